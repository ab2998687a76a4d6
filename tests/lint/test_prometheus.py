"""The Prometheus alert rules gpuhost ships (monitoring/prometheus/): promtool accepts them, and its rule unit tests
(tests/prometheus/) show each alert firing on its fault and silent on a healthy host."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "monitoring", "prometheus")
RULE_TESTS = os.path.join(ROOT, "tests", "prometheus")


def _run(promtool, *args, cwd=ROOT):
    proc = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def _files(directory):
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".yml"))


def test_promtool_checks_every_rule_file(promtool):
    files = _files(RULES)
    assert files
    rc, out = _run(promtool, "check", "rules", *files)
    assert rc == 0, out


def test_every_alert_is_exercised_by_promtool_test_rules(promtool):
    rc, out = _run(promtool, "test", "rules", *_files(RULE_TESTS), cwd=RULE_TESTS)
    assert rc == 0, out
    import yaml
    alerts = {r["alert"] for f in _files(RULES) for g in yaml.safe_load(open(f))["groups"] for r in g["rules"]
              if "alert" in r}
    tested = {t["alertname"] for f in _files(RULE_TESTS) for case in yaml.safe_load(open(f))["tests"]
              for t in case.get("alert_rule_test") or [] if t.get("exp_alerts")}
    assert alerts and alerts == tested, "alerts with no firing case: %s" % sorted(alerts - tested)
