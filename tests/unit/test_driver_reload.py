"""A driver change without a reboot (module_utils/driver/driver_reload.py): who holds the driver on a real host's
fuser table (tests/fixtures/kernel_modules/), what gpuhost may stop, and reload or reboot with the reason. The
containers are `docker inspect` documents cut to the keys read here."""
from conftest import read_fixture
from driver import driver_reload as dr
from driver import kernel_modules as km

FUSER = km.holders_by_pid(km.parse_fuser(read_fixture("kernel_modules", "fuser-v_570.158.01")))
PROCS = [{"pid": pid, "command": h["command"]} for pid, h in FUSER.items()]


def container(name, pid, gpus=True, serving=True, running=True, cid=None):
    return {"Id": cid or (name * 8)[:64], "Name": "/" + name, "State": {"Running": running, "Pid": pid},
            "Config": {"Labels": {"gpuhost.layer": "vllm"} if serving else {}, "Image": "vllm/vllm-openai:v0.11.0",
                       "Env": []},
            "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None,
                                               "Capabilities": [["gpu"]]}] if gpus else []}}


def test_vllm_run_by_hand_holds_the_driver_and_the_fabric_manager_is_a_service():
    # The fuser table of an 8 x H200 host: vLLM started by a user (no container), and nv-fabricmanager.
    held = dr.holders([], PROCS, {4334: "nvidia-fabricmanager.service"})
    assert held["services"] == ["nvidia-fabricmanager.service"] and held["containers"] == []
    assert sorted(h["pid"] for h in held["foreign"]) == [1116621, 1117159]
    decided = dr.decide("570.172.08", "570.158.01", ["nvidia_uvm", "nvidia"], True, None, held)
    assert decided["method"] == "reboot"
    assert "pid 1116621 (vllm) has the driver open" in decided["reason"]


def test_the_same_vllm_in_gpuhosts_serving_container_is_stopped_and_started():
    vllm = container("qwen3", 1116621, cid="c" * 64)
    cgroups = {1117159: "0::/system.slice/docker-%s.scope\n" % ("c" * 64)}
    held = dr.holders([vllm], PROCS, {4334: "nvidia-fabricmanager.service"}, cgroups)
    assert held == {"containers": ["qwen3"], "services": ["nvidia-fabricmanager.service"], "foreign": []}
    decided = dr.decide("570.172.08", "570.158.01", ["nvidia_modeset", "nvidia_uvm", "nvidia"], True, None, held)
    assert decided["method"] == "reload"
    assert decided["reason"] == ("570.158.01 -> 570.172.08: stop qwen3, nvidia-fabricmanager.service, unload "
                                 "nvidia_modeset, nvidia_uvm, nvidia, load 570.172.08")


def test_another_tenants_container_is_never_stopped_and_a_container_without_gpus_is_no_holder():
    theirs = container("trainer", 4242, serving=False)
    plain = container("redis", 4343, gpus=False, serving=False)
    stopped = container("old", 4444, running=False, serving=False)
    held = dr.holders([theirs, plain, stopped], [], {})
    assert [h.get("container") for h in held["foreign"]] == ["trainer"]
    assert "not a gpuhost serving container" in held["foreign"][0]["what"]
    # The nvidia runtime's way of giving GPUs (NVIDIA_VISIBLE_DEVICES) counts too; void and none do not.
    by_env = container("legacy", 4545, gpus=False, serving=False)
    by_env["Config"]["Env"] = ["NVIDIA_VISIBLE_DEVICES=0,1"]
    assert dr.gets_gpus(by_env) and not dr.gets_gpus(dict(by_env, Config={"Env": ["NVIDIA_VISIBLE_DEVICES=void"]}))


def test_reboot_where_the_kernel_has_no_new_module_or_a_module_is_stuck():
    held = {"containers": [], "services": [], "foreign": []}
    assert dr.decide("580.105.08", "580.105.08", ["nvidia"], True, None, held)["method"] == "none"
    assert "no nvidia module" in dr.decide("580.105.08", "580.95.05", ["nvidia"], False, None, held)["reason"]
    stale = dr.decide("580.105.08", "580.95.05", ["nvidia"], True, "580.95.05", held)
    assert stale["method"] == "reboot" and "module is 580.95.05, not 580.105.08" in stale["reason"]
    stuck = dr.decide("580.105.08", "580.95.05", ["nvidia_uvm", "nvidia"], True, None, held, ["nvidia_uvm"])
    assert stuck["method"] == "reboot" and "stuck unloading" in stuck["reason"]


def test_the_orders_nvidias_driver_container_uses():
    loaded = km.loaded_nvidia(km.parse_lsmod(read_fixture("kernel_modules", "lsmod_gds-gdrdma-docs")))
    assert dr.unload_order(loaded) == ["nvidia_modeset", "nvidia_uvm", "nvidia_peermem", "nvidia_fs", "nvidia"]
    assert dr.load_order(loaded)[0] == "nvidia"
    assert dr.service_start_order(["nvidia-persistenced.service", "nvidia-fabricmanager.service"]) == [
        "nvidia-fabricmanager.service", "nvidia-persistenced.service"]


def test_diagnose_names_a_driver_change_that_stopped_half_way():
    import json
    from layers import driver
    assert driver.check_driver_upgrade(None, "580.95.05")["status"] == "ok"
    half = {"state": "reloading", "from": "580.95.05", "to": "580.105.08", "method": "reload",
            "since": "2026-12-07T13:00:00Z", "containers": ["qwen3"], "services": ["nvidia-persistenced.service"]}
    check = driver.check_driver_upgrade(json.dumps(half), None)
    assert check["status"] == "warn" and "580.95.05 -> 580.105.08 stopped at reloading" in check["summary"]
    assert "stopped for it: qwen3, nvidia-persistenced.service" in check["summary"]
    assert "site.yml --tags driver" in check["remedy"]
    # A failed reload the reboot finished: the new driver runs.
    failed = dict(half, state="failed", reason="modprobe -r nvidia failed: module nvidia is in use")
    assert driver.check_driver_upgrade(json.dumps(failed), "580.105.08")["status"] == "ok"
    assert driver.check_driver_upgrade(json.dumps(dict(half, state="verified")), "580.105.08")["summary"].startswith(
        "driver change 580.95.05 -> 580.105.08 done (reloaded without a reboot")
    assert driver.check_driver_upgrade("{", None)["status"] == "warn"
