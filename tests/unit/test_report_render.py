"""Fleet summaries of gpu_stack_check results (module_utils/diagnosis/report_render.py, library/gpuhost_report.py):
the host × layer table in Markdown and HTML, escaping of untrusted text, file names."""
import html.parser
import json
import os
import subprocess
import sys

import pytest

from diagnosis import report_render as rr
from layers import stack_check as sc
from conftest import MODULE_RUNNER, ROOT

MODULE = os.path.join(ROOT, "library", "gpuhost_report.py")


def diagnosis(failed=None, health="ok", evidence_line="ok line", host_text="x"):
    checks = []
    for layer in sc.LAYERS:
        status = "fail" if layer == failed else (health if layer == "health" else "ok")
        remedy = "run `nvidia-ctk runtime configure --runtime=docker` and restart docker" if status != "ok" else None
        checks.append(sc.result(layer + "_check", layer, status, "%s summary %s" % (layer, host_text),
                                remedy=remedy, ev=sc.evidence(["docker", "info"], [evidence_line], 0)))
    return sc.summarise(checks, [l for l in sc.LAYERS if l != "health"])


RESULTS = {
    "gpu-b": diagnosis("runtime_config"),
    "gpu-a": diagnosis(None, health="fail"),
    "gpu-c": {"unreachable": True, "msg": "Failed to connect to the host via ssh"},
}


def test_rows_sorted_with_statuses_and_unreachable():
    rows = rr.rows(RESULTS)
    assert [r["host"] for r in rows] == ["gpu-a", "gpu-b", "gpu-c"]
    assert rows[0]["statuses"]["health"] == "warn" and rows[0]["failed_layer"] is None and rows[0]["ok"]
    assert rows[1]["statuses"]["runtime_config"] == "fail" and rows[1]["failed_layer"] == "runtime_config"
    assert rows[2]["reachable"] is False and rows[2]["failed_layer"] == "unreachable"
    assert rows[2]["statuses"] == dict((l, None) for l in rr.LAYERS)


def test_fleet_summary_counts():
    summary = rr.fleet_summary(RESULTS)
    assert summary["hosts"] == 3 and summary["ok"] == 1 and summary["failed"] == 2
    assert summary["failed_by_layer"] == {"runtime_config": 1, "unreachable": 1}


def test_markdown_table():
    text = rr.render_markdown(RESULTS, generated="2026-12-02T18:00:00Z")
    lines = text.splitlines()
    header = next(l for l in lines if l.startswith("| host"))
    assert header == ("| host | hardware | driver | fabric | persistence | DCGM | docker | toolkit | runtime config | CDI | "
                      "container | serving | health | failed layer | remedy |")
    row_b = next(l for l in lines if l.startswith("| gpu-b"))
    cells = [c.strip() for c in row_b.strip("|").split(" | ")]
    assert cells[8] == "**FAIL**" and cells[13] == "runtime_config"
    assert cells[14] == "run `nvidia-ctk runtime configure --runtime=docker` and restart docker"
    row_a = next(l for l in lines if l.startswith("| gpu-a"))
    assert "| warn | none |" in row_a
    row_c = next(l for l in lines if l.startswith("| gpu-c"))
    assert row_c.count("| - ") == 12 and "unreachable" in row_c
    assert "2 with one (runtime_config: 1, unreachable: 1)" in text
    # every table row has as many cells as the header
    widths = set(l.count(" | ") for l in lines if l.startswith("| "))
    assert len(widths) == 1


def test_markdown_escapes_untrusted_text():
    evil = "evil|host<script>alert(1)</script>*x*"
    text = rr.render_markdown({evil: {"unreachable": True, "msg": "a|b\nc `x|y` <b>"}})
    row = next(l for l in text.splitlines() if l.startswith("| evil"))
    assert "<script>" not in text and "&lt;script&gt;" in row
    assert "evil\\|host" in row and "\\*x\\*" in row
    assert "`x\\|y`" in row and "\n" not in row
    assert rr.md_cell("_lead gpu_01 trail_") == "\\_lead gpu_01 trail\\_"
    assert rr.md_cell("`dmesg | grep -i xid`", table=False) == "`dmesg | grep -i xid`"
    assert rr.md_cell("a|b", table=False) == "a\\|b"
    assert len([c for c in row.split(" | ")]) == 15


class _Collector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.cells, self.attrs = [], [], []
        self._in_td = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.append((tag, dict(attrs)))
        if tag == "td":
            self._in_td = [dict(attrs).get("class", ""), ""]

    def handle_endtag(self, tag):
        if tag == "td" and self._in_td is not None:
            self.cells.append(tuple(self._in_td))
            self._in_td = None

    def handle_data(self, data):
        if self._in_td is not None:
            self._in_td[1] += data


def test_html_is_self_contained_and_coloured():
    page = rr.render_html(RESULTS, generated="2026-12-02T18:00:00Z")
    assert page.startswith("<!DOCTYPE html>")
    parser = _Collector()
    parser.feed(page)
    assert "script" not in parser.tags and "link" not in parser.tags and "img" not in parser.tags
    assert "http://" not in page and "https://" not in page
    assert "default-src 'none'" in page
    fails = [c for c in parser.cells if c[0] == "s fail"]
    assert ("s fail", "FAIL") in fails
    assert ("s warn", "warn") in parser.cells and ("s none", "-") in parser.cells
    assert any(c == ("fail", "runtime_config") for c in parser.cells)


