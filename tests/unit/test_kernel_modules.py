"""The NVIDIA kernel modules read from real texts (tests/fixtures/kernel_modules/, README there names each source):
lsmod and /proc/modules, the unload order, the references no module name explains, who fuser says holds the device
nodes, and what modprobe -r / rmmod print when a module is in use."""
from conftest import read_fixture
from driver import kernel_modules as km


def test_proc_modules_lines_inside_logs():
    pod = km.parse_proc_modules(read_fixture("kernel_modules", "proc-modules_460.32.03"))
    assert pod == {"nvidia": {"size": 34041856, "refcount": 32, "holders": ["nvidia_modeset", "nvidia_uvm"],
                              "state": "Live", "taint": "POE"}}
    ppc = km.parse_proc_modules(read_fixture("kernel_modules", "proc-modules_384.36"))
    assert ppc["nvidia_uvm"]["holders"] == [] and ppc["nvidia"]["holders"] == ["nvidia_uvm"]
    assert km.loaded_nvidia(ppc) == ["nvidia_uvm", "nvidia"]
    # nvidia's one reference is nvidia_uvm's: once it is gone, nvidia can go.
    assert km.open_references(ppc) == {"nvidia_uvm": 0, "nvidia": 0}


def test_lsmod_on_servers_and_the_references_that_are_open_files():
    fm = km.parse_lsmod(read_fixture("kernel_modules", "lsmod_535.161.08"))
    assert fm["nvidia"] == {"size": 56717312, "refcount": 550, "holders": ["nvidia_uvm", "nvidia_peermem",
                                                                          "nvidia_modeset"]}
    # Only nvidia_peermem and nvidia are in the excerpt: 549 references that are no listed module's.
    assert km.open_references(fm)["nvidia"] == 549
    hpc = km.parse_lsmod(read_fixture("kernel_modules", "lsmod_570_hpc-node"))
    assert sorted(hpc) == ["ib_uverbs", "nvidia", "nvidia_peermem"] and hpc["nvidia"]["refcount"] == 96
    docs = km.parse_lsmod(read_fixture("kernel_modules", "lsmod_gds-gdrdma-docs"))
    assert km.loaded_nvidia(docs) == ["nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia_fs", "nvidia"]
    # 115 references, three of them the dependents loaded here: 112 open files hold the driver.
    assert km.open_references(docs)["nvidia"] == 112 and km.open_references(docs)["nvidia_uvm"] == 0
    idle = km.parse_lsmod(read_fixture("kernel_modules", "lsmod_361_idle"))
    assert km.open_references(idle) == {"nvidia_modeset": 0, "nvidia_uvm": 0, "nvidia": 0}
    display = km.parse_lsmod(read_fixture("kernel_modules", "lsmod_display-held"))
    assert km.loaded_nvidia(display) == ["nvidia_drm", "nvidia_modeset", "nvidia"]
    assert km.open_references(display) == {"nvidia_drm": 2, "nvidia_modeset": 2, "nvidia": 82}


def test_fuser_names_the_processes_that_hold_the_nodes():
    rows = km.parse_fuser(read_fixture("kernel_modules", "fuser-v_570.158.01"))
    held = km.holders_by_pid(rows)
    assert sorted((pid, h["command"]) for pid, h in held.items()) == [
        (4334, "nv-fabricmanage"), (1116621, "vllm"), (1117159, "VLLM::EngineCor")]
    assert "/dev/nvidia-nvswitch3" in held[4334]["files"] and "/dev/nvidia-uvm" in held[1116621]["files"]
    assert len(held[1117159]["files"]) == 10


def test_what_modprobe_and_rmmod_say_is_in_use():
    assert km.in_use(read_fixture("kernel_modules", "modprobe-r_in-use_optimus")) == [
        {"module": "nvidia", "holders": []}]
    assert km.in_use(read_fixture("kernel_modules", "rmmod_in-use_tinygrad")) == [
        {"module": "nvidia_drm", "holders": []}, {"module": "nvidia_modeset", "holders": ["nvidia_drm"]},
        {"module": "nvidia_uvm", "holders": []}, {"module": "nvidia", "holders": ["nvidia_uvm", "nvidia_modeset"]}]
    assert km.in_use(read_fixture("kernel_modules", "modprobe-r_in-use_rmmod-f"))[0]["module"] == "nvidia_drm"
    assert km.normal("nvidia-uvm") == "nvidia_uvm"
