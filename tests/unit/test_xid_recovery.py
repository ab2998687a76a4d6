"""Drift's Xid recovery: carrying out one GPU's plan (module_utils/gpu/xid_recovery.py) with nvidia-smi -r's real
outputs (tests/fixtures/gpu_reset/), the state drift keeps between runs (xid_policy.next_state), and how the health
and hardware checks and drift read Xids once a cursor says which were dealt with, on real kernel logs
(tests/fixtures/xid/). The GPU facts are written here from what each capture prints."""
import json

from conftest import read_fixture
from diagnosis import drift
from gpu import xid_policy as xp
from gpu import xid_recovery as xr
from layers import container, hardware, health

# Two captures one after the other, as one host's log: akash-network/support#244 (Xid 43 twice on 0000:00:05, Xid 31
# from python3.10 on 0000:00:07, Xid 94, a contained ECC error, on 0000:00:08) and NVIDIA/gpu-operator#1146 (Xid 48
# and 64 on 0000:07:00: a reset).
AKASH = read_fixture("xid", "dmesg-T_535.183.01") + read_fixture("xid", "syslog_kernel-ts")
GPUS = [{"index": 0, "pci_bus_id": "00000000:00:05.0", "uuid": "GPU-0", "name": "NVIDIA H100 PCIe"},
        {"index": 1, "pci_bus_id": "00000000:00:07.0", "uuid": "GPU-1", "name": "NVIDIA H100 PCIe"},
        {"index": 2, "pci_bus_id": "00000000:00:08.0", "uuid": "GPU-2", "name": "NVIDIA H100 PCIe"},
        {"index": 3, "pci_bus_id": "00000000:07:00.0", "uuid": "GPU-3", "name": "NVIDIA H100 PCIe"}]
SUCCESS = read_fixture("gpu_reset", "reset_535_2xA100_success")
IN_USE = read_fixture("gpu_reset", "reset_535_2xA100_in-use")


class FakeIO(object):
    """Answers each argv by its first words; records what ran."""

    def __init__(self, answers=None, active=()):
        self.ran = []
        self.answers = answers or {}
        self.active = set(active)

    def run(self, argv):
        self.ran.append(" ".join(argv))
        if argv[:2] == ["systemctl", "is-active"]:
            return (0, "active\n", "") if argv[2] in self.active else (3, "inactive\n", "")
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix):
                return answer
        return 0, "", ""


def a100_plan(action="RESET_GPU", containers=("vllm-a",), **more):
    plan = {"index": 0, "bus_id": "00000000:8B:00.0", "uuid": "GPU-0", "action": action, "containers": list(containers),
            "holders": [], "tenants": [], "blocked": [], "xids": [], "say": "GPU 0: Xid 95", "reboot": False,
            "on_failure": "out_of_service"}
    plan.update(more)
    return plan


def test_every_reset_holder_has_its_unit():
    assert set(xr.HOLDER_UNITS) == set(xp.RESET_HOLDERS)


def test_a_reset_stops_only_that_gpus_containers_and_the_running_holders_then_starts_them_again():
    io = FakeIO({"nvidia-smi -r -i 0": (0, SUCCESS, "")}, active={"nvidia-persistenced.service"})
    healthy = []
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl", {"vllm-a": "http://127.0.0.1:8000"},
                       lambda url: healthy.append(url) or True)
    acted = [r for r in io.ran if "is-active" not in r]
    assert acted == ["docker stop vllm-a", "systemctl stop nvidia-persistenced.service", "nvidia-smi -r -i 0",
                     "nvidia-smi -q -i 0", "systemctl start nvidia-persistenced.service", "docker start vllm-a"]
    assert out["ok"] and not out["out_of_service"] and out["reset"]["reset"][0] == "00000000:8B:00.0"
    assert healthy == ["http://127.0.0.1:8000"]


PROBE = {"image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04", "command": ["/cuda-samples/vectorAdd"]}
PROBE_RUN = "docker run --rm --pull never --network none --gpus device=0 " + PROBE["image"]


