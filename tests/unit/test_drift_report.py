"""Drift summaries: outcome per host, before → after per layer, escaping of host text."""
from diagnosis.drift import compare
from diagnosis.drift_report import exit_ok, host_outcome, render_html, render_markdown

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
