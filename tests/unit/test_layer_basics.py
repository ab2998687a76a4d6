"""The generic check every layer gets first (`<layer>_basics`, module_utils/layers/generic.py), on real outputs.

tests/fixtures/generic/README.md cites each file: journal excerpts of units that failed for a missing user
(217/USER, nvidia-persistenced's own "Failed to find user ID"), a missing executable (203/EXEC), a full disk
(dockerd, docker run), a failed `systemctl show`; real dpkg states (iF, hi, iU, ii, rc) from scratch databases;
`getent passwd`. tests/fixtures/host/: the fabric manager's failed journal, the converged `systemctl show`, the
packaged nvidia-persistenced units.

Where no capture exists (a failed or masked unit of ours in `systemctl show`'s key=value form), the test writes
the few lines itself from systemctl(1)/org.freedesktop.systemd1(5) and says so (COMPOSED below).
"""
import json
import os

from conftest import FIXTURES
from host import systemd
from layers import generic, registry, stack
from layers import stack_check as sc
from test_stack_check import DOCKER_INFO, INFO_CMD, PROBE_OPTS, cap, healthy_host

GENERIC = os.path.join(FIXTURES, "generic")
HOST = os.path.join(FIXTURES, "host")
OPTS = dict(stack.DEFAULT_OPTIONS)
GIB = 1024 ** 3


