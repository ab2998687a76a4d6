#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a drift run's per-host JSON reports and its fleet summary."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpuhost_drift_report
short_description: Per-host JSON and a fleet summary (Markdown, HTML) of a drift run
description:
  - Runs where the reports go (the control node). Writes into O(dest) one C(<host>.json) per host (its
    drift before and after the run), C(summary.md) and C(summary.html) (host × layer, before → after,
    what was repaired and what remains; self-contained HTML) and C(summary.json).
  - Returns C(clean) — true when every host is clean or repaired — for the run's exit status.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
extends_documentation_fragment:
  - gpuhost_reports
options:
  results:
    description: Host name to C({before, after, check_mode}) (M(gpuhost_drift) results), or C({unreachable, msg}).
    type: dict
    required: true
  title:
    description: Title of the summaries.
    type: str
    default: GPU fleet drift
"""

EXAMPLES = r"""
- name: Write the drift reports
  gpuhost_drift_report:
    results: "{{ drift_results }}"
    dest: reports/drift
  delegate_to: localhost
"""

RETURN = r"""
markdown:
  description: The Markdown summary.
  returned: always
  type: str
clean:
  description: Every host is clean or was repaired.
  returned: always
  type: bool
outcomes:
  description: Host to C(clean), C(repaired), C(drift) or C(unreachable).
  returned: always
  type: dict
dest:
  description: The directory the reports were written to (empty in check mode).
  returned: always
  type: str
files:
  description: Files written.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runs.atomic_file import write_run_reports
from ansible.module_utils.diagnosis.drift_report import exit_ok, host_outcome, render_html, render_markdown
from ansible.module_utils.diagnosis.report_render import report_files


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            title=dict(type="str", default="GPU fleet drift"),
            generated=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    results = dict((str(h), r if isinstance(r, dict) else {"unreachable": True, "msg": "no result"})
                   for h, r in module.params["results"].items())
    title, generated = module.params["title"], module.params["generated"]
    markdown = render_markdown(results, title, generated)
    outcomes = dict((h, host_outcome(r)["outcome"]) for h, r in results.items())
    files, dest = [], ""
    if not module.check_mode:
        entries = dict((h, dict(r, host=h, **host_outcome(r))) for h, r in results.items())
        summary = {"hosts": len(results), "outcomes": outcomes, "clean": exit_ok(results)}
        dest, files = write_run_reports(module, "gpuhost_drift_report", module.params["dest"], report_files(
            entries, markdown, render_html(results, title, generated), summary))
    module.exit_json(changed=bool(files), markdown=markdown, clean=exit_ok(results), outcomes=outcomes, files=files,
                     dest=dest)


if __name__ == "__main__":
    main()
