"""DCGM in the simulator (gpusim/dcgm.py, gpusim/hostengine.py): dcgmi discovery and diag with the real texts
(tests/fixtures/dcgmi, tests/fixtures/dcgm_diag), the -j document read by the product's reader
(module_utils/gpu/dcgm_diag.py), nv-hostengine as a holder of the GPUs, the faults of `gpusim fault`."""
import json
import os
import signal
import subprocess
import sys

import pytest

from simhelpers import BIN, SIM, edit, make_state, run_smi, st

from gpusim import ctl, dcgm, hostengine, kmod  # noqa: E402
from gpu import dcgm_diag as dd  # noqa: E402  (tests/conftest.py serves module_utils)
from conftest import read_fixture  # noqa: E402

CUDA13 = "usr/libexec/datacenter-gpu-manager-4/plugins/cuda13"
CUDA12 = "usr/libexec/datacenter-gpu-manager-4/plugins/cuda12"


@pytest.fixture
def host(tmp_path):
    """Two H100 on 580.95.05 (CUDA 13.0), persistence on, DCGM 4.5.2 with its cuda13 plugin package."""
    path = tmp_path / "s.json"
    make_state(path, models=("h100", "h100"))
    edit(path, lambda s: [g.update(persistence_mode=True) for g in s["gpus"]])
    (tmp_path / "root" / CUDA13).mkdir(parents=True)
    return path


def dcgmi(path, *argv, version="4.5.2", root=None):
    root = root or os.path.join(os.path.dirname(str(path)), "root")
    return dcgm.run(list(argv), state_path=str(path), root=root, version=version)


def start_engine(path, account=None, pid=None):
    o = hostengine.Options()
    o.daemon, o.service_account = False, account
    return hostengine.start(o, pid or os.getpid(), str(path), "4.5.2")


# ----- dcgmi discovery ----------------------------------------------------------------------------------------
def test_discovery_without_a_host_engine_is_dcgmis_connection_error(host):
    out, err, rc = dcgmi(host, "discovery", "-l")
    assert out == read_fixture("dcgmi", "not-connected_discovery-l") and err == ""
    assert rc == 235   # DCGM_ST_CONNECTION_NOT_VALID (-21)


def test_discovery_lists_the_engines_gpus_in_the_real_layout(host):
    assert start_engine(host) == (0, ["Started host engine version 4.5.2 using port number: 5555"])
    edit(host, lambda s: [g.update(pci_bus_id=b) for g, b in zip(s["gpus"], ("00000000:19:00.0", "00000000:3B:00.0"))])
    out, _err, rc = dcgmi(host, "discovery", "-l")
    uuid = st.load(str(host))["gpus"][0]["uuid"]
    real = read_fixture("dcgmi", "discovery-l_4.5_8xH100").replace("8 GPUs", "2 GPUs").replace(
        "Device UUID: GPU-..." + " " * 33, "Device UUID: " + uuid)     # the reporter elided the UUID
    assert rc == 0 and out.startswith(real)
    tail = out.split("0 NvSwitches found.\n", 1)[1]
    assert tail == ("+-----------+\n| Switch ID |\n+-----------+\n+-----------+\n0 ConnectX found.\n+----------+\n"
                    "| ConnectX |\n+----------+\n+----------+\n0 CPUs found.\n" + "+--------+" + "-" * 70 + "+\n"
                    "| CPU ID | Device Information" + " " * 51 + "|\n" + ("+--------+" + "-" * 70 + "+\n") * 2)
    # DCGM 4.4 counts without "(Active)" (dcgmi/Query.cpp at 4.4.2), as the 4 x H100 capture of NVIDIA/DCGM#229
    edit(host, lambda s: [g.update(pci_bus_id=b) for g, b in zip(s["gpus"], ("00000000:4C:00.0", "00000000:5D:00.0"))])
    out, _err, _rc = dcgmi(host, "discovery", "-l", version="4.4.2")
    real = read_fixture("dcgmi", "discovery-l_4.x_4xH100").splitlines()
    s = st.load(str(host))
    mine = out.splitlines()
    assert mine[0] == "2 GPUs found." and real[0] == "4 GPUs found."
    for got, want in zip(mine[1:12], real[1:12]):
        want = want.replace("<<<NULL>>>" + " " * 11, "NVIDIA H100 80GB HBM3").replace(
            "GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de", s["gpus"][0]["uuid"]).replace(
            "GPU-75c4ee16-a840-6f6c-9a7b-5ed8f41598b8", s["gpus"][1]["uuid"])
        assert got == want


