"""gpuhost's metrics for the node exporter's textfile collector (module_utils/diagnosis/metrics.py): what a check of a
host says, as Prometheus' text format; DCGM's diagnostic from a real DCGM 4 document (tests/fixtures/dcgm_diag/)."""
import json
import re

from conftest import read_fixture
from diagnosis import metrics
from gpu import dcgm_diag as dd
from layers import dcgm
from runs import rollout

A100 = read_fixture("dcgm_diag", "diag-r1-j_4.1.1_A100-SXM4-40GB_software-fail.json")
SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? -?[0-9.e+]+$')


def _result(**more):
    diag = dcgm.check_dcgm_diag(dd.read_run(226, A100), 1, {"status": "ok", "summary": "DCGM 4.1.1"})
    xid = {"name": "xid", "layer": "health", "status": "fail", "data": {"out_of_service": [
        {"index": 1, "bus_id": "00000000:01:00.0", "uuid": "GPU-1", "xids": [79]}]}}
    result = {"failed_layer": None, "gpu_count": 2,
              "layers": {"driver": {"status": "ok", "required": True}, "dcgm": {"status": "skipped", "required": False},
                         "health": {"status": "fail", "required": False}},
              "xids": [{"code": 79, "action": "RESTART_BM", "count": 2, "gpus": ["0000:01:00"]}],
              "checks": [xid, diag]}
    result.update(more)
    return result


def _samples(text):
    return [l for l in text.splitlines() if l and not l.startswith("#")]


def test_every_line_is_prometheus_text_with_help_and_type_before_its_samples():
    text = metrics.render(_result())
    for line in _samples(text):
        assert SAMPLE.match(line), line
    names = [l.split()[2] for l in text.splitlines() if l.startswith("# TYPE")]
    assert len(names) == len(set(names))
    for name in names:
        first = next(i for i, l in enumerate(text.splitlines()) if l.startswith(name))
        assert text.splitlines()[first - 1] == "# TYPE %s gauge" % name


def test_layers_xids_out_of_service_and_dcgm_per_gpu():
    samples = _samples(metrics.render(_result()))
    assert 'gpuhost_host_ok 1' in samples
    assert 'gpuhost_layer_ok{layer="driver",required="true"} 1' in samples
    assert 'gpuhost_layer_ok{layer="health",required="false"} 0' in samples
    # A layer the check skipped says nothing (DCGM not installed is not a failing DCGM).
    assert not any('layer="dcgm"' in s for s in samples)
    assert 'gpuhost_xid_events{action="RESTART_BM",xid="79"} 2' in samples
    assert 'gpuhost_xid_gpu{pci="0000:01:00",xid="79"} 1' in samples
    assert 'gpuhost_gpu_out_of_service{bus_id="00000000:01:00.0",gpu="1"} 1' in samples
    # The A100 failed level 1's software test (persistence mode off, DCGM error 29).
    assert 'gpuhost_dcgm_diag_ok{gpu="0",level="1"} 0' in samples


def test_a_failed_host_and_a_drift_run():
    drift = {"layers": {"driver": {"state": "ok", "findings": []},
                        "serving": {"state": "drift", "findings": [{"code": "container_stopped"}]}}}
    samples = _samples(metrics.render(_result(failed_layer="driver", drift=drift)))
    assert 'gpuhost_host_ok 0' in samples
    assert 'gpuhost_drift_findings{layer="serving"} 1' in samples and 'gpuhost_drift_findings{layer="driver"} 0' in samples


def test_the_same_state_writes_the_same_bytes_and_labels_are_escaped():
    assert metrics.render(_result()) == metrics.render(_result())
    result = _result(xids=[{"code": 13, "action": 'A "quoted"\\ action\n', "count": 1, "gpus": []}])
    assert 'gpuhost_xid_events{action="A \\"quoted\\"\\\\ action\\n",xid="13"} 1' in _samples(metrics.render(result))


def test_promtool_accepts_the_text(promtool):
    """Prometheus' own checker on what the textfile collector will read (issue 40: `promtool check metrics`)."""
    import subprocess
    base = _result(drift={"layers": {"cdi": {"findings": [{"what": "spec"}]}}})
    text = metrics.render(dict(base, checks=base["checks"] + [SERVING]), _instances(RECORD))
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


SERVING = {"name": "serving_running", "layer": "serving", "status": "fail",
           "data": {"running": ["qwen3-32b-fp8"], "stopped": ["qwen25-3b-awq-0"], "missing": ["gone"]}}
def _instances(record):
    """The record's instances as gpuhost_metrics reads them from the fact file."""
    return rollout.record_instances(json.dumps(record))


RECORD = {"vllm": {"instances": {
    "qwen3-32b-fp8": {"max_model_len": 32768,
                      "plan": {"kv_cache_tokens": 128320, "max_concurrency": 3.92},
                      "startup": {"kv_cache_tokens": 127136, "max_concurrency": 3.88}},
    "qwen25-3b-awq-0": {"max_model_len": 4096, "plan": {"kv_cache_tokens": 42400, "max_concurrency": 10.35},
                        "startup": {"kv_cache_tokens": None, "max_concurrency": None}}}}}


def test_serving_instances_running_and_their_headroom_from_the_record():
    """Per instance: up from the serving layer's check; KV tokens and the requests of max_model_len they hold, as the
    plan and as the startup log said (the record's figures: vLLM's "Maximum concurrency for 32,768 tokens per
    request: 3.88x" is 127,136 KV tokens / 32,768)."""
    text = metrics.render(_result(checks=[SERVING]), _instances(RECORD))
    lines = _samples(text)
    assert 'gpuhost_vllm_instance_up{vllm_instance="qwen3-32b-fp8"} 1' in lines
    assert 'gpuhost_vllm_instance_up{vllm_instance="qwen25-3b-awq-0"} 0' in lines
    assert 'gpuhost_vllm_instance_up{vllm_instance="gone"} 0' in lines
    assert 'gpuhost_vllm_max_concurrency{source="startup",vllm_instance="qwen3-32b-fp8"} 3.88' in lines
    assert 'gpuhost_vllm_max_concurrency{source="plan",vllm_instance="qwen3-32b-fp8"} 3.92' in lines
    assert 'gpuhost_vllm_kv_cache_tokens{source="startup",vllm_instance="qwen3-32b-fp8"} 127136' in lines
    assert 'gpuhost_vllm_max_model_len{vllm_instance="qwen25-3b-awq-0"} 4096' in lines
    # A start whose log gave no figure has no startup sample (not a zero that would read as no headroom).
    assert not [l for l in lines if 'source="startup",vllm_instance="qwen25-3b-awq-0"' in l]
    # No record (or one without a vllm section): no figures, the rest as before.
    assert "gpuhost_vllm_max_concurrency" not in metrics.render(_result(checks=[SERVING]), None)
    assert "gpuhost_vllm_max_concurrency" not in metrics.render(_result(checks=[SERVING]), _instances({"vllm": "broken"}))
    assert "gpuhost_vllm_max_concurrency" not in metrics.render(_result(checks=[SERVING]),
                                                                rollout.record_instances("{not json"))
