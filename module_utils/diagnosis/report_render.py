# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet summaries of gpu_stack_check results: a Markdown table and a self-contained HTML page.

Pure stdlib, no Ansible imports. Input: {host name: gpu_stack_check result}. A host that could not
be checked is given as {"unreachable": True, "msg": "..."} (or any result without `layers`).

Host names, summaries, evidence and remedies are untrusted text (they come from the hosts): the
Markdown escapes table syntax and HTML, the HTML page escapes everything it prints and allows no
script, style sheet, image or font from anywhere (inline CSS only, CSP `default-src 'none'`).
"""
import html
import json
import re

from ansible.module_utils.diagnosis.explain import ExplainError, explain
from ansible.module_utils.layers.registry import HEADINGS as LAYER_HEADINGS, STACK_LAYERS as LAYERS
STATUS_WORDS = {"ok": "ok", "warn": "warn", "fail": "FAIL", "skipped": "skip"}
UNKNOWN = "-"


def _text(value):
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _one_line(value, limit=None):
    text = " ".join(_text(value).split())
    if limit and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text


def host_row(host, result):
    """The row of one host: layer statuses, failed layer, message and remedy (plain text)."""
    result = result if isinstance(result, dict) else {}
    layers = result.get("layers")
    if not isinstance(layers, dict):
        reason = result.get("msg") or result.get("message") or "no result"
        return {"host": _text(host), "reachable": False, "statuses": dict((l, None) for l in LAYERS),
                "summaries": {}, "failed_layer": "unreachable" if result.get("unreachable") else "not checked",
                "message": _one_line(reason), "remedy": _one_line(reason), "ok": False}
    statuses, summaries = {}, {}
    for layer in LAYERS:
        entry = layers.get(layer) if isinstance(layers.get(layer), dict) else {}
        status = entry.get("status")
        statuses[layer] = status if status in STATUS_WORDS else None
        summaries[layer] = _one_line(entry.get("summary"))
    return {"host": _text(host), "reachable": True, "statuses": statuses, "summaries": summaries,
            "failed_layer": result.get("failed_layer"), "message": _one_line(result.get("message")),
            "remedy": _one_line(result.get("remedy")), "ok": bool(result.get("ok"))}


def check_findings(check):
    """What the error text of a failed (or warned) check says, as `gpuhost explain` reads it."""
    if not isinstance(check, dict) or check.get("status") not in ("fail", "warn"):
        return []
    ev = check.get("evidence") if isinstance(check.get("evidence"), dict) else {}
    lines = ev.get("lines") if isinstance(ev.get("lines"), list) else []
    try:
        return explain("\n".join(_text(l) for l in lines))["findings"]
    except ExplainError:
        return []


def host_findings(result):
    """[(check name, finding)] of a host's failed and warned checks."""
    checks = result.get("checks") if isinstance(result, dict) else None
    out = []
    for check in checks if isinstance(checks, list) else []:
        out.extend((_text(check.get("name")), f) for f in check_findings(check))
    return out


def rows(results):
    return [host_row(h, results[h]) for h in sorted(results or {}, key=_text)]


def fleet_summary(results):
    """Counts for the fleet: hosts, ok, failed per layer, unreachable."""
    table = rows(results)
    by_layer = {}
    for row in table:
        if row["failed_layer"]:
            by_layer[row["failed_layer"]] = by_layer.get(row["failed_layer"], 0) + 1
    return {"hosts": len(table), "ok": len([r for r in table if r["ok"]]),
            "failed": len([r for r in table if not r["ok"]]), "failed_by_layer": by_layer,
            "rows": [{"host": r["host"], "ok": r["ok"], "failed_layer": r["failed_layer"],
                      "statuses": r["statuses"], "message": r["message"], "remedy": r["remedy"]} for r in table]}


# ---------------------------------------------------------------------------------------------
# Markdown

