# -*- coding: utf-8 -*-
"""Write a config file atomically with a backup, for the toolkit's modules (needs an AnsibleModule)."""
import os
import tempfile


def read_text(path):
    """Text of `path`, or None when it does not exist."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomic(module, path, text, backup=True, mode=0o644):
    """Replace `path` with `text` in one rename; keep a timestamped backup of the old file.

    An existing file keeps its owner and mode (atomic_move copies them); a new one gets `mode`.
    Returns the backup path, or None.
    """
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    backup_file = None
    if backup and os.path.exists(path):
        backup_file = module.backup_local(path)
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


def stage_copy(text, directory=None, suffix=".json"):
    """A temporary file holding `text` (for validators that read a path); the caller removes it."""
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return tmp


def new_run_dir(path, attempts=1000):
    """Create a directory for one run's reports that no other run has: `path`, or `path-2`, `path-3`...

    mkdir is atomic, so two runs started in the same second never share (and overwrite) a directory.
    Returns the path created.
    """
    parent = os.path.dirname(path.rstrip("/")) or "."
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    for number in range(1, attempts + 1):
        candidate = path if number == 1 else "%s-%d" % (path, number)
        try:
            os.mkdir(candidate, 0o755)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError("%s and %d more like it exist already" % (path, attempts - 1))
