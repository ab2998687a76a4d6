#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fetch an apt repository key and write it to its keyring path only once its fingerprint is the expected one."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_signing_key
short_description: An apt repository key, written only after its fingerprint passed
description:
  - Fetches the key at O(url) into memory, computes the fingerprints of its primary keys in Python (no gpg
    needed) and writes it to O(dest), the path a deb822 source names in C(Signed-By), only when one of them is
    O(expected_fingerprint). A key with another fingerprint, or a file that is no key, fails the task naming
    the URL, both fingerprints and the fix, and nothing is written.
  - "After the task O(dest) holds the expected key or nothing: a file there without the expected fingerprint
    (an earlier version's download, a hand-placed key) is moved to O(backup_dir), also when the task fails,
    so apt never reads it."
  - A key with the expected fingerprint at O(dest) is left alone and not fetched (no network access on a
    converged or air-gapped host) unless O(force) is set.
  - The key is stored armored (a binary key is armored first), so O(dest) must end in C(.asc); it is written
    atomically, mode C(0644), with a timestamped backup of the file it replaces.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
extends_documentation_fragment:
  - gpuhost_backup
options:
  url:
    description: Where the key is fetched (C(https://), C(http://) or C(file://)).
    type: str
    required: true
  dest:
    description: The keyring file apt reads (the source's C(Signed-By)); must end in C(.asc).
    type: path
    required: true
  expected_fingerprint:
    description:
      - The full fingerprint the key must have (40 hex digits, 64 for a v6 key; spaces, case and C(0x) do not
        matter). Short key IDs are refused.
    type: str
    required: true
  layer:
    description: Layer named in the messages.
    type: str
    default: apt
  fix:
    description: What the operator should do about a refused key, in the failure message.
    type: str
  force:
    description:
      - Fetch even when O(dest) already holds the expected key, and replace it when the fetched one differs
        (a vendor that extended the key's expiry, say). A fetched key with another fingerprint still fails and
        leaves the trusted one in place.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for the key.
    type: int
    default: 30
  validate_certs:
    description: Verify the server's TLS certificate.
    type: bool
    default: true
notes:
  - Supports check mode and diff mode. The diff shows the fingerprints before and after, not the key.
  - "Check mode fetches (read-only) and fails on a key with another fingerprint, as the real run would. A key
    that cannot be fetched in check mode (a fresh host whose network or proxy a later layer sets up) is a
    warning and reports changed: the real run fetches it, and fails there if it still cannot."
"""

EXAMPLES = r"""
- name: NVIDIA's container toolkit repository key, checked before apt trusts it (fingerprint)
  apt_signing_key:
    url: https://nvidia.github.io/libnvidia-container/gpgkey
    dest: /usr/share/keyrings/nvidia-container-toolkit-keyring.asc
    expected_fingerprint: C95B321B61E88C1809C4F759DDCAE044F796ECB0
    layer: toolkit
"""

RETURN = r"""
fingerprints:
  description: Fingerprints of the primary keys of the key at O(dest) after the task (the fetched one when it was fetched).
  returned: success
  type: list
  elements: str
dest:
  description: The keyring path.
  returned: always
  type: str
fetched:
  description: Whether the key was fetched (false when the key on disk already had the expected fingerprint).
  returned: always
  type: bool
rejected_path:
  description: Where a file at O(dest) without the expected fingerprint was moved (the backup directory).
  returned: when such a file was moved
  type: str
backup_file:
  description: Backup of the file the new key replaced.
  returned: when a file was replaced
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible.module_utils.driver.signing_key import (
    MAX_KEY_BYTES, WRONG, SigningKeyError, check_dest, diff, disk_state, expected_fingerprint,
    fetch_failure, fetch_ok, needs_fetch, read_key, refusal, rejected_note, stored_text)
from ansible.module_utils.runs.atomic_file import backup_copy, write_atomic


def read_bytes(module, path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg="%s: cannot read %s: %s. Fix: remove it or choose another keyring path"
                             % (module.params["layer"], path, exc), dest=path, changed=False, fetched=False)


def fetch(module, url):
    """(bytes, None) or (None, why)."""
    resp, info = fetch_url(module, url, timeout=module.params["timeout"])
    if not fetch_ok(url, info.get("status"), resp is not None):
        return None, info.get("msg") or "HTTP status %s" % info.get("status")
    data = resp.read(MAX_KEY_BYTES + 1)
    if len(data) > MAX_KEY_BYTES:
        return None, "more than %d bytes, not a repository key" % MAX_KEY_BYTES
    return data, None


def move_aside(module, dest):
    # A copy in the backup directory, then the file is gone: apt reads every *.asc/*.gpg in trusted.gpg.d and
    # any path a source names, so a renamed copy beside dest could still be read (or warned about); the backup
    # directory is where gpuhost keeps every replaced file, out of every reader's way.
    rejected = backup_copy(dest, module.params["backup_dir"])
    os.unlink(dest)
    return rejected


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            expected_fingerprint=dict(type="str", required=True),
            layer=dict(type="str", default="apt"),
            fix=dict(type="str"),
            force=dict(type="bool", default=False),
            timeout=dict(type="int", default=30),
            validate_certs=dict(type="bool", default=True),
            backup_dir=dict(type="path", default="/var/backups/gpuhost"),
        ),
        supports_check_mode=True,
    )
    url, dest, layer, fix = (module.params[k] for k in ("url", "dest", "layer", "fix"))
    result = dict(changed=False, dest=dest, fetched=False)
    try:
        expected = expected_fingerprint(module.params["expected_fingerprint"])
        check_dest(dest)
    except SigningKeyError as exc:
        module.fail_json(msg="%s: %s" % (layer, exc), **result)

    on_disk = read_bytes(module, dest)
    disk_fprs, disk_error = read_key(on_disk)
    state = disk_state(on_disk, disk_fprs, expected)
    if not needs_fetch(state, module.params["force"]):
        module.exit_json(fingerprints=disk_fprs, **result)

    def refuse(msg, **extra):
        # The rule: a wrong key is never left where apt reads it, also when this run fails.
        note = ""
        if state == WRONG:
            if not module.check_mode:
                result["rejected_path"] = move_aside(module, dest)
            note = rejected_note(dest, disk_fprs, disk_error, result.get("rejected_path"), module.check_mode)
        module.fail_json(msg=msg(note), **dict(result, **extra))

    data, why = fetch(module, url)
    if data is None:
        if module.check_mode:
            module.warn("%s: cannot fetch the repository key %s in check mode (%s); a run fetches it and checks "
                        "its fingerprint before writing %s" % (layer, url, why, dest))
            result["changed"] = True
            module.exit_json(fingerprints=[], **result)
        refuse(lambda note: fetch_failure(layer, url, why, expected, dest, fix, note))
    result["fetched"] = True
    found, error = read_key(data)
    if expected not in found:
        refuse(lambda note: refusal(layer, url, found, error, expected, dest, fix, note), fingerprints=found)

    text = stored_text(data)
    result["fingerprints"] = found
    if on_disk == text.encode("ascii"):
        module.exit_json(**result)
    result["changed"] = True
    if module._diff:
        result["diff"] = diff(dest, disk_fprs, disk_error, on_disk is not None, found)
    if module.check_mode:
        module.exit_json(**result)
    result["backup_file"] = write_atomic(module, dest, text, backup=on_disk is not None,
                                         backup_dir=module.params["backup_dir"])
    if state == WRONG:
        result["rejected_path"] = result["backup_file"]
    # apt reads Signed-By keys as _apt: the file must be world-readable (a replaced file keeps its old mode).
    module.set_mode_if_different(dest, "0644", True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