# `_` inside a word (runtime_config, gpu_01) is never emphasis in CommonMark/GFM: only word-edge ones
# are escaped, so the table stays readable as plain text.
_MD_SPECIAL = re.compile(r"([\\|*\[\]<>#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md_cell(value, limit=None, table=True):
    """Text safe inside a Markdown table cell (or, table=False, a list item): one line, Markdown and
    HTML syntax escaped.

    Backtick code spans are kept (remedies are commands); in a table `|` is escaped inside them too,
    as GFM needs (elsewhere a backslash would show inside the code span).
    """
    text = _one_line(value, limit).replace("&", "&amp;")
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            if table:
                part = part.replace("|", "\\|")
            out.append(part.replace("<", "&lt;").replace(">", "&gt;"))
        else:
            out.append(_MD_SPECIAL.sub(lambda m: {"<": "&lt;", ">": "&gt;"}.get(m.group(1), "\\" + m.group(1)),
                                       part))
    return "".join(out)


def _md_status(status):
    word = STATUS_WORDS.get(status, UNKNOWN)
    return "**FAIL**" if status == "fail" else word


def render_markdown(results, title="GPU stack diagnosis", generated=None):
    """A Markdown report: one row per host (host × layer), failed layer and remedy."""
    table = rows(results)
    summary = fleet_summary(results)
    lines = ["# %s" % md_cell(title), ""]
    if generated:
        lines += ["Generated %s." % md_cell(generated), ""]
    lines.append("%d host(s): %d without a failed required layer, %d with one%s." % (
        summary["hosts"], summary["ok"], summary["failed"],
        (" (" + ", ".join("%s: %d" % (md_cell(k), v) for k, v in sorted(summary["failed_by_layer"].items())) + ")")
        if summary["failed_by_layer"] else ""))
    lines.append("")
    header = ["host"] + [LAYER_HEADINGS[l] for l in LAYERS] + ["failed layer", "remedy"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] * len(header)) + "|")
    for row in table:
        cells = [md_cell(row["host"])] + [_md_status(row["statuses"][l]) for l in LAYERS]
        cells.append(md_cell(row["failed_layer"] or "none"))
        cells.append(md_cell(row["remedy"] or ("" if row["ok"] else row["message"]), 300))
        lines.append("| " + " | ".join(cells) + " |")
    failing = [r for r in table if not r["ok"]]
    if failing:
        lines += ["", "## Failures", ""]
        for row in failing:
            lines.append("- **%s**: %s" % (md_cell(row["host"], table=False), md_cell(row["message"], 600, table=False)))
            result = (results or {}).get(row["host"])
            for name, f in host_findings(result):
                lines.append("  - %s, explained: [%s] %s (line %s: %s) - %s Fix: %s" % (
                    md_cell(name, table=False), md_cell(f["layer"], table=False), md_cell(f["kind"], table=False),
                    f["line"], md_cell("`%s`" % f["quote"].replace("`", "'"), 300, table=False),
                    md_cell(f["meaning"], 400, table=False), md_cell(f["fix"], 400, table=False)))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# HTML


def esc(value):
    """HTML-escape text for element content and quoted attribute values."""
    return html.escape(_text(value), quote=True)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d2125;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}
