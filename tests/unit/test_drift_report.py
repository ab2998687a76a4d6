"""Drift summaries: outcome per host, before → after per layer, escaping of host text; the module that writes them
(library/gpuhost_drift_report.py)."""
import json
import os
import subprocess
import sys

from diagnosis.drift import compare
from diagnosis.drift_report import exit_ok, host_outcome, render_html, render_markdown
from conftest import MODULE_RUNNER, ROOT

RECORD = {"driver": {"version": "580.95.05", "packages": []}, "cdi": {"driver_version": "580.95.05"}}


def stack(loaded, failing=()):
    layers = {n: {"status": "fail" if n in failing else "ok", "summary": "%s broke" % n}
              for n in ("driver", "persistence", "docker", "toolkit", "runtime_config", "cdi", "container")}
    return {"driver_version": loaded, "gpu_state": "ok", "layers": layers, "checks": []}


def test_repaired_host_and_remaining_drift():
    before = compare(RECORD, stack("580.105.08", failing=("container",)), {})
    after = compare(dict(RECORD, driver={"version": "580.105.08", "packages": []},
                         cdi={"driver_version": "580.105.08"}), stack("580.105.08"), {})
    results = {"gpu-a": {"before": before, "after": after, "check_mode": False},
               "gpu-b": {"before": before, "after": before, "check_mode": True}}
    assert host_outcome(results["gpu-a"])["outcome"] == "repaired"
    assert host_outcome(results["gpu-b"])["outcome"] == "drift"
    assert host_outcome(results["gpu-b"])["repaired"] == []
    assert exit_ok(results) is False
    assert exit_ok({"gpu-a": results["gpu-a"]}) is True
    md = render_markdown(results)
    row_a = next(l for l in md.splitlines() if l.startswith("| gpu-a"))
    assert "**repaired**" in row_a and "drift → ok" in row_a
    row_b = next(l for l in md.splitlines() if l.startswith("| gpu-b"))
    assert "**drift**" in row_b and "580.105.08" in row_b


def test_html_escapes_host_text():
    evil = compare({}, stack("1", failing=("docker",)), {})
    evil["layers"]["docker"]["findings"][0]["message"] = "<script>alert(1)</script>"
    page = render_html({"<b>x</b>": {"before": evil, "after": evil, "check_mode": True}})
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<b>x</b>" not in page
    assert "default-src 'none'" in page


def test_unreachable_host_is_not_clean():
    results = {"gone": {"unreachable": True, "msg": "ssh: connect timed out"}}
    assert host_outcome(results["gone"])["outcome"] == "unreachable"
    assert exit_ok(results) is False
    assert "ssh: connect timed out" in render_markdown(results)


def test_rollout_verdicts_failed_repair_and_host_left_as_found():
    before = compare(RECORD, stack("580.105.08", failing=("container",)), {})
    results = {"gpu-a": {"before": before, "after": before, "check_mode": False,
                         "repair_failed": "the repair left cdi_stale"},
               "gpu-b": {"before": before, "after": before, "check_mode": False,
                         "skipped": "rollout stopped: the repair of gpu-a failed; this host was left as found"}}
    assert host_outcome(results["gpu-a"])["outcome"] == "repair failed"
    assert host_outcome(results["gpu-a"])["remaining"][0] == "repair failed: the repair left cdi_stale"
    assert host_outcome(results["gpu-b"])["outcome"] == "not repaired"
    assert exit_ok(results) is False
    md = render_markdown(results)
    assert "rollout stopped: the repair of gpu-a failed" in md and "**repair failed**" in md


def _run_drift_report(tmp_path, args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, *MODULE_RUNNER, os.path.join(ROOT, "library", "gpuhost_drift_report.py"),
                           str(args_file)], capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout)


def test_gpuhost_drift_report_module_writes_a_directory_of_its_own(tmp_path):
    clean = compare(RECORD, stack("580.95.05"), {})
    dest = tmp_path / "reports" / "drift"
    args = {"results": {"gpu-a": {"before": clean, "after": clean, "check_mode": False}, "summary": "no dict"},
            "dest": str(dest), "_ansible_check_mode": False}
    out = _run_drift_report(tmp_path, args)
    assert not out.get("failed"), out
    assert out["changed"] is True and out["dest"] == str(dest) and out["clean"] is False
    assert [os.path.basename(f) for f in out["files"]] == ["gpu-a.json", "summary-2.json", "summary.md",
                                                           "summary.html", "summary.json"]
    host = json.loads((dest / "summary-2.json").read_text())
    assert host["host"] == "summary" and host["unreachable"] is True and host["outcome"] == "unreachable"
    assert json.loads((dest / "summary.json").read_text()) == {
        "hosts": 2, "outcomes": {"gpu-a": "clean", "summary": "unreachable"}, "clean": False}
    assert (dest / "summary.md").read_text() == out["markdown"]
    assert _run_drift_report(tmp_path, args)["dest"] == str(dest) + "-2"
    checked = _run_drift_report(tmp_path, dict(args, dest=str(tmp_path / "checked"), _ansible_check_mode=True))
    assert checked["changed"] is False and checked["files"] == [] and checked["dest"] == ""
    assert not (tmp_path / "checked").exists()
    refused = _run_drift_report(tmp_path, dict(args, dest=str(dest / "summary.md" / "x")))
    assert refused["failed"] and refused["msg"].startswith(
        "gpuhost_drift_report: cannot create a report directory at %s: " % (dest / "summary.md" / "x"))
    assert refused["msg"].endswith(". Fix: set gpuhost_reports_dir to a writable directory")
