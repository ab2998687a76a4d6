"""The nvidia_gpu_facts module: its pure state decision, its pipeline on captured outputs, and
the module itself run directly and through `ansible localhost -m`."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from gpu import gpu_facts as gf
from gpu import host_parse
from gpu import nvsmi_parse
from gpu.nvsmi_csv import COMPUTE_APPS_FIELDS, GPU_QUERY_FIELDS
from host.runner import HostIO
from conftest import FIXTURES, MODULE_RUNNER, ROOT

SMI = os.path.join(FIXTURES, "nvidia_smi")
HOST = os.path.join(FIXTURES, "host")
MODULE = os.path.join(ROOT, "library", "nvidia_gpu_facts.py")
STATES = set(nvsmi_parse.STATES)


def load(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8") as handle:
        return handle.read()


def smi(name):
    return load(SMI, name)


def host(name):
    return load(HOST, name)


def kernel(name):
    return host_parse.parse_proc_version(host(name))


def pci(name):
    return host_parse.nvidia_gpus(host_parse.parse_lspci(host(name)))


def facts_of(name):
    return nvsmi_parse.facts_from_output(smi(name))


# --- decide_state (pure) -------------------------------------------------------------------------

def test_state_no_gpu():
    state, message = gf.decide_state(False, None, None, None, [], True)
    assert state == "no_gpu" and "no NVIDIA GPU" in message


def test_state_no_gpu_when_the_bus_cannot_be_read_says_so():
    state, message = gf.decide_state(False, None, None, None, [], False)
    assert state == "no_gpu" and "could not be read" in message


def test_state_no_driver_from_the_pci_bus():
    gpus = pci("lspci-nn_2xRTXPRO6000-workstation_vm_no-driver.txt")
    state, message = gf.decide_state(False, None, None, None, gpus, True)
    assert state == "no_driver" and "2 NVIDIA GPU(s)" in message and "10de:2bb1" in message


def test_state_no_driver_when_only_the_kernel_module_is_there():
    state, message = gf.decide_state(False, None, None, kernel("proc-driver-nvidia-version_open_550.54.15.txt"), [], True)
    assert state == "no_driver" and "550.54.15" in message


def test_state_driver_not_loaded_from_the_error_text():
    state, message = gf.decide_state(True, facts_of("032_error_couldnt-communicate-with-driver.txt"), None,
                                     None, [], True)
    assert state == "driver_not_loaded" and "not loaded" in message


def test_state_driver_not_loaded_when_no_proc_file_and_no_gpus():
    state, _ = gf.decide_state(True, facts_of("026_version_610.57.04_RTX2080S_linux.txt"), None, None, [], True)
    assert state == "driver_not_loaded"


@pytest.mark.parametrize("name", ["029_error_nvml-version-mismatch_570.124.txt",
                                  "030_error_nvml-version-mismatch_550.144.txt",
                                  "031_error_nvml-version-mismatch_old-460-no-version-line.txt"])
def test_state_version_mismatch(name):
    state, message = gf.decide_state(True, facts_of(name), None,
                                     kernel("proc-driver-nvidia-version_proprietary_515.76.txt"), [], True)
    assert state == "version_mismatch" and "515.76" in message


def test_state_no_devices_names_the_open_kernel_modules():
    no_devices = nvsmi_parse.facts_from_output("No devices were found\n")
    gpus = pci("lspci-nn-D_4xRTXPRO6000-server_rocky10.txt")
    state, message = gf.decide_state(True, no_devices, None,
                                     kernel("proc-driver-nvidia-version_proprietary_515.76.txt"), gpus, True)
    assert state == "error"
    assert "open kernel modules" in message and "proprietary" in message
    assert "nvidia-driver-570-server-open" in message and "10de:2bb5" in message


def test_state_no_devices_without_open_module_need_has_no_hint():
    no_devices = nvsmi_parse.facts_from_output("No devices were found\n")
    gpus = pci("lspci-n_A100_gcp.txt")
    state, message = gf.decide_state(True, no_devices, None,
                                     kernel("proc-driver-nvidia-version_proprietary_515.76.txt"), gpus, True)
    assert state == "error" and "open kernel" not in message


def test_state_error_when_nvidia_smi_gave_nothing_usable():
    state, message = gf.decide_state(True, None, "nvidia-smi -q -x timed out", None, [], True)
    assert (state, message) == ("error", "nvidia-smi -q -x timed out")


def test_state_ok():
    state, message = gf.decide_state(True, facts_of("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml"), None,
                                     kernel("proc-driver-nvidia-version_open_550.54.15.txt"), [], True)
    assert state == "ok" and message == "1 GPU(s) visible to nvidia-smi"


def test_state_ok_even_without_proc_file_when_nvidia_smi_lists_gpus():
    # e.g. a container where /proc/driver is masked but the toolkit injected nvidia-smi
    state, _ = gf.decide_state(True, facts_of("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml"), None, None, [], True)
    assert state == "ok"


# --- build_facts on captures ---------------------------------------------------------------------

def attempt(kind, rc, stdout="", stderr="", fields=None):
    return {"kind": kind, "argv": ["nvidia-smi"], "rc": rc, "stdout": stdout, "stderr": stderr,
            "fields": list(fields) if fields else None}


def captures(smi_attempts=None, lspci=None, proc=None, sysfs=None, path="/usr/bin/nvidia-smi"):
    return {"nvidia_smi_path": path if smi_attempts is not None else None, "nvidia_smi_requested": None,
            "smi": smi_attempts or [],
            "lspci": attempt("lspci", 0, host(lspci)) if lspci else None,
            "sysfs_pci": sysfs, "proc_version": host(proc) if proc else None,
            "proc_version_path": "/proc/driver/nvidia/version"}


def test_build_facts_ok_blackwell():
    facts = gf.build_facts(captures([attempt("xml", 0, smi("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml"))],
                                    proc="proc-driver-nvidia-version_open_aarch64_580.65.06.txt"),
                           pid_exists=lambda pid: False)
    assert set(facts) == set(gf.FACT_KEYS)
    assert facts["state"] == "ok" and facts["gpu_count"] == 1
    assert facts["driver_version_kernel"] == "580.65.06"
    assert facts["driver_version_userspace"] == "590.44.01"
    assert facts["cuda_driver_version"] == "13.1"
    assert facts["kernel_modules"]["flavor"] == "open" and facts["kernel_modules"]["loaded"] is True
    assert facts["nvidia_smi_form"] == "xml"
    (proc,) = facts["processes"]
    assert proc["pid"] == 116860 and proc["pid_exists"] is False and proc["zombie"] is True
    assert any("differs from userspace" in w for w in facts["warnings"])


def test_build_facts_living_process_is_not_a_zombie():
    facts = gf.build_facts(captures([attempt("xml", 0, smi("021_qx_RTX3060.xml"))],
                                    proc="proc-driver-nvidia-version_proprietary_515.76.txt"),
                           pid_exists=lambda pid: pid == 28543)
    assert [(p["pid"], p["pid_exists"], p["zombie"]) for p in facts["processes"]] == [(28543, True, False)]


def test_build_facts_no_gpu_from_empty_sysfs():
    facts = gf.build_facts(captures(sysfs=[]))
    assert facts["state"] == "no_gpu" and facts["pci_source"] == "sysfs"
    assert facts["gpus"] == [] and facts["kernel_modules"]["loaded"] is False


def test_build_facts_no_driver_from_lspci():
    facts = gf.build_facts(captures(lspci="lspci-nn_2xRTXPRO6000-workstation_vm_no-driver.txt"))
    assert facts["state"] == "no_driver" and facts["pci_source"] == "lspci"
    assert [d["pci_address"] for d in facts["pci_devices"]] == ["0000:01:00.0", "0000:02:00.0"]


def test_build_facts_no_driver_from_sysfs():
    sysfs = [{"address": "0000:38:00.0", "vendor": "0x10de\n", "device": "0x2bb5\n", "class": "0x030200\n"}]
    facts = gf.build_facts(captures(sysfs=sysfs))
    assert facts["state"] == "no_driver" and facts["pci_devices"][0]["compute_capability"] == "12.0"


def test_build_facts_driver_not_loaded():
    text = smi("032_error_couldnt-communicate-with-driver.txt")
    facts = gf.build_facts(captures([attempt("xml", 9, text)], lspci="lspci-nn-D_GH200.txt"))
    assert facts["state"] == "driver_not_loaded"
    assert "open kernel modules" in facts["message"]  # GH200 needs them and nothing is loaded


def test_build_facts_version_mismatch_names_both_versions():
    text = smi("029_error_nvml-version-mismatch_570.124.txt")
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Wed Feb 26 01:54:31 UTC 2025\n"
    caps = captures([attempt("xml", 18, text)])
    caps["proc_version"] = proc
    facts = gf.build_facts(caps)
    assert facts["state"] == "version_mismatch"
    assert facts["driver_version_kernel"] == "570.124.06" and facts["driver_version_userspace"] == "570.124"
    assert "570.124.06" in facts["message"] and "570.124" in facts["message"]


def test_build_facts_no_devices_on_blackwell_with_proprietary_module():
    facts = gf.build_facts(captures([attempt("xml", 6, "No devices were found\n")],
                                    lspci="lspci-nn-D_4xRTXPRO6000-server_rocky10.txt",
                                    proc="proc-driver-nvidia-version_proprietary_515.76.txt"))
    assert facts["state"] == "error" and "open kernel modules" in facts["message"]
    assert len(facts["pci_devices"]) == 4 and facts["gpus"] == []


def test_build_facts_timeout():
    facts = gf.build_facts(captures([attempt("xml", gf.TIMEOUT_RC)]))
    assert facts["state"] == "error" and "timed out" in facts["message"]


def test_build_facts_truncated_xml_is_an_error_not_a_crash():
    xml = smi("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml")
    facts = gf.build_facts(captures([attempt("xml", 0, xml[:5000])]))
    assert facts["state"] == "error" and "not well-formed" in facts["message"]


ROW = ("0, NVIDIA L4, GPU-aa, 00000000:00:03.0, 0x27B810DE, 550.90.07, Disabled, Default, 23034, 20313, "
       "2377, 0, 35.00, 72.00, 76")


def test_build_facts_csv_fallback():
    facts = gf.build_facts(captures([
        attempt("xml", 2, "", "Unknown option -x"),
        attempt("csv_gpu", 0, ROW + "\n", fields=GPU_QUERY_FIELDS),
        attempt("csv_apps", 0, "GPU-aa, 00000000:00:03.0, 8, /usr/bin/python3, 20000\n",
                fields=COMPUTE_APPS_FIELDS),
    ], proc="proc-driver-nvidia-version_open_550.54.15.txt"), pid_exists=lambda pid: True)
    assert facts["state"] == "ok" and facts["nvidia_smi_form"] == "csv_query_gpu"
    gpu = facts["gpus"][0]
    assert (gpu["name"], gpu["memory_used_mib"], gpu["compute_capability"]) == ("NVIDIA L4", 20313, "8.9")
    assert facts["processes"][0]["gpu_index"] == 0 and facts["processes"][0]["used_mib"] == 20000
    assert facts["cuda_driver_version"] is None
    assert any("CSV fallback" in w for w in facts["warnings"])


# --- capture with a fake host ----------------------------------------------------------------------

class FakeIO(HostIO):
    def __init__(self, commands=None, files=None, binaries=None, dirs=None):
        self.commands = commands or {}
        self.files = files or {}
        self.binaries = binaries or {}
        self.dirs = dirs or {}
        self.calls = []

    def run(self, argv):
        self.calls.append(list(argv))
        for key, result in self.commands.items():
            # ("/usr/bin/nvidia-smi", "--query-gpu") matches "--query-gpu=index,..."
            if [a.split("=")[0] for a in argv[:len(key)]] == list(key):
                return result(argv) if callable(result) else result
        return 127, "", "not found"

    def which(self, name):
        return self.binaries.get(name)

    def read(self, path):
        return self.files.get(path)

    def listdir(self, path):
        return self.dirs.get(path)

    def exists(self, path):
        return path in self.files or path in self.binaries.values() or path.startswith("/proc/1")


def test_capture_runs_xml_first_and_stops_there():
    xml = smi("019_qx_A100-SXM4-MIG.xml")
    io = FakeIO(commands={("/usr/bin/nvidia-smi", "-q"): (0, xml, ""),
                          ("/usr/bin/lspci",): (0, host("lspci-n_A100_gcp.txt"), "")},
                binaries={"nvidia-smi": "/usr/bin/nvidia-smi", "lspci": "/usr/bin/lspci"},
                files={"/proc/driver/nvidia/version": host("proc-driver-nvidia-version_proprietary_515.76.txt")})
    facts = gf.gather(io)
    # XML answered: no CSV; -L for the MIG devices' names (it has two), `topo -m` for the interconnect (this fake
    # host has neither: the MIG devices keep no name, the topology is null)
    assert io.calls == [["/usr/bin/nvidia-smi", "-q", "-x"], ["/usr/bin/nvidia-smi", "-L"],
                        ["/usr/bin/nvidia-smi", "topo", "-m"], ["/usr/bin/lspci", "-nn", "-D"]]
    assert facts["state"] == "ok" and facts["pci_source"] == "lspci"
    assert facts["gpus"][0]["mig_mode"] is True
    assert [(d["index"], d["memory_total_mib"], d["uuid"]) for d in facts["gpus"][0]["mig_devices"]] == [
        (0, 19968, None), (1, 19968, None)]
    assert facts["topology"] is None and facts["nvswitches"] == []


def test_interconnect_facts_from_real_topo_and_fabric():
    """8x B200 HGX `topo -m` (NV18 everywhere) and the 590 XML's fabric (State N/A: no NVSwitch fabric)."""
    topo = load(os.path.join(FIXTURES, "fabric"), "topo-m_8xB200-HGX_NV18_595.91.07.txt")
    io = FakeIO(commands={("/usr/bin/nvidia-smi", "-q"): (0, smi("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml"), ""),
                          ("/usr/bin/nvidia-smi", "topo"): (0, topo, "")},
                binaries={"nvidia-smi": "/usr/bin/nvidia-smi"},
                files={"/proc/driver/nvidia/version": host("proc-driver-nvidia-version_proprietary_515.76.txt")})
    facts = gf.gather(io)
    assert facts["topology"]["gpus"] == ["GPU%d" % i for i in range(8)]
    assert facts["topology"]["links"]["GPU0"]["GPU7"] == "NV18"
    assert facts["fabric"]["needed"] is False and facts["fabric"]["state"] == "not_applicable"
    assert facts["fabric"]["gpus"][0]["state"] == "N/A"


