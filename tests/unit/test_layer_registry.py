"""The layer registry (module_utils/layers/registry.py) is the one list of layers: every place that needs
the layers reads it, and where Ansible needs a literal (tags, role order, argument specs, module docs) the
literal is proven equal to it here. A list of layers anywhere else in the product fails."""
import glob
import io
import os
import re
import tokenize

import yaml

from diagnosis import drift
from diagnosis import error_catalogue
import gpu_stack_check
from diagnosis import report_render
from conftest import ROOT
from layers import registry, stack

NAMES = [layer.name for layer in registry.REGISTRY]


def _yaml(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_names_titles_and_checks_are_unique():
    assert len(set(NAMES)) == len(NAMES)
    checks = [c for layer in registry.REGISTRY for c in layer.checks]
    assert len(set(checks)) == len(checks)
    assert set(registry.TITLES) == set(NAMES) and all(registry.TITLES.values())


def test_every_check_is_implemented_by_its_layers_module():
    for layer in registry.REGISTRY:
        if layer.checks:
            module = getattr(stack, layer.module)
            assert list(module.CHECKS) == list(layer.checks), layer.name
            assert module.__name__.endswith("layers." + layer.module)


def test_what_a_layer_owns_is_checked_first():
    """Every layer that owns something gets its generic `<layer>_basics` check first, causes before symptoms."""
    for layer in registry.REGISTRY:
        generic = [c for c in layer.checks if c.endswith("_basics")]
        assert generic == ([layer.name + "_basics"] if layer.owns else []), layer.name
        assert not layer.owns or layer.checks[0] == layer.name + "_basics"
    owned = dict((l.name, l.owns) for l in registry.REGISTRY if l.owns)
    assert [u.name for own in owned.values() for u in own.units] == [
        "nvidia-fabricmanager.service", "nvidia-persistenced.service", "nvidia-dcgm.service", "docker.service"]
    assert owned["toolkit"].packages.option == "toolkit_packages" and owned["toolkit"].packages.same_version
    assert gpu_stack_check.ARGUMENT_SPEC["toolkit_packages"]["default"] == list(registry.TOOLKIT_PACKAGES)
    assert [d.path for d in owned["docker"].disks] == ["docker_root", "/var/lib/gpuhost"]


def test_every_check_result_lands_on_its_registry_layer():
    """A healthy host's diagnosis: each check result carries the layer the registry gives it."""
    from test_stack_check import PROBE_OPTS, healthy_host
    out = stack.evaluate(stack.capture(healthy_host(), PROBE_OPTS), PROBE_OPTS)
    assert list(out["layers"]) == list(registry.STACK_LAYERS)
    for check in out["checks"]:
        slot = check["name"] if check["name"] in registry.CHECK_LAYER else "docker"  # containerd's engine check
        assert check["layer"] == registry.CHECK_LAYER[slot], check["name"]
    assert [c["name"] for c in out["checks"]] == [c for layer in registry.REGISTRY for c in layer.checks]


def test_site_layers_runs_the_registry_roles_with_their_tags_in_order():
    play = _yaml("playbooks", "site-layers.yml")[0]
    roles = [(r["role"], r["tags"]) for r in play["roles"]]
    assert roles[0] == ("gpuhost_common", ["always"]) and roles[-1] == ("gpuhost_handlers", ["always"])
    assert [(role, tags[0]) for role, tags in roles[1:-1]] == list(registry.site_roles())
    fingerprint = next(t for t in play["post_tasks"] if "fingerprint" in t["name"])
    assert fingerprint["vars"]["gpuhost_common_layer_tags"] == list(registry.site_tags())


def test_site_yml_names_the_same_tags():
    with open(os.path.join(ROOT, "playbooks", "site.yml"), encoding="utf-8") as handle:
        line = next(l for l in handle if l.startswith("# Tags select layers"))
    assert re.findall(r"[a-z]+", line.split("--tags", 1)[1]) == list(registry.site_tags())


def test_drift_repairs_through_the_registry_roles_in_order():
    tasks = _yaml("playbooks", "tasks", "drift-repair.yml")
    roles = [t["ansible.builtin.include_role"]["name"] for t in tasks if "ansible.builtin.include_role" in t]
    assert roles[:-1] == list(registry.repair_roles())
    assert roles[-1] == registry.VALIDATE_ROLE   # the check after the repair



def test_every_repairable_layer_has_a_row_in_a_drift_matrix():
    """Each layer drift repairs is proven through the playbooks an operator runs: its canonical fault is a row
    of some scenario's drift matrix (molecule/shared/drift-matrix.yml, imported with drift_matrix)."""
    rows = []
    for path in glob.glob(os.path.join(ROOT, "molecule", "*", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            plays = yaml.safe_load(handle)
        for play in plays if isinstance(plays, list) else []:
            if str(play.get("ansible.builtin.import_playbook", "")).endswith("shared/drift-matrix.yml"):
                rows += [row for matrix_round in play["vars"]["drift_matrix"] for row in matrix_round]
    assert {row["layer"] for row in rows} == set(registry.DRIFT_LAYERS)
    # The reports' JSON sorts its keys: the matrix orders the layers it finds by its own copy of the stack order.
    assert _yaml("molecule", "shared", "drift-matrix.yml")[0]["vars"]["stack_order"] == NAMES
    with open(drift.__file__, encoding="utf-8") as handle:
        codes = set(re.findall(r'(?:finding\(|_layer_failed\(stack, "[a-z_]+", )"([a-z_]+)"', handle.read()))
    for row in rows:
        assert row["code"] in codes and row["inject"] and row["host"], row


def test_drift_compares_every_registry_drift_layer():
    assert drift.LAYERS == registry.DRIFT_LAYERS
    for layer in registry.DRIFT_LAYERS:
        assert callable(getattr(drift, layer + "_findings")), layer
    out = drift.compare({}, {"layers": {}, "checks": []}, {})
    assert list(out["layers"]) == list(registry.DRIFT_LAYERS)


def test_error_catalogue_layers_are_registry_catalogue_names():
    used = {entry["layer"] for entry in error_catalogue.ENTRIES}
    assert used <= set(registry.CATALOGUE_ORDER), used - set(registry.CATALOGUE_ORDER)
    assert all(registry.catalogue_layer(name) in NAMES for name in used if name != registry.CATALOGUE_OTHER)


def test_reports_render_the_registry_layers():
    assert report_render.LAYERS == registry.STACK_LAYERS
    assert set(report_render.LAYER_HEADINGS) == set(NAMES)


def test_module_options_and_docs_list_the_registry_layers():
    spec = gpu_stack_check.ARGUMENT_SPEC
    assert spec["required_layers"]["choices"] == list(registry.STACK_LAYERS)
    assert spec["required_layers"]["default"] == list(registry.DEFAULT_REQUIRED_LAYERS)
    doc = yaml.safe_load(gpu_stack_check.DOCUMENTATION)["options"]
    assert doc["required_layers"]["choices"] == list(registry.STACK_LAYERS)
    assert doc["required_layers"]["default"] == list(registry.DEFAULT_REQUIRED_LAYERS)
    assert doc["not_required"]["choices"] == list(registry.STACK_LAYERS)


def test_gpu_validate_argument_spec_lists_the_registry_layers():
    options = _yaml("roles", "gpu_validate", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["gpu_validate_required_layers"]["choices"] == list(registry.STACK_LAYERS)
    assert _yaml("roles", "gpu_validate", "defaults", "main.yml")["gpu_validate_required_layers"] == []


# Where a literal list of layers may stand: the registry, and the literals the tests above prove equal to it.
ALLOWED = {
    os.path.join("module_utils", "layers", "registry.py"),
    os.path.join("library", "gpu_stack_check.py"),           # DOCUMENTATION (test above)
    os.path.join("roles", "gpu_validate", "meta", "argument_specs.yml"),
    os.path.join("playbooks", "site-layers.yml"),            # roles and fingerprint tags (test above)
}
LAYER_WORDS = set(NAMES) | set(registry.site_tags())
_SPAN = re.compile(r"[\[\(\{][^\[\]\(\)\{\}]*[\]\)\}]", re.S)


def _python_code(text):
    """The file's code without comments and docstrings (prose may name layers)."""
    out = []
    previous = tokenize.INDENT
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and previous in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT,
                                                          tokenize.NL):
            continue   # a docstring or a bare string statement
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            out.append(tok.string)
        previous = tok.type
    return " ".join(out)


def _yaml_code(text):
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def _lists_of_layers(text, minimum=4):
    for match in _SPAN.finditer(text):
        words = set(re.findall(r"[A-Za-z_]+", match.group(0))) & LAYER_WORDS
        if len(words) >= minimum:
            yield sorted(words)


def test_no_other_file_lists_the_layers():
    found = []
    for top in ("library", "module_utils", "roles", "playbooks", "bin", "site.yml"):
        path = os.path.join(ROOT, top)
        walk = os.walk(path) if os.path.isdir(path) else [(ROOT, [], [top])]
        for folder, dirs, files in walk:
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                full = os.path.join(folder, name)
                rel = os.path.relpath(full, ROOT)
                if rel in ALLOWED:
                    continue
                with open(full, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
                if name.endswith(".py") or text.startswith("#!/usr/bin/python"):
                    try:
                        code = _python_code(text)
                    except (tokenize.TokenError, IndentationError):
                        code = text
                elif name.endswith((".yml", ".yaml")):
                    code = _yaml_code(text)
                else:
                    continue
                if rel == os.path.join("module_utils", "layers", "stack.py"):
                    # the static import of every check module Ansible must ship (names checked above)
                    code = code.replace("from ansible . module_utils . layers import (", "")
                for words in _lists_of_layers(code):
                    found.append("%s: %s" % (rel, ", ".join(words)))
    assert not found, "lists of layers outside the registry:\n" + "\n".join(found)


def test_role_texts_name_layers_by_the_registrys_names_not_numbers():
    """The role READMEs and defaults numbered the layers (1, 2, 2b, 3 ...): a second list, in prose. They name the
    registry's layers instead, each a name the registry has."""
    numbered, unknown = [], []
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "README.md")) + \
            glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml")):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        rel = os.path.relpath(path, ROOT)
        numbered += ["%s: %s" % (rel, m.group(0)) for m in re.finditer(r"\blayers? \d+[a-z]?\b", text)]
        unknown += ["%s: %s" % (rel, name) for name in re.findall(r"the `(\w+)` layer\b", text)
                    if name not in registry.BY_NAME]
    assert not numbered and not unknown, numbered + unknown


def test_the_scan_finds_a_list_of_layers():
    """The scan above is not blind: the old drift tuple, in code, is found; in a comment it is not."""
    assert list(_lists_of_layers(_python_code('LAYERS = ("driver", "fabric", "persistence", "docker")\n')))
    assert not list(_lists_of_layers(_python_code('# ("driver", "fabric", "persistence", "docker")\nx = 1\n')))
    assert list(_lists_of_layers(_yaml_code("tags: [driver, persistence, mig, docker]\n")))


def _owns(layer):
    """What the layer owns (its `<layer>_basics` check reads it), as the map's column says it."""
    own = layer.owns
    if not own:
        return "-"
    parts = []
    if own.packages:
        names = list(own.packages.names) or (["option `%s`" % own.packages.option] if own.packages.option else [])
        parts.append("packages: %s%s%s" % (", ".join(names), " (one version)" if own.packages.same_version else "",
                                          ("; " if names else "") + ", ".join(own.packages.patterns)
                                          if own.packages.patterns else ""))
    if own.units:
        parts.append("units: %s" % ", ".join(u.name + (" (when %s)" % u.when if u.when else "")
                                             + (" (and the user of its %s)" % u.user_option if u.user_option else "")
                                             for u in own.units))
    if own.configs:
        parts.append("configs: %s" % ", ".join("%s (%s)" % (c.path or "option `%s`" % c.option, c.kind)
                                               for c in own.configs))
    if own.disks:
        parts.append("free space: %s" % ", ".join(d.label + ("" if d.path == "docker_root" else " " + d.path)
                                                  for d in own.disks))
    if own.engine:
        parts.append("engine %s" % own.engine)
    return "; ".join(parts)


def _architecture_table():
    rows = ["| layer | title | roles (tags) | check module | checks | drift repairs with | catalogue | owns "
            "(`<layer>_basics`) |",
            "|---|---|---|---|---|---|---|---|"]
    for layer in registry.REGISTRY:
        roles = ", ".join("%s (%s)" % (role, layer.tags[min(i, len(layer.tags) - 1)])
                          for i, role in enumerate(layer.roles)) or "-"
        module = ("`layers/%s.py`" % layer.module) if layer.checks else "-"
        rows.append("| `%s` | %s | %s | %s | %s | %s | %s | %s |" % (
            layer.name, layer.title, roles, module, ", ".join(layer.checks) or "-",
            ", ".join(layer.repair) if layer.drift else "-", ", ".join(layer.catalogue) or "-", _owns(layer)))
    return rows


def test_the_architecture_page_draws_the_registry():
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as handle:
        text = handle.read()
    table = text.split("<!-- registry table: start -->\n", 1)[1].split("\n<!-- registry table: end -->", 1)[0]
    assert table.splitlines() == _architecture_table()
