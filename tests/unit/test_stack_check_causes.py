"""The stack check names the decisive cause: the engine's own verdict on daemon.json (the line of a
trailing comma as a person counts it, a BOM only where that engine refuses one), a default runtime
whose binary is gone, and the explain table knowing dockerd's refusal."""
import json
import os

from containers import daemon_json as dj
from diagnosis import explain as ex
from layers import stack_check as sc
from conftest import FIXTURES
from test_stack_check import DOCKER_INFO, INFO_CMD, cap

DOWN = cap(INFO_CMD, 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                            "Is the docker daemon running?\n")
# nvidia-ctk's own daemon.json (corpus nvidia_ctk/docker_configure_existing-keys.json).
with open(os.path.join(FIXTURES, "nvidia_ctk", "docker_configure_existing-keys.json")) as _h:
    CTK_DAEMON = _h.read()


def trailing_comma(text):
    """The same file with a comma after its last top-level entry, as a hand edit leaves it."""
    body = text.rstrip().rstrip("}").rstrip()
    return body + ",\n}\n"


def test_trailing_comma_is_named_at_the_comma():
    broken = trailing_comma(CTK_DAEMON)
    comma_line = broken.rstrip().split("\n").index(broken.rstrip().split("\n")[-2]) + 1
    try:
        dj.parse(broken)
    except dj.DaemonJsonError as exc:
        message = str(exc)
    assert "line %d, column" % comma_line in message and "a trailing comma" in message
    # What the check says when docker is down and the engine has no --validate (20.10 prints
    # "unknown flag: --validate"): this module's own reading.
    old = cap(["/usr/sbin/dockerd", "--validate"], 125, "", "unknown flag: --validate\n")
    check = sc.check_docker(DOWN, "/usr/bin/docker", broken, old, "Docker version 20.10.24+dfsg1, build 297e128")
    assert check["status"] == "fail" and "cannot start: it refuses /etc/docker/daemon.json" in check["summary"]
    assert "line %d" % comma_line in check["remedy"] and "systemctl restart docker" in check["remedy"]
    assert "enable --now" not in check["remedy"]


def test_the_engines_own_verdict_wins():
    # A real `dockerd` refusal (a Chinese blog's capture of `sudo dockerd`).
    refusal = ("unable to configure the Docker daemon with file /etc/docker/daemon.json: the following "
               "directives don't match any configuration option: default\n")
    validate = cap(["/usr/sbin/dockerd", "--validate", "--config-file", "/etc/docker/daemon.json"], 1, "", refusal)
    check = sc.check_docker(DOWN, "/usr/bin/docker", '{"default": 1}', validate, "Docker version 26.1.5+dfsg1")
    assert check["status"] == "fail" and "don't match any configuration option: default" in check["summary"]
    (finding,) = ex.explain(refusal)["findings"]
    assert (finding["layer"], finding["kind"]) == ("docker", "docker_config_refused")
    # The engine accepts its file: docker is simply down.
    ok = cap(["/usr/sbin/dockerd", "--validate"], 0, "configuration OK\n", "")
    assert "systemctl enable --now docker" in sc.check_docker(DOWN, "/usr/bin/docker", CTK_DAEMON, ok,
                                                              "Docker version 26.1.5")["remedy"]


def test_a_bom_is_refused_only_by_engines_that_refuse_it():
    with_bom = dj.BOM + CTK_DAEMON
    assert dj.parse(with_bom) == json.loads(CTK_DAEMON)
    assert dj.engine_accepts_bom("Docker version 26.1.5+dfsg1, build a72d7cd") is True
    assert dj.engine_accepts_bom("Docker version 20.10.24+dfsg1, build 297e128") is False
    assert dj.engine_accepts_bom("") is None
    old = sc.check_docker(DOWN, "/usr/bin/docker", with_bom, None, "Docker version 20.10.24+dfsg1, build 297e128")
    assert old["status"] == "fail" and "byte order mark" in old["summary"]
    new = sc.check_docker(DOWN, "/usr/bin/docker", with_bom, None, "Docker version 26.1.5+dfsg1")
    assert "systemctl enable --now docker" in new["remedy"]
    # With docker 26 running, the runtime check reads the BOM'd file too.
    running = sc.check_runtime(cap(INFO_CMD, 0, json.dumps(DOCKER_INFO)), with_bom, True)
    assert running["status"] == "ok"


def test_a_dangling_default_runtime_fails_every_container():
    info = dict(DOCKER_INFO, DefaultRuntime="nvidia")
    check = sc.check_docker(cap(INFO_CMD, 0, json.dumps(info)), "/usr/bin/docker", runtime_bin_found=False)
    assert check["status"] == "fail" and "every container on this host fails to start, GPU or not" in check["summary"]
    assert "default-runtime" in check["remedy"]
    assert sc.check_docker(cap(INFO_CMD, 0, json.dumps(info)), "/usr/bin/docker", runtime_bin_found=True)["status"] \
        == "ok"


# --- the hardware layer: each GPU on the bus ----------------------------------------------------

TWO_ON_THE_BUS = {"pci_devices": [{"pci_address": "0000:17:00.0"}, {"pci_address": "0000:2b:00.0"}]}
# Xid 79 as NVIDIA/open-gpu-kernel-modules#1151 quotes it (test_stack_check.KMSG).
XID79_GPU1 = "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"


