"""containerd_config: the root config's imports edit, versions and decisions, on real files.

Real inputs: tests/fixtures/nvidia_ctk/containerd_configure_*.toml (what nvidia-ctk 1.20.0 wrote from no config,
corpus nvidia_ctk/) and tests/fixtures/containerd/ (config.toml files from public repositories, sources in its
README). Expected texts are written from the input by hand (the one statement replaced), never taken from the
code's output. Version-3/4 configs are small inline ones: no real 2.x file was found (fixtures README).
"""
import pytest

from containers import containerd_config as cc
from conftest import containerd_fixture as fixture

DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
ROOT = "/etc/containerd/config.toml"
CTK_ROOT = "containerd_configure_config.toml"
CTK_DROP_IN = "containerd_configure_99-nvidia.toml"
K17 = "config-1.7-default-systemdcgroup_lucheng0127-k8s_setup_guide.toml"
KAIROS = "config-v2-imports-conf.d_kairos-provider-kubeadm.toml"
NO_VERSION = "config-no-version_cavebeavis-containerd-test.toml"


@pytest.fixture(params=["tomllib", "small reader"])
def reader(request, monkeypatch):
    """Every test runs with tomllib (Python >= 3.11) and with the reader used where it is missing."""
    if request.param == "small reader":
        monkeypatch.setattr(cc, "tomllib", None)
    return request.param


def edit(text, drop_in=DROP_IN, path=ROOT):
    return cc.ensure_import(text, cc.parse_root(text, path), drop_in, path)


# --- what nvidia-ctk writes -------------------------------------------------------------------------

def test_missing_root_gets_exactly_what_nvidia_ctk_writes(reader):
    assert cc.ensure_import(None, None, DROP_IN) == fixture(CTK_ROOT)
    assert cc.import_pattern(DROP_IN) == "/etc/containerd/conf.d/*.toml"


def test_nvidia_ctk_output_reads_as_version_2_and_is_left_alone(reader):
    root = cc.parse_root(fixture(CTK_ROOT))
    assert root["version"] == 2 and root["imports"] == ["/etc/containerd/conf.d/*.toml"]
    assert edit(fixture(CTK_ROOT)) == fixture(CTK_ROOT)
    assert cc.dropin_version(fixture(CTK_DROP_IN)) == 2


def test_plan_fresh_host_then_converged(reader):
    first = cc.plan(ROOT, None, DROP_IN, None, fixture(CTK_DROP_IN))
    assert first["changed"] and first["config_changed"] and first["drop_in_changed"]
    assert first["config_after"] == fixture(CTK_ROOT) and first["config_version"] == 2
    again = cc.plan(ROOT, fixture(CTK_ROOT), DROP_IN, fixture(CTK_DROP_IN), fixture(CTK_DROP_IN))
    assert not again["changed"] and not again["config_changed"] and not again["drop_in_changed"]
    assert again["imports"] == ["/etc/containerd/conf.d/*.toml"]


def test_plan_changes_on_the_imports_line_alone(reader):
    # The drop-in is already right; the root lost its imports entry (an operator rewrote config.toml).
    decided = cc.plan(ROOT, "version = 2\n", DROP_IN, fixture(CTK_DROP_IN), fixture(CTK_DROP_IN))
    assert decided["changed"] and decided["config_changed"] and not decided["drop_in_changed"]
    assert decided["config_after"] == 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'


def test_plan_changes_on_the_drop_in_alone(reader):
    wanted = fixture(CTK_DROP_IN).replace('runtime_type = "io.containerd.runc.v2"',
                                          'runtime_type = "io.containerd.runc.v2"\n          default = 1')
    decided = cc.plan(ROOT, fixture(CTK_ROOT), DROP_IN, fixture(CTK_DROP_IN), wanted)
    assert decided["changed"] and decided["drop_in_changed"] and not decided["config_changed"]


# --- real operator configs: only the imports statement changes ---------------------------------------

