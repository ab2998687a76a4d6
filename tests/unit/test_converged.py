"""The converged fingerprint (site.yml's fast path): its parsers on real outputs, its comparison, and
the gpuhost_converged module run by real ansible on local files."""
import json
import os

import pytest

from conftest import ANSIBLE, FIXTURES, run_ansible_module
from runs.converged import (differences, fingerprint, health_problems, parse_os_release, parse_systemctl_show,
                       path_digests)
from diagnosis.drift import parse_dpkg_status

HOST = os.path.join(FIXTURES, "host")


def read(name):
    with open(os.path.join(HOST, name), encoding="utf-8") as handle:
        return handle.read()


def test_os_release_of_debian_12():
    assert parse_os_release(read("os-release_debian12.txt")) == "debian 12"


def test_systemctl_show_of_a_converged_target():
    units = parse_systemctl_show(read("systemctl-show_units_debian12-converged.txt"))
    assert units["docker.service"] == "active enabled"
    assert units["nvidia-persistenced.service"].startswith("active ")
    assert units["containerd.service"] == "active enabled"
    # toolkit 1.18's refresh unit: enabled, runs at boot and on driver changes, inactive in between.
    assert units["nvidia-cdi-refresh.service"] == "inactive enabled"


def sample(**changes):
    base = dict(code="c1", inputs="i1", os_release="debian 12 kernel 6.1.0", driver_loaded="NVRM 580.95.05",
                reboot_required=False,
                packages=parse_dpkg_status("nvidia-driver\t580.95.05-1\thold\tinstalled\n"
                                           "docker.io\t20.10.24+dfsg1-1+deb12u1\tinstall\tinstalled\n"),
                units={"docker.service": "active enabled"},
                files={"/etc/docker": "dir", "/etc/docker/daemon.json": "aa"},
                containers={"qwen": "id1 img1"})
    base.update(changes)
    return fingerprint(**base)


def test_the_same_host_has_no_differences():
    assert differences(sample(), sample()) == []


def test_no_record_is_a_full_run():
    assert differences({}, sample()) == [
        "no converged fingerprint yet (site.yml has not completed a full run on this host)"]
    assert differences({"format": 0}, sample())[0].startswith("fingerprint format 0")


@pytest.mark.parametrize("change, expected", [
    (dict(code="c2"), "gpuhost's roles and modules changed since the last full run"),
    (dict(inputs="i2"), "the roles' variables changed since the last full run"),
    (dict(driver_loaded="NVRM 580.105.08"), "driver_loaded: was 'NVRM 580.95.05', is 'NVRM 580.105.08'"),
    (dict(reboot_required=True), "reboot_required: was False, is True"),
    (dict(files={"/etc/docker": "dir", "/etc/docker/daemon.json": "bb"}), "files: /etc/docker/daemon.json changed"),
    (dict(files={"/etc/docker": "dir"}), "files: /etc/docker/daemon.json changed"),
    (dict(units={"docker.service": "inactive enabled"}),
     "units: docker.service was 'active enabled', is 'inactive enabled'"),
    (dict(containers={"qwen": "id2 img1"}), "containers: qwen was 'id1 img1', is 'id2 img1'"),
    (dict(packages=parse_dpkg_status("nvidia-driver\t580.95.05-1\tinstall\tinstalled\n"
                                     "docker.io\t20.10.24+dfsg1-1+deb12u1\tinstall\tinstalled\n")),
     "packages: nvidia-driver was '580.95.05-1 hold installed', is '580.95.05-1 install installed'"),
])
def test_each_change_is_named(change, expected):
    assert differences(sample(), sample(**change)) == [expected]


def test_held_driver_packages_of_a_real_host_are_fingerprinted_with_their_hold():
    # dpkg-query -W output of a converged trixie target, re-read in the module's format.
    rows = [line.split("\t") for line in read("dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt").splitlines()]
    stdout = "".join("%s\t%s\t%s\t%s\n" % (name, version, "hold" if abbrev.startswith("h") else "install",
                                           "installed" if abbrev[1:2] == "i" else "not-installed")
                     for name, version, abbrev in rows)
    prints = sample(packages=parse_dpkg_status(stdout))["packages"]
    assert prints["nvidia-driver"].endswith(" hold installed")
    unheld = stdout.replace("nvidia-driver\t580.105.08-1\thold", "nvidia-driver\t580.105.08-1\tinstall")
    assert unheld != stdout
    assert differences(sample(packages=parse_dpkg_status(stdout)),
                       sample(packages=parse_dpkg_status(unheld))) == [
        "packages: nvidia-driver was '580.105.08-1 hold installed', is '580.105.08-1 install installed'"]


