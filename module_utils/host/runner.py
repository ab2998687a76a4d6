# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one way gpuhost runs a command on a host and reads its files: a HostIO.

Every module and every module_utils function that needs the host goes through one of these, so the same
code runs inside a module, outside Ansible and in tests on recorded outputs. Nothing else in library/ or
module_utils/ imports subprocess or calls AnsibleModule.run_command (tests/unit/test_host_runner.py fails
on one that does).

    io.run(argv)                    -> (rc, stdout, stderr); never raises for a command that fails
    io.run(argv, merge_stderr=True) -> (rc, stdout and stderr in the order written, "")
    io.which(name)                  -> path or None (PATH, then EXTRA_BIN_DIRS)
    io.read(path), io.read_bytes(path), io.listdir(path), io.exists(path), io.stat(path), io.readlink(path)

    ModuleHostIO(module, ...)       inside a module: AnsibleModule.run_command and get_bin_path
    module_host_io(module)          the read-only checks' ModuleHostIO: the module's `timeout` option bounds
                                    each command (coreutils `timeout`), the C locale, never an exception
    SubprocessHostIO(timeout=...)   outside Ansible: the MIG boot script (the nvidia_mig role copies this
                                    file to the host with mig_apply.py)
    HostIO                          the interface; tests subclass it with recorded outputs

Pure stdlib (python >= 3.6), no Ansible import.
"""
import os
import shlex
import shutil
import subprocess

# coreutils `timeout`'s exit status when the command ran out of time (SubprocessHostIO returns it too).
TIMEOUT_RC = 124
# A shell's exit status for a command it cannot run (ModuleHostIO(handle_exceptions=False), SubprocessHostIO).
NOT_RUN_RC = 127

# The parsers read English: the C locale.
C_LOCALE = {"LC_ALL": "C"}

# Where the tools live besides PATH: lspci is in /usr/bin on Debian/Ubuntu but /sbin or /usr/sbin
# elsewhere; NVIDIA's container images put nvidia-smi in /usr/local/nvidia/bin.
EXTRA_BIN_DIRS = ["/usr/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/local/nvidia/bin"]


def command_line(argv, merge_stderr=False):
    """The shell line of argv, each word quoted; `2>&1` appended when merge_stderr (what a message shows)."""
    return " ".join(shlex.quote(str(part)) for part in argv) + (" 2>&1" if merge_stderr else "")


def step_record(what, result):
    """One step a module carried out, for its result: {step, rc, output} (stdout and stderr, stripped, joined)."""
    rc, out, err = result
    return {"step": what, "rc": rc, "output": "\n".join(x for x in ((out or "").strip(), (err or "").strip()) if x)}


class HostIO(object):
    """Host access: commands through run() and which() (each backend's own), files read here.

    run(argv, merge_stderr=False) -> (rc, stdout, stderr); which(name) -> path or None; read(path) -> text
    or None; read_bytes(path) -> bytes or None; listdir(path) -> sorted list or None; exists(path) -> bool;
    stat(path) -> os.stat_result or None; readlink(path) -> text, None (nothing there) or False (not a
    symlink).
    """

    def run(self, argv, merge_stderr=False):
        raise NotImplementedError

    def which(self, name):
        raise NotImplementedError

    def read(self, path):
        try:
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except (IOError, OSError):
            return None

    def read_bytes(self, path):
        """A file's bytes (EFI variables are binary), or None."""
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except (IOError, OSError):
            return None

    def listdir(self, path):
        try:
            return sorted(os.listdir(path))
        except (IOError, OSError):
            return None

    def exists(self, path):
        return os.path.exists(path)

    def readlink(self, path):
        """A symlink's text; None when nothing is there, False when something other than a symlink is."""
        try:
            return os.readlink(path)
        except (IOError, OSError):
            return False if os.path.lexists(path) else None

    def stat(self, path):
        try:
            return os.stat(path)
        except (IOError, OSError):
            return None


class ModuleHostIO(HostIO):
    """A module's host access over its AnsibleModule. The defaults are run_command's own; a module sets what
    it needs:

    timeout           seconds each command may run (under coreutils `timeout -k 5`, where it is installed);
                      None: unbounded
    environ_update    environment to add (C_LOCALE where a parser reads the output)
    errors            how undecodable output is decoded (run_command's `errors`)
    handle_exceptions True: a command that cannot be started fails the module (run_command's own answer);
                      False: run() returns (127, "", why), as a shell would
    """

    def __init__(self, module, timeout=None, environ_update=None, errors="surrogate_or_strict",
                 handle_exceptions=True):
        self.module = module
        self.timeout = timeout
        self.environ_update = dict(environ_update) if environ_update else None
        self.errors = errors
        self.handle_exceptions = handle_exceptions
        self.timeout_bin = module.get_bin_path("timeout") if timeout is not None else None

    def which(self, name):
        return self.module.get_bin_path(name, opt_dirs=EXTRA_BIN_DIRS)

    def run(self, argv, merge_stderr=False):
        argv = list(argv)
        if self.timeout_bin:
            argv = [self.timeout_bin, "-k", "5", str(self.timeout)] + argv
        options = dict(check_rc=False, errors=self.errors, handle_exceptions=self.handle_exceptions)
        if self.environ_update:
            options["environ_update"] = dict(self.environ_update)
        command = argv
        if merge_stderr:
            # The shell merges the streams in the order they were written (a traceback amid the log).
            command = command_line(argv, merge_stderr=True)
            options["use_unsafe_shell"] = True
        try:
            return self.module.run_command(command, **options)
        except (IOError, OSError) as exc:
            return NOT_RUN_RC, "", "%s: %s" % (argv[0], exc)


def module_host_io(module):
    """The ModuleHostIO of a read-only check whose `timeout` option bounds each command (refused unless
    positive): the C locale, undecodable bytes replaced, a command that cannot run is exit 127."""
    timeout = module.params["timeout"]
    if timeout <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %d" % timeout)
    return ModuleHostIO(module, timeout=timeout, environ_update=C_LOCALE, errors="replace", handle_exceptions=False)


class SubprocessHostIO(HostIO):
    """Host access outside Ansible (the MIG boot script): commands through subprocess, never an exception.

    timeout: seconds each command may run (then exit 124); environ_update: environment to add.
    """

    def __init__(self, timeout=None, environ_update=None):
        self.timeout = timeout
        self.environ_update = dict(environ_update) if environ_update else None

    def which(self, name):
        found = shutil.which(name)
        if found:
            return found
        for directory in EXTRA_BIN_DIRS:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        return None

    def run(self, argv, merge_stderr=False):
        argv = list(argv)
        env = dict(os.environ, **self.environ_update) if self.environ_update else None
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                                  universal_newlines=True, timeout=self.timeout, env=env, check=False)
        except OSError as exc:
            return NOT_RUN_RC, "", str(exc)
        except subprocess.TimeoutExpired:
            return TIMEOUT_RC, "", "%s timed out after %s s" % (" ".join(argv), self.timeout)
        return proc.returncode, proc.stdout, proc.stderr or ""
