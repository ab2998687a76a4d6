"""The limits a container gets on a host declared for training (check container_limits, docker layer), on real
/proc/<pid>/limits captures and a real refusal (tests/fixtures/limits/, sources in tests/fixtures/README.md)."""
import json

import pytest

from host.limits import UNLIMITED, LimitsParseError, at_least, describe, parse_limits
from layers import stack_check as sc
from layers.engine import check_container_limits, default_ulimits
from containers.daemon_json import TRAINING_ULIMITS, render
from conftest import read_fixture
from test_stack_check import PROBE_OPTS, containerd_host, healthy_host

# docker 1.x, 2016: a container's PID 1 with docker's default memlock (64 KiB).
DEFAULT_64K = read_fixture("limits", "proc-limits_docker-container-pid1_memlock-65536")
# CoreOS 773.1.0: a container process whose docker.service has LimitMEMLOCK=infinity: memlock unlimited, the
# default 8 MiB stack (an excerpt: the first 14 lines, the index cut the rest).
UNLIMITED_MEMLOCK = read_fixture("limits", "proc-limits_docker-container-process_memlock-unlimited")
REFUSED = read_fixture("limits", "docker-run_rlimit-type-8")
ARGV = ["/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "cat", "img",
        "/proc/self/limits"]


def cap(stdout, rc=0, stderr=""):
    return {"argv": ARGV, "rc": rc, "stdout": stdout, "stderr": stderr}


# --- the parser -------------------------------------------------------------------------------------------

def test_parse_a_docker_default_container():
    limits = parse_limits(DEFAULT_64K)
    assert len(limits) == 16
    assert limits["Max locked memory"] == {"soft": 65536, "hard": 65536, "units": "bytes"}
    assert limits["Max stack size"] == {"soft": 8388608, "hard": UNLIMITED, "units": "bytes"}
    assert limits["Max open files"] == {"soft": 2048, "hard": 1048576, "units": "files"}
    # Rows without units (the kernel prints none for priorities), padded with trailing spaces.
    assert limits["Max nice priority"] == {"soft": 0, "hard": 0, "units": None}
    assert limits["Max realtime timeout"]["units"] == "us"


def test_parse_unlimited_memlock():
    limits = parse_limits(UNLIMITED_MEMLOCK)
    assert len(limits) == 13
    assert limits["Max locked memory"] == {"soft": UNLIMITED, "hard": UNLIMITED, "units": "bytes"}
    assert limits["Max processes"]["soft"] == UNLIMITED and limits["Max pending signals"]["hard"] == 62551


@pytest.mark.parametrize("text", ["", None, REFUSED, "Limit                     Soft Limit           Hard Limit"])
def test_parse_refuses_what_is_not_a_limits_table(text):
    with pytest.raises(LimitsParseError):
        parse_limits(text)


def test_helpers():
    assert at_least(UNLIMITED, 67108864) and at_least(67108864, 67108864) and not at_least(8388608, 67108864)
    assert describe(65536) == "65536 bytes (64 KiB)" and describe(8388608) == "8388608 bytes (8 MiB)"
    assert describe(UNLIMITED) == "unlimited" and describe(1000) == "1000 bytes"


# --- the check's verdicts ---------------------------------------------------------------------------------

def test_skipped_where_the_host_is_not_declared_for_training():
    check = check_container_limits(cap(DEFAULT_64K), None, False)
    assert check["status"] == "skipped" and "gpuhost_training" in check["summary"]


def test_docker_default_memlock_fails_naming_it_and_the_remedy():
    check = check_container_limits(cap(DEFAULT_64K), None, True)
    assert check["status"] == "fail" and check["layer"] == "docker"
    assert "memlock 65536 bytes (64 KiB)" in check["summary"] and "pinned memory" in check["summary"]
    assert "stack 8388608 bytes (8 MiB)" in check["summary"] and "64 MiB" in check["summary"]
    assert "gpuhost_training: true" in check["remedy"] and "site.yml --tags docker" in check["remedy"]
    assert "--ulimit memlock=-1 --ulimit stack=67108864" in check["remedy"]
    lines = check["evidence"]["lines"]
    assert lines[0].startswith("Max stack size            8388608") and "Max locked memory" in lines[1]
    assert lines[-1] == "/etc/docker/daemon.json default-ulimits: memlock not set, stack not set"
    assert check["data"]["memlock"]["soft"] == 65536