def test_capture_falls_back_to_csv_and_retries_older_fields():
    def query_gpu(argv):
        if "compute_cap" in argv[1]:
            return 2, 'Field "compute_cap" is not a valid field to query.\n', ""
        return 0, ROW + "\n", ""

    io = FakeIO(commands={("/opt/nv/nvidia-smi", "-q"): (255, "", "Unknown Error in -x"),
                          ("/opt/nv/nvidia-smi", "--query-gpu"): query_gpu,
                          ("/opt/nv/nvidia-smi", "--query-compute-apps"): (0, "", "")},
                files={"/opt/nv/nvidia-smi": "#!", "/proc/driver/nvidia/version":
                       host("proc-driver-nvidia-version_open_550.54.15.txt")},
                dirs={gf.SYSFS_PCI_DEVICES: []})
    facts = gf.gather(io, nvidia_smi_path="/opt/nv/nvidia-smi")
    kinds = [call[1].split("=")[0] for call in io.calls]
    assert kinds == ["-q", "--query-gpu", "--query-gpu", "--query-compute-apps"]
    assert "compute_cap" in io.calls[1][1] and "compute_cap" not in io.calls[2][1]
    assert facts["state"] == "ok" and facts["gpus"][0]["name"] == "NVIDIA L4" and facts["processes"] == []


