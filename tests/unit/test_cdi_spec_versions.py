"""Which CDI spec version the toolkit writes and which the engines read (tests/fixtures/cdi_versions/README.md)."""
import csv
import os

import pytest

from conftest import FIXTURES
from containers.cdi_spec import (FEATURE_NO_ADDITIONAL_GIDS, engine_compat, engine_first_reading, engine_reads, newer,
                      read_spec, too_new_for, toolkit_has_feature_flag, toolkit_spec_version)
from containers.versions import version_token, version_tuple as parse_version

HERE = os.path.join(FIXTURES, "cdi_versions")


def read(name, folder=HERE):
    with open(os.path.join(folder, name), encoding="utf-8") as handle:
        return handle.read()


# --- version strings as the tools print them -------------------------------------------------------

@pytest.mark.parametrize("text, version, token", [
    ("26.1.5+dfsg1\n", (26, 1, 5), "26.1.5+dfsg1"),                          # Debian 13's docker.io
    ("20.10.24+dfsg1", (20, 10, 24), "20.10.24+dfsg1"),                      # Debian 12's docker.io
    ("Docker version 28.2.0, build 879ac3f", (28, 2, 0), "28.2.0"),           # dockerd --version
    ("1.7.24~ds1", (1, 7, 24), "1.7.24~ds1"),                                  # Debian 13's containerd
    ("podman version 4.3.1\n", (4, 3, 1), "4.3.1"),                            # Debian 12's podman
    ("NVIDIA Container Toolkit CLI version 1.18.0\ncommit: f8daa5e26de9fd7eb79259040b6dd5a52060048c\n",
     (1, 18, 0), "1.18.0"),
    ("", None, None), ("Cannot connect to the Docker daemon", None, None),
])
def test_version_of_tool_output(text, version, token):
    assert parse_version(text) == version
    assert version_token(text) == token


@pytest.mark.parametrize("name, version, token", [
    ("containerd-version_containerd.io-1.7.27_ctrsploit-dqd.txt", (1, 7, 27), "1.7.27"),
    ("containerd-version_ubuntu-1.5.5_kata-containers-3120.txt", (1, 5, 5), "1.5.5-0ubuntu3~20.04.1"),
    ("containerd-version_v1.5.7_kata-containers-8781.txt", (1, 5, 7), "1.5.7"),
    ("podman-version_4.9.3_ubuntu-24.04_podman-27070.txt", (4, 9, 3), "4.9.3"),
])
def test_version_of_real_outputs(name, version, token):
    text = read(name)
    assert parse_version(text) == version
    assert version_token(text) == token


def test_version_of_debian_containerd_from_ctr():
    # the Debian 13 containerd's own report (real capture); `containerd --version` prints the same version
    ctr = read("ctr-version_containerd-1.7.24_debian13.stdout", os.path.join(FIXTURES, "containerd"))
    assert "Version:  1.7.24~ds1" in ctr
    assert engine_reads("containerd", "1.7.24~ds1") == "0.7.0"


# --- what the toolkit writes ----------------------------------------------------------------------

def test_toolkit_writes_minimum_version():
    # 1.19.0 had the additional-GIDs code but dropped every GID (fixed in 1.19.1): real 1.19.0 and 1.20.1
    # outputs on hosts whose nodes are 0666 root:root say 0.5.0.
    assert read("ctk-1.19.0_cdi-generate-last-line_ctrsploit-dqd.txt").endswith(
        'msg="Generated CDI spec with version 0.5.0"\n')
    assert toolkit_spec_version("1.19.0") == "0.5.0"
    assert toolkit_spec_version("1.20.1", restricted_nodes=False) == "0.5.0"
    assert "crw-rw-rw-" in read("ctk-1.20.1_device-nodes-in-cdi-container_ctrsploit-dqd.txt")
    # 1.19.1+ with group-only nodes (DRM, or /dev/nvidia* 0660 with a group): additionalGids -> 0.7.0
    assert toolkit_spec_version("1.19.1") == "0.7.0"
    assert toolkit_spec_version("NVIDIA Container Toolkit CLI version 1.20.0") == "0.7.0"
    assert toolkit_spec_version("1.19.1", [FEATURE_NO_ADDITIONAL_GIDS]) == "0.5.0"
    assert toolkit_spec_version("1.17.8") == toolkit_spec_version("1.18.2") == "0.5.0"
    assert toolkit_spec_version("1.11.0") is None and toolkit_spec_version(None) is None