def test_after_a_reset_cuda_runs_a_kernel_on_that_gpu_alone_before_its_containers_start():
    # NVIDIA's vectorAdd, as gpu-operator#346 printed it.
    io = FakeIO({"nvidia-smi -r -i 0": (0, SUCCESS, ""),
                 PROBE_RUN: (0, read_fixture("cuda_probe", "001_success_gpu-operator-346.txt"), "")},
                active={"nvidia-persistenced.service"})
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl", probe=PROBE)
    acted = [r for r in io.ran if "is-active" not in r]
    assert acted[3:] == ["nvidia-smi -q -i 0", "systemctl start nvidia-persistenced.service",
                         PROBE_RUN + " /cuda-samples/vectorAdd", "docker start vllm-a"]
    assert out["ok"] and out["cuda_probe"]["status"] == "ok" and out["warning"] is None
    assert "--gpus device=0" in out["cuda_probe"]["summary"]


def test_a_reset_gpu_on_which_cuda_fails_is_not_trusted():
    # gpu-operator#1146: the vectorAdd of a GPU that logged Xid 48 and 64 ("unknown error").
    failed = read_fixture("cuda_probe", "012_other-unknown-error-gpu-fault_gpu-operator-1146.txt")
    io = FakeIO({"nvidia-smi -r -i 0": (0, SUCCESS, ""), PROBE_RUN: (1, "", failed)})
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl", probe=PROBE)
    assert not out["ok"] and out["out_of_service"]
    assert out["reason"].startswith("GPU 0 was reset but CUDA fails in a --gpus device=0 container")
    # Its containers go back as they were all the same.
    assert io.ran[-1] == "docker start vllm-a"


def test_a_probe_image_not_on_the_host_leaves_the_reset_standing_with_a_warning():
    # docker's own words for an image absent under --pull never.
    absent = 'docker: Error response from daemon: No such image: %s.\nSee \'docker run --help\'.\n' % PROBE["image"]
    io = FakeIO({"nvidia-smi -r -i 0": (0, SUCCESS, ""), PROBE_RUN: (125, "", absent)})
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl", probe=PROBE)
    assert out["ok"] and "is not on the host" in out["warning"]
    # No probe image: nothing run beyond nvidia-smi.
    io = FakeIO({"nvidia-smi -r -i 0": (0, SUCCESS, "")})
    assert xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl", probe={"image": ""})["cuda_probe"] is None
    assert not any(" run " in r for r in io.ran)


class DcgmIO(FakeIO):
    def which(self, name):
        return "/usr/bin/" + name


def test_after_a_reset_dcgms_level_1_runs_on_that_gpu_where_its_host_engine_ran():
    # A real DCGM 4 document of a GPU that fails level 1 (Gforensics: A100, persistence mode off, DCGM error 29).
    failed = read_fixture("dcgm_diag", "diag-r1-j_4.1.1_A100-SXM4-40GB_software-fail.json")
    io = DcgmIO({"nvidia-smi -r -i 0": (0, SUCCESS, ""), "/usr/bin/dcgmi diag": (226, failed, "")},
                active={"nvidia-persistenced.service", "nvidia-dcgm.service"})
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl")
    acted = [r for r in io.ran if "is-active" not in r]
    # The host engine is started again before DCGM asks it; the diagnostic runs on the reset GPU alone.
    assert acted.index("systemctl start nvidia-dcgm.service") < acted.index("/usr/bin/dcgmi diag -r 1 -j -i 0")
    assert not out["ok"] and out["out_of_service"]
    assert out["reason"].startswith("GPU 0 was reset but dcgmi diag -r 1: GPU 0: software (Deployment) failed: "
                                    "Persistence Mode")
    assert io.ran[-1] == "docker start vllm-a"
    # Without DCGM's host engine nothing of DCGM runs.
    io = DcgmIO({"nvidia-smi -r -i 0": (0, SUCCESS, "")}, active={"nvidia-persistenced.service"})
    assert xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl")["dcgm"] is None
    assert not any("dcgmi" in r for r in io.ran)