p.meta{color:#555;margin:0 0 16px}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #c9ced4;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f1f3f5;font-weight:600}
td.s{text-align:center;font-weight:600;min-width:54px}
.ok{background:#d3f0da;color:#125a26}.warn{background:#fff0c2;color:#6b4e00}
.fail{background:#f8d0d3;color:#8a1020}.skipped{background:#eceef0;color:#5b636b}
.none{background:#fafafa;color:#888}
td.host{font-weight:600;white-space:nowrap}
td.remedy{max-width:420px}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;border:1px solid #dde1e5;padding:6px;margin:4px 0;white-space:pre-wrap;word-break:break-all}
details table{width:100%}
td pre{min-width:380px}
details{margin:8px 0;border:1px solid #dde1e5;padding:6px 10px;border-radius:4px}
summary{cursor:pointer;font-weight:600}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border:1px solid #c9ced4}
"""


def _status_cell(status, summary):
    cls = status if status in STATUS_WORDS else "none"
    word = STATUS_WORDS.get(status, UNKNOWN)
    return '<td class="s %s" title="%s">%s</td>' % (cls, esc(summary), esc(word))


def _code_spans(text):
    """Escaped text with `...` shown as <code> (the escaping happens first, so nothing leaks)."""
    parts = re.split(r"(`[^`]*`)", _text(text))
    out = []
    for part in parts:
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append("<code>%s</code>" % esc(part[1:-1]))
        else:
            out.append(esc(part))
    return "".join(out)


def _checks_table(result):
    checks = result.get("checks") if isinstance(result, dict) else None
    if not isinstance(checks, list) or not checks:
        return "<p>No checks.</p>"
    out = ["<table><tr><th>check</th><th>layer</th><th>status</th><th>summary</th><th>remedy</th>"
           "<th>evidence</th><th>explained</th></tr>"]
    for check in checks:
        if not isinstance(check, dict):
            continue
        ev = check.get("evidence") if isinstance(check.get("evidence"), dict) else {}
        lines = ev.get("lines") if isinstance(ev.get("lines"), list) else []
        evidence_text = "$ %s%s\n%s" % (_text(ev.get("command")),
                                        "  (exit %s)" % ev.get("rc") if ev.get("rc") not in (None, 0) else "",
                                        "\n".join(_text(l) for l in lines))
        explained = "".join(
            "<p><b>[%s] %s</b> (line %s): %s <i>Fix:</i> %s</p>" % (
                esc(f["layer"]), esc(f["kind"]), esc(f["line"]), esc(f["meaning"]), _code_spans(f["fix"]))
            for f in check_findings(check))
        out.append("<tr><td>%s</td><td>%s</td>%s<td>%s</td><td>%s</td><td><pre>%s</pre></td><td>%s</td></tr>" % (
            esc(check.get("name")), esc(check.get("layer")),
            _status_cell(check.get("status"), check.get("summary")), esc(check.get("summary")),
            _code_spans(check.get("remedy")), esc(evidence_text.strip()), explained))
    out.append("</table>")
    return "".join(out)


def render_html(results, title="GPU stack diagnosis", generated=None):
    """A self-contained HTML page: the host × layer table coloured by status, then each host's checks."""
    table = rows(results)
    summary = fleet_summary(results)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>%s</title><style>%s</style></head><body>" % (esc(title), _CSS),
             "<h1>%s</h1>" % esc(title)]
    meta = "%d host(s): %d without a failed required layer, %d with one" % (
        summary["hosts"], summary["ok"], summary["failed"])
    if summary["failed_by_layer"]:
        meta += " (%s)" % ", ".join("%s: %d" % (k, v) for k, v in sorted(summary["failed_by_layer"].items()))
    if generated:
        meta = "Generated %s. %s" % (generated, meta)
    parts.append('<p class="meta">%s.</p>' % esc(meta))
    parts.append('<p class="legend"><span class="ok">ok</span><span class="warn">warn</span>'
                 '<span class="fail">FAIL</span><span class="skipped">skip</span></p>')
    parts.append("<table><tr><th>host</th>%s<th>failed layer</th><th>remedy</th></tr>"
                 % "".join("<th>%s</th>" % esc(LAYER_HEADINGS[l]) for l in LAYERS))
    for row in table:
        cells = ['<td class="host">%s</td>' % esc(row["host"])]
        cells += [_status_cell(row["statuses"][l], row["summaries"].get(l)) for l in LAYERS]
        failed = row["failed_layer"]
        cells.append('<td class="%s">%s</td>' % ("fail" if failed else "ok", esc(failed or "none")))
        cells.append('<td class="remedy">%s</td>' % _code_spans(row["remedy"] or ("" if row["ok"] else row["message"])))
        parts.append("<tr>%s</tr>" % "".join(cells))
    parts.append("</table>")
    parts.append("<h2>Hosts</h2>")
    for row in table:
        result = (results or {}).get(row["host"])
        if result is None:
            result = next((v for k, v in (results or {}).items() if _text(k) == row["host"]), {})
        parts.append('<details%s><summary>%s — %s</summary><p>%s</p>%s</details>' % (
            "" if row["ok"] else " open", esc(row["host"]), esc(row["failed_layer"] or "ok"),
            _code_spans(row["message"]), _checks_table(result) if row["reachable"] else ""))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def safe_filename(host, taken=None):
    """A file name for a host's report: [A-Za-z0-9._-] only, never hidden, unique within `taken`."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", _text(host)).lstrip(".") or "host"
    base = base[:100]
    name, n = base, 2
    taken = taken if taken is not None else set()
    while name.lower() in taken:
        name = "%s-%d" % (base, n)
        n += 1
    taken.add(name.lower())
    return name


def report_json(value):
    """A report file's JSON text: indented, keys sorted, ending in a newline."""
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def host_file_names(hosts):
    """Host -> the file name of its JSON report: safe_filename() in host order, none taking a summary's name."""
    taken, names = set(["summary"]), {}
    for host in sorted(hosts):
        names[host] = safe_filename(host, taken) + ".json"
    return names


def report_files(entries, markdown, page, summary):
    """(file name, text) of a run's reports, in the order they are written: each host's entry ({host: dict})
    in its own JSON file, then summary.md, summary.html (`page`) and summary.json (`summary`)."""
    names = host_file_names(entries)
    return ([(names[host], report_json(entries[host])) for host in sorted(entries)]
            + [("summary.md", markdown), ("summary.html", page), ("summary.json", report_json(summary))])
