"""Drift decisions: the record against the live stack and dpkg."""
import os

from conftest import FIXTURES
from diagnosis.drift import AUTO, MANUAL, REBOOT, compare, parse_dpkg_status

RECORD = {
    "driver": {"version": "580.95.05", "packages": ["nvidia-driver-580-server-open"]},
    "cdi": {"driver_version": "580.95.05"},
    "vllm": {"instances": [{"name": "vllm-a"}]},
}
HELD = {"nvidia-driver-580-server-open": {"version": "580.95.05-0ubuntu0.24.04.1", "want": "hold", "status": "installed"}}


def stack(loaded="580.95.05", gpu_state="ok", failing=(), cdi_status="ok"):
    layers = {name: {"status": "fail" if name in failing else "ok", "summary": "%s broke" % name}
              for name in ("driver", "persistence", "docker", "toolkit", "runtime_config", "cdi", "container", "health")}
    return {"driver_version": loaded, "gpu_state": gpu_state, "layers": layers,
            "checks": [{"name": "cdi_spec", "status": cdi_status, "summary": "spec is stale: made for 580.95.05"}]}


def test_real_dpkg_query_output():
    with open(os.path.join(FIXTURES, "host", "dpkg-query_status_debian12.txt")) as handle:
        parsed = parse_dpkg_status(handle.read())
    # Read from the file: dpkg and apt, both wanted install and installed; the unknown package is absent.
    assert set(parsed) == {"dpkg", "apt"}
    assert parsed["apt"]["want"] == "install" and parsed["apt"]["status"] == "installed"


def test_clean_host_has_no_drift():
    out = compare(RECORD, stack(), HELD, {"vllm-a": {"running": True}})
    assert out["drifted"] is False
    assert all(layer["state"] == "ok" for layer in out["layers"].values())


def test_upgrade_then_reboot_behind_our_back_is_repairable():
    # unattended-upgrades installed 580.105.08 and the host rebooted: loaded != recorded.
    dpkg = {"nvidia-driver-580-server-open": dict(HELD["nvidia-driver-580-server-open"], version="580.105.08-0ubuntu0.24.04.1")}
    out = compare(RECORD, stack(loaded="580.105.08", failing=("container",), cdi_status="fail"), dpkg,
                  {"vllm-a": {"running": True}})
    assert out["layers"]["driver"]["findings"][0]["code"] == "driver_changed"
    assert out["layers"]["cdi"]["state"] == "drift"
    assert out["layers"]["container"]["state"] == "drift"
    assert out["manual"] == []
    assert "driver_changed" in out["repairable"] and "cdi_stale" in out["repairable"]


def test_pending_reboot_is_manual_unless_reboots_allowed():
    dpkg = {"nvidia-driver-580-server-open": dict(HELD["nvidia-driver-580-server-open"], version="580.105.08-0ubuntu0.24.04.1")}
    never = compare(RECORD, stack(loaded="580.95.05", gpu_state="version_mismatch"), dpkg)
    found = never["layers"]["driver"]["findings"][0]
    assert found["code"] == "reboot_pending" and found["repair"] == MANUAL
    assert "580.105.08" in found["message"] and "580.95.05" in found["message"]
    auto = compare(RECORD, stack(loaded="580.95.05", gpu_state="version_mismatch"), dpkg, allow_reboot=True)
    assert auto["layers"]["driver"]["findings"][0]["repair"] == REBOOT


def test_hold_removed_and_runtime_entry_gone_and_serving_down():
    dpkg = {"nvidia-driver-580-server-open": dict(HELD["nvidia-driver-580-server-open"], want="install")}
    out = compare(RECORD, stack(failing=("runtime_config",)), dpkg, {"vllm-a": {"running": False, "status": "exited"}})
    assert [f["code"] for f in out["layers"]["driver"]["findings"]] == ["hold_missing"]
    assert out["layers"]["runtime_config"]["findings"][0]["repair"] == AUTO
    assert out["layers"]["serving"]["findings"][0]["code"] == "serving_down"
    assert "exited" in out["layers"]["serving"]["findings"][0]["message"]


