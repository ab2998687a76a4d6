"""Every custom module's DOCUMENTATION, EXAMPLES and RETURN are YAML that ansible-doc can read, and name the
module as its file does (a colon in a plain scalar, or a copied header, would break `ansible-doc`).

YAML that parses is not enough: `- text (a: b)` in a description list is a mapping, and
`{description: ok, warn or refuse., type: str}` is a mapping with a key `warn or refuse.`. So every
description is text, every option and RETURN entry is a mapping of known keys with a description and a type,
and the options are the module's argument_spec (read from its source) with the same types."""
import ast
import glob
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT

MODULES = sorted(glob.glob(os.path.join(ROOT, "library", "*.py")) + glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py")))
IDS = [os.path.relpath(p, ROOT) for p in MODULES]
ANSIBLE_DOC = os.path.join(os.path.dirname(sys.executable), "ansible-doc")

OPTION_KEYS = {"description", "type", "required", "default", "choices", "elements", "suboptions", "aliases",
               "version_added"}
RETURN_KEYS = {"description", "returned", "type", "elements", "sample", "contains", "version_added"}


def _docs(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                found[node.targets[0].id] = node.value.value
    return found


class _Opaque(object):
    """A value the source computes (a constant's name, a call): not compared."""


def _value(node, names):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {k.arg: _value(k.value, names) for k in node.keywords}
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, names) for e in node.elts]
    if isinstance(node, ast.Name) and node.id in names:
        return _value(names[node.id], names)
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return _Opaque()


def argument_spec(source):
    """The argument_spec given to AnsibleModule (inline or a module-level name), read without importing."""
    tree = ast.parse(source)
    names = {n.targets[0].id: n.value for n in tree.body
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AnsibleModule":
            for keyword in node.keywords:
                if keyword.arg == "argument_spec":
                    return _value(keyword.value, names)
    return None


def _fragment_options(names):
    options = {}
    for name in names:
        with open(os.path.join(ROOT, "doc_fragments", name + ".py"), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        text = next(n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and getattr(n.targets[0], "id", None) == "DOCUMENTATION")
        options.update(yaml.safe_load(text).get("options") or {})
    return options


def _is_text(value):
    return (isinstance(value, str) and value.strip() != "") or (
        isinstance(value, list) and value != [] and all(isinstance(v, str) and v.strip() for v in value))


def option_problems(options, spec, where=""):
    """What is wrong with DOCUMENTATION options against an argument_spec (None: no spec to compare)."""
    problems = []
    for name, doc in (options or {}).items():
        here = where + name
        if not isinstance(doc, dict) or not _is_text(doc.get("description")) or not doc.get("type"):
            problems.append("option %s: not a mapping with a description and a type: %r" % (here, doc))
            continue
        if set(doc) - OPTION_KEYS:
            problems.append("option %s: unknown keys %s" % (here, sorted(set(doc) - OPTION_KEYS)))
        if spec is None:
            continue
        if name not in spec:
            problems.append("option %s: not in the argument_spec" % here)
            continue
        arg = spec[name]
        for key, default in (("type", "str"), ("elements", None), ("choices", None), ("required", False),
                             ("default", None)):
            wanted = arg.get(key, default)
            if not isinstance(wanted, _Opaque) and doc.get(key, default) != wanted:
                problems.append("option %s: %s is %r in DOCUMENTATION, %r in the argument_spec"
                                % (here, key, doc.get(key, default), wanted))
        if doc.get("suboptions") or arg.get("options"):
            problems += option_problems(doc.get("suboptions"), arg.get("options") or {}, here + ".")
    for name in sorted(set(spec or {}) - set(options or {})):
        problems.append("option %s%s: in the argument_spec, not documented" % (where, name))
    return problems


def return_problems(entries, where=""):
    """What is wrong with RETURN entries (and those under each `contains`)."""
    problems = []
    if not isinstance(entries, dict):
        return ["%s: not a mapping: %r" % (where or "RETURN", entries)]
    for name, doc in entries.items():
        here = where + name
        if not isinstance(doc, dict) or not _is_text(doc.get("description")) or not doc.get("type"):
            problems.append("%s: not a mapping with a description and a type: %r" % (here, doc))
            continue
        if set(doc) - RETURN_KEYS:
            problems.append("%s: unknown keys %s" % (here, sorted(set(doc) - RETURN_KEYS)))
        if not where and not doc.get("returned"):
            problems.append("%s: no returned" % here)
        if "contains" in doc:
            problems += return_problems(doc["contains"], here + ".")
    return problems


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_module_docs_parse(path):
    docs = _docs(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, sorted(docs)
    documentation = yaml.safe_load(docs["DOCUMENTATION"])
    assert documentation["module"] == os.path.splitext(os.path.basename(path))[0]
    assert isinstance(documentation.get("short_description"), str) and documentation["short_description"].strip()
    for key in ("description", "notes"):
        assert key not in documentation or _is_text(documentation[key]), (key, documentation[key])
    examples = yaml.safe_load(docs["EXAMPLES"])
    assert isinstance(examples, list) and all(isinstance(task, dict) for task in examples)
    yaml.safe_load(docs["RETURN"])


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_options_are_the_argument_spec(path):
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    documentation = yaml.safe_load(_docs(path)["DOCUMENTATION"])
    options = dict(_fragment_options(documentation.get("extends_documentation_fragment") or []))
    options.update(documentation.get("options") or {})
    spec = argument_spec(source)
    assert spec is not None, "no AnsibleModule(argument_spec=...) found"
    assert option_problems(options, spec) == []


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_return_entries_are_mappings_with_descriptions(path):
    assert return_problems(yaml.safe_load(_docs(path)["RETURN"]) or {}) == []


def test_the_checks_see_flow_mappings_split_at_commas_and_colons_in_lists():
    bad = yaml.safe_load("plan:\n  description: The plan.\n  returned: always\n  type: dict\n  contains:\n"
                         "    verdict: {description: ok, warn or refuse., type: str}\n")
    assert return_problems(bad) == ["plan.verdict: unknown keys ['warn or refuse.']"]
    assert not _is_text(yaml.safe_load("- Reports whether it is static (no [Install] section: it cannot be enabled)."))
    spec = {"state": {"type": "str", "choices": ["present", "absent"]}, "paths": {"type": "list", "elements": "path"}}
    options = yaml.safe_load("state: {description: What to do, type: str, choices: [present]}\n"
                             "paths: {description: Where., type: list}\nextra: {description: Not taken., type: str}\n")
    assert option_problems(options, spec) == [
        "option state: choices is ['present'] in DOCUMENTATION, ['present', 'absent'] in the argument_spec",
        "option paths: elements is None in DOCUMENTATION, 'path' in the argument_spec",
        "option extra: not in the argument_spec"]


@pytest.mark.skipif(not os.path.exists(ANSIBLE_DOC), reason="ansible-doc not installed in this venv")
def test_ansible_doc_renders_every_module():
    # ansible-doc renders all of them in one run, or prints nothing and names the one it could not read.
    names = [os.path.splitext(os.path.basename(p))[0] for p in MODULES]
    libraries = sorted({os.path.dirname(p) for p in MODULES})
    env = dict(os.environ, ANSIBLE_LIBRARY=os.pathsep.join(libraries),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"),
               ANSIBLE_DOC_FRAGMENT_PLUGINS=os.path.join(ROOT, "doc_fragments"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([ANSIBLE_DOC, "-t", "module"] + names, capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name, path in zip(names, MODULES):
        assert "> MODULE %s (%s)" % (name, path) in proc.stdout, name