def test_capture_explicit_path_that_does_not_exist():
    io = FakeIO(dirs={gf.SYSFS_PCI_DEVICES: ["0000:00:00.0"]},
                files={gf.SYSFS_PCI_DEVICES + "/0000:00:00.0/vendor": "0x8086\n"})
    facts = gf.gather(io, nvidia_smi_path="/nonexistent/nvidia-smi")
    assert facts["state"] == "no_gpu" and io.calls == []
    assert any("does not exist" in w for w in facts["warnings"])


def test_capture_sysfs_reads_only_nvidia_functions():
    base = gf.SYSFS_PCI_DEVICES
    io = FakeIO(dirs={base: ["0000:00:1f.3", "0000:38:00.0"]},
                files={base + "/0000:00:1f.3/vendor": "0x8086\n", base + "/0000:38:00.0/vendor": "0x10de\n",
                       base + "/0000:38:00.0/device": "0x2bb5\n", base + "/0000:38:00.0/class": "0x030200\n"})
    facts = gf.gather(io)
    assert facts["state"] == "no_driver" and facts["pci_devices"][0]["pci_address"] == "0000:38:00.0"


def test_error_facts_has_every_key():
    facts = gf.error_facts("boom")
    assert set(facts) == set(gf.FACT_KEYS) and facts["state"] == "error"


