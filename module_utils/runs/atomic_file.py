# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a config file atomically with a backup, or a run's reports into a directory of their own, for the
toolkit's modules (needs an AnsibleModule)."""
import os
import shutil
import tempfile
import time

# Backups live outside the directories their tools read: dockerd reads /etc/docker, CDI reads every
# spec in /etc/cdi, apt warns about every odd name in /etc/apt/sources.list.d.
BACKUP_DIR = "/var/backups/gpuhost"


def read_text(path, newline=None):
    """Text of `path`, or None when it does not exist. newline="" keeps CR LF line ends as they are."""
    try:
        with open(path, "r", encoding="utf-8", newline=newline) as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def backup_copy(path, backup_dir=BACKUP_DIR):
    """Copy `path` (mode and times kept) to `backup_dir`/<path>.<UTC time>; return the copy's path.

    The copy mirrors the file's own path (/var/backups/gpuhost/etc/docker/daemon.json.20261204T101500Z),
    and a second backup in the same second gets -2, -3... rather than replacing the first.
    """
    base = "%s.%s" % (os.path.join(backup_dir, path.lstrip("/")), time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    os.makedirs(os.path.dirname(base), 0o750, exist_ok=True)
    for number in range(1, 1000):
        candidate = base if number == 1 else "%s-%d" % (base, number)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as target, open(path, "rb") as source:
            shutil.copyfileobj(source, target)
        shutil.copystat(path, candidate)
        return candidate
    raise OSError("no free backup name for %s under %s" % (path, backup_dir))


def write_atomic(module, path, text, backup=True, mode=0o644, backup_dir=BACKUP_DIR):
    """Replace `path` with `text` in one rename; keep a timestamped backup of the old file in `backup_dir`.

    An existing file keeps its owner and mode (atomic_move copies them); a new one gets `mode`.
    Returns the backup path, or None.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, 0o755, exist_ok=True)
    backup_file = None
    if backup and os.path.exists(path):
        backup_file = backup_copy(path, backup_dir)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        if not os.path.exists(path):
            os.chmod(tmp, mode)
        module.atomic_move(tmp, path, unsafe_writes=False)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return backup_file


def stage_copy(text, suffix=".json"):
    """A temporary file (in the system's temp directory) holding `text`, for validators that read a path;
    the caller removes it."""
    fd, tmp = tempfile.mkstemp(prefix="gpuhost-", suffix=suffix)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return tmp


def new_run_dir(path, attempts=1000):
    """Create a directory for one run's reports that no other run has: `path`, or `path-2`, `path-3`...

    mkdir is atomic, so two runs started in the same second never share (and overwrite) a directory.
    Returns the path created.
    """
    parent = os.path.dirname(path.rstrip("/")) or "."
    # exist_ok: two runs may both find the parent missing and make it at once.
    os.makedirs(parent, 0o755, exist_ok=True)
    for number in range(1, attempts + 1):
        candidate = path if number == 1 else "%s-%d" % (path, number)
        try:
            os.mkdir(candidate, 0o755)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError("%s and %d more like it exist already" % (path, attempts - 1))


def write_run_reports(module, who, dest, files):
    """Create a run's report directory (new_run_dir(dest)) and write `files` ((name, text), in order) into it;
    returns (the directory, the paths written). A directory that cannot be made fails the task, named by `who`."""
    try:
        run_dir = new_run_dir(dest)
    except OSError as exc:
        module.fail_json(msg="%s: cannot create a report directory at %s: %s. Fix: set "
                             "gpuhost_reports_dir to a writable directory" % (who, dest, exc))
    paths = []
    for name, text in files:
        path = os.path.join(run_dir, name)
        write_atomic(module, path, text, backup=False)
        paths.append(path)
    return run_dir, paths