def test_a_lost_gpu_is_named_and_the_other_said_healthy():
    facts = dict(TWO_ON_THE_BUS, gpus=[{"index": 0, "pci_bus_id": "00000000:17:00.0",
                                        "uuid": "GPU-b42dd28e-0000-0000-0000-000000000000", "mig_mode": False}])
    # nvidia-smi 610's line for the GPU it lost, then the table of the others.
    smi = "Unable to determine the device handle for GPU1: 0000:2B:00.0: Unknown Error\n"
    check = sc.check_hardware(facts, sc.parse_xids(XID79_GPU1), smi)
    assert check["status"] == "fail" and check["layer"] == "hardware"
    assert check["summary"].startswith("GPU 1 (0000:2b:00.0) fell off the bus (Xid 79)")
    assert check["summary"].endswith("healthy: GPU 0")
    assert check["remedy"].startswith("GPU 1: drain the host and reboot it")
    states = [(g["index"], g["state"], g["uuid"]) for g in check["data"]["gpus"]]
    assert states == [(0, "healthy", "GPU-b42dd28e-0000-0000-0000-000000000000"), (1, "lost", None)]
    # Without the Xid, nvidia-smi's own line says it (older form: no index).
    alone = sc.check_hardware(facts, [], "Unable to determine the device handle for GPU0000:2B:00.0: Unknown Error\n")
    assert alone["status"] == "fail" and "GPU 1 (0000:2b:00.0) fell off the bus (Unknown Error)" in alone["summary"]


def test_an_application_xid_is_not_a_hardware_fault():
    facts = dict(TWO_ON_THE_BUS, gpus=[{"index": 0, "pci_bus_id": "00000000:17:00.0"},
                                       {"index": 1, "pci_bus_id": "00000000:2B:00.0"}])
    xid13 = "[  200.1] NVRM: Xid (PCI:0000:17:00): 13, pid=4242, name=python3, Graphics SM Warp Exception\n"
    assert sc.check_hardware(facts, sc.parse_xids(xid13), "")["status"] == "ok"
    xid48 = "NVRM: Xid (PCI:0000:17:00): 48, pid=4242, name=python3, An uncorrectable double bit error\n"
    faulty = sc.check_hardware(facts, sc.parse_xids(xid48), "")
    assert faulty["status"] == "fail" and "GPU 0 (00000000:17:00.0): Xid 48 Double Bit ECC Error" in faulty["summary"]
    assert faulty["remedy"].startswith("GPU 0: drain the GPU, reset it")


def test_mig_mode_is_seen():
    # corpus nvidia_smi/003: an H100 with MIG enabled (-q).
    from gpu import nvsmi_parse
    with open(os.path.join(FIXTURES, "nvidia_smi", "003_q_590.48.01_H100-MIG_load.txt"), "rb") as handle:
        facts = nvsmi_parse.facts_from_output(handle.read())
    check = sc.check_hardware(facts, [], "")
    assert check["status"] == "warn" and "has MIG mode on" in check["summary"]
    assert "nvidia-smi -i 0 -mig 0" in check["remedy"]


# --- persistence: a masked daemon; the kernel log when dmesg is restricted -----------------------

def test_a_masked_daemon_is_named_with_a_remedy_that_works():
    facts = {"state": "ok", "gpus": [{"index": 0, "persistence_mode": False}, {"index": 1, "persistence_mode": True}]}
    check = sc.check_persistence(facts, {"smi": []}, "inactive", "masked")
    assert check["status"] == "fail" and "nvidia-persistenced is masked" in check["summary"]
    assert check["remedy"].startswith("the unit is masked, so it cannot be started: `systemctl unmask")
    on = {"state": "ok", "gpus": [{"index": 0, "persistence_mode": True}]}
    warned = sc.check_persistence(on, {"smi": []}, "inactive", "masked")
    assert warned["status"] == "warn" and "the next reboot or driver reload turns it off" in warned["summary"]
    assert sc.check_persistence(on, {"smi": []}, "active", "enabled")["status"] == "ok"


def test_restricted_dmesg_falls_back_to_the_journal():
    from test_stack_check import FakeIO
    restricted = (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")
    journal = (0, XID79_GPU1, "")
    io = FakeIO({("/usr/bin/dmesg",): restricted, ("/usr/bin/journalctl", "-k"): journal}, {}, {}, {})
    caps = {}
    # Only the kernel-log part of capture(): the rest needs a host.
    argv = sc.kernel_log_argv("dmesg")
    caps["kernel_log"] = sc._run(io, ["/usr/bin/dmesg"] + argv[1:])
    assert caps["kernel_log"]["rc"] == 1
    full = sc.capture(io, {"container_check": False})
    assert full["kernel_log"]["argv"][:2] == ["/usr/bin/journalctl", "-k"]
    check = sc.check_xid(full["kernel_log"], "dmesg")
    assert check["evidence"]["lines"][0].startswith("dmesg failed (dmesg: read kernel buffer failed: Operation not "
                                                    "permitted): read the journal instead")
    assert check["data"]["xids"][0]["code"] == 79


def test_the_engine_message_gets_the_comma_line():
    """docker 23+: `dockerd --validate` says what Go's decoder says (no line); the check adds the line."""
    broken = trailing_comma(CTK_DAEMON)
    go = ("unable to configure the Docker daemon with file /etc/docker/daemon.json: invalid character '}' looking "
          "for beginning of object key string\n")
    validate = cap(["/usr/sbin/dockerd", "--validate", "--config-file", "/etc/docker/daemon.json"], 1, "", go)
    check = sc.check_docker(DOWN, "/usr/bin/docker", broken, validate, "Docker version 26.1.5+dfsg1")
    assert "invalid character '}' looking for beginning of object key string (line" in check["summary"]
    assert "a trailing comma" in check["summary"] and "at line" in check["remedy"]
