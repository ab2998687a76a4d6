"""`gpuhost smi`: JSON and text output, refusals, and agreement with the module on the same input."""
import json
import os
import subprocess
import sys

import pytest

from gpu import gpu_facts
from conftest import FIXTURES, ROOT
from gpuhost_cli import smi as cli
from test_nvidia_gpu_facts import fake_nvidia_smi, run_ansible, run_module

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")
SMI = os.path.join(FIXTURES, "nvidia_smi")
HOST = os.path.join(FIXTURES, "host")
XML_FIXTURES = sorted(f for f in os.listdir(SMI) if f.endswith(".xml"))
# Keys the module adds to a process that a saved output cannot know.
HOST_ONLY_PROCESS_KEYS = ("pid_exists", "zombie")


def fixture(prefix):
    return os.path.join(SMI, next(f for f in os.listdir(SMI) if f.startswith(prefix + "_")))


def gpuhost(*args, stdin=None):
    """The real entry point in a subprocess (bin/gpuhost dispatching to gpuhost_cli.smi)."""
    return subprocess.run([sys.executable, GPUHOST, "smi"] + list(args), capture_output=True, text=True,
                          input=stdin, timeout=60)


class Result(object):
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def smi_main(capsys):
    """cli.main in-process (fast); the subprocess tests above cover the real entry point."""
    def run(*args):
        rc = cli.main(list(args))
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)
    return run


def test_json_fields_for_the_blackwell_capture():
    proc = gpuhost("--json", fixture("043"))
    assert proc.returncode == 0 and proc.stderr == ""
    out = json.loads(proc.stdout)
    assert (out["state"], out["driver_version"], out["cuda_version"]) == ("ok", "590.44.01", "13.1")
    (gpu,) = out["gpus"]
    assert gpu["index"] == 0
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert gpu["uuid"] == "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"
    assert gpu["pci_bus_id"] == "00000000:61:00.0"
    assert (gpu["memory_total_mib"], gpu["memory_used_mib"]) == (97887, 65720)
    assert gpu["persistence_mode"] is True
    (process,) = out["processes"]
    assert (process["pid"], process["used_mib"], process["gpu_index"], process["pci_bus_id"]) == (
        116860, 65710, 0, "00000000:61:00.0")
    assert process["name"] == "/root/src/llama.cpp/build/bin/llama-server"


def test_json_persistence_null_for_windows(smi_main):
    out = json.loads(smi_main("--json", fixture("015")).stdout)
    assert out["gpus"][0]["persistence_mode"] is None
    assert all(p["used_mib"] is None for p in out["processes"])


def test_json_table_processes_carry_index_and_bus_id(smi_main):
    out = json.loads(smi_main("--json", fixture("047")).stdout)
    assert len(out["gpus"]) == 8 and len(out["processes"]) == 13
    last = out["processes"][-1]
    assert (last["gpu_index"], last["pci_bus_id"], last["pid"]) == (7, "00000000:89:00.0", 9908)


