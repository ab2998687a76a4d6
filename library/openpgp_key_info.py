#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Report the fingerprints of an OpenPGP key file and check one against an expected value."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: openpgp_key_info
short_description: Fingerprints of an apt repository key, checked before apt trusts it
description:
  - Reads an armored or binary OpenPGP key file and returns the fingerprints of its primary keys,
    computed in Python (no gpg needed). With O(expected_fingerprint) it fails unless the file holds
    that key. Read-only.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  path:
    description: The key file.
    type: path
    required: true
  expected_fingerprint:
    description: Fingerprint the file must contain (spaces and case do not matter).
    type: str
  layer:
    description: Layer named in the failure message.
    type: str
    default: toolkit
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: The downloaded key is NVIDIA's
  openpgp_key_info:
    path: /usr/share/keyrings/nvidia-container-toolkit-keyring.asc
    expected_fingerprint: C95B321B61E88C1809C4F759DDCAE044F796ECB0
"""

RETURN = r"""
fingerprints:
  description: Fingerprints of the primary keys in the file.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.driver.openpgp import OpenPGPError, normalise, primary_fingerprints


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            expected_fingerprint=dict(type="str"),
            layer=dict(type="str", default="toolkit"),
        ),
        supports_check_mode=True,
    )
    path, layer = module.params["path"], module.params["layer"]
    try:
        with open(path, "rb") as handle:
            found = primary_fingerprints(handle.read())
    except (OSError, OpenPGPError) as exc:
        module.fail_json(msg="%s: cannot read the repository key %s: %s" % (layer, path, exc))
    expected = module.params["expected_fingerprint"]
    if expected and normalise(expected) not in found:
        module.fail_json(msg="%s: repository key %s has fingerprint %s, expected %s — the key was not trusted; "
                             "check the key URL, or set the fingerprint variable if the vendor rotated its key"
                         % (layer, path, ", ".join(found), normalise(expected)), fingerprints=found)
    module.exit_json(changed=False, fingerprints=found)


if __name__ == "__main__":
    main()