def test_missing_record_reports_only_live_failures():
    out = compare({}, stack(failing=("docker",)), {})
    assert [layer for layer, v in out["layers"].items() if v["state"] == "drift"] == ["docker"]


def test_runtime_set_up_under_an_older_driver_is_stale():
    # The runtime entry is still in daemon.json (the checker passes it), but docker was last configured
    # and restarted under 580.95.05; after the upgrade `--gpus` needs both again.
    record = dict(RECORD, runtime={"driver_version": "580.95.05", "cdi_enabled": True})
    out = compare(record, stack(loaded="580.105.08"), HELD, {"vllm-a": {"running": True}})
    found = out["layers"]["runtime_config"]["findings"]
    assert [f["code"] for f in found] == ["runtime_stale"]
    assert found[0]["repair"] == AUTO
    assert "580.95.05" in found[0]["message"] and "580.105.08" in found[0]["message"]
    assert "nvidia-ctk runtime configure --runtime=docker" in found[0]["message"]
    # The same record with the driver it was set up for loaded: nothing to do.
    assert compare(record, stack(loaded="580.95.05"), HELD, {"vllm-a": {"running": True}})["drifted"] is False


def test_missing_runtime_entry_wins_over_the_recorded_driver():
    record = dict(RECORD, runtime={"driver_version": "580.95.05"})
    found = compare(record, stack(loaded="580.105.08", failing=("runtime_config",)), HELD)["layers"]["runtime_config"]["findings"]
    assert len(found) == 1 and "runtime_config broke" in found[0]["message"]


def test_a_serving_container_that_lost_its_gpus_is_its_own_repairable_finding():
    """gpu_stack_check's serving_gpus verdict (a systemd reload without /dev/char links): the serving layer
    names each container, for the repair to restart it once the toolkit role made the links; the fresh
    containers worked, so the container layer has no drift of its own."""
    live = stack(failing=("container",))
    live["checks"].append({"name": "serving_gpus", "layer": "container", "status": "fail",
                           "summary": "container vllm-a lost its GPU devices (systemd reload without /dev/char "
                                      "links): nvidia-smi inside says Failed to initialize NVML: Unknown Error",
                           "data": {"ok": [], "lost": ["vllm-a"], "failed": [],
                                    "cause": "systemd reload without /dev/char links"}})
    out = compare(RECORD, live, HELD, {"vllm-a": {"running": True}})
    assert out["layers"]["container"]["state"] == "ok"
    found = out["layers"]["serving"]["findings"]
    assert found == [{"code": "serving_lost_gpus", "repair": AUTO, "container": "vllm-a",
                      "message": "serving container vllm-a lost its GPU devices (systemd reload without /dev/char "
                                 "links)"}]
    live["checks"].append({"name": "container_gpus", "layer": "container", "status": "fail",
                           "summary": "--gpus all: the container failed"})
    assert compare(RECORD, live, HELD, {"vllm-a": {"running": True}})["layers"]["container"]["findings"][0][
        "message"] == "containers: --gpus all: the container failed"


def test_a_next_boot_without_a_module_is_driver_drift_and_holds_the_reboot():
    """gpu_stack_check's next_boot warning (a newer kernel with no nvidia module): the driver layer drifts, and a
    pending reboot is not repaired, reboots allowed or not, until the module is there."""
    live = stack()
    live["checks"].append({"name": "next_boot", "layer": "driver", "status": "warn",
                           "summary": "the next boot starts kernel 6.2.0-34-generic (newer than the running "
                                      "6.2.0-33-generic), which has no nvidia module: build the module for it",
                           "data": {"next_boot": "6.2.0-34-generic"}})
    out = compare(RECORD, live, HELD, {"vllm-a": {"running": True}})
    codes = [f["code"] for f in out["layers"]["driver"]["findings"]]
    assert codes == ["kernel_stranded"] and out["layers"]["driver"]["state"] == "drift"
    assert out["manual"] == ["driver layer: the next boot starts kernel 6.2.0-34-generic (newer than the running "
                             "6.2.0-33-generic), which has no nvidia module: build the module for it"]
    dpkg = {"nvidia-driver-580-server-open": dict(HELD["nvidia-driver-580-server-open"],
                                                  version="580.105.08-0ubuntu0.24.04.1")}
    out = compare(RECORD, live, dpkg, {"vllm-a": {"running": True}}, allow_reboot=True)
    pending = next(f for f in out["layers"]["driver"]["findings"] if f["code"] == "reboot_pending")
    assert pending["repair"] == MANUAL and "reboot_pending" not in out["repairable"]
    # the same without the stranded kernel is a reboot the run may do
    out = compare(RECORD, stack(), dpkg, {"vllm-a": {"running": True}}, allow_reboot=True)
    assert "reboot_pending" in out["repairable"]


