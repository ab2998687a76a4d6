"""State-driven behaviour: driver errors byte-identical to the corpus, boot, faults, -pm."""
import os
import re

import pytest

from simhelpers import corpus, dump, edit, make_state, run_smi
from gpusim import boot, ctl, state as st


def _ctl(path, *args, monkeypatch=None):
    os.environ["GPUSIM_STATE"] = str(path)
    try:
        return ctl.main(list(args))
    finally:
        del os.environ["GPUSIM_STATE"]


def test_no_driver_loaded_is_032(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, loaded=False)
    for argv in ([], ["-L"], ["-q", "-x"], ["--query-gpu=name", "--format=csv"]):
        assert run_smi(p, *argv) == (corpus("032_error"), 9)


@pytest.mark.parametrize("capture,installed", [("029_error", "570.124.06"), ("030_error", "550.144.03")])
def test_mismatch_after_install_without_reboot_is_029_030(tmp_path, capture, installed):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",), driver="535.230.02")
    edit(p, lambda s: s["driver"]["installed"].update(version=installed))   # what a postinst does
    out, rc = run_smi(p)
    assert (out, rc) == (corpus(capture), 18)
    boot.boot(str(p), root=str(tmp_path / "root"))                       # reboot heals it
    out, rc = run_smi(p, "--query-gpu=driver_version", "--format=csv,noheader")
    assert (out, rc) == (installed + "\n", 0)


def test_blackwell_with_proprietary_modules_no_devices(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, modules="proprietary")
    assert run_smi(p) == ("No devices were found\n", 6)
    assert run_smi(p, "-L") == ("No devices were found\n", 6)
    make_state(p, models=("rtx-pro-6000-bse", "h100"), modules="proprietary")
    out, rc = run_smi(p, "-L")
    assert rc == 0 and out.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID:") and out.count("\n") == 1


def test_branch_older_than_model_does_not_drive_it(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, driver="550.144.03")
    assert run_smi(p) == ("No devices were found\n", 6)


def test_invalid_arguments(tmp_path):
    p = tmp_path / "s.json"
    make_state(p)
    msg = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    for argv in (["--bogus"], ["--query-gpu=name"], ["-x"], ["-pm", "7"], ["--format=json", "--query-gpu=name"]):
        assert run_smi(p, *argv) == (msg, 2), argv


def test_pm_as_root_and_not_root(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "h100"))
    out, rc = run_smi(p, "-pm", "1", euid=1000)
    assert (out, rc) == ("Unable to set persistence mode for GPU 00000000:17:00.0: Insufficient Permissions\n"
                         "Terminating early due to previous errors.\n", 4)
    assert [g["persistence_mode"] for g in dump(p)["gpus"]] == [False, False]
    out, rc = run_smi(p, "-i", "0", "-pm", "1")
    assert (out, rc) == ("Enabled Legacy persistence mode for GPU 00000000:17:00.0.\nAll done.\n", 0)
    out, rc = run_smi(p, "-pm", "ENABLED")
    assert out == ("Persistence mode is already Enabled for GPU 00000000:17:00.0.\n"
                   "Enabled Legacy persistence mode for GPU 00000000:31:00.0.\nAll done.\n")
    out, _ = run_smi(p, "--query-gpu=persistence_mode", "--format=csv,noheader")
    assert out == "Enabled\nEnabled\n"
    assert run_smi(p, "-pm", "0")[0].startswith("Disabled Legacy persistence mode for GPU 00000000:17:00.0.\n")
    make_state(p, driver="570.133.20")
    assert run_smi(p, "-pm", "1")[0] == "Enabled persistence mode for GPU 00000000:17:00.0.\nAll done.\n"


def test_boot_loads_installed_and_lays_down_nodes(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p, models=("rtx-pro-6000-bse", "h100"), driver=None)
    s, made = boot.boot(str(p), root=str(root))
    assert s["driver"]["loaded"] is None and made == [] and not (root / "proc/driver/nvidia").exists()
    assert run_smi(p)[1] == 9
    _ctl(p, "driver", "install", "580.95.05", "--modules", "open", "--package", "nvidia-driver-580-server-open")
    assert run_smi(p)[1] == 9                                   # installed, not loaded until a reboot
    s, made = boot.boot(str(p), root=str(root))
    assert s["driver"]["loaded"] == {"version": "580.95.05", "kernel_modules": "open"}
    assert made == ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    assert (root / "dev/nvidiactl").read_text() == "c 195 255\n"
    assert (root / "dev/nvidia1").read_text() == "c 195 1\n"
    assert (root / "dev/nvidia-uvm-tools").read_text() == "c 508 1\n"
    ver = (root / "proc/driver/nvidia/version").read_text()
    assert re.match(r"^NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580\.95\.05  Release Build  "
                    r"\(dvs-builder@[\w-]+\)  \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d UTC \d{4}\nGCC version:  gcc version .+ \n$",
                    ver)
    info = (root / "proc/driver/nvidia/gpus/0000:17:00.0/information").read_text()
    assert "Model: \t\t NVIDIA RTX PRO 6000 Blackwell Server Edition\n" in info
    assert (root / "run/gpu-sim/boot-id").read_text().strip() == s["boot"]["id"]
    assert s["kernel_log"][0].startswith("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05")
    assert run_smi(p)[1] == 0


