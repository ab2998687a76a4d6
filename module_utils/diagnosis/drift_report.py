# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet summary of a drift run: per host and layer, the state before and after, what was repaired
and what remains. Markdown and a self-contained HTML page. Pure stdlib, no Ansible imports.

Input: {host: {"before": gpuhost_drift result, "after": gpuhost_drift result, "check_mode": bool,
"repair_failed"/"skipped": the rollout's message where the repair failed or was not run}}, or
{"unreachable": True, "msg": ...} for a host that could not be checked. Text from hosts is untrusted
and escaped exactly as in the diagnosis summaries (report_render).
"""
from ansible.module_utils.diagnosis.report_render import _CSS as CSS, esc, md_cell
from ansible.module_utils.diagnosis.drift import LAYERS

HEADINGS = {"runtime_config": "runtime config", "cdi": "CDI"}


def _codes(result):
    return [f["code"] for layer in LAYERS for f in ((result or {}).get("layers") or {}).get(layer, {}).get("findings", [])]


def host_outcome(entry):
    """repaired / remaining finding messages and a one-word outcome of one host."""
    if not entry or entry.get("unreachable") or "before" not in entry:
        return {"outcome": "unreachable", "repaired": [], "remaining": [entry.get("msg", "no result") if entry else "no result"]}
    before, after = entry.get("before") or {}, entry.get("after") or entry.get("before") or {}
    after_codes = set(_codes(after))
    repaired, remaining = [], []
    for layer in LAYERS:
        for f in (before.get("layers") or {}).get(layer, {}).get("findings", []):
            if f["code"] not in after_codes and not entry.get("check_mode"):
                repaired.append("%s: %s" % (layer, f["message"]))
        for f in (after.get("layers") or {}).get(layer, {}).get("findings", []):
            remaining.append("%s: %s" % (layer, f["message"]))
    # The rollout's verdicts: a repair that failed, or a host left as found after an earlier batch failed.
    if entry.get("repair_failed"):
        remaining.insert(0, "repair failed: %s" % entry["repair_failed"])
        outcome = "repair failed"
    elif entry.get("skipped"):
        remaining.insert(0, entry["skipped"])
        outcome = "not repaired"
    elif remaining:
        outcome = "drift"
    elif repaired:
        outcome = "repaired"
    else:
        outcome = "clean"
    return {"outcome": outcome, "repaired": repaired, "remaining": remaining}


def _state(entry, which, layer):
    result = (entry or {}).get(which) or {}
    return ((result.get("layers") or {}).get(layer) or {}).get("state", "-")


def _cell_word(entry, layer):
    before = _state(entry, "before", layer)
    after = _state(entry, "after", layer) if not entry.get("check_mode") else before
    if before == after:
        return before
    return "%s → %s" % (before, after)


def exit_ok(results):
    """0-style verdict for schedulers: True when every host is clean or repaired."""
    return all(host_outcome(e)["outcome"] in ("clean", "repaired") for e in (results or {}).values())


def render_markdown(results, title="GPU fleet drift", generated=None):
    lines = ["# %s" % md_cell(title), ""]
    if generated:
        lines += ["Generated %s." % md_cell(generated), ""]
    lines.append("| host | outcome | %s | repaired | remaining |" % " | ".join(HEADINGS.get(l, l) for l in LAYERS))
    lines.append("|%s" % ("---|" * (len(LAYERS) + 4)))
    for host in sorted(results or {}):
        entry = results[host] or {}
        out = host_outcome(entry)
        cells = [md_cell(host), "**%s**" % out["outcome"] if out["outcome"] != "clean" else "clean"]
        cells += [md_cell(_cell_word(entry, l)) if "before" in entry else "-" for l in LAYERS]
        cells += [md_cell("; ".join(out["repaired"]) or "-"), md_cell("; ".join(out["remaining"]) or "-")]
        lines.append("| %s |" % " | ".join(cells))
    return "\n".join(lines) + "\n"


def _td(word):
    cls = "ok" if word == "ok" else ("fail" if word == "drift" else ("warn" if "→" in word else "none"))
    return '<td class="s %s">%s</td>' % (cls, esc(word))


def render_html(results, title="GPU fleet drift", generated=None):
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
             "<title>%s</title><style>%s</style></head><body>" % (esc(title), CSS),
             "<h1>%s</h1>" % esc(title)]
    if generated:
        parts.append('<p class="meta">Generated %s.</p>' % esc(generated))
    parts.append('<p class="legend"><span class="ok">ok</span><span class="warn">drift → ok (repaired)</span>'
                 '<span class="fail">drift</span></p>')
    parts.append("<table><tr><th>host</th><th>outcome</th>%s<th>repaired</th><th>remaining</th></tr>"
                 % "".join("<th>%s</th>" % esc(HEADINGS.get(l, l)) for l in LAYERS))
    for host in sorted(results or {}):
        entry = results[host] or {}
        out = host_outcome(entry)
        cls = {"clean": "ok", "repaired": "warn"}.get(out["outcome"], "fail")
        cells = ['<td class="host">%s</td>' % esc(host), '<td class="s %s">%s</td>' % (cls, esc(out["outcome"]))]
        cells += [_td(_cell_word(entry, l)) if "before" in entry else _td("-") for l in LAYERS]
        cells += ['<td class="remedy">%s</td>' % "<br>".join(esc(m) for m in out["repaired"]),
                  '<td class="remedy">%s</td>' % "<br>".join(esc(m) for m in out["remaining"])]
        parts.append("<tr>%s</tr>" % "".join(cells))
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"