def test_containerd_1_7_default_only_the_empty_imports_is_filled(reader):
    text = fixture(K17)
    assert text.count("imports = []\n") == 1
    expected = text.replace("imports = []\n", 'imports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert edit(text) == expected
    assert cc.config_version(cc.parse_root(text)) == 2


def test_containerd_1_7_default_parses_the_same_after_the_edit():
    tomllib = pytest.importorskip("tomllib")
    before, after = tomllib.loads(fixture(K17)), tomllib.loads(edit(fixture(K17)))
    assert after.pop("imports") == ["/etc/containerd/conf.d/*.toml"] and before.pop("imports") == []
    assert after == before


def test_config_already_importing_conf_d_is_not_touched(reader):
    text = fixture(KAIROS)
    assert edit(text) is text
    decided = cc.plan(ROOT, text, DROP_IN, None, fixture(CTK_DROP_IN))
    assert decided["changed"] and decided["drop_in_changed"] and not decided["config_changed"]


def test_another_drop_in_directory_is_appended_to_existing_imports(reader):
    text = fixture(KAIROS)
    old = 'imports = ["/etc/containerd/conf.d/*.toml"]\n'
    assert text.count(old) == 1
    expected = text.replace(old, 'imports = ["/etc/containerd/conf.d/*.toml", "/etc/containerd/nvidia.d/*.toml"]\n')
    assert edit(text, "/etc/containerd/nvidia.d/99-nvidia.toml") == expected


def test_no_imports_statement_goes_right_after_version_and_keeps_comments(reader):
    # containerd 2.x style (inline, no real 2.x file found): single quotes, comments, a table after.
    text = ("# managed by hand\nversion = 3  # containerd 2.1\nroot = '/var/lib/containerd'\n\n"
            "[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'runc'\n")
    expected = text.replace("# containerd 2.1\n", '# containerd 2.1\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    assert edit(text) == expected


def test_single_quoted_imports_keep_their_quotes(reader):
    text = "version = 3\nimports = ['/etc/containerd/certs/*.toml']\n"
    assert edit(text) == ("version = 3\nimports = ['/etc/containerd/certs/*.toml', "
                          "'/etc/containerd/conf.d/*.toml']\n")


@pytest.mark.parametrize("array,expected", [
    ('[\n  "/a/*.toml",\n]', '[\n  "/a/*.toml",\n  "/etc/containerd/conf.d/*.toml",\n]'),
    ('[\n  "/a/*.toml" # vendor\n]', '[\n  "/a/*.toml", # vendor\n  "/etc/containerd/conf.d/*.toml"\n]'),
    ("[ ]", '["/etc/containerd/conf.d/*.toml" ]'),
])
def test_multi_line_and_spaced_arrays(reader, array, expected):
    assert edit("version = 2\nimports = %s\n[grpc]\n" % array) == "version = 2\nimports = %s\n[grpc]\n" % expected


def test_crlf_file_keeps_its_line_ends(reader):
    text = 'version = 2\r\nroot = "/var/lib/containerd"\r\n'
    assert edit(text) == 'version = 2\r\nimports = ["/etc/containerd/conf.d/*.toml"]\r\nroot = "/var/lib/containerd"\r\n'


@pytest.mark.parametrize("text", ["", "\n", "# containerd: defaults\n", "# no newline"])
def test_empty_or_comment_only_file_gets_imports_and_version_2(reader, text):
    # The tool treats a file without keys as missing: version 2, and both keys are written.
    assert cc.config_version(cc.parse_root(text)) == 2
    new = edit(text)
    assert new.startswith(text) and new.endswith('imports = ["/etc/containerd/conf.d/*.toml"]\nversion = 2\n')


# --- which imports already reach the drop-in -----------------------------------------------------------

@pytest.mark.parametrize("imports,covered", [
    (["/etc/containerd/conf.d/*.toml"], True),
    (["/etc/containerd/conf.d/99-nvidia.toml"], True),
    (["conf.d/*.toml"], True),                  # relative to the root config's directory
    (["/etc/containerd/conf.d/9*.toml"], True),
    (["/etc/containerd/*.toml"], False),        # * does not cross a /
    (["/etc/containerd/config.d/*.toml"], False),
    ([], False),
])
def test_imports_cover(imports, covered):
    assert cc.imports_cover(imports, DROP_IN, ROOT) is covered


# --- versions ----------------------------------------------------------------------------------------

def test_real_config_without_version_is_refused_as_version_1(reader):
    text = fixture(NO_VERSION)
    with pytest.raises(cc.ContainerdConfigError) as err:
        cc.config_version(cc.parse_root(text, ROOT), ROOT)
    message = str(err.value)
    assert ROOT in message and "no `version` line" in message and "version 1" in message
    assert "version = 2" in message and "version = 3" in message


@pytest.mark.parametrize("text,needle", [
    ("version = 1\n", "says `version = 1`"),
    ('version = "2"\n', "must be a whole number"),
    ("version = true\n", "must be a whole number"),
])
def test_bad_versions(reader, text, needle):
    with pytest.raises(cc.ContainerdConfigError) as err:
        cc.config_version(cc.parse_root(text, ROOT), ROOT)
    assert needle in str(err.value)


def test_drop_in_version_must_match_the_root(reader):
    # A root written for containerd 2.x (version 3) and the version-2 drop-in the tool writes for an empty root.
    with pytest.raises(cc.ContainerdConfigError) as err:
        cc.plan(ROOT, "version = 3\n", DROP_IN, None, fixture(CTK_DROP_IN))
    assert "config version 2" in str(err.value) and "version 3" in str(err.value)
    # The AKS case (NVIDIA/aicr#1688): a version-4 drop-in over a version-2 root stops containerd 2.3.0-2.3.4.
    v4 = fixture(CTK_DROP_IN).replace("version = 2", "version = 4", 1)
    with pytest.raises(cc.ContainerdConfigError) as err:
        cc.plan(ROOT, fixture(K17), DROP_IN, None, v4)
    assert "2.3.0-2.3.4" in str(err.value)


def test_other_drop_ins_with_a_higher_version_are_named(reader):
    found = cc.other_dropins_above(2, {"/d/a.toml": "version = 4\n", "/d/b.toml": "version = 2\n",
                                       "/d/c.toml": "not [ toml", "/d/d.toml": "[x]\ny = 1\n"})
    assert found == [("/d/a.toml", 4)]


# --- malformed files ---------------------------------------------------------------------------------

def test_malformed_real_config_names_the_file_and_the_line():
    pytest.importorskip("tomllib")
    # The 1.7 default with one quote lost, as a hand edit leaves it.
    text = fixture(K17).replace('state = "/run/containerd"', 'state = "/run/containerd', 1)
    with pytest.raises(cc.ContainerdConfigError) as err:
        cc.parse_root(text, ROOT)
    assert ROOT in str(err.value) and "not valid TOML" in str(err.value) and "line 7" in str(err.value)


@pytest.mark.parametrize("text", ['version = 2\nimports = ["/a/*.toml"\n', "version = 2\nroot = \n",
                                  'version = 2\nroot = "/x" y\n'])
def test_malformed_root_table_is_refused_by_both_readers(reader, text):
    with pytest.raises(cc.ContainerdConfigError) as err:
        cc.parse_root(text, ROOT)
    assert "not valid TOML" in str(err.value)


@pytest.mark.parametrize("text", ['version = 2\nimports = "/a/*.toml"\n', "version = 2\nimports = [1]\n"])
def test_imports_that_are_not_a_list_of_paths_are_refused(reader, text):
    with pytest.raises(cc.ContainerdConfigError) as err:
        edit(text)
    assert "`imports` must be" in str(err.value)