def test_proc_version_formats_match_real_captures(tmp_path):
    from simhelpers import host
    pat_open = re.compile(r"^NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  [\d.]+  Release Build  "
                          r"\(dvs-builder@[\w-]+\)  .+ UTC \d{4}$")
    pat_prop = re.compile(r"^NVRM version: NVIDIA UNIX x86_64 Kernel Module  [\d.]+  .+ UTC \d{4}$")
    assert pat_open.match(host("proc-driver-nvidia-version_open_550").split("\n")[0])
    assert pat_prop.match(host("proc-driver-nvidia-version_proprietary_515").split("\n")[0])
    assert pat_open.match(boot.version_text({"version": "580.95.05", "kernel_modules": "open"}).split("\n")[0])
    assert pat_prop.match(boot.version_text({"version": "580.95.05", "kernel_modules": "proprietary"}).split("\n")[0])


def test_boot_with_proprietary_blackwell_logs_real_nvrm_lines(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p, modules="proprietary")
    s, made = boot.boot(str(p), root=str(root))
    assert made == ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    assert "NVRM: The NVIDIA GPU 0000:17:00.0 (PCI ID: 10de:2bb5)" in s["kernel_log"]
    assert "NVRM: installed in this system requires use of the NVIDIA open kernel modules." in s["kernel_log"]


def test_boot_resets_processes_persistence_and_lost(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p, processes=[{"pid": 1, "name": "x", "gpu_index": 0, "used_mib": 5}])
    edit(p, lambda s: s["gpus"][0].update(persistence_mode=True, lost=True))
    s, _ = boot.boot(str(p), root=str(root))
    assert s["processes"] == [] and s["gpus"][0]["persistence_mode"] is False and "lost" not in s["gpus"][0]


def test_fault_module_not_loaded(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p)
    _ctl(p, "fault", "module_not_loaded", "on")
    assert run_smi(p)[1] == 9
    s, made = boot.boot(str(p), root=str(root))
    assert s["driver"]["loaded"] is None and made == []
    _ctl(p, "fault", "module_not_loaded", "off")
    assert run_smi(p)[1] == 0


def test_fault_no_driver_and_back(tmp_path):
    p = tmp_path / "s.json"
    make_state(p)
    _ctl(p, "fault", "no_driver")
    assert st.driver_state(st.load(str(p))) == "no_driver"
    _ctl(p, "fault", "no_driver", "off")
    assert st.driver_state(st.load(str(p))) == "ok"


def test_fault_nvml_mismatch(tmp_path):
    p = tmp_path / "s.json"
    make_state(p)
    _ctl(p, "fault", "nvml_mismatch")
    assert run_smi(p) == ("Failed to initialize NVML: Driver/library version mismatch\n"
                          "NVML library version: 580.105\n", 18)
    _ctl(p, "fault", "nvml_mismatch", "off")
    assert run_smi(p)[1] == 0


def test_fault_missing_device_node(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p)
    _ctl(p, "fault", "missing_device_node", "nvidia-uvm")
    s, made = boot.boot(str(p), root=str(root))
    assert "nvidia-uvm" not in made and not (root / "dev/nvidia-uvm").exists()
    assert (root / "dev/nvidia-uvm-tools").exists()


def test_fault_zombie_process_and_holder(tmp_path):
    p = tmp_path / "s.json"
    make_state(p)
    _ctl(p, "fault", "zombie_process", "--mib", "3000")
    zombie = dump(p)["processes"][0]
    assert not os.path.exists("/proc/%d" % zombie["pid"])
    out, _ = run_smi(p, "--query-compute-apps=pid,used_memory", "--format=csv,noheader")
    assert out == "%d, 3000 MiB\n" % zombie["pid"]
    assert "3004MiB /  97887MiB" in run_smi(p)[0]
    # a process added by the tool goes away with its pid; the zombie stays
    _ctl(p, "process", "add", "--gpu", "0", "--mib", "100", "--pid", str(zombie["pid"] + 1 if not os.path.exists(
        "/proc/%d" % (zombie["pid"] + 1)) else zombie["pid"] + 2))
    out, _ = run_smi(p, "--query-compute-apps=pid", "--format=csv,noheader")
    assert out == "%d\n" % zombie["pid"]
    _ctl(p, "process", "add", "--gpu", "0", "--mib", "100", "--pid", str(os.getpid()), "--name", "vllm")
    assert "%d" % os.getpid() in run_smi(p, "--query-compute-apps=pid", "--format=csv,noheader")[0]
    _ctl(p, "fault", "zombie_process", "off")
    _ctl(p, "process", "remove", "--all")
    assert dump(p)["processes"] == []