def test_a_repair_runs_the_roles_of_the_drifted_layers_only():
    # A CDI spec deleted: the CDI role, nothing below it and no serving restart.
    only_cdi = compare(RECORD, stack(failing=("cdi",), cdi_status="fail"), HELD, {"vllm-a": {"running": True}})
    assert only_cdi["repair_roles"] == ["nvidia_cdi"]
    # The driver upgraded behind our back: the driver role (its handlers restart what it must), the runtime and the
    # spec recorded for the old driver, the containers that fail meanwhile; in site.yml's order.
    dpkg = {"nvidia-driver-580-server-open": dict(HELD["nvidia-driver-580-server-open"], version="580.105.08-0ubuntu0.24.04.1")}
    upgraded = compare(dict(RECORD, runtime={"driver_version": "580.95.05"}),
                       stack(loaded="580.105.08", failing=("container",)), dpkg, {"vllm-a": {"running": True}})
    assert upgraded["repair_roles"] == ["nvidia_driver", "nvidia_container_toolkit", "nvidia_cdi"]
    # docker stopped and the serving container with it.
    down = compare(RECORD, stack(failing=("docker",)), HELD, {"vllm-a": {"running": False, "status": "exited"}})
    assert down["repair_roles"] == ["docker", "nvidia_container_toolkit", "vllm"]


def test_a_host_with_only_manual_drift_runs_no_role():
    dpkg = {"nvidia-driver-580-server-open": dict(HELD["nvidia-driver-580-server-open"], version="580.105.08-0ubuntu0.24.04.1")}
    pending = compare(RECORD, stack(loaded="580.95.05", gpu_state="version_mismatch"), dpkg, {"vllm-a": {"running": True}})
    assert pending["drifted"] and pending["repairable"] == []
    assert pending["repair_roles"] == []


def test_containers_that_fail_because_a_gpu_fell_off_the_bus_are_not_the_toolkits_to_repair():
    # The L4 lost (Xid 79): every fresh --gpus container fails ("GPU is lost"); the toolkit role cannot mend that,
    # so a drift run must not run it (it would fail and stop the Xid policy's out-of-service mark).
    lost = stack(gpu_state="error", failing=("driver", "container"))
    lost["message"] = "hardware (each GPU on the bus): GPU 1 (0000:31:00.0) fell off the bus (Xid 79)"
    lost["checks"].append({"name": "gpus_all", "layer": "container", "status": "fail",
                           "summary": "--gpus all: the container failed"})
    out = compare(RECORD, lost, HELD, {"vllm-a": {"running": True}})
    found = out["layers"]["container"]["findings"]
    assert [f["code"] for f in found] == ["gpus_broken"] and found[0]["repair"] == MANUAL
    assert "driver layer" in found[0]["message"]
    assert "nvidia_container_toolkit" not in out["repair_roles"]
    # The same failure with a working driver is the container layer's roles' (the toolkit, the CDI spec).
    alone = stack(failing=("container",))
    alone["checks"] = lost["checks"]
    assert "nvidia_container_toolkit" in compare(RECORD, alone, HELD, {"vllm-a": {"running": True}})["repair_roles"]