def test_an_engine_started_without_a_driver_manages_no_gpu_and_holds_nothing(host):
    edit(host, lambda s: s["driver"].update(loaded=None))
    assert start_engine(host)[0] == 0
    assert st.load(str(host))["hostengine"]["gpus"] == []
    out, _err, rc = dcgmi(host, "discovery", "-l")
    assert rc == 0 and out.startswith("0 GPUs found (Active).\n")
    # the driver comes back (modprobe): DCGM 4 does not pick the GPUs up (NVIDIA/gpu-operator#2854)
    edit(host, lambda s: s["driver"].update(loaded={"version": "580.95.05", "kernel_modules": "open"}))
    assert dcgmi(host, "discovery", "-l")[0].startswith("0 GPUs found (Active).\n")
    assert not kmod.openers(st.load(str(host)))["hostengine"]


# ----- dcgmi diag: text --------------------------------------------------------------------------------------
def test_diag_level_1_passes_in_dcgmis_table(host):
    out, err, rc = dcgmi(host, "diag", "-r", "1")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[:4] == ["Successfully ran diagnostic for group.",
                         "+---------------------------+------------------------------------------------+",
                         "| Diagnostic                | Result                                         |",
                         "+===========================+================================================+"]
    assert "| DCGM Version              | 4.5.2                                          |" in lines
    assert "| GPU Device IDs Detected   | 2330, 2330                                     |" in lines
    assert lines[-4:] == ["| software                  | Pass                                           |",
                          "|                           | GPU0: Pass                                     |",
                          "|                           | GPU1: Pass                                     |",
                          "+---------------------------+------------------------------------------------+"]
    assert all(len(line) == 78 for line in lines[1:])


