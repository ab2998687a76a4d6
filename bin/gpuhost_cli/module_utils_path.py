# -*- coding: utf-8 -*-
"""One import path for gpuhost's module_utils outside Ansible (the CLI, the unit tests).

Inside a module, Ansible serves module_utils/ as `ansible.module_utils.<name>`; every file imports its
siblings by that name and no other. Outside Ansible, install() makes the same names work: each
`ansible.module_utils.<name>` of this project is the plain module `<name>` from module_utils/ on sys.path
(one module object under both names, so a test's monkeypatch or an exception class is the one the code
sees), and where Ansible is not installed at all (an operator's laptop), empty `ansible` and
`ansible.module_utils` packages stand in.
"""
import importlib
import importlib.abc
import importlib.util
import os
import sys
import types

PREFIX = "ansible.module_utils."


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, directory):
        self.directory = directory

    def _ours(self, plain):
        top = plain.split(".")[0]
        return (os.path.isfile(os.path.join(self.directory, top + ".py"))
                or os.path.isfile(os.path.join(self.directory, top, "__init__.py")))

    def find_spec(self, fullname, path=None, target=None):
        if fullname in ("ansible", "ansible.module_utils"):
            return None
        if not fullname.startswith(PREFIX) or not self._ours(fullname[len(PREFIX):]):
            return None
        plain = fullname[len(PREFIX):]
        is_package = os.path.isdir(os.path.join(self.directory, *plain.split(".")))
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec):
        return importlib.import_module(spec.name[len(PREFIX):])

    def exec_module(self, module):
        """The plain import already ran it."""


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`ansible` and `ansible.module_utils` where Ansible is absent: empty packages, so that the alias above
    has a parent to hang from."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in ("ansible", "ansible.module_utils"):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        """Nothing to run: an empty package."""


def install(directory):
    """Put module_utils/ on sys.path and serve it as ansible.module_utils too (idempotent)."""
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    if not any(isinstance(f, _Alias) and f.directory == directory for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias(directory))
    if not any(isinstance(f, _Stub) for f in sys.meta_path):
        sys.meta_path.append(_Stub())
