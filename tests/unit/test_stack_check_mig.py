"""gpu_stack_check and MIG (issue 24 item 3): the declared layout against the GPUs (check mig_layout), and a serving
container given a MIG-enabled GPU whole (serving_gpus). On real captures: -q -x of MIG hosts (nvidia_smi/019, 039),
`nvidia-smi mig -lgi` and `-L` (tests/fixtures/mig/, README there names each); a reboot's state from the simulator."""
import json
import os
import sys

import pytest

from layers import stack_check as sc
from gpu.nvsmi_list import parse_list
from conftest import FIXTURES, ROOT

SMI = os.path.join(FIXTURES, "nvidia_smi")
MIGFX = os.path.join(FIXTURES, "mig")


def load(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8", newline="") as handle:
        return handle.read()


def cap(argv, rc=0, stdout="", stderr=""):
    return {"argv": list(argv), "rc": rc, "stdout": stdout, "stderr": stderr}


def xml_facts(name=None, text=None):
    caps = {"nvidia_smi_path": "/usr/bin/nvidia-smi", "nvidia_smi_requested": None,
            "smi": [{"kind": "xml", "argv": ["/usr/bin/nvidia-smi", "-q", "-x"], "rc": 0,
                     "stdout": text if text is not None else load(SMI, name), "stderr": "", "fields": None}],
            "lspci": None, "sysfs_pci": [], "proc_version": None, "proc_version_path": "/proc/driver/nvidia/version"}
    return sc.build_facts(caps, pid_exists=lambda pid: True)


LGI = ["/usr/bin/nvidia-smi", "mig", "-lgi"]
# A100-SXM4 (019: MIG mode Enabled) and an A100-SXM4-40GB -lgi with two 3g.20gb GIs (NVIDIA's guide, 450.80.02)
A100_FACTS = xml_facts("019_qx_A100-SXM4-MIG.xml")
A100_LGI = cap(LGI, 0, load(MIGFX, "lgi_450.80.02_A100-SXM4-40GB_2x3g.20gb_54col.txt"))


def test_the_real_captures_are_what_the_tests_say():
    assert [g["mig_mode"] for g in A100_FACTS["gpus"]] == [True]
    assert A100_FACTS["state"] == "ok"


def test_layout_as_declared_is_ok():
    check = sc.check_mig_layout({"0": ["3g.20gb", "3g.20gb"]}, A100_FACTS, A100_LGI)
    assert check["status"] == "ok" and check["layer"] == "persistence"
    assert check["data"]["live"] == {"0": ["3g.20gb", "3g.20gb"]} and check["data"]["differ"] == []


def test_a_different_layout_fails_with_both_sides_and_the_fix():
    check = sc.check_mig_layout({"0": ["3g.20gb", "2g.10gb", "1g.5gb"]}, A100_FACTS, A100_LGI)
    assert check["status"] == "fail"
    assert "GPU 0" in check["summary"] and "3g.20gb, 3g.20gb" in check["summary"]
    assert "2g.10gb" in check["summary"] and "gpuhost-mig" in check["remedy"]
    assert check["data"]["differ"] == [0]


def test_declared_disabled_but_mig_on_fails():
    check = sc.check_mig_layout({0: "disabled"}, A100_FACTS, A100_LGI)
    assert check["status"] == "fail" and "MIG enabled" in check["summary"]


def test_no_layout_declared_passes():
    # a healthy host without a declared layout shows no skipped check (the toolkit scenario asserts none)
    assert sc.check_mig_layout(None, A100_FACTS, None)["status"] == "ok"
    assert sc.check_mig_layout({}, A100_FACTS, None)["status"] == "ok"


def test_a_gpu_the_layout_names_that_is_not_there():
    check = sc.check_mig_layout({"3": ["3g.20gb"]}, A100_FACTS, A100_LGI)
    assert check["status"] == "fail" and "not on this host" in check["summary"]


def test_an_a100_80gb_with_mig_on_and_no_instance_listing():
    facts = xml_facts("039_qx_535.54.03_4xA100-SXM4-80GB_MIG.xml")   # trimmed to GPU 0 of the four
    assert [g["mig_mode"] for g in facts["gpus"]] == [True]
    # -lgi printed nothing readable: MIG is on, but no GPU instance is seen, so a declared one is missing
    check = sc.check_mig_layout({"0": ["1g.20gb"]}, facts, cap(LGI, 6, "No GPU instances found: Not Found\n"))
    assert check["status"] == "fail" and "no instance" in check["summary"]


def test_a_layout_lost_at_a_reboot(tmp_path):
    """An H100 after a boot (the simulator: Hopper comes up with MIG Disabled, no instance; research §3, §6)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "simulator"))
    from simhelpers import make_state, run_smi
    from gpusim import mig as simmig, state as simstate
    path = tmp_path / "s.json"
    make_state(path, models=("h100",))
    run_smi(path, "-mig", "1")
    run_smi(path, "mig", "-cgi", "3g.40gb,3g.40gb", "-C")
    live = sc.check_mig_layout({"0": ["3g.40gb", "3g.40gb"]}, xml_facts(text=run_smi(path, "-q", "-x")[0]),
                               cap(LGI, *reversed(run_smi(path, "mig", "-lgi"))))
    assert live["status"] == "ok", live
    state = simstate.load(str(path))
    simmig.reset_at_boot(state)
    simstate.save(state, str(path))
    out, rc = run_smi(path, "mig", "-lgi")
    check = sc.check_mig_layout({"0": ["3g.40gb", "3g.40gb"]}, xml_facts(text=run_smi(path, "-q", "-x")[0]),
                                cap(LGI, rc, out))
    assert check["status"] == "fail" and "lost at a reboot" in check["summary"]
    assert check["data"]["live"] == {"0": "disabled"}


# --- a MIG-enabled GPU given whole to a serving container ---------------------------------------------------------

A100_L = load(MIGFX, "L_530.30.02_A100-80GB-PCIe_2x3g.40gb.txt")


def _host_facts():
    parsed = parse_list(A100_L)
    return {"state": "ok", "gpus": parsed["gpus"]}


def _serving_ok(names):
    return sc.result("serving_gpus", "container", "ok", "every serving container lists its GPUs (%s)" % names,
                     data={"ok": names.split(", "), "lost": [], "failed": []})


def test_a_container_given_the_mig_gpu_whole_fails():
    gpu_line = A100_L.splitlines()[0] + "\n"      # the GPU line and no MIG device under it
    execs = {"vllm-a": cap(["docker", "exec", "vllm-a", "nvidia-smi", "-L"], 0, gpu_line)}
    check = sc.mig_whole_decides(_serving_ok("vllm-a"), execs, _host_facts())
    assert check["status"] == "fail" and "vllm-a" in check["summary"] and "GPU 0 whole" in check["summary"]
    assert "0:0" in check["remedy"] and check["data"]["mig_whole"] == [{"container": "vllm-a", "gpu": 0}]


def test_a_container_given_one_mig_device_is_fine():
    lines = A100_L.splitlines()
    execs = {"vllm-a": cap(["docker", "exec", "vllm-a", "nvidia-smi", "-L"], 0, "\n".join(lines[:2]) + "\n"),
             "vllm-b": cap(["docker", "exec", "vllm-b", "nvidia-smi", "-L"], 0, "\n".join([lines[0], lines[2]]) + "\n")}
    before = _serving_ok("vllm-a, vllm-b")
    assert sc.mig_whole_decides(before, execs, _host_facts()) == before


def test_without_mig_on_the_host_nothing_changes():
    facts = {"state": "ok", "gpus": [dict(g, mig_mode=False) for g in _host_facts()["gpus"]]}
    execs = {"vllm-a": cap(["docker"], 0, A100_L.splitlines()[0] + "\n")}
    before = _serving_ok("vllm-a")
    assert sc.mig_whole_decides(before, execs, facts) == before


@pytest.mark.parametrize("layout", [{"x": ["3g.20gb"]}, {"0": "3g.20gb"}])
def test_an_unreadable_declared_layout_is_a_warning(layout):
    check = sc.check_mig_layout(layout, A100_FACTS, A100_LGI)
    assert check["status"] == "warn"


# --- drift: a layout lost at a reboot is repairable by the nvidia_mig role -----------------------------------------

def test_drift_names_a_lost_layout_and_a_run_repairs_it():
    from diagnosis import drift
    check = sc.check_mig_layout({"0": ["3g.20gb", "3g.20gb", "1g.5gb"]}, A100_FACTS, A100_LGI)
    stack = sc.summarise([check])
    assert stack["failed_layer"] == "persistence"
    found = drift.compare({}, stack, {})
    assert found["layers"]["persistence"]["findings"][0]["code"] == "mig_layout"
    assert "mig_layout" in found["repairable"] and "persistence_off" not in found["repairable"]
    ok = drift.compare({}, sc.summarise([sc.check_mig_layout({"0": ["3g.20gb"] * 2}, A100_FACTS, A100_LGI)]), {})
    assert ok["layers"]["persistence"]["state"] == "ok"


# --- a CDI spec without the live MIG devices ----------------------------------------------------------------------

def _mig_refs(facts):
    return ["%s:%s" % (g["index"], d["index"]) for g in facts["gpus"] if g["mig_mode"] for d in g["mig_devices"]]


def test_a_cdi_spec_generated_before_the_layout_lacks_the_mig_devices():
    # nvidia-ctk 1.20.0's real spec of a GPU without MIG devices (tests/fixtures/nvidia_ctk), on the MIG host of 019
    spec = load(os.path.join(FIXTURES, "nvidia_ctk"), "cdi-generate_mock-A100_nvidia.yaml")
    refs = _mig_refs(A100_FACTS)
    assert refs and refs[0] == "0:0"
    check = sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": spec}, "999.88.77", 1, mig_refs=refs)
    assert check["status"] == "fail" and "MIG device 0:0" in check["summary"] and "regenerate" in check["remedy"]
    assert check["data"]["mig_missing"] == refs
    # the same spec with a device per MIG device (nvcdi's GPU:device names) passes
    entry = '    - name: "%s"\n      containerEdits:\n        deviceNodes:\n            - path: /dev/nvidia0\n'
    with_mig = spec.replace("devices:\n", "devices:\n" + "".join(entry % ref for ref in refs), 1)
    assert sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": with_mig}, "999.88.77", 1, mig_refs=refs)["status"] == "ok"


# Real `docker inspect` of three serving containers (docker.io 20.10.24): --gpus device=1, device=0:0, all.
INSPECT = load(os.path.join(FIXTURES, "gpus_path"), "docker-inspect_20.10.24+dfsg1_debian12_gpus-device-1_device-0-0_all.json")


def _two_gpus(mig_on):
    """Two H100 of capture 028's -L (GPU 0, its UUID) and a second GPU; MIG on where mig_on says."""
    first = parse_list(load(SMI, "028_L_590.48.01_H100-MIG.txt"))["gpus"][0]
    second = dict(first, index=1, uuid="GPU-11111111-1111-1111-1111-111111111111", mig_devices=[])
    return {"state": "ok", "gpus": [dict(first, mig_mode=0 in mig_on), dict(second, mig_mode=1 in mig_on)]}


def test_a_restarting_container_given_the_mig_gpu_whole_is_named_from_its_device_request():
    """No exec answer (the container exits and restarts): the device requests say GPU 1 whole, and --gpus all."""
    inspected = cap(["docker", "inspect", "whole-1", "slice-a", "every"], 0, INSPECT)
    failed = sc.result("serving_gpus", "container", "fail", "nvidia-smi fails inside serving container whole-1: exit 1",
                       data={"ok": [], "lost": [], "failed": ["whole-1"]})
    check = sc.mig_whole_decides(failed, {}, _two_gpus({1}), inspected)
    assert check["status"] == "fail"
    assert check["data"]["mig_whole"] == [{"container": "every", "gpu": 1}, {"container": "whole-1", "gpu": 1}]
    assert "every, whole-1 is given GPU 1 whole, but MIG is enabled there" in check["summary"]
    assert "nvidia_mig_layout: {'1': disabled}" in check["remedy"]


def test_a_mig_device_request_is_not_a_whole_gpu():
    """MIG on GPU 0 only: slice-a asked for 0:0 (fine), whole-1 for GPU 1 (no MIG), but `every` got all GPUs."""
    inspected = cap(["docker", "inspect"], 0, INSPECT)
    check = sc.mig_whole_decides(_serving_ok("slice-a, whole-1"), {}, _two_gpus({0}), inspected)
    assert check["data"]["mig_whole"] == [{"container": "every", "gpu": 0}]
    without_all = json.dumps([c for c in json.loads(INSPECT) if c["Name"] != "/every"])
    before = _serving_ok("slice-a, whole-1")
    assert sc.mig_whole_decides(before, {}, _two_gpus({0}), cap(["docker", "inspect"], 0, without_all)) == before


def test_another_containers_own_failure_stays_the_finding():
    """slice-a lost its devices (its own failure); whole-1's MIG cause is added, not put in its place."""
    inspected = cap(["docker", "inspect"], 0, json.dumps([c for c in json.loads(INSPECT) if c["Name"] == "/whole-1"]))
    lost = sc.result("serving_gpus", "container", "fail", "container slice-a lost its GPU devices (...)",
                     remedy="recreate slice-a", data={"ok": [], "lost": ["slice-a"], "failed": []})
    check = sc.mig_whole_decides(lost, {}, _two_gpus({1}), inspected)
    assert check["summary"].startswith("container slice-a lost its GPU devices")
    assert "also serving container whole-1 is given GPU 1 whole" in check["summary"]
    assert check["remedy"] == "recreate slice-a" and check["data"]["mig_whole"] == [{"container": "whole-1", "gpu": 1}]