# --- the module itself -------------------------------------------------------------------------------

def fake_nvidia_smi(tmp_path, fixture, rc=0):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\ncat '%s'\nexit %d\n" % (os.path.join(SMI, fixture), rc))
    script.chmod(0o755)
    return str(script)


def run_module(tmp_path, args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, *MODULE_RUNNER, MODULE, str(args_file)], capture_output=True, text=True,
                          env=env, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_module_direct_ok(tmp_path):
    pytest.importorskip("ansible")
    smi_path = fake_nvidia_smi(tmp_path, "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml")
    rc, out = run_module(tmp_path, {"nvidia_smi_path": smi_path, "timeout": 20,
                                    "proc_version_path": os.path.join(HOST, "proc-driver-nvidia-version_open_550.54.15.txt")})
    facts = out["ansible_facts"]["nvidia"]
    assert rc == 0 and out["changed"] is False
    assert facts["state"] == "ok" and facts["gpus"][0]["pci_device_id"] == "0x2bb4"
    assert facts["kernel_modules"]["flavor"] == "open"


def test_module_direct_broken_gpu_layer_does_not_fail(tmp_path):
    pytest.importorskip("ansible")
    smi_path = fake_nvidia_smi(tmp_path, "029_error_nvml-version-mismatch_570.124.txt", rc=18)
    rc, out = run_module(tmp_path, {"nvidia_smi_path": smi_path, "proc_version_path": str(tmp_path / "none")})
    assert rc == 0 and not out.get("failed")
    assert out["ansible_facts"]["nvidia"]["state"] == "version_mismatch"


