"""The gpuhost.gpu collection, built from this tree as `make collection` builds it (tests/harness/collection.py):
ansible-galaxy installs the artifact, ansible-doc reads every module from it and a module runs by its FQCN, from a
directory outside the repository (no ansible.cfg of the checkout); the collection playbooks load with every role and
module they name; ansible-test sanity passes on it; every shipped Python file carries the one licence header."""
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
_SPEC = importlib.util.spec_from_file_location("gpuhost_collection", os.path.join(ROOT, "tests", "harness", "collection.py"))
collection = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(collection)

MODULES = sorted(os.path.splitext(os.path.basename(p))[0]
                 for p in glob.glob(os.path.join(ROOT, "library", "*.py")) + glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py")))
LICENCE = ["# Copyright (c) gpuhost contributors",
           "# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)",
           "# SPDX-License-Identifier: GPL-3.0-or-later"]


def _user_env(collections_path):
    """A user's environment: none of the checkout's Ansible settings, the collection's path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_DEPRECATION_WARNINGS="false",
               PYTHONWARNINGS="ignore")
    return env


def _run(argv, cwd, env, timeout=300):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(collections path, a directory outside the repository) with the artifact installed there."""
    out = str(tmp_path_factory.mktemp("collection"))
    user = str(tmp_path_factory.mktemp("user"))
    assert not os.path.abspath(user).startswith(ROOT + os.sep)
    artifact = collection.build(out)
    path = os.path.join(out, "collections")
    proc = _run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "-p", path, artifact],
                cwd=user, env=_user_env(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path, user


def test_ansible_doc_reads_every_module(installed):
    path, user = installed
    env = _user_env(path)
    proc = _run([os.path.join(BIN, "ansible-doc"), "--json", "-l", "gpuhost.gpu"], cwd=user, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(proc.stdout)) == ["gpuhost.gpu." + m for m in MODULES]
    proc = _run([os.path.join(BIN, "ansible-doc"), "--json"] + ["gpuhost.gpu." + m for m in MODULES], cwd=user, env=env)
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    bad = [m for m in MODULES if (docs.get("gpuhost.gpu." + m) or {}).get("doc", {}).get("module") != m]
    assert not bad, "ansible-doc gives no documentation of %s:\n%s" % (bad, proc.stderr)
    # The shared doc fragments resolve inside the collection.
    assert "backup_dir" in docs["gpuhost.gpu.docker_daemon_json"]["doc"]["options"]
    for module in ("gpuhost_report", "gpuhost_drift_report"):
        assert {"dest", "generated"} <= set(docs["gpuhost.gpu." + module]["doc"]["options"]), module


def test_module_runs_by_fqcn(installed):
    """The module and the module_utils it imports travel in the collection's names (AnsiballZ)."""
    path, user = installed
    args = {"env": ["NVIDIA_REQUIRE_CUDA=cuda>=12.4"], "driver_version": "550.54.15", "driver_cuda_version": "12.4",
            "image": "example/cuda:12.4"}
    proc = _run([os.path.join(BIN, "ansible"), "localhost", "-c", "local", "-o", "-m", "gpuhost.gpu.cuda_image_check",
                 "-a", json.dumps(args)], cwd=user, env=_user_env(path))
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    assert '"image_cuda": "12.4"' in proc.stdout, proc.stdout


@pytest.mark.parametrize("playbook", ["site", "diagnose", "drift"])
def test_collection_playbooks_load(installed, playbook):
    """ansible-playbook gpuhost.gpu.<playbook> finds the playbook, its imports, and every role and module its
    plays and static roles name by their short names (resolved in the collection)."""
    path, user = installed
    inventory = os.path.join(user, "hosts.yml")
    with open(inventory, "w", encoding="utf-8") as handle:
        handle.write("gpu_hosts:\n  hosts:\n    gpu1:\n      ansible_connection: local\n")
    proc = _run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, "gpuhost.gpu." + playbook, "--list-tasks"],
                cwd=user, env=_user_env(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sanity(tmp_path):
    """ansible-test sanity (collection.SANITY_TESTS) on the built collection, offline but for PyPI. Run with no
    stdin at all, as CI starts `make test`: ansible-test reads its stdin's flags and fails without one."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "harness", "collection.py"), "sanity",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=1800, check=False,
                          preexec_fn=lambda: os.close(0))  # pylint: disable=subprocess-popen-preexec-fn
    found = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith(("ERROR", "FATAL"))]
    assert proc.returncode == 0, "\n".join(found) or proc.stdout[-5000:] + proc.stderr[-5000:]


def _shipped_python():
    return sorted(glob.glob(os.path.join(ROOT, "library", "*.py")) + glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py"))
                  + glob.glob(os.path.join(ROOT, "module_utils", "*", "*.py"))
                  + glob.glob(os.path.join(ROOT, "doc_fragments", "*.py"))
                  + [os.path.join(ROOT, "bin", "gpuhost_cli", "module_utils_path.py")])


def test_one_licence_header():
    """Every module, module_utils and doc fragment file (and the helper the collection ships) opens with the same
    licence header, after its shebang and coding line: the licence galaxy.yml declares, the text in COPYING."""
    bad = []
    for path in _shipped_python():
        with open(path, encoding="utf-8") as handle:
            head = [line.rstrip("\n") for line in handle.readlines()[:6]]
        at = next((i for i, line in enumerate(head) if line == LICENCE[0]), None)
        if at is None or at > 2 or head[at:at + 3] != LICENCE:
            bad.append(os.path.relpath(path, ROOT))
    assert not bad, "no licence header (%s):\n%s" % (" / ".join(LICENCE), "\n".join(bad))
    with open(os.path.join(ROOT, "collection", "galaxy.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["license"] == ["GPL-3.0-or-later"]
    with open(os.path.join(ROOT, "COPYING"), encoding="utf-8") as handle:
        assert "GNU GENERAL PUBLIC LICENSE" in handle.read(200)


def test_dependencies_are_the_collections_the_roles_use():
    """galaxy.yml's dependencies: exactly the collections (other than ansible.builtin and this one) whose modules,
    filters, tests or lookups the roles and playbooks name."""
    used = set()
    for top in ("roles", "playbooks"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*.yml"), recursive=True) + \
                glob.glob(os.path.join(ROOT, top, "**", "*.j2"), recursive=True):
            with open(path, encoding="utf-8") as handle:
                text = re.sub(r"(?m)^\s*#.*$", "", handle.read())
            used.update(m.group(1) for m in re.finditer(r"(?<![\w./-])([a-z][a-z0-9_]*\.[a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*\b", text)
                        if m.group(1) not in ("ansible.builtin", "gpuhost.gpu", "ansible.legacy"))
    # Dotted words that are no installed collection are attributes the regex saw (ansible_facts.x.y and such).
    import ansible_collections  # pylint: disable=import-outside-toplevel  (the collections the pinned ansible bundles)
    roots = list(ansible_collections.__path__)
    used = {c for c in used if any(os.path.isdir(os.path.join(r, *c.split("."))) for r in roots)}
    with open(os.path.join(ROOT, "collection", "galaxy.yml"), encoding="utf-8") as handle:
        declared = set(yaml.safe_load(handle)["dependencies"])
    assert used == declared


def test_build_rewrites_imports_and_keeps_alignment():
    source = ("from ansible.module_utils.basic import AnsibleModule\n"
              "from ansible.module_utils.layers.engine import (cdi_enabled, choose_engine,\n"
              "                                                parse_docker_info)\n"
              "from ansible.module_utils.layers import (  # noqa: F401\n"
              "    cdi, container)\n"
              "x = 'ansible.module_utils.gpu.gpu_facts'\n")
    text, count = collection.rewrite_imports(source, ["gpu", "layers"])
    prefix = "ansible_collections.gpuhost.gpu.plugins.module_utils."
    assert count == 3
    lines = text.splitlines()
    assert lines[0] == "from ansible.module_utils.basic import AnsibleModule"
    assert lines[1].startswith("from %slayers.engine import (cdi_enabled" % prefix)
    assert lines[2].index("parse_docker_info") == lines[1].index("(") + 1
    assert lines[4] == "    cdi, container)"
    assert lines[5] == "x = '%sgpu.gpu_facts'" % prefix


def test_build_rewrites_documentation_names():
    source = ('DOCUMENTATION = r"""\nmodule: gpu_stack_check\nextends_documentation_fragment:\n  - gpuhost_backup\n'
              'description: see M(nvidia_gpu_facts) and M(ansible.builtin.copy)\nseealso:\n  - module: nvidia_gpu_facts\n"""\n'
              'EXAMPLES = r"""\n- name: Check\n  gpu_stack_check:\n    fail_on_required: true\n"""\n')
    text, _n = collection.rewrite_fragments(source, ["gpuhost_backup"])
    text, _n = collection.rewrite_module_refs(text, ["gpu_stack_check", "nvidia_gpu_facts"])
    assert "module: gpu_stack_check\n" in text
    assert "  - gpuhost.gpu.gpuhost_backup\n" in text
    assert "M(gpuhost.gpu.nvidia_gpu_facts) and M(ansible.builtin.copy)" in text
    assert "  - module: gpuhost.gpu.nvidia_gpu_facts\n" in text
    assert "  gpuhost.gpu.gpu_stack_check:\n    fail_on_required: true" in text
