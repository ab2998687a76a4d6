# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One import path for gpuhost's module_utils outside Ansible (the CLI, the unit tests).

Inside a module, Ansible serves module_utils/ as `ansible.module_utils.<name>`; every file imports its
siblings by that name and no other. Outside Ansible, install() makes the same names work: each
`ansible.module_utils.<name>` of this project is the plain module `<name>` from module_utils/ on sys.path
(one module object under both names, so a test's monkeypatch or an exception class is the one the code
sees), and where Ansible is not installed at all (an operator's laptop), empty `ansible` and
`ansible.module_utils` packages stand in.

The gpuhost.gpu collection (tests/harness/collection.py) ships the same files with their imports renamed to
`ansible_collections.gpuhost.gpu.plugins.module_utils.<name>`; those names are served the same way, so code
copied out of the collection (role nvidia_mig's MIG boot script) runs outside Ansible too.
"""
import importlib
import importlib.abc
import importlib.util
import os
import sys
import types

PREFIX = "ansible.module_utils."
COLLECTION_PREFIX = "ansible_collections.gpuhost.gpu.plugins.module_utils."
PREFIXES = (PREFIX, COLLECTION_PREFIX)
# The packages above our names, empty stand-ins where nothing else provides them.
PARENTS = ("ansible", "ansible.module_utils", "ansible_collections", "ansible_collections.gpuhost",
           "ansible_collections.gpuhost.gpu", "ansible_collections.gpuhost.gpu.plugins",
           "ansible_collections.gpuhost.gpu.plugins.module_utils")


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, directory):
        self.directory = directory

    def _ours(self, plain):
        top = plain.split(".")[0]
        return (os.path.isfile(os.path.join(self.directory, top + ".py"))
                or os.path.isfile(os.path.join(self.directory, top, "__init__.py")))

    def find_spec(self, fullname, path=None, target=None):
        if fullname in PARENTS:
            return None
        prefix = next((p for p in PREFIXES if fullname.startswith(p)), None)
        if prefix is None or not self._ours(fullname[len(prefix):]):
            return None
        plain = fullname[len(prefix):]
        is_package = os.path.isdir(os.path.join(self.directory, *plain.split(".")))
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec):
        prefix = next(p for p in PREFIXES if spec.name.startswith(p))
        return importlib.import_module(spec.name[len(prefix):])

    def exec_module(self, module):
        """The plain import already ran it."""


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`ansible` and `ansible.module_utils` where Ansible is absent (and the collection's packages above its
    module_utils, wherever nothing else provides them): empty packages, so that the alias above has a parent to
    hang from."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in PARENTS:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        """Nothing to run: an empty package."""


def install(directory):
    """Put module_utils/ on sys.path and serve it as ansible.module_utils (and under the collection's name)
    too (idempotent)."""
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    if not any(isinstance(f, _Alias) and f.directory == directory for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias(directory))
    if not any(isinstance(f, _Stub) for f in sys.meta_path):
        sys.meta_path.append(_Stub())
