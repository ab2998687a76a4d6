"""Every module_utils file imports the way Ansible imports it (as ansible.module_utils.<name>, with no plain
path to fall back on), and every `try: <ansible.module_utils imports> except ImportError: <plain imports>`
pair binds the same names. A name only the fallback binds passes every unit test (they import the plain
way) and breaks on the host: k8s_plan's OUTSIDE_BUDGET_MIB was a NameError under Ansible."""
import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

MODULE_UTILS = os.path.join(ROOT, "module_utils")
UTILS = sorted(glob.glob(os.path.join(MODULE_UTILS, "**", "*.py"), recursive=True))
MODULES = sorted(glob.glob(os.path.join(ROOT, "library", "*.py"))
                 + glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py")))

# Runs in a fresh interpreter: sys.path there has no module_utils/ (so a broken `try:` branch cannot fall
# back to the plain import, as on a host), and the ansible.module_utils copies never meet this session's
# plain ones (two PlanError classes would confuse other tests).
_IMPORT_ALL = r"""
import importlib.util, json, os, sys
import ansible.module_utils
utils_dir, names, modules = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
ansible.module_utils.__path__.append(utils_dir)
out = {}
def attempt(key, load):
    try:
        out[key] = load()
    except Exception as exc:  # the error is the result
        out[key] = "%s: %s" % (type(exc).__name__, exc)
def util(name):
    module = importlib.import_module("ansible.module_utils." + name)
    wanted = os.path.join(utils_dir, *name.split("."))
    if module.__file__ in (wanted + ".py", os.path.join(wanted, "__init__.py")):
        return None
    return "imported " + module.__file__
def library(path):
    spec = importlib.util.spec_from_file_location("gpuhost_module_" + os.path.basename(path)[:-3], path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
for name in names:
    attempt(name, lambda: util(name))
for path in modules:
    attempt(path, lambda: library(path))
print(json.dumps(out))
"""


def _dotted(path):
    """layers/base.py -> layers.base, layers/__init__.py -> layers."""
    parts = os.path.splitext(os.path.relpath(path, MODULE_UTILS))[0].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.fixture(scope="module")
def imported():
    names = " ".join(_dotted(p) for p in UTILS)
    proc = subprocess.run([sys.executable, "-I", "-c", _IMPORT_ALL, MODULE_UTILS, names] + MODULES,
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("path", UTILS, ids=[os.path.relpath(p, MODULE_UTILS) for p in UTILS])
def test_module_utils_import_as_ansible_imports_them(imported, path):
    assert imported[_dotted(path)] is None


@pytest.mark.parametrize("path", MODULES, ids=[os.path.relpath(p, ROOT) for p in MODULES])
def test_modules_import_their_utils_as_ansible_does(imported, path):
    assert imported[path] is None


def _bound(statements):
    """Names a block binds at its level: imports (as named), assignments (`tomllib = None`)."""
    names = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _catches_import_error(handler):
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id in ("ImportError", "ModuleNotFoundError") for k in kinds)


def import_fallbacks(source):
    """[(line, names only the try binds, names only the fallback binds)] per top-level try/except ImportError."""
    pairs = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                if _catches_import_error(handler):
                    tried, fallback = _bound(node.body), _bound(handler.body)
                    pairs.append((node.lineno, sorted(tried - fallback), sorted(fallback - tried)))
    return pairs


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("path", UTILS + MODULES, ids=[os.path.relpath(p, ROOT) for p in UTILS + MODULES])
def test_try_and_fallback_imports_bind_the_same_names(path):
    for line, only_tried, only_fallback in import_fallbacks(_read(path)):
        assert (only_tried, only_fallback) == ([], []), "line %d: only the ansible import binds %s, only the " \
            "plain import binds %s" % (line, only_tried, only_fallback)


def test_the_name_check_sees_a_name_only_the_fallback_imports():
    source = ("try:\n    from ansible.module_utils.serving.vllm_plan import PlanError\n"
              "except ImportError:  # plain import\n    from vllm_plan import OUTSIDE_BUDGET_MIB, PlanError\n"
              "try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n")
    assert import_fallbacks(source) == [(1, [], ["OUTSIDE_BUDGET_MIB"]), (5, [], [])]


def _falls_back_to_a_plain_import(node, handler):
    """A try that imports from ansible.module_utils and, failing that, the same code by its plain name."""
    tried = [s for s in node.body if isinstance(s, ast.ImportFrom) and (s.module or "").startswith("ansible.module_utils")]
    return bool(tried) and any(isinstance(s, (ast.Import, ast.ImportFrom)) for s in handler.body)


@pytest.mark.parametrize("path", UTILS + MODULES, ids=[os.path.relpath(p, ROOT) for p in UTILS + MODULES])
def test_one_import_path(path):
    """Every file imports gpuhost's module_utils as ansible.module_utils.<name> and only so: the CLI and the
    tests serve that name too (bin/gpuhost_cli/module_utils_path.py), so no file keeps a second, plain import."""
    twins = [node.lineno for node in ast.parse(_read(path)).body if isinstance(node, ast.Try)
             for handler in node.handlers if _catches_import_error(handler) and _falls_back_to_a_plain_import(node, handler)]
    assert not twins, "line(s) %s: a plain-import fallback" % twins