def test_a_refused_reset_puts_everything_back_and_marks_the_gpu():
    io = FakeIO({"nvidia-smi -r -i 0": (255, IN_USE, "")}, active={"nvidia-persistenced.service"})
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl")
    assert "nvidia-smi -q -i 0" not in io.ran
    assert io.ran[-2:] == ["systemctl start nvidia-persistenced.service", "docker start vllm-a"]
    assert not out["ok"] and out["out_of_service"] and not out["reboot"]
    assert "00000000:8B:00.0: In use by another client" in out["reason"]
    # Where the operator allows host restarts, a failed reset asks for one.
    allowed = xr.carry_out(FakeIO({"nvidia-smi -r -i 0": (255, IN_USE, "")}), a100_plan(on_failure="RESTART_BM"),
                           "docker", "nvidia-smi", "systemctl")
    assert allowed["reboot"] and allowed["out_of_service"]


def test_a_container_that_will_not_stop_means_no_reset():
    io = FakeIO({"docker stop vllm-a": (1, "", "Error response from daemon: cannot stop container")})
    out = xr.carry_out(io, a100_plan(), "docker", "nvidia-smi", "systemctl")
    assert not any(r.startswith("nvidia-smi -r") for r in io.ran) and not out["ok"]
    assert out["reason"] == "could not stop vllm-a, so GPU 0 was not reset"


def test_restart_app_restarts_the_gpus_containers_and_a_blocked_plan_runs_nothing():
    io = FakeIO()
    out = xr.carry_out(io, a100_plan("RESTART_APP", ["vllm-a", "vllm-b"]), "docker", "nvidia-smi", "systemctl")
    assert io.ran == ["docker restart vllm-a", "docker restart vllm-b"] and out["ok"]
    io = FakeIO()
    blocked = xr.carry_out(io, a100_plan(blocked=[{"kind": "mig", "reason": "GPU 0 has MIG mode on"}]), "docker",
                           "nvidia-smi", "systemctl")
    assert io.ran == [] and not blocked["ok"] and not blocked["out_of_service"]
    marked = xr.carry_out(io, a100_plan("RESTART_BM"), "docker", "nvidia-smi", "systemctl")
    assert io.ran == [] and marked["out_of_service"] and not marked["reboot"]


# --- the state between runs ---------------------------------------------------------------------------------------

def test_the_cursor_moves_past_what_was_done_and_stays_for_what_failed():
    decision = xp.decide(AKASH, GPUS, None, "boot-1", {1: ["vllm-b"], 3: ["vllm-d"]})
    by_index = dict((p["index"], p) for p in decision["gpus"])
    assert [by_index[i]["action"] for i in range(4)] == ["IGNORE", "RESTART_APP", "RESTART_APP", "RESET_GPU"]
    outcomes = {"0000:00:05": {"ok": True}, "0000:00:07": {"ok": True}, "0000:00:08": {"ok": True},
                "0000:07:00": {"ok": False}}
    state = xp.next_state({}, decision, outcomes, "boot-1", "2026-12-07T12:00:00Z")
    # GPU 0's Xid 43 needs nothing, GPU 1 and 2 restarted: past; GPU 3's failed reset: no cursor, tried again.
    assert sorted(state["cursor"]["gpus"]) == ["0000:00:05", "0000:00:07", "0000:00:08"]
    again = xp.decide(AKASH, GPUS, state["cursor"], "boot-1", {1: ["vllm-b"], 3: ["vllm-d"]})
    assert [p["index"] for p in again["gpus"]] == [3]
    # A marked GPU's Xids are consumed and the mark holds for this boot only.
    marked = xp.next_state(state, again, {"0000:07:00": {"ok": False, "out_of_service": True, "reason": "reset failed"}},
                           "boot-1", "2026-12-07T12:05:00Z")
    assert xp.decide(AKASH, GPUS, marked["cursor"], "boot-1")["gpus"] == []
    assert list(xp.out_of_service(marked, "boot-1")) == ["0000:07:00"]
    assert marked["out_of_service"]["0000:07:00"]["xids"] == [48, 64] and xp.out_of_service(marked, "boot-2") == {}