def test_fault_throttle(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "h100"))
    _ctl(p, "fault", "throttle", "hw_thermal_slowdown", "--gpu", "1")
    out, _ = run_smi(p, "--query-gpu=clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_slowdown,"
                        "clocks_event_reasons.active", "--format=csv,noheader")
    assert out == "Not Active, Not Active, 0x0000000000000001\nActive, Active, 0x0000000000000049\n"
    q, _ = run_smi(p, "-i", "1", "-q", "-d", "PERFORMANCE")
    assert "            HW Thermal Slowdown                        : Active" in q
    with pytest.raises(SystemExit):
        _ctl(p, "fault", "throttle", "too_hot")


def test_fault_xid_lines_and_lost_gpu(tmp_path, capsys):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "h100"))
    _ctl(p, "fault", "xid", "13", "--gpu", "0", "--pid", "4242", "--name", "python3")
    _ctl(p, "fault", "xid", "79", "--gpu", "1")
    log = dump(p)["kernel_log"]
    assert log[0] == ("NVRM: Xid (PCI:0000:17:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on "
                      "(GPC 0, TPC 0, SM 0): Out Of Range Address")
    assert log[1] == "NVRM: Xid (PCI:0000:31:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert log[2] == "NVRM: GPU 0000:31:00.0: GPU has fallen off the bus."
    out, rc = run_smi(p)
    assert rc == 15 and "0000:31:00.0: GPU is lost." in out
    capsys.readouterr()
    _ctl(p, "kmsg")
    lines = capsys.readouterr().out.strip().split("\n")
    assert re.match(r"^\[\s+\d+\.\d{6}\] NVRM: Xid \(PCI:0000:17:00\): 13, ", lines[0])


def test_init_cli(tmp_path):
    p = tmp_path / "s.json"
    _ctl(p, "init", "--gpus", "rtx-pro-6000-bse,h100,h200,l4,a100-80gb", "--branches", "570,580,590",
         "--bus", "17,31,4b,65,98", "--driver", "580.95.05:open")
    s = st.load(str(p))
    assert [g["model"] for g in s["gpus"]] == ["rtx-pro-6000-bse", "h100", "h200", "l4", "a100-80gb"]
    assert [g["pci_bus_id"] for g in s["gpus"]][-1] == "00000000:98:00.0"
    assert len({g["uuid"] for g in s["gpus"]}) == 5 and all(re.match(r"^GPU-[0-9a-f-]{36}$", g["uuid"])
                                                            for g in s["gpus"])
    assert s["repo_branches"] == ["570", "580", "590"] and st.driver_state(s) == "ok"
    _ctl(p, "set", "gpus.0.temperature_c", "81")
    assert st.load(str(p))["gpus"][0]["temperature_c"] == 81


def test_mig_mode_on_and_off(tmp_path):
    # NVIDIA MIG user guide: "Disabled MIG Mode for GPU 00000000:36:00.0" then "All done."
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "h100"))
    out, rc = run_smi(p, "-i", "1", "-mig", "1", euid=1000)
    assert rc == 4 and "Insufficient Permissions" in out
    assert run_smi(p, "-i", "1", "-mig", "1") == ("Enabled MIG Mode for GPU 00000000:31:00.0\nAll done.\n", 0)
    assert [g["mig_mode"] for g in dump(p)["gpus"]] == [False, True]
    out, _ = run_smi(p, "--query-gpu=mig.mode.current", "--format=csv,noheader")
    assert out == "Disabled\nEnabled\n"
    assert run_smi(p, "-mig", "0") == ("Disabled MIG Mode for GPU 00000000:17:00.0\n"
                                       "Disabled MIG Mode for GPU 00000000:31:00.0\nAll done.\n", 0)
    assert [g["mig_mode"] for g in dump(p)["gpus"]] == [False, False]
    assert run_smi(p, "-mig", "2")[1] == 2
    make_state(p, models=("l4",))
    out, rc = run_smi(p, "-mig", "1")
    assert rc == 3 and out.startswith("Unable to enable MIG Mode for GPU ") and "Not Supported" in out
    assert dump(p)["gpus"][0]["mig_mode"] is False