def test_feature_flag_exists_from_1_19():
    assert not toolkit_has_feature_flag("1.17.8")     # no --feature-flag option at all
    assert not toolkit_has_feature_flag("1.18.2")     # the option, not this flag
    assert toolkit_has_feature_flag("1.19.0") and toolkit_has_feature_flag("1.20.0")


def test_release_notes_name_the_flag():
    notes = read("release-notes_toolkit-1.19.1_known-issues_cloud-native-docs.md")
    assert "nvidia-ctk cdi generate --feature-flag %s" % FEATURE_NO_ADDITIONAL_GIDS in notes
    assert "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS=%s" % FEATURE_NO_ADDITIONAL_GIDS in read(
        "troubleshooting_no-additional-gids-feature-flag_cloud-native-docs.md")


# --- what the engines read ------------------------------------------------------------------------

MODULE_READS = {"v0.4": "0.4.0", "v0.5": "0.5.0", "v0.6": "0.6.0", "v0.7": "0.7.0", "v0.8": "0.8.0",
                "v1.0": "1.0.0", "v1.1": "1.1.0"}


def engine_rows():
    with open(os.path.join(HERE, "engine-release_cdi-module.tsv"), encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_every_release_tag_reads_what_its_cdi_module_reads():
    rows = engine_rows()
    assert len(rows) > 200
    for row in rows:
        module = row["cdi_module"]
        expected = None if module.startswith("v0.0.0-") else MODULE_READS[module[:4]]
        assert engine_reads(row["engine"], row["tag"]) == expected, row


@pytest.mark.parametrize("engine, version, reads", [
    ("docker", "26.1.5+dfsg1", "0.7.0"),          # Debian 13: vendored CDI v0.7.2
    ("docker", "26.0.2", "0.6.0"), ("docker", "26.1.0", "0.7.0"),
    ("docker", "25.0.5", "0.6.0"), ("docker", "25.0.17", "0.8.0"),   # 25.0.17 took CDI v0.8.1 in
    ("docker", "20.10.24+dfsg1", None), ("docker", "24.0.7", None),  # no CDI before 25
    ("docker", "28.2.0", "1.0.0"), ("docker", "29.2.0", "1.1.0"),
    ("containerd", "1.7.24~ds1", "0.7.0"), ("containerd", "1.7.15", "0.6.0"), ("containerd", "1.7.16", "0.7.0"),
    ("containerd", "1.6.20~ds1", None), ("containerd", "2.0.0", "0.8.0"),
    ("podman", "4.3.1", "0.5.0"), ("podman", "4.9.3", "0.6.0"), ("podman", "5.1.0", "0.7.0"),
    ("podman", "5.4.2", "0.8.0"), ("podman", "4.0.3", None),
    ("podman", "not a version", None), ("cri-o", "1.30.0", None),
])
def test_engine_reads(engine, version, reads):
    assert engine_reads(engine, version) == reads


def test_first_release_reading_0_7_0_is_the_release_notes():
    notes = read("release-notes_toolkit-1.19.1_known-issues_cloud-native-docs.md")
    for engine, first in (("docker", "26.1.0"), ("containerd", "1.7.16"), ("podman", "5.1.0")):
        assert engine_first_reading(engine, "0.7.0") == first
        assert "%s >= %s" % (engine, first) in notes
    assert engine_first_reading("docker", "9.9.9") is None


def test_spec_version_compare_and_too_new():
    assert newer("0.7.0", "0.6.0") and not newer("0.6.0", "0.6.0") and not newer("0.5.0", None)
    engines = {"docker": "26.0.2", "containerd": "1.7.24~ds1", "podman": "4.9.3"}
    assert too_new_for("0.7.0", engines) == [("docker", "26.0.2", "0.6.0"), ("podman", "4.9.3", "0.6.0")]
    assert too_new_for("0.5.0", engines) == []
    assert too_new_for("0.7.0", {"docker": "20.10.24+dfsg1", "podman": None}) == []


# --- the decision ----------------------------------------------------------------------------------

def test_debian_13_needs_no_flag():
    # docker.io 26.1.5+dfsg1 and containerd 1.7.24~ds1 both read 0.7.0
    got = engine_compat("1.20.0", {"docker": "26.1.5+dfsg1", "containerd": "1.7.24~ds1"})
    assert got["feature_flags"] == [] and got["spec_version"] == "0.7.0" and got["unreadable_by"] == []
    assert got["engines"] == {"docker": {"version": "26.1.5+dfsg1", "reads": "0.7.0"},
                              "containerd": {"version": "1.7.24~ds1", "reads": "0.7.0"}}


def test_old_podman_gets_the_flag_and_the_reason_names_it():
    got = engine_compat("1.19.1", {"docker": "26.1.5+dfsg1", "podman": "4.9.3"})
    assert got["feature_flags"] == [FEATURE_NO_ADDITIONAL_GIDS]
    assert got["spec_version"] == "0.5.0" and got["unreadable_by"] == []
    assert len(got["reasons"]) == 1
    assert got["reasons"][0].startswith("spec version too new for podman 4.9.3: the spec is cdiVersion 0.7.0, "
                                        "podman 4.9.3 reads up to 0.6.0; generating with --feature-flag "
                                        "no-additional-gids-for-device-nodes")


def test_docker_26_0_gets_the_flag():
    got = engine_compat("1.20.0", {"docker": "26.0.2", "containerd": "1.7.13"})
    assert got["feature_flags"] == [FEATURE_NO_ADDITIONAL_GIDS]
    assert [r.split(":")[0] for r in got["reasons"]] == ["spec version too new for containerd 1.7.13",
                                                         "spec version too new for docker 26.0.2"]


def test_toolkits_that_never_write_0_7_0_get_no_flag():
    for toolkit in ("1.17.8", "1.18.0", "1.19.0"):
        got = engine_compat(toolkit, {"podman": "4.9.3"})
        assert got["feature_flags"] == [] and got["spec_version"] == "0.5.0" and got["unreadable_by"] == []
        # ... but nvidia-cdi-refresh gets it already: an upgrade to 1.19.1 regenerates through it at once
        assert got["refresh_feature_flags"] == [FEATURE_NO_ADDITIONAL_GIDS]


def test_refresh_flags_follow_the_engines_alone():
    assert engine_compat("1.20.0", {"docker": "26.1.5+dfsg1"})["refresh_feature_flags"] == []
    assert engine_compat("1.20.0", {"docker": "26.0.2"})["refresh_feature_flags"] == [FEATURE_NO_ADDITIONAL_GIDS]
    assert engine_compat(None, {"containerd": "1.7.13"})["refresh_feature_flags"] == [FEATURE_NO_ADDITIONAL_GIDS]
    assert engine_compat("1.18.0", {"docker": "20.10.24+dfsg1"})["refresh_feature_flags"] == []


def test_an_engine_too_old_even_for_the_flag_is_reported():
    # Debian 12's podman 4.3.1 reads 0.5.0: the flagged spec fits; podman 4.1 reads only 0.4.0: nothing fits
    assert engine_compat("1.20.0", {"podman": "4.3.1"})["unreadable_by"] == []
    got = engine_compat("1.20.0", {"podman": "4.1.1"})
    assert got["feature_flags"] == [FEATURE_NO_ADDITIONAL_GIDS]
    assert got["unreadable_by"] == ["spec version too new for podman 4.1.1: the spec is cdiVersion 0.5.0, "
                                    "podman 4.1.1 reads up to 0.4.0"]


def test_unknown_toolkit_or_engines_decide_nothing():
    got = engine_compat(None, {"podman": "4.9.3"})
    assert got["feature_flags"] == [] and got["spec_version"] is None and "not known" in got["reasons"][0]
    got = engine_compat("1.20.0", {"docker": None, "containerd": "1.6.20~ds1"})
    assert got["feature_flags"] == [] and got["engines"]["docker"] == {"version": None, "reads": None}
    assert engine_compat("1.20.0", {})["feature_flags"] == []


def test_read_spec_reports_cdi_version_of_a_0_7_0_spec():
    text = ('---\ncdiVersion: 0.7.0\nkind: nvidia.com/gpu\ndevices:\n    - name: "0"\n      containerEdits:\n'
            '        deviceNodes:\n            - path: /dev/nvidia0\n              hostPath: /dev/nvidia0\n'
            '              major: 195\n              fileMode: 432\n              permissions: rwm\n'
            '              gid: 44\n        additionalGids:\n            - 44\n')
    assert read_spec(text)["cdi_version"] == "0.7.0"
