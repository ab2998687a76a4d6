"""The simulated /dev/char mechanism: nvidia-ctk system create-dev-char-symlinks (its logrus lines as the
real tool prints them, tests/fixtures/devchar/), udev's driver-bind rule at boot, and systemd reloads taking
the NVIDIA nodes without links from running containers (gpusim/reload.py)."""
import json
import os
import re
import stat
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM = os.path.join(ROOT, "molecule", "simulator")
if SIM not in sys.path:
    sys.path.insert(0, SIM)
DEVCHAR = os.path.join(ROOT, "tests", "fixtures", "devchar")

from gpusim import boot, reload  # noqa: E402
from test_ctk import make_state, run, state_env, untimed  # noqa: E402,F401 (state_env: the fixture)


def fixture(name):
    with open(os.path.join(DEVCHAR, name), encoding="utf-8") as fh:
        return fh.read()


def mknod(path, major, minor):
    try:
        os.mknod(str(path), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod needs root")


def test_create_dev_char_symlinks_lines_are_the_real_ones(tmp_path, state_env):
    make_state(state_env, version="580.95.05")
    (tmp_path / "dev").mkdir()
    mknod(tmp_path / "dev" / "nvidia0", 195, 0)
    mknod(tmp_path / "dev" / "nvidiactl", 195, 255)
    links = tmp_path / "char"
    args = ["system", "create-dev-char-symlinks", "--driver-root=%s" % tmp_path, "--dev-char-path=%s" % links]
    rc, out, err = run(args)
    assert (rc, out) == (0, "")
    assert untimed(err) == ['level=info msg="Creating link %s/195:0 => %s/dev/nvidia0"' % (links, tmp_path),
                            'level=info msg="Creating link %s/195:255 => %s/dev/nvidiactl"' % (links, tmp_path)]
    assert os.readlink(str(links / "195:0")) == "%s/dev/nvidia0" % tmp_path
    # The real tool's line shape (AgentBaker#3276, logfmt): the same words.
    real = fixture("create-dev-char-symlinks_create-all_logfmt_new-links_AgentBaker-3276.txt")
    assert re.search(r'level=info msg="Creating link /dev/char/\d+:\d+ => /dev/nvidia\S*"', real)
    rc, _out, err = run(args)
    assert rc == 0 and untimed(err)[:2] == [
        'level=info msg="Creating link %s/195:0 => %s/dev/nvidia0"' % (links, tmp_path),
        'level=warning msg="Could not create symlink: symlink %s/dev/nvidia0 %s/195:0: file exists"' % (tmp_path, links)]
    # The TTY form of the same warning, from a real node (aks-gpu#106).
    assert "Could not create symlink: symlink /dev/nvidia-modeset /dev/char/195:254: file exists" in \
        fixture("create-dev-char-symlinks_create-all_tty_links-exist_aks-gpu-106.txt")


def test_create_all_without_the_module_fails(state_env):
    make_state(state_env, version="580.95.05", loaded=False)
    rc, _out, err = run(["system", "create-dev-char-symlinks", "--create-all", "--dry-run"])
    assert rc == 1 and untimed(err)[-1].startswith('level=error msg="failed to create symlink creator: ')


def test_boot_runs_the_driver_bind_rule_the_role_installs(tmp_path):
    import yaml
    with open(os.path.join(ROOT, "roles", "nvidia_container_toolkit", "defaults", "main.yml")) as fh:
        rule = yaml.safe_load(fh)["nvidia_container_toolkit_dev_char_udev_rule"]
    (tmp_path / "etc/udev/rules.d").mkdir(parents=True)
    (tmp_path / "etc/udev/rules.d/71-nvidia-dev-char.rules").write_text("# comment\n" + rule + "\n")
    (tmp_path / "lib/udev/rules.d").mkdir(parents=True)
    (tmp_path / "lib/udev/rules.d/71-nvidia-dev-char.rules").write_text('ACTION=="add", '
                                                                       'DEVPATH=="/bus/pci/drivers/nvidia", '
                                                                       'RUN+="/bin/false"\n')
    (tmp_path / "lib/udev/rules.d/60-other.rules").write_text('ACTION=="add", SUBSYSTEM=="block", RUN+="/bin/true"\n')
    # /etc hides the same name in /lib; rules without the driver's DEVPATH do not run.
    assert boot.driver_bind_commands(str(tmp_path)) == [
        "/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"]


def test_a_reload_takes_the_nodes_without_links_from_systemd_managed_containers(tmp_path):
    dev_char, run_dir = tmp_path / "char", tmp_path / "run"
    dev_char.mkdir()
    (tmp_path / "nvidia0").write_text("")
    (tmp_path / "nvidiactl").write_text("")
    os.symlink(str(tmp_path / "nvidia0"), str(dev_char / "195:0"))
    reload.generator(str(run_dir), str(dev_char))                    # a boot: before the container
    docker_systemd = {"linux": {"cgroupsPath": "system.slice:docker:4f1c9a"}}
    record = reload.container_record(["195:0", "195:255"], docker_systemd, str(run_dir))
    assert record == {"numbers": ["195:0", "195:255"], "systemd_cgroup": True, "reloads_at_start": 1}
    text = lambda: (run_dir / "reloads").read_text()  # noqa: E731
    assert reload.lost_devices(record, text()) == []
    reload.generator(str(run_dir), str(dev_char))                    # daemon-reload: 195:255 has no link
    assert reload.lost_devices(record, text()) == ["195:255"]
    os.symlink(str(tmp_path / "nvidiactl"), str(dev_char / "195:255"))
    reload.generator(str(run_dir), str(dev_char))                    # links made later: lost stays lost
    assert reload.lost_devices(record, text()) == ["195:255"]
    restarted = reload.container_record(["195:0", "195:255"], docker_systemd, str(run_dir))
    reload.generator(str(run_dir), str(dev_char))
    assert reload.lost_devices(restarted, text()) == []
    cgroupfs = reload.container_record(["195:0"], {"linux": {"cgroupsPath": "/docker/4f1c9a"}}, str(run_dir))
    assert not cgroupfs["systemd_cgroup"] and reload.lost_devices(dict(cgroupfs, reloads_at_start=0), text()) == []


def test_nvidia_smi_in_a_container_says_what_real_ones_say(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "var/lib/gpu-sim/systemd").mkdir(parents=True)
    (rootfs / "var/lib/gpu-sim/devices.json").write_text(json.dumps(
        {"numbers": ["195:0", "195:255", "508:0"], "systemd_cgroup": True, "reloads_at_start": 0}))
    (rootfs / "var/lib/gpu-sim/systemd/reloads").write_text(json.dumps(["195:0", "195:255"]) + "\n")
    assert not reload.nvml_lost(str(rootfs))          # only nvidia-uvm lost: NVML still opens its nodes
    (rootfs / "var/lib/gpu-sim/systemd/reloads").write_text(json.dumps([]) + "\n")
    assert reload.nvml_lost(str(rootfs))
    lost = fixture("nvml-unknown-error_after-daemon-reload_ubuntu22.04_systemd249_570.133.20_markdown-section.txt")
    assert reload.MSG_LOST in lost.splitlines()