def test_path_digests_walk_directories_and_see_content_links_and_removal(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.json").write_text("{}")
    os.symlink("a.json", str(tmp_path / "d" / "link"))
    first = path_digests(str(tmp_path / "d"))
    assert set(first) == {str(tmp_path / "d"), str(tmp_path / "d" / "a.json"), str(tmp_path / "d" / "link")}
    assert first[str(tmp_path / "d" / "link")] == "link:a.json"
    os.utime(str(tmp_path / "d" / "a.json"), (0, 0))
    assert path_digests(str(tmp_path / "d")) == first  # times are not content
    (tmp_path / "d" / "a.json").write_text('{"runtimes": {}}')
    assert path_digests(str(tmp_path / "d")) != first
    assert path_digests(str(tmp_path / "missing")) == {str(tmp_path / "missing"): "absent"}


def test_serving_health_is_asked_over_http(tmp_path):
    """A real HTTP server on loopback: 200 is healthy, 503 and a closed port are problems, and a
    container that is not running is one without asking."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/ok/health" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = "http://127.0.0.1:%d" % server.server_port
        instances = {"a": {"url": base + "/ok"}, "b": {"url": base + "/sick/"}, "c": {"url": "http://127.0.0.1:9"},
                     "d": {"url": base + "/ok"}}
        status = {"a": "running", "b": "running", "c": "running", "d": "exited"}
        problems = health_problems(instances, status, timeout=5)
    finally:
        server.shutdown()
    assert problems[0] == "serving: %s/sick/health answered 503" % base
    assert problems[1].startswith("serving: http://127.0.0.1:9/health answered ")
    assert problems[2] == "serving: container d is exited"
    assert len(problems) == 3


# --- the module, through real ansible ---------------------------------------------------------------

needs_ansible = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")


def run_module(args, *flags):
    return run_ansible_module("gpuhost_converged", args, *flags)


@pytest.fixture
def host(tmp_path):
    """A config directory, an empty record, and the module's arguments for them."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "daemon.json").write_text('{"log-level": "warn"}\n')
    (tmp_path / "gpuhost.fact").write_text("{}\n")
    return tmp_path, dict(code_digest="c1", inputs_digest="i1", path=str(tmp_path / "converged.json"),
                          record_path=str(tmp_path / "gpuhost.fact"), paths=[str(tmp_path / "etc")],
                          packages=["dpkg"])


@needs_ansible
def test_record_then_compare_then_a_change(host):
    tmp_path, args = host
    compared = run_module(args)
    assert compared["match"] is False and compared["changed"] is False
    assert not (tmp_path / "converged.json").exists()

    # --check records nothing.
    checked = run_module(dict(args, mode="record"), "--check", "--diff")
    assert checked["changed"] is True and not (tmp_path / "converged.json").exists()
    assert '"inputs": "i1"' in checked["diff"]["after"]

    recorded = run_module(dict(args, mode="record"))
    assert recorded["changed"] is True
    stored = json.loads((tmp_path / "converged.json").read_text())
    assert stored["files"][str(tmp_path / "etc" / "daemon.json")] == recorded["fingerprint"]["files"][
        str(tmp_path / "etc" / "daemon.json")]
    assert stored["packages"]["dpkg"].endswith(" install installed")  # this machine's own dpkg
    assert run_module(dict(args, mode="record"))["changed"] is False

    assert run_module(args)["match"] is True
    assert run_module(dict(args, inputs_digest="i2"))["differences"] == [
        "the roles' variables changed since the last full run"]
    (tmp_path / "etc" / "daemon.json").write_text('{"log-level": "debug"}\n')
    changed = run_module(args)
    assert changed["match"] is False
    assert changed["differences"] == ["files: %s changed" % (tmp_path / "etc" / "daemon.json")]


@needs_ansible
def test_a_recorded_serving_container_that_is_gone_is_a_problem(host):
    tmp_path, args = host
    (tmp_path / "gpuhost.fact").write_text(json.dumps(
        {"vllm": {"instances": {"qwen": {"url": "http://127.0.0.1:9/", "port": 9}}}}))
    # No docker CLI: the container is absent both times, so the fingerprint matches; the live check does not.
    args = dict(args, docker_path=str(tmp_path / "no-docker"))
    assert run_module(dict(args, mode="record"))["changed"] is True
    compared = run_module(args)
    assert compared["differences"] == []
    assert compared["problems"] == ["serving: container qwen is absent"]
    assert compared["match"] is False


@needs_ansible
def test_a_malformed_fingerprint_fails_and_is_left_alone(host):
    tmp_path, args = host
    (tmp_path / "converged.json").write_text("{not json")
    res = run_module(dict(args, mode="record"))
    assert res["failed"] is True
    assert "gpuhost converged fingerprint" in res["msg"] and "remove it" in res["msg"]
    assert (tmp_path / "converged.json").read_text() == "{not json"