def test_unlimited_memlock_with_the_default_stack_fails_on_the_stack_only():
    check = check_container_limits(cap(UNLIMITED_MEMLOCK), "{}", True)
    assert check["status"] == "fail" and "memlock" not in check["summary"]
    assert check["summary"].endswith("stack 8388608 bytes (8 MiB) (training needs 67108864 bytes (64 MiB))")


def test_the_training_limits_pass():
    # The unlimited capture with seed 000's stack (--ulimit stack=67108864 sets soft and hard) in place of its own.
    seeded = UNLIMITED_MEMLOCK.replace("Max stack size            8388608              unlimited",
                                       "Max stack size            67108864             67108864 ")
    assert seeded != UNLIMITED_MEMLOCK
    check = check_container_limits(cap(seeded), render(TRAINING_ULIMITS), True)
    assert check["status"] == "ok" and check["remedy"] is None
    assert check["summary"] == "a container gets the training limits: memlock unlimited, stack 67108864 bytes (64 MiB)"
    assert check["evidence"]["lines"][-1] == ("/etc/docker/daemon.json default-ulimits: memlock unlimited, "
                                              "stack 67108864 bytes (64 MiB)")


def test_default_ulimits_set_but_not_got_means_restart_docker():
    check = check_container_limits(cap(DEFAULT_64K), render(TRAINING_ULIMITS), True)
    assert check["status"] == "fail" and check["remedy"].startswith("restart docker")


def test_an_operators_lower_default_ulimits_are_named():
    config = {"default-ulimits": {"memlock": {"Name": "memlock", "Soft": 8388608, "Hard": 8388608},
                                  "stack": {"Name": "stack", "Soft": 67108864, "Hard": 67108864}}}
    check = check_container_limits(cap(DEFAULT_64K), json.dumps(config), True, "/etc/docker/daemon.json")
    assert check["status"] == "fail" and "raise /etc/docker/daemon.json's default-ulimits by hand" in check["remedy"]
    assert "memlock 8388608 bytes (8 MiB), stack 67108864 bytes (64 MiB)" in check["evidence"]["lines"][-1]
    assert default_ulimits("{not json") is None


def test_a_docker_that_may_not_raise_limits_is_its_own_failure():
    check = check_container_limits(cap("", rc=125, stderr="docker: " + REFUSED), None, True)
    assert check["status"] == "fail" and check["data"]["refused"] == "memlock"
    assert "memlock limit" in check["summary"] and "CAP_SYS_RESOURCE" in check["summary"]
    assert "error setting rlimit type 8: operation not permitted" in check["summary"]
    assert "pidof dockerd" in check["remedy"]


def test_a_container_that_does_not_run_is_a_warning():
    check = check_container_limits(cap("", rc=125, stderr="Unable to find image 'img:latest' locally"), None, True)
    assert check["status"] == "warn" and "Unable to find image" in check["summary"]
    assert check_container_limits(None, None, True)["status"] == "skipped"


# --- the capture: the extra container only on a training host ---------------------------------------------

def _limits_runs(io):
    return [r for r in io.ran if r[-1:] == ["/proc/self/limits"]]


def test_no_limits_container_unless_training():
    io = healthy_host()
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert not _limits_runs(io)
    check = next(c for c in out["checks"] if c["name"] == "container_limits")
    assert check["status"] == "skipped" and out["failed_layer"] is None


def test_a_training_host_runs_one_limits_container_and_fails_the_docker_layer():
    io = healthy_host()
    # Ahead of the fake's catch-all `docker run`, which answers first otherwise.
    io.commands = dict([(tuple(ARGV[:9]), (0, DEFAULT_64K, ""))] + list(io.commands.items()))
    opts = dict(PROBE_OPTS, training=True)
    out = sc.evaluate(sc.capture(io, opts), opts)
    assert _limits_runs(io) == [ARGV]
    assert out["failed_layer"] == "docker" and "memlock 65536 bytes (64 KiB)" in out["message"]
    assert out["layers"]["docker"]["checks"] == ["docker_basics", "docker", "container_limits"]


def test_no_limits_container_without_container_checks_or_on_containerd():
    io = healthy_host()
    opts = dict(PROBE_OPTS, training=True, container_check=False)
    out = sc.evaluate(sc.capture(io, opts), opts)
    assert not _limits_runs(io)
    assert next(c for c in out["checks"] if c["name"] == "container_limits")["status"] == "skipped"
    io = containerd_host()
    opts = dict(PROBE_OPTS, training=True)
    out = sc.evaluate(sc.capture(io, opts), opts)
    assert not _limits_runs(io)
    check = next(c for c in out["checks"] if c["name"] == "container_limits")
    assert check["status"] == "skipped" and "containerd" in check["summary"]