def test_persistence_off_fails_level_1_with_dcgms_warning_on_every_gpu_of_the_run(host):
    edit(host, lambda s: s["gpus"][1].update(persistence_mode=False))
    out, _err, rc = dcgmi(host, "diag", "-r", "1")
    assert rc == 226
    # the test line says Warn, each GPU Fail (Software's SetResult applies to every GPU of the run), the warning
    # wrapped at 45 characters (Diag::DisplayVerboseInfo); its words are the real 4.1.1 document's
    assert "| software                  | Warn                                           |" in out
    assert "|                           | GPU0: Fail                                     |" in out
    assert "| Warning: GPU1             | Persistence Mode: Persistence mode for GPU 1   |\n" in out
    real = json.loads(read_fixture("dcgm_diag", "diag-r1-j_4.1.1"))
    warning = real["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["warnings"][0]["warning"]
    doc = dd.parse(dcgmi(host, "diag", "-r", "1", "-j")[0])
    assert [w["text"] for w in doc["tests"][0]["results"][1]["warnings"]] == [warning.replace("GPU 0", "GPU 1")]


def test_verbose_adds_the_memory_tests_info(host):
    out, _err, rc = dcgmi(host, "diag", "-r", "2", "-v")
    assert rc == 0 and "| Info: GPU0                | Allocated " in out
    assert "+-----  Hardware  ----------+------------------------------------------------+" in out
    assert "+-----  Integration  -------+------------------------------------------------+" in out


# ----- dcgmi diag -j: the real documents ----------------------------------------------------------------------
def test_level_1_document_is_the_real_4_1_1_a100_one(tmp_path):
    """The A100 capture (DCGM 4.1.1, persistence off) and the simulator's 4.4 document differ only in what the
    hosts differ in: DCGM and driver version, device id (20b0 A100-SXM4-40GB; 20b2 the simulated 80GB), serial."""
    path = tmp_path / "s.json"
    make_state(path, models=("a100-80gb",), driver="570.195.03")
    (tmp_path / "root" / CUDA12).mkdir(parents=True)
    out, _err, rc = dcgmi(path, "diag", "-r", "1", "-j", version="4.4.2")
    serial = st.load(str(path))["gpus"][0]["serial"]
    real = read_fixture("dcgm_diag", "diag-r1-j_4.1.1")
    assert rc == 226
    assert out == real.replace('"20b0"', '"20b2"').replace('"0000000000000"', '"%s"' % serial).replace(
        "570.148.08", "570.195.03").replace('"4.1.1"', '"4.4.2"')


def test_level_2_document_on_a_sku_outside_diag_skus_is_the_real_gated_one(tmp_path):
    """GB10 is not in DCGM's diag-skus.yaml, nor is the RTX 4090: memory and pcie Skip with no reason, the 4.5
    summary repeating the warning. The capture's one GB10-only line (the SRAM threshold info) is left out."""
    path = tmp_path / "s.json"
    make_state(path, models=("rtx-4090",), driver="580.95.05", modules="proprietary")
    (tmp_path / "root" / CUDA13).mkdir(parents=True)
    out, _err, rc = dcgmi(path, "diag", "-r", "2", "-j")
    real = json.loads(read_fixture("dcgm_diag", "diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-skip"))
    del real["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["test_summary"]["info"]
    real["entity_groups"][0]["entities"][0].update(device_id="2684", serial_num=st.load(str(path))["gpus"][0]["serial"])
    real["metadata"]["Driver Version Detected"] = "580.95.05"
    assert rc == 226 and out == dcgm.jsoncpp(real)
    verdict = dd.verdict(dd.parse(out), rc)
    assert verdict["status"] == "fail" and [s["test"] for s in verdict["skipped"]] == ["memory", "pcie"]


def test_the_json_writer_writes_the_real_documents_byte_for_byte():
    for name in ("diag-r1-j_4.1.1", "diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-pass",
                 "diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-skip"):
        raw = read_fixture("dcgm_diag", name)
        assert dcgm.jsoncpp(json.loads(raw)) == raw


def test_a_passing_run_reads_as_a_pass(host):
    out, _err, rc = dcgmi(host, "diag", "-r", "3", "-j")
    parsed = dd.parse(out)
    assert rc == 0 and parsed["version"] == "4.5.2" and parsed["driver_version"] == "580.95.05"
    assert [t["name"] for t in parsed["tests"]] == ["software", "memory", "diagnostic", "nvbandwidth", "pcie",
                                                    "targeted_stress", "targeted_power"]
    assert set(parsed["gpus"]) == {0, 1} and parsed["gpus"][0]["device_id"] == "2330"
    assert dd.verdict(parsed, rc)["status"] == "pass"


@pytest.mark.parametrize("kind, code, rc, status", [("mismatch", 58, 205, "isolate"), ("dbe", 57, 205, "isolate"),
                                                    ("alloc", 56, 226, "fail")])
def test_a_memory_fault_fails_the_memory_test_of_that_gpu(host, monkeypatch, kind, code, rc, status):
    monkeypatch.setenv("GPUSIM_STATE", str(host))
    assert ctl.main(["fault", "dcgm_memory_error", kind, "--gpu", "1"]) == 0
    out, _err, got = dcgmi(host, "diag", "-r", "2", "-j")
    verdict = dd.verdict(dd.parse(out), got)
    assert got == rc and verdict["status"] == status
    assert [(f["gpu"], f["test"], f["category"]) for f in verdict["failed"]] == [(1, "memory", "Hardware")]
    warning = verdict["failed"][0]["warnings"][0]
    assert warning["error_id"] == code and "GPU 1" in warning["text"]
    if kind == "mismatch":
        assert warning["text"] == ("A memory mismatch was detected on GPU 1, but no error was reported by CUDA or "
                                   "NVML. Run a field diagnostic on the GPU.")
    # level 1 does not run the memory test
    assert dcgmi(host, "diag", "-r", "1")[2] == 0
    assert ctl.main(["fault", "dcgm_memory_error", kind, "off", "--gpu", "1"]) == 0
    assert dcgmi(host, "diag", "-r", "2")[2] == 0 and "dcgm_memory_error" not in st.load(str(host))["faults"]


def test_a_corrupt_inforom_fails_level_1(host, monkeypatch):
    monkeypatch.setenv("GPUSIM_STATE", str(host))
    ctl.main(["fault", "inforom_corrupt", "--gpu", "0"])
    out, _err, rc = dcgmi(host, "diag", "-r", "1", "-j")
    failed = dd.verdict(dd.parse(out), rc)["failed"]
    assert rc == 226 and [(f["gpu"], f["test"]) for f in failed] == [(0, "software"), (1, "software")]
    assert failed[0]["warnings"][0] == {"error_id": 9, "category": 15, "severity": 4, "text": (
        "Inforom: A corrupt InfoROM has been detected in GPU 0. Flash the InfoROM to clear this corruption.")}
    ctl.main(["fault", "inforom_corrupt", "off", "--gpu", "0"])
    assert dcgmi(host, "diag", "-r", "1")[2] == 0


def test_a_clocks_event_fails_the_level_3_stress_tests(host, monkeypatch):
    monkeypatch.setenv("GPUSIM_STATE", str(host))
    ctl.main(["fault", "throttle", "hw_slowdown", "--gpu", "0"])
    assert dcgmi(host, "diag", "-r", "2")[2] == 0
    out, _err, rc = dcgmi(host, "diag", "-r", "3", "-j")
    failed = dd.verdict(dd.parse(out), rc)["failed"]
    assert rc == 226 and [f["test"] for f in failed] == ["diagnostic", "targeted_stress", "targeted_power"]
    assert failed[0]["warnings"][0]["error_id"] == 43 and "clocks_event_reason_hw_slowdown" in \
        failed[0]["warnings"][0]["text"]


# ----- dcgmi diag: runs that cannot complete ------------------------------------------------------------------
def test_without_the_cuda_plugin_package_of_the_drivers_cuda_major(tmp_path):
    """DCGM 4.4.1 without datacenter-gpu-manager-4-cuda12 on a 12.x driver, as NVIDIA/DCGM#254 printed it."""
    path = tmp_path / "s.json"
    make_state(path, models=("l4",) * 4, driver="570.195.03")
    (tmp_path / "root" / CUDA13).mkdir(parents=True)     # the other major's package does not help
    out, _err, rc = dcgmi(path, "diag", "-i", "0,1,2,3", "-v", "-r", "3", version="4.4.2")
    assert rc == 226
    assert out.rstrip("\n") == read_fixture("dcgmi", "diag-r3-v_4.4.1").rstrip("\n")
    doc = dd.parse(dcgmi(path, "diag", "-r", "1", "-j", version="4.4.2")[0])
    assert "plugins/cuda12/" in doc["runtime_error"] and doc["tests"] == []


def test_a_gpu_split_into_mig_instances_is_refused(host):
    def mig(s):
        g = s["gpus"][0]
        g["mig_mode"] = True
        g["mig_instances"] = [{"id": 7, "profile_id": 19, "start": 0, "size": 1,
                               "cis": [{"id": 0, "profile_id": 0, "start": 0, "size": 1}]},
                              {"id": 8, "profile_id": 19, "start": 1, "size": 1,
                               "cis": [{"id": 0, "profile_id": 0, "start": 0, "size": 1}]}]
    edit(host, mig)
    out, _err, rc = dcgmi(host, "diag", "-r", "1")
    assert rc == 226 and out == (
        "Error: Unable to complete diagnostic for entities *,cpu:*. Return: (-30) : DCGM GPU Diagnostic returned an "
        "error\nGPU 0's MIG configuration is incompatible with the diagnostic because it prevents access to the "
        "entire GPU.\n")
    # the refusal names GPU 0 even when only GPU 1 is asked for (NVIDIA/DCGM#70)
    assert "GPU 0's MIG configuration" in dcgmi(host, "diag", "-r", "1", "-i", "1")[0]
    doc = dd.parse(dcgmi(host, "diag", "-r", "1", "-j")[0])
    assert "MIG configuration is incompatible" in doc["runtime_error"]
    assert dd.verdict(doc, 226)["messages"][0].startswith("dcgmi diag could not run: Error: Unable to complete")


def test_one_whole_gpu_instance_runs_and_mig_without_instances_is_refused(tmp_path):
    path = tmp_path / "s.json"
    make_state(path, models=("h100",))
    (tmp_path / "root" / CUDA13).mkdir(parents=True)
    edit(path, lambda s: s["gpus"][0].update(mig_mode=True, persistence_mode=True))
    assert "MIG is enabled, but no compute instances are configured." in dcgmi(path, "diag", "-r", "1")[0]
    edit(path, lambda s: s["gpus"][0].update(mig_instances=[{"id": 0, "profile_id": 0, "start": 0, "size": 8,
                                                             "cis": [{"id": 0, "profile_id": 4, "start": 0,
                                                                      "size": 7}]}]))
    assert dcgmi(path, "diag", "-r", "1")[2] == 0


def test_diag_without_a_host_engine_runs_in_an_embedded_one(host):
    """dcgmi diag starts an embedded host engine when none answers (Diag.cpp StartDiag, NVIDIA/DCGM#108); with
    --host it first prints Command::Connect's line."""
    assert dcgm.hostengine(st.load(str(host))) is None
    assert dcgmi(host, "diag", "-r", "1")[2] == 0
    out, _err, rc = dcgmi(host, "diag", "-r", "1", "--host", "localhost")
    assert rc == 0 and out.startswith("Error: unable to establish a connection to the specified host: localhost\n"
                                      "Successfully ran diagnostic for group.\n")


def test_the_engines_service_account_must_exist(host):
    start_engine(host, account="gpusim-no-such-user")
    out, _err, rc = dcgmi(host, "diag", "-r", "1")
    assert rc == 253 and out.startswith("Error: Unable to complete diagnostic for entities *,cpu:*. Return: (-3) : "
                                        "Generic unspecified error\nError when executing the diagnostic: ")
    start_engine(host, account="root")
    assert dcgmi(host, "diag", "-r", "1")[2] == 0


def test_bad_run_values_and_names(host):
    out, err, rc = dcgmi(host, "diag", "-r", "5")
    assert (out, rc) == ("", 254) and err == ("Error: Invalid value '5' specified for -r..\n"
                                              "An error occurred trying to parse the command line.\n")
    assert dcgmi(host, "diag", "-r", "short")[2] == 0
    assert [t["name"] for t in dd.parse(dcgmi(host, "diag", "-r", "memory", "-j")[0])["tests"]] == ["software",
                                                                                                      "memory"]
    out, _err, rc = dcgmi(host, "diag", "-r", "nosuchtest")
    assert rc == 198 and "Return: (-58) : Requested tests were not found among possible test choices." in out


def test_dcgm_3_documents_are_named_by_the_product_not_read(host):
    out, _err, rc = dcgmi(host, "diag", "-r", "1", "-j", version="3.3.9")
    assert rc == 0 and json.loads(out)["version"] == "3.3.9"
    with pytest.raises(dd.DcgmDiagError, match="DCGM 3"):
        dd.parse(out)


# ----- nv-hostengine as a holder of the GPUs ------------------------------------------------------------------
def test_the_engine_holds_the_driver_the_gpus_and_mig_changes(host):
    start_engine(host)
    state = st.load(str(host))
    assert kmod.openers(state)["hostengine"] and kmod.refcount(state, "nvidia") == 3
    assert kmod.remove(state, ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"])[0] == [
        "modprobe: FATAL: Module nvidia is in use."]
    edit(host, lambda s: [g.update(persistence_mode=False) for g in s["gpus"]])
    out, rc = run_smi(host, "-r", "-i", "0")
    assert rc == 255 and "In use by another client" in out
    out, _rc = run_smi(host, "-i", "0", "-mig", "1")
    assert "pending enable state" in out
    hostengine.stop(os.getpid(), str(host))
    assert not dcgm.hostengine(st.load(str(host)))
    out, rc = run_smi(host, "-r", "-i", "1")
    assert rc == 0 and "successfully reset" in out


def test_nv_hostengine_runs_in_the_foreground_as_the_unit_starts_it(host, tmp_path):
    (tmp_path / "root" / "usr/lib/gpu-sim").mkdir(parents=True)
    (tmp_path / "root" / "usr/lib/gpu-sim/dcgm.version").write_text("4.4.2\n")
    env = dict(os.environ, GPUSIM_STATE=str(host), GPUSIM_ROOT=str(tmp_path / "root"), PYTHONPATH=SIM)
    exe = [sys.executable, os.path.join(BIN, "nv-hostengine")]
    proc = subprocess.Popen(exe + ["-n", "--service-account", "root"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    try:
        assert proc.stdout.readline() == "Started host engine version 4.4.2 using port number: 5555\n"
        he = st.load(str(host))["hostengine"]
        assert he["pid"] == proc.pid and he["service_account"] == "root" and len(he["gpus"]) == 2
        second = subprocess.run(exe + ["-n"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=30)
        assert second.returncode == 255 and second.stdout == "Err: Failed to start DCGM Server: -7\n"
        out = subprocess.run([sys.executable, os.path.join(BIN, "dcgmi"), "discovery", "-l"], env=env,
                             stdout=subprocess.PIPE, universal_newlines=True, timeout=30).stdout
        assert out.startswith("2 GPUs found.\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0 and st.load(str(host))["hostengine"]["pid"] is None


def test_a_boot_forgets_the_engine(host):
    from gpusim import boot
    start_engine(host)
    s = st.load(str(host))
    boot.apply_state(s)
    assert s["hostengine"]["pid"] is None and s["hostengine"]["gpus"] == []


def test_fault_list_names_the_dcgm_faults(capsys):
    ctl.main(["fault", "list"])
    assert {"dcgm_memory_error", "inforom_corrupt"} <= set(capsys.readouterr().out.split())


def test_dcgmi_version(host):
    assert dcgmi(host, "--version") == ("\ndcgmi  version: 4.5.2\n\n", "", 0)