def load(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8", newline="") as handle:
        return handle.read()


# COMPOSED: `systemctl show` of a unit that failed, and of a masked one, in systemctl(1)'s key=value form with
# org.freedesktop.systemd1(5)'s values (as generic/systemctl-show_failed_start-limit-hit_user-unit.txt shows a
# failed unit, and a public note records `LoadState=masked`, `ActiveState=inactive`, `UnitFileState=masked`).
def composed_failed(unit, result="exit-code"):
    return "Id=%s\nLoadState=loaded\nActiveState=failed\nSubState=failed\nResult=%s\n" % (unit, result)


def composed_masked(unit):
    return "Id=%s\nLoadState=masked\nActiveState=inactive\nSubState=dead\nUnitFileState=masked\n" % unit


def host(**parts):
    """The generic checks' inputs (generic.host_inputs's shape)."""
    base = {"packages": None, "units": None, "users": {}, "configs": None, "disks": None, "docker_root": None,
            "failures": {}, "journals": {}, "engine": "docker", "engine_running": True, "engine_version": None,
            "conditions": {}}
    base.update(parts)
    return base


def units_of(show_text, definitions=None, journals=None):
    shown = systemd.parse_show(show_text)
    return dict((name, {"show": show, "definition": (definitions or {}).get(name),
                        "journal": (journals or {}).get(name)}) for name, show in shown.items())


# --- the parsers of systemd's words --------------------------------------------------------------

def test_show_of_a_converged_host_and_of_a_failed_unit():
    converged = systemd.parse_show(load(HOST, "systemctl-show_units_debian12-converged.txt"))
    assert systemd.unit_state(converged["docker.service"]) == "active"
    assert systemd.unit_state(converged["nvidia-cdi-refresh.service"]) == "inactive"
    failed = systemd.parse_show(load(GENERIC, "systemctl-show_failed_start-limit-hit_user-unit.txt"))
    assert systemd.unit_state(failed["spirit-daemon.service"]) == "failed"
    assert systemd.unit_state(systemd.parse_show(composed_masked("docker.service"))["docker.service"]) == "masked"


def test_the_journal_names_a_missing_user():
    cause = systemd.failure_cause(load(GENERIC, "journal_wsdd_217-USER_failed-to-determine-user-credentials.txt"),
                                  users=["wsdd"])
    assert (cause["kind"], cause["status"], cause["result"], cause["user"]) == ("user", "217/USER", "exit-code", "wsdd")
    assert cause["reason"] == "wsdd.service: Failed to determine user credentials: No such process"
    # nvidia-persistenced drops to --user itself and says which user it could not find
    for name in ("journal_nvidia-persistenced_user-deleted-by-old-postrm.txt",
                 "journal_nvidia-persistenced_user-not-created_ubuntu-26.04.txt"):
        cause = systemd.failure_cause(load(GENERIC, name))
        assert (cause["kind"], cause["user"]) == ("user", "nvidia-persistenced"), name


def test_the_journal_names_a_missing_executable():
    cause = systemd.failure_cause(load(GENERIC, "journal_ksushy_203-EXEC_failed-to-locate-executable.txt"))
    assert (cause["kind"], cause["status"], cause["path"]) == ("exec", "203/EXEC", "/usr/bin/ksushy")
    assert "Failed to locate executable /usr/bin/ksushy: No such file or directory" in cause["reason"]


def test_the_journal_names_a_full_disk_and_otherwise_the_daemons_last_word():
    assert systemd.failure_cause(load(GENERIC, "dockerd-log_no-space-left-on-device_linuxkit.txt"))["kind"] == "disk"
    fm = systemd.failure_cause(load(HOST, "004_journal_fabricmanager_failed_NV_WARN_NOTHING_TO_DO_2xA40-nvlink-"
                                          "bridge_zh-locale.txt"))
    assert (fm["kind"], fm["status"]) == ("other", "1/FAILURE")
    assert fm["reason"].endswith("failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")
    # systemd's bookkeeping (restart counter, start-limit-hit) is not the reason; the daemon's line before it is
    show = systemd.parse_show(load(GENERIC, "systemctl-show_failed_start-limit-hit_user-unit.txt"))
    spirit = systemd.failure_cause(load(GENERIC, "journalctl_failed_start-limit-hit_user-unit_excerpt.txt"),
                                   show["spirit-daemon.service"])
    assert spirit["reason"] == "spirit-migrate-store: unrecognized spirit store schema version: 11"


def test_a_killed_daemon_is_named_as_killed():
    cause = systemd.failure_cause(load(GENERIC, "journal_electrumx_9-KILL_failed-with-result-signal.txt"))
    assert (cause["kind"], cause["status"], cause["result"]) == ("other", "9/KILL", "signal")
    assert cause["reason"] == "its process was killed by a signal (status 9/KILL)"
    # what the persistence layer says of nvidia-persistenced killed so (the toolkit scenario's fault)
    units = units_of(composed_failed("nvidia-persistenced.service", "signal"),
                     journals={"nvidia-persistenced.service": load(GENERIC, "journal_electrumx_9-KILL_failed-with-"
                                                                            "result-signal.txt")})
    check = sc.check_basics("persistence", host(units=units), OPTS)
    assert check["status"] == "fail" and "systemctl enable --now nvidia-persistenced" in check["remedy"]


def test_the_users_a_unit_runs_as():
    assert systemd.unit_users(load(HOST, "nvidia-persistenced.service_ubuntu-nvidia-compute-utils.txt"), "--user") \
        == [("nvidia-persistenced", "ExecStart --user nvidia-persistenced")]
    assert systemd.unit_users(load(HOST, "nvidia-persistenced.service_debian.txt"), "--user") == \
        [("nvpd", "ExecStart --user nvpd")]
    assert systemd.unit_users(load(HOST, "nvidia-persistenced.service_nvidia-template.txt"), "--user") == []


def test_getent_says_whether_a_user_exists():
    root = {"rc": 0, "stdout": load(GENERIC, "getent-passwd_root_debian12.txt")}
    assert systemd.user_exists("root", root) is True
    # `getent passwd nvidia-persistenced` here: nothing printed, exit 2 (README.md)
    assert systemd.user_exists("nvidia-persistenced", {"rc": 2, "stdout": ""}) is False
    assert systemd.user_exists("x", None, None) is None


# --- each generic finding -----------------------------------------------------------------------

def packages(text):
    return generic.dpkg.parse(text)


def test_toolkit_half_configured_and_unpacked_fail_held_is_installed_versions_differ():
    states = packages(load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db.txt"))
    check = sc.check_basics("toolkit", host(packages=states), OPTS)
    assert check["name"] == "toolkit_basics" and check["status"] == "fail"
    assert check["summary"].startswith("nvidia-container-toolkit half-configured (dpkg iF); libnvidia-container-tools "
                                       "unpacked (dpkg iU): dpkg never finished installing them")
    assert "dpkg --configure -a" in check["remedy"]
    kinds = [f["kind"] for f in check["data"]["findings"]]
    assert kinds == ["package_half", "package_versions"]          # the held base is not "not installed"
    assert "1.17.7-1" in check["data"]["findings"][1]["summary"]


def test_a_removed_toolkit_package_is_not_installed():
    states = packages(load(GENERIC, "dpkg-query-W_toolkit-base_rc_scratch-db.txt"))
    check = sc.check_basics("toolkit", host(packages=states), OPTS)
    assert check["status"] == "fail"
    assert "nvidia-container-toolkit-base (config-files (dpkg rc))" in check["summary"]
    assert "site.yml --tags toolkit" in check["remedy"]


def test_a_failed_dkms_build_is_the_driver_layers_own_cause():
    states = packages(load(GENERIC, "dpkg-query-W_driver_dkms-iF_driver-hi_scratch-db.txt"))
    check = sc.check_basics("driver", host(packages=states), OPTS)
    assert check["status"] == "fail" and check["summary"].startswith("nvidia-dkms-580 half-configured (dpkg iF)")
    # the held driver is fine, and the toolkit's packages are not the driver's
    held = packages(load(HOST, "dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt"))
    assert sc.check_basics("driver", host(packages=held), OPTS)["status"] == "ok"


def test_a_failed_unit_with_the_journals_reason():
    journal = load(HOST, "004_journal_fabricmanager_failed_NV_WARN_NOTHING_TO_DO_2xA40-nvlink-bridge_zh-locale.txt")
    units = units_of(composed_failed("nvidia-fabricmanager.service"),
                     journals={"nvidia-fabricmanager.service": journal})
    needed = sc.check_basics("fabric", host(units=units, conditions={"fabric_needed": True}), OPTS)
    assert needed["status"] == "fail"
    assert needed["summary"] == ("nvidia-fabricmanager.service failed (exit status 1/FAILURE, result exit-code): "
                                 "request to query NVSwitch device information from NVSwitch driver failed with "
                                 "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")
    assert "systemctl enable --now nvidia-fabricmanager" in needed["remedy"]
    assert any("journalctl -u nvidia-fabricmanager.service -b -n 20" in c for c in [needed["evidence"]["command"]])
    # a host without NVSwitch does not need it: nothing to say
    unneeded = sc.check_basics("fabric", host(units=units), OPTS)
    assert unneeded["status"] == "ok" and "not needed here" in unneeded["summary"]


def test_a_masked_unit():
    units = units_of(composed_masked("docker.service"))
    check = sc.check_basics("docker", host(units=units, engine_running=False), OPTS)
    assert check["status"] == "fail" and check["summary"] == "docker.service is masked: it cannot be started"
    assert check["remedy"].startswith("`systemctl unmask docker && systemctl enable --now docker`")
    # persistence mode may be on without the daemon: a masked nvidia-persistenced is a warning here (the
    # persistence check fails it where persistence mode is off)
    masked = sc.check_basics("persistence", host(units=units_of(composed_masked("nvidia-persistenced.service"))),
                             OPTS)
    assert masked["status"] == "warn" and "systemctl unmask nvidia-persistenced" in masked["remedy"]


def test_daemon_json_that_does_not_parse():
    broken = load(os.path.join(FIXTURES, "nvidia_ctk"), "docker_configure_existing-keys.json").rstrip()
    broken = broken[:-1].rstrip() + ",\n}\n"            # a trailing comma, as a hand edit leaves it
    line = len(broken.rstrip().split("\n")) - 1
    configs = {"/etc/docker/daemon.json": broken}
    down = sc.check_basics("docker", host(configs=configs, engine_running=False), OPTS)
    assert down["status"] == "fail" and "line %d, column 6: a trailing comma" % line in down["summary"]
    assert ("fix /etc/docker/daemon.json at line %d by hand" % line) in down["remedy"]
    running = sc.check_basics("docker", host(configs=configs, engine_running=True), OPTS)
    assert running["status"] == "warn" and "the next restart refuses this one" in running["summary"]


def statvfs(free_gib, total_gib=100, inodes=6553600, free_inodes=6000000):
    block = 4096
    return {"path": None, "measured": "/", "free": int(free_gib * GIB), "total": int(total_gib * GIB),
            "free_inodes": free_inodes, "inodes": inodes, "block": block}


def test_free_space_on_dockers_data_root():
    full = sc.check_basics("docker", host(docker_root="/var/lib/docker", disks={
        "/var/lib/docker": dict(statvfs(0.3), measured="/var/lib/docker"),
        "/var/lib/gpuhost": statvfs(0.3)}), OPTS)
    assert full["status"] == "fail"
    assert full["summary"].startswith("docker's data-root /var/lib/docker: only 0.3 GiB free of 100.0 GiB")
    assert "docker image prune" in full["remedy"] and "not a GPU problem" in full["remedy"]
    low = sc.check_basics("docker", host(disks={"/var/lib/docker": statvfs(1.5), "/var/lib/gpuhost": statvfs(1.5)}),
                          OPTS)
    assert low["status"] == "warn"
    inodes = sc.check_basics("docker", host(disks={"/var/lib/docker": statvfs(50, free_inodes=12)}), OPTS)
    assert inodes["status"] == "fail" and "no free inodes" in inodes["summary"]


def test_no_space_left_in_the_engines_own_failure():
    text = load(GENERIC, "docker-run_no-space-left-on-device_overlay2.txt")
    check = sc.check_basics("docker", host(failures={"container_gpus": text}), OPTS)
    assert check["status"] == "fail"
    assert check["summary"].startswith("the engine reports no space left on device: docker: Error response from "
                                       "daemon: mkdir /var/lib/docker/overlay2/")
    assert "docker container prune" in check["remedy"]


def test_systemctl_that_does_not_answer_is_skipped_not_ok():
    err = load(GENERIC, "systemctl-show_no-systemd-pid1_container_stderr.txt")
    caps = {"units_show": cap(systemd.show_argv("/usr/bin/systemctl", ["nvidia-persistenced.service"]), 1, "", err)}
    inputs = generic.host_inputs(caps, OPTS, "docker", {})
    check = sc.check_basics("persistence", inputs, OPTS)
    assert check["status"] == "skipped"
    assert "System has not been booted with systemd as init system (PID 1)" in check["summary"]


def test_docker_owns_nothing_on_a_containerd_node():
    assert sc.check_basics("docker", host(engine="containerd"), OPTS)["status"] == "skipped"


# --- the pipeline: the generic cause names the layer's failure -------------------------------------

def with_commands(io, commands):
    merged = dict(commands)                        # these first: FakeIO answers the first matching prefix
    merged.update((key, value) for key, value in io.commands.items() if key not in commands)
    io.commands = merged
    return io


def test_a_missing_persistenced_user_is_the_persistence_layers_cause():
    """Ubuntu's unit runs `nvidia-persistenced --user nvidia-persistenced`; the user is gone (an old postrm
    deleted it): the unit failed, and the layer's summary names the user, not 'persistence mode is off'."""
    io = with_commands(healthy_host(), {
        ("/usr/bin/systemctl", "show"): (0, composed_failed("nvidia-persistenced.service"), ""),
        ("/usr/bin/systemctl", "cat", "--", "nvidia-persistenced.service"):
            (0, load(HOST, "nvidia-persistenced.service_ubuntu-nvidia-compute-utils.txt"), ""),
        ("/usr/bin/systemctl", "is-active", "nvidia-persistenced"): (3, "failed\n", ""),
        ("/usr/bin/journalctl",): (0, load(GENERIC, "journal_nvidia-persistenced_user-deleted-by-old-postrm.txt"), ""),
        ("/usr/bin/getent", "passwd", "nvidia-persistenced"): (2, "", ""),
    })
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert ["/usr/bin/journalctl", "-u", "nvidia-persistenced.service", "-b", "-n", "20", "--no-pager"] in io.ran
    assert out["failed_layer"] == "persistence"
    layer = out["layers"]["persistence"]
    assert layer["checks"][0] == "persistence_basics"
    assert layer["summary"].startswith("nvidia-persistenced.service runs as user nvidia-persistenced (ExecStart "
                                       "--user nvidia-persistenced), which does not exist: it cannot start")
    assert "adduser --system --group --no-create-home --home /nonexistent nvidia-persistenced" in layer["remedy"]
    assert "systemctl enable --now nvidia-persistenced" in layer["remedy"]
    assert out["message"].startswith("persistence mode: nvidia-persistenced.service runs as user nvidia-persistenced")
    basics = next(c for c in out["checks"] if c["name"] == "persistence_basics")
    failed = [f for f in basics["data"]["findings"] if f["kind"] == "unit_failed"][0]
    assert "Failed to find user ID of user 'nvidia-persistenced'" in failed["summary"]


def full_disk(io, free_gib):
    io.dirs["/var/lib/docker"] = []
    io.statvfs = lambda path: os.statvfs_result((4096, 4096, 100 * GIB // 4096, int(free_gib * GIB) // 4096,
                                                 int(free_gib * GIB) // 4096, 6553600, 6000000, 6000000, 0, 255))
    return io


def test_a_full_data_root_fails_the_docker_layer_not_the_gpu():
    refused = load(GENERIC, "docker-run_no-space-left-on-device_overlay2.txt")
    io = full_disk(with_commands(healthy_host(), {("/usr/bin/docker", "run"): (125, "", refused)}), 0.2)
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "docker"
    assert out["layers"]["docker"]["summary"].startswith("docker's data-root /var/lib/docker: only 0.2 GiB free")
    assert "docker image prune" in out["remedy"] and "not a GPU problem" in out["remedy"]
    # without statvfs the engine's own words are enough
    io = with_commands(healthy_host(), {("/usr/bin/docker", "run"): (125, "", refused)})
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "docker"
    assert out["layers"]["docker"]["summary"].startswith("the engine reports no space left on device")


def test_a_converged_host_passes_every_generic_check():
    """What the toolkit scenario asserts of a converged host: no generic check warns, fails or is skipped."""
    info = dict(DOCKER_INFO, DockerRootDir="/var/lib/docker")    # docker info's DockerRootDir
    io = full_disk(with_commands(healthy_host(), {
        ("/usr/bin/systemctl", "show"): (0, load(HOST, "systemctl-show_units_debian12-converged.txt"), ""),
        ("/usr/bin/docker", "info"): (0, json.dumps(info), "")}), 60)
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    basics = [c for c in out["checks"] if c["name"].endswith("_basics")]
    assert [c["name"] for c in basics] == [l.name + "_basics" for l in registry.REGISTRY if l.owns]
    assert all(c["status"] == "ok" for c in basics), [(c["name"], c["status"], c["summary"]) for c in basics]
    assert out["failed_layer"] is None, out["message"]
    docker = next(c for c in basics if c["name"] == "docker_basics")
    assert "docker.service active" in docker["summary"] and "60.0 GiB free on /var/lib/docker" in docker["summary"]
    assert [r for r in io.ran if r[:2] == ["/usr/bin/systemctl", "show"]] == [
        systemd.show_argv("/usr/bin/systemctl", [u.name for l in registry.REGISTRY if l.owns for u in l.owns.units])]
    assert INFO_CMD[:2] == ["/usr/bin/docker", "info"]