def test_html_escapes_hosts_evidence_and_attributes():
    evil_host = '<img src=x onerror="alert(1)">'
    result = diagnosis("driver", evidence_line='"><script>alert(2)</script>', host_text='" onmouseover="x')
    page = rr.render_html({evil_host: result})
    parser = _Collector()
    parser.feed(page)
    assert "script" not in parser.tags and "img" not in parser.tags
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    for tag, attrs in parser.attrs:
        assert "onmouseover" not in attrs and "onerror" not in attrs, (tag, attrs)
    assert "<code>nvidia-ctk runtime configure --runtime=docker</code>" in page


def test_safe_filename():
    taken = set(["summary"])
    assert rr.safe_filename("gpu01.example.com", taken) == "gpu01.example.com"
    assert rr.safe_filename("../../etc/passwd", taken) == "_.._etc_passwd"
    assert rr.safe_filename("a b", taken) == "a_b"
    assert rr.safe_filename("a/b", taken) == "a_b-2"
    assert rr.safe_filename("summary", taken) == "summary-2"
    assert rr.safe_filename("", taken) == "host"


def test_report_files_are_the_hosts_in_order_then_the_summaries():
    entries = {"b/x": {"host": "b/x"}, "summary": {"host": "summary"}, "a": {"host": "a", "z": 1, "k": [2]}}
    assert rr.host_file_names(entries) == {"a": "a.json", "b/x": "b_x.json", "summary": "summary-2.json"}
    files = rr.report_files(entries, "# md\n", "<html>\n", {"hosts": 3})
    assert [name for name, _text in files] == ["a.json", "b_x.json", "summary-2.json", "summary.md", "summary.html",
                                               "summary.json"]
    assert files[0][1] == '{\n  "host": "a",\n  "k": [\n    2\n  ],\n  "z": 1\n}\n'
    assert files[3:5] == [("summary.md", "# md\n"), ("summary.html", "<html>\n")]
    assert files[5][1] == rr.report_json({"hosts": 3}) == '{\n  "hosts": 3\n}\n'


def test_gpuhost_report_module_writes_the_reports(tmp_path):
    dest = tmp_path / "reports"
    args = {"results": dict((h, dict(r, changed=False, invocation={"module_args": {}}))
                            for h, r in RESULTS.items()),
            "dest": str(dest), "generated": "2026-12-02T18:00:00Z", "_ansible_check_mode": False}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, *MODULE_RUNNER, MODULE, str(args_file)], capture_output=True, text=True, env=env,
                          timeout=60)
    out = json.loads(proc.stdout)
    assert not out.get("failed"), out
    assert out["changed"] is True
    assert sorted(os.listdir(str(dest))) == ["gpu-a.json", "gpu-b.json", "gpu-c.json", "summary.html",
                                             "summary.json", "summary.md"]
    host_b = json.loads((dest / "gpu-b.json").read_text())
    assert host_b["host"] == "gpu-b" and host_b["failed_layer"] == "runtime_config"
    assert "invocation" not in host_b and "changed" not in host_b
    assert (dest / "summary.md").read_text() == out["markdown"]
    assert json.loads((dest / "summary.json").read_text())["failed_by_layer"]["runtime_config"] == 1
    assert out["dest"] == str(dest)
    # a second run with the same directory (same second) gets its own, the first run's reports stay
    before = (dest / "summary.md").read_text()
    again = json.loads(subprocess.run([sys.executable, *MODULE_RUNNER, MODULE, str(args_file)], capture_output=True, text=True,
                                      env=env, timeout=60).stdout)
    assert again["dest"] == str(dest) + "-2"
    assert sorted(os.listdir(again["dest"])) == sorted(os.listdir(str(dest)))
    assert (dest / "summary.md").read_text() == before


def test_gpuhost_report_documents_its_options():
    import yaml
    sys.path.insert(0, os.path.join(ROOT, "library"))
    import gpuhost_report as mod
    from test_module_docs import _fragment_options
    doc = yaml.safe_load(mod.DOCUMENTATION)
    options = dict(_fragment_options(doc["extends_documentation_fragment"]), **doc["options"])
    assert set(options) == {"results", "dest", "title", "generated"}
    assert set(yaml.safe_load(mod.RETURN)) == {"markdown", "files", "summary", "host_files", "dest"}


def test_failed_checks_are_explained_in_both_reports():
    """A failed check whose evidence holds a real error text (corpus errors/008) carries what
    `gpuhost explain` says of it, in the Markdown and (escaped) in the HTML."""
    from conftest import FIXTURES
    with open(os.path.join(FIXTURES, "errors", "008_compose-unsatisfied-condition-cuda-12.8_host-550.144.03.txt")) as h:
        text = h.read()
    results = {"gpu-x": diagnosis("container", evidence_line=text.splitlines()[3])}
    markdown = rr.render_markdown(results)
    assert "- container_check, explained: [image] cuda_driver_too_old (line 1: " in markdown
    # The quote is a code span, its '>' escaped as everywhere in the report.
    assert "`nvidia-container-cli: requirement error: unsatisfied condition: cuda&gt;=12.8" in markdown
    assert "Fix: upgrade the driver branch" in markdown
    page = rr.render_html(results)
    assert "<b>[image] cuda_driver_too_old</b>" in page and "cuda&gt;=12.8" in page and "cuda>=12.8" not in page
    # A passing check is not explained, whatever its evidence says.
    calm = {"gpu-y": diagnosis(None, evidence_line=text.splitlines()[3])}
    assert "explained" not in rr.render_markdown(calm)