def test_a_gpu_off_the_bus_is_planned_by_its_address_when_nvidia_smi_lists_no_gpu():
    # akash-network/support#209: nvidia-smi answers nothing once the GPU is lost, so the facts have no GPU.
    decision = xp.decide(read_fixture("xid", "dmesg-T_535.161.07"), [], None, "boot-1")
    assert [(p["index"], p["bus_id"], p["action"]) for p in decision["gpus"]] == [(None, "0000:a1:00", "RESTART_BM")]
    assert decision["unmapped"] == []
    # Named by its address: it has no index any more.
    assert decision["gpus"][0]["say"].startswith("GPU 0000:a1:00: Xid 79")


def test_the_state_file_that_is_not_json_is_named_never_overwritten():
    state, error = xp.read_state("{not json", "/var/lib/gpuhost/xid-state.json")
    assert state is None and "/var/lib/gpuhost/xid-state.json is not JSON" in error and "move it aside" in error
    assert xp.read_state("", "x") == ({}, None)


# --- what the checks and drift read once a cursor exists ------------------------------------------------------------

def _captures(state=None, cgroups=None, inspect=None):
    facts = {"state": "ok", "gpus": GPUS, "processes": []}
    return {"gpu": {}, "facts": facts, "boot_id": "boot-1", "kernel_log": {"argv": ["dmesg"], "rc": 0, "stdout": AKASH},
            "xid_state": json.dumps(state) if state is not None else None, "gpu_process_cgroups": cgroups or {},
            "serving_inspect": inspect}


OPTS = {"xid_state_path": xp.STATE_PATH, "allow_reboot": False}


def test_the_xid_check_counts_only_what_no_run_dealt_with():
    caps = _captures()
    decision, marks, error = health.xid_plans(caps, caps["facts"], OPTS)
    pending = health.check_xid(caps["kernel_log"], "dmesg", decision, marks, error)
    assert pending["status"] == "fail" and "Xid 31" in pending["summary"] and "drift.yml" in pending["remedy"]
    done = xp.next_state({}, decision, dict((xp.bus_key(p["bus_id"]), {"ok": True}) for p in decision["gpus"]),
                         "boot-1", "2026-12-07T12:00:00Z")
    caps = _captures(done)
    decision, marks, error = health.xid_plans(caps, caps["facts"], OPTS)
    dealt = health.check_xid(caps["kernel_log"], "dmesg", decision, marks, error)
    assert dealt["status"] == "ok" and dealt["summary"].startswith("Xid errors since boot, each dealt with")
    # The hardware check judges the GPUs by the same pending Xids: GPU 3's Xid 48 and 64 after its reset are history.
    assert hardware.check_hardware(caps["facts"], hardware.pending_xid_events(decision, marks))["status"] == "ok"
    assert hardware.check_hardware(caps["facts"], health.parse_xids(AKASH))["status"] == "fail"
    broken = _captures()
    broken["xid_state"] = "{"
    assert health.xid_plans(broken, broken["facts"], OPTS)[2].startswith("/var/lib/gpuhost/xid-state.json is not JSON")


def test_drift_repairs_the_plans_and_leaves_a_refused_reset_and_an_out_of_service_gpu_to_people():
    caps = _captures()
    decision, marks, error = health.xid_plans(caps, caps["facts"], OPTS)
    stack = {"checks": [health.check_xid(caps["kernel_log"], "dmesg", decision, marks, error)]}
    found = drift.health_findings({}, stack, {}, False, {})
    assert [(f["code"], f["repair"]) for f in found] == [("xid_restart_app", "auto"), ("xid_restart_app", "auto"),
                                                         ("xid_reset_gpu", "auto")]
    plans = [dict(p, blocked=[{"kind": "tenant", "reason": "used by pid 7"}]) if p["index"] == 3 else p
             for p in decision["gpus"] if p["index"] in (0, 3)]
    marked = {"0000:00:08": {"index": 2, "bus_id": "00000000:00:08.0", "since": "t", "reason": "reset failed",
                             "boot_id": "boot-1"}}
    stack = {"checks": [health.check_xid(caps["kernel_log"], "dmesg", dict(decision, gpus=plans), marked)]}
    found = drift.health_findings({}, stack, {}, False, {})
    assert [(f["code"], f["repair"]) for f in found] == [("xid_reset_refused", "manual"), ("gpu_out_of_service", "manual")]
    assert drift.health_findings({}, stack, {}, True, {})[-1]["repair"] == "reboot"


