"""Every custom module's DOCUMENTATION, EXAMPLES and RETURN are YAML that ansible-doc can read, and name the
module as its file does (a colon in a plain scalar, or a copied header, would break `ansible-doc`)."""
import ast
import glob
import os

import pytest
import yaml

from conftest import ROOT

MODULES = sorted(glob.glob(os.path.join(ROOT, "library", "*.py")) + glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py")))


def _docs(path):
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                found[node.targets[0].id] = node.value.value
    return found


@pytest.mark.parametrize("path", MODULES, ids=[os.path.relpath(p, ROOT) for p in MODULES])
def test_module_docs_parse(path):
    docs = _docs(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, sorted(docs)
    documentation = yaml.safe_load(docs["DOCUMENTATION"])
    assert documentation["module"] == os.path.splitext(os.path.basename(path))[0]
    assert documentation.get("short_description") and documentation.get("description")
    yaml.safe_load(docs["EXAMPLES"])
    yaml.safe_load(docs["RETURN"])
