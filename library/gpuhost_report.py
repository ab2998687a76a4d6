#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_report
short_description: Write gpu_stack_check results as per-host JSON and a fleet summary (Markdown, HTML)
description:
  - "Runs where the reports go (the control node, C(delegate_to) localhost). Writes into O(dest) one
    C(<host>.json) per host (the whole diagnosis), C(summary.md) (a host × layer table with the failed
    layer and remedy per host), C(summary.html) (the same table coloured by status, then each host's
    checks with their evidence; self-contained, inline CSS, no external assets) and C(summary.json)
    (counts and rows)."
  - "Host names, evidence and remedies are treated as untrusted text: escaped in Markdown and HTML,
    host names reduced to C([A-Za-z0-9._-]) in file names."
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
extends_documentation_fragment:
  - gpuhost_reports
options:
  results:
    description:
      - "Host name to its gpu_stack_check result. A host without a result (unreachable, failed before the
        check) may be given as C({unreachable: true, msg: ...})."
    type: dict
    required: true
  title:
    description: Title of the summaries.
    type: str
    default: GPU stack diagnosis
"""

EXAMPLES = r"""
- name: Write the fleet report
  gpuhost_report:
    results: "{{ dict(groups['gpu_hosts'] | zip(groups['gpu_hosts'] | map('extract', hostvars, 'diagnosis'))) }}"
    dest: /srv/reports/diagnose-20261202T183000Z
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
markdown:
  description: The Markdown summary.
  returned: always
  type: str
files:
  description: Paths written (empty in check mode).
  returned: always
  type: list
  elements: str
summary:
  description:
    - C(hosts), C(ok), C(failed), C(failed_by_layer) and C(rows) (per host C(host), C(ok), C(failed_layer),
      C(statuses), C(message), C(remedy)).
  returned: always
  type: dict
dest:
  description: The directory the reports were written to (empty in check mode).
  returned: always
  type: str
host_files:
  description: Host name to the file name of its JSON report.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.runs.atomic_file import write_run_reports
from ansible.module_utils.diagnosis.report_render import (fleet_summary, host_file_names, render_html, render_markdown,
                                                          report_files)

# Keys Ansible adds to a registered result that are not part of the diagnosis.
_ANSIBLE_KEYS = ("invocation", "changed", "failed", "skipped", "skip_reason", "_ansible_no_log",
                 "ansible_facts", "warnings", "deprecations")


def clean(result):
    if not isinstance(result, dict):
        return {"unreachable": True, "msg": "no result"}
    return dict((k, v) for k, v in result.items() if k not in _ANSIBLE_KEYS and not k.startswith("_ansible"))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            title=dict(type="str", default="GPU stack diagnosis"),
            generated=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    results = dict((str(host), clean(result)) for host, result in module.params["results"].items())
    title, generated = module.params["title"], module.params["generated"]
    markdown = render_markdown(results, title, generated)
    page = render_html(results, title, generated)
    summary = fleet_summary(results)
    host_files = host_file_names(results)
    files, dest = [], ""
    if not module.check_mode:
        entries = dict((host, dict(result, host=host)) for host, result in results.items())
        dest, files = write_run_reports(module, "gpuhost_report", module.params["dest"],
                                        report_files(entries, markdown, page, summary))
    module.exit_json(changed=bool(files), markdown=markdown, files=files, summary=summary, host_files=host_files,
                     dest=dest)


if __name__ == "__main__":
    main()