def test_serving_containers_and_processes_are_placed_on_their_gpus():
    # docker inspect's device requests as `--gpus device=1` and `--gpus all` send them.
    whole = {"Id": "c1" * 32, "Name": "/vllm-b", "State": {"Running": True},
             "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["1"], "Capabilities": [["gpu"]]}]}}
    every = {"Id": "c2" * 32, "Name": "/vllm-all", "State": {"Running": True},
             "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None,
                                                "Capabilities": [["gpu"]]}]}}
    assert container.serving_by_gpu([whole, every], GPUS) == {0: ["vllm-all"], 1: ["vllm-b", "vllm-all"],
                                                              2: ["vllm-all"], 3: ["vllm-all"]}
    facts = {"processes": [{"pid": 11, "name": "python3", "gpu_index": 1}, {"pid": 12, "name": "train.py", "gpu_index": 1}]}
    cgroups = {11: "0::/system.slice/docker-%s.scope\n" % ("c1" * 32), 12: "0::/user.slice/session-3.scope\n"}
    placed = container.gpu_processes(facts, cgroups, [whole])
    assert placed == {1: [{"pid": 11, "name": "python3", "container": "vllm-b", "serving": True,
                           "cgroup": "0::/system.slice/docker-%s.scope" % ("c1" * 32)},
                          {"pid": 12, "name": "train.py", "container": None, "serving": False,
                           "cgroup": "0::/user.slice/session-3.scope"}]}
    # The container's own first process is its, whatever its cgroup reads.
    whole["State"]["Pid"] = 12
    assert [p["container"] for p in container.gpu_processes(facts, {}, [whole])[1]] == [None, "vllm-b"]


# --- nothing new is placed on a GPU out of service ------------------------------------------------------------------

def test_the_gpu_facts_carry_this_boots_marks_and_the_vllm_role_refuses_such_a_gpu():
    from serving import vllm_instances as vi
    state = {"cursor": {}, "out_of_service": {"0000:00:07": {"index": 1, "bus_id": "00000000:00:07.0", "boot_id": "boot-1",
                                                             "since": "2026-12-07T12:00:00Z", "xids": [79],
                                                             "reason": "Xid 79 GPU has fallen off the bus"}}}
    facts = {"state": "ok", "message": "", "gpus": [dict(g, memory_total_mib=81559) for g in GPUS[:2]]}
    marked = xp.with_out_of_service(facts, json.dumps(state), "boot-1")
    assert ["out_of_service" in g for g in marked["gpus"]] == [False, True]
    assert marked["out_of_service"][0]["xids"] == [79]
    # Another boot: the restart brought it back.
    assert xp.with_out_of_service(facts, json.dumps(state), "boot-2")["out_of_service"] == []
    declared = [{"name": "vllm-b", "image": "vllm/vllm-openai:v0.11.0", "gpus": [1], "port": 8001, "model": "m"}]
    try:
        vi.instances(declared, marked, {})
        refused = None
    except vi.InstancesError as exc:
        refused = str(exc)
    assert refused and "GPU 1 (00000000:00:07.0) is out of service since 2026-12-07T12:00:00Z (Xid 79" in refused
    assert "place the instance on another GPU" in refused
    assert vi.instances([dict(declared[0], gpus=[0])], marked, {})["instances"][0]["gpu_indexes"] == [0]