def test_stdin_and_executable_entry_point():
    with open(fixture("018"), encoding="utf-8") as handle:
        text = handle.read()
    assert json.loads(gpuhost("--json", "-", stdin=text).stdout)["gpus"][0]["memory_total_mib"] == 81559
    proc = subprocess.run([GPUHOST, "smi", fixture("018")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "state: ok" in proc.stdout and "NVIDIA H100 80GB HBM3" in proc.stdout


def test_text_summary(smi_main):
    proc = smi_main(fixture("002"))
    assert proc.returncode == 0
    assert "driver: 590.48.01" in proc.stdout and "MIG 3  GI 10 CI 0" in proc.stdout
    assert "pid 21198  GPU 0  C  7484 MiB  ./gpu_burn" in proc.stdout


@pytest.mark.parametrize("prefix, state", [("029", "version_mismatch"), ("031", "version_mismatch"),
                                           ("032", "driver_not_loaded")])
def test_error_texts_exit_0_with_their_state(smi_main, prefix, state):
    proc = smi_main("--json", fixture(prefix))
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == state


def _assert_one_line_refusal(proc):
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gpuhost smi: ")
    assert "Traceback" not in proc.stderr


def _cut_in_half(tmp_path, prefix):
    with open(fixture(prefix), encoding="utf-8") as handle:
        text = handle.read()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:len(text) // 2])
    return str(cut)


def _assert_partial(proc, missing):
    """A capture cut short is read as far as it goes, and says so."""
    assert proc.returncode == 0 and proc.stderr == ""
    out = json.loads(proc.stdout)
    assert out["command"] == "smi" and out["partial"] is True
    assert any(w.startswith("partial capture: ") and missing in w for w in out["warnings"]), out["warnings"]
    return out


def test_xml_cut_in_half_is_read_as_far_as_it_goes_subprocess(tmp_path):
    out = _assert_partial(gpuhost("--json", _cut_in_half(tmp_path, "043")), "cut short")
    (gpu,) = out["gpus"]  # the one <gpu> is cut after its memory block
    assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    assert (gpu["memory_total_mib"], gpu["memory_used_mib"]) == (97887, 65720)


@pytest.mark.parametrize("prefix, missing, gpus", [("043", "cut short", 1), ("019", "cut short", 1),
                                                   ("003", "ends inside the last GPU section", 1),
                                                   ("001", "ends inside the GPU section", 1),
                                                   ("047", "ends inside the GPU section", 6)])
def test_cut_in_half_is_read_as_far_as_it_goes(smi_main, tmp_path, prefix, missing, gpus):
    out = _assert_partial(smi_main("--json", _cut_in_half(tmp_path, prefix)), missing)
    assert len(out["gpus"]) == gpus and out["state"] == "ok"


def test_text_says_partial(smi_main, tmp_path):
    proc = smi_main(_cut_in_half(tmp_path, "001"))
    assert proc.returncode == 0 and "form: table (partial)" in proc.stdout
    assert "warning: partial capture: table ends inside the GPU section" in proc.stdout


@pytest.mark.parametrize("prefix, form", [("006", "dmon"), ("007", "pmon"), ("017", "dmon"), ("037", "dmon")])
def test_time_series_are_read(smi_main, prefix, form):
    proc = smi_main("--json", fixture(prefix))
    assert proc.returncode == 0 and proc.stderr == ""
    out = json.loads(proc.stdout)
    assert (out["command"], out["form"], out["partial"], out["gpu_count"]) == ("smi", form, False, 1)


def test_a_q_excerpt_without_its_gpu_line_is_read(smi_main):
    # `nvidia-smi -q | grep -A8 "Clocks Throttle Reasons"` (2018): Idle Active, every other reason Not Active
    out = json.loads(smi_main("--json", fixture("054")).stdout)
    assert out["partial"] is True and out["form"] == "q"
    (gpu,) = out["gpus"]
    assert gpu["index"] is None and gpu["clocks_event_reasons_active"] == ["gpu_idle"]
    assert any("without its 'GPU <bus id>' line" in w for w in out["warnings"])


def test_what_no_reader_knows_is_refused_with_a_reason(smi_main):
    # CUDA's deviceQuery is not nvidia-smi output and holds no error
    proc = smi_main(os.path.join(FIXTURES, "nvidia_smi_memory", "L4_550.90.07_deviceQuery.txt"))
    _assert_one_line_refusal(proc)
    assert "not a recognised nvidia-smi output" in proc.stderr and "nor a known GPU-stack error" in proc.stderr


@pytest.mark.parametrize("args", [[], ["--bogus", "x"], ["a", "b"], ["/nonexistent/file"]])
def test_usage_errors_exit_2_with_one_line(smi_main, args):
    _assert_one_line_refusal(smi_main(*args))


def test_usage_error_subprocess():
    _assert_one_line_refusal(gpuhost())


def test_binary_garbage_exits_2(smi_main, tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 8)
    _assert_one_line_refusal(smi_main(str(junk)))


def test_internal_errors_are_one_line(monkeypatch, capsys):
    def boom(_):
        raise RuntimeError("simulated bug\nwith two lines")

    monkeypatch.setattr(cli.nvsmi_parse, "facts_from_output", boom)
    assert cli.main([fixture("043")]) == 2
    err = capsys.readouterr().err
    assert err == "gpuhost smi: internal error: RuntimeError: simulated bug with two lines\n"


def test_help(smi_main):
    proc = smi_main("--help")
    assert proc.returncode == 0 and "gpuhost smi" in proc.stdout


# --- module and CLI agree ------------------------------------------------------------------------------

def _without_host_keys(processes):
    return [{k: v for k, v in p.items() if k not in HOST_ONLY_PROCESS_KEYS} for p in processes]


@pytest.mark.parametrize("name", XML_FIXTURES)
def test_module_pipeline_and_cli_agree(smi_main, name):
    with open(os.path.join(SMI, name), encoding="utf-8") as handle:
        xml = handle.read()
    captures = {"nvidia_smi_path": "/usr/bin/nvidia-smi", "nvidia_smi_requested": None,
                "smi": [{"kind": "xml", "argv": [], "rc": 0, "stdout": xml, "stderr": "", "fields": None}],
                "lspci": None, "sysfs_pci": [], "proc_version": None, "proc_version_path": "/x"}
    module = gpu_facts.build_facts(captures, pid_exists=lambda pid: True)
    out = json.loads(smi_main("--json", os.path.join(SMI, name)).stdout)
    assert module["gpus"] == out["gpus"]
    assert _without_host_keys(module["processes"]) == out["processes"]
    assert module["driver_version_userspace"] == out["driver_version"]
    assert module["cuda_driver_version"] == out["cuda_version"]


def test_module_run_directly_and_cli_agree(smi_main, tmp_path):
    pytest.importorskip("ansible")
    smi_path = fake_nvidia_smi(tmp_path, "045_qx_513.46_GRID-P4-1Q_vGPU_13procs.xml")
    rc, result = run_module(tmp_path, {"nvidia_smi_path": smi_path, "proc_version_path": str(tmp_path / "none")})
    facts = result["ansible_facts"]["nvidia"]
    out = json.loads(smi_main("--json", fixture("045")).stdout)
    assert rc == 0 and facts["gpus"] == out["gpus"]
    assert _without_host_keys(facts["processes"]) == out["processes"]


def test_ansible_adhoc_and_cli_agree(tmp_path):
    smi_path = fake_nvidia_smi(tmp_path, "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml")
    proc_file = os.path.join(HOST, "proc-driver-nvidia-version_open_550.54.15.txt")
    rc, result = run_ansible(tmp_path, "nvidia_smi_path=%s proc_version_path=%s" % (smi_path, proc_file))
    facts = result["ansible_facts"]["nvidia"]
    out = json.loads(gpuhost("--json", fixture("043")).stdout)
    assert rc == 0 and facts["state"] == out["state"] == "ok"
    assert facts["gpus"] == out["gpus"]
    assert _without_host_keys(facts["processes"]) == out["processes"]
    assert facts["processes"][0]["pid_exists"] in (True, False)