def test_module_direct_bad_argument_fails(tmp_path):
    pytest.importorskip("ansible")
    rc, out = run_module(tmp_path, {"timeout": 0})
    assert rc != 0 and out["failed"] is True and "timeout" in out["msg"]


def _ansible_bin():
    candidate = os.path.join(os.path.dirname(sys.executable), "ansible")
    return candidate if os.path.exists(candidate) else shutil.which("ansible")


def _host_has_no_nvidia():
    if shutil.which("nvidia-smi") or os.path.exists("/proc/driver/nvidia/version"):
        return False
    base = "/sys/bus/pci/devices"
    for name in (os.listdir(base) if os.path.isdir(base) else []):
        try:
            with open(os.path.join(base, name, "vendor")) as handle:
                if handle.read().strip().lower() == "0x10de":
                    return False
        except OSError:
            continue
    return True


def run_ansible(cwd, args=""):
    """`ansible localhost -m nvidia_gpu_facts` from a directory without the repo's ansible.cfg
    (its profile_tasks callback would wrap the JSON), module found via ANSIBLE_LIBRARY only."""
    ansible = _ansible_bin()
    if not ansible:
        pytest.skip("ansible not on PATH")
    env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(ROOT, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [ansible, "localhost", "-m", "nvidia_gpu_facts", "-e", "ansible_python_interpreter=%s" % sys.executable]
    if args:
        cmd += ["-a", args]
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=str(cwd))
    out = json.loads(proc.stdout)
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return proc.returncode, result


def test_ansible_adhoc_on_this_host(tmp_path):
    rc, result = run_ansible(tmp_path)
    assert rc == 0
    facts = result["ansible_facts"]["nvidia"]
    assert facts["state"] in STATES
    if _host_has_no_nvidia():
        assert facts["state"] == "no_gpu"


def test_documentation_matches_the_argument_spec():
    pytest.importorskip("ansible")
    yaml = pytest.importorskip("yaml")
    import nvidia_gpu_facts as module

    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == "nvidia_gpu_facts"
    options = doc["options"]
    assert set(options) == set(module.ARGUMENT_SPEC)
    for name, spec in module.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"], name
        assert options[name].get("default") == spec.get("default"), name
    yaml.safe_load(module.EXAMPLES)
    returned = yaml.safe_load(module.RETURN)["ansible_facts"]["contains"]["nvidia"]["contains"]
    assert set(returned) == set(gf.FACT_KEYS)


def test_mig_devices_get_their_names_and_uuids_from_the_listing():
    """-q (003) gives each MIG device's memory, -L of the same host (028) its profile and UUID, by Device N."""
    facts = nvsmi_parse.facts_from_output(smi("003_q_590.48.01_H100-MIG_load.txt"))
    merged = nvsmi_parse.merge_mig_listing(facts, smi("028_L_590.48.01_H100-MIG.txt"))
    devices = merged["gpus"][0]["mig_devices"]
    assert [(d["gpu_index"], d["index"], d["profile"], d["memory_total_mib"]) for d in devices] == [
        (0, 0, "3g.40gb", 40448), (0, 1, "2g.20gb", 20096), (0, 2, "1g.10gb", 9984), (0, 3, "1g.10gb", 9984)]
    assert devices[1]["uuid"] == "MIG-00000001-0000-0000-0000-000000000001"
    assert facts["gpus"][0]["mig_devices"][0]["uuid"] is None  # the facts given are not changed
