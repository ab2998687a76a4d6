"""/dev/char links (module_utils/containers/dev_char.py, library/nvidia_dev_char_links.py) on real link listings
(tests/fixtures/devchar/)."""
import os
import re
import stat

import pytest
import yaml

from containers import dev_char
from conftest import FIXTURES, ROOT, run_ansible_module

DEVCHAR = os.path.join(FIXTURES, "devchar")


def fixture(name):
    with open(os.path.join(DEVCHAR, name), encoding="utf-8") as handle:
        return handle.read()


def test_wanted_links_name_every_nvidia_node_and_nothing_else():
    nodes = {"/dev/nvidia0": (195, 0), "/dev/nvidia1": (195, 1), "/dev/nvidiactl": (195, 255),
             "/dev/nvidia-modeset": (195, 254), "/dev/nvidia-uvm": (509, 0), "/dev/nvidia-uvm-tools": (509, 1),
             "/dev/nvidia-caps/nvidia-cap1": (234, 1), "/dev/null": (1, 3), "/dev/nvidia-caps": (0, 0)}
    assert dev_char.wanted_links(nodes) == {
        "/dev/char/195:0": "/dev/nvidia0", "/dev/char/195:1": "/dev/nvidia1", "/dev/char/195:255": "/dev/nvidiactl",
        "/dev/char/195:254": "/dev/nvidia-modeset", "/dev/char/509:0": "/dev/nvidia-uvm",
        "/dev/char/509:1": "/dev/nvidia-uvm-tools", "/dev/char/234:1": "/dev/nvidia-caps/nvidia-cap1"}


def test_the_links_nvidia_ctk_reports_are_the_ones_wanted():
    """nvidia-ctk's own log (AgentBaker#3276): `Creating link /dev/char/195:254 => /dev/nvidia-modeset`."""
    created = dict(re.findall(r"Creating link (/dev/char/\d+:\d+) => (/dev/\S+?)\"",
                              fixture("create-dev-char-symlinks_create-all_logfmt_new-links_AgentBaker-3276.txt")))
    assert created, "no link in the fixture"
    nodes = dict((node, tuple(int(n) for n in link.rsplit("/", 1)[1].split(":"))) for link, node in created.items())
    assert dev_char.wanted_links(nodes) == created


def test_relative_links_as_udev_makes_them_are_kept():
    """`ls -la /dev/char | grep ../nvidia` on a real k3s node: relative targets resolve to the nodes."""
    listing = fixture("ls-la-dev-char_grep-nvidia_k3s-fedora39_545.23.08.txt")
    existing = dict(("/dev/char/" + m.group(1), m.group(2))
                    for m in re.finditer(r"(\d+:\d+) -> (\.\./\S+)", listing))
    assert existing["/dev/char/195:0"] == "../nvidia0"
    wanted = dict((link, os.path.normpath(os.path.join("/dev/char", target))) for link, target in existing.items())
    todo = dev_char.plan(wanted, existing)
    assert todo["create"] == [] and todo["replace"] == [] and sorted(todo["ok"]) == sorted(existing)
    # That node had no modeset link: it is the one missing.
    wanted["/dev/char/195:254"] = "/dev/nvidia-modeset"
    assert dev_char.missing(wanted, existing) == ["/dev/char/195:254"]


def test_plan_replaces_stale_symlinks_and_leaves_other_files_alone():
    wanted = {"/dev/char/195:0": "/dev/nvidia0", "/dev/char/195:1": "/dev/nvidia1", "/dev/char/195:255": "/dev/nvidiactl"}
    todo = dev_char.plan(wanted, {"/dev/char/195:0": "/dev/nvidia1", "/dev/char/195:1": False,
                                  "/dev/char/195:255": "/dev/nvidiactl"})
    assert todo["replace"] == [("/dev/char/195:0", "/dev/nvidia1", "/dev/nvidia0")]
    assert todo["conflict"] == [("/dev/char/195:1", "/dev/nvidia1")] and todo["ok"] == ["/dev/char/195:255"]


def test_the_role_installs_nvidias_udev_rule():
    """The rule NVIDIA published (Azure/aks-gpu's 71-nvidia-char-dev.rules, fixtures README), one line."""
    with open(os.path.join(ROOT, "roles", "nvidia_container_toolkit", "defaults", "main.yml"), encoding="utf-8") as fh:
        defaults = yaml.safe_load(fh)
    assert defaults["nvidia_container_toolkit_dev_char_udev_rule"] == (
        'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
        'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"')
    assert defaults["nvidia_container_toolkit_dev_char_rule"].endswith("/71-nvidia-dev-char.rules")


@pytest.fixture
def dev(tmp_path):
    root = tmp_path / "dev"
    (root / "nvidia-caps").mkdir(parents=True)
    try:
        for name, major, minor in (("nvidia0", 195, 0), ("nvidiactl", 195, 255), ("nvidia-uvm", 509, 0),
                                   ("nvidia-caps/nvidia-cap1", 234, 1)):
            os.mknod(str(root / name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod needs root")
    (root / "nvidia-fake").write_text("not a device")
    return root


def test_module_creates_the_links_once_and_check_mode_changes_nothing(dev, tmp_path):
    links = tmp_path / "char"
    args = {"path": str(links), "dev": str(dev)}
    checked = run_ansible_module("nvidia_dev_char_links", args, "--check", "--diff")
    assert checked["changed"] and not links.exists()
    assert sorted(checked["created"]) == sorted("%s/%s" % (links, l) for l in ("195:0", "195:255", "509:0", "234:1"))
    first = run_ansible_module("nvidia_dev_char_links", args)
    assert first["changed"] and os.readlink(str(links / "195:0")) == str(dev / "nvidia0")
    assert os.readlink(str(links / "234:1")) == str(dev / "nvidia-caps" / "nvidia-cap1")
    assert not run_ansible_module("nvidia_dev_char_links", args)["changed"]
    (links / "195:255").unlink()
    os.symlink("/dev/nvidia9", str(links / "195:255"))
    again = run_ansible_module("nvidia_dev_char_links", args, "--diff")
    assert again["created"] == [str(links / "195:255")] and os.readlink(str(links / "195:255")) == str(dev / "nvidiactl")
    assert "/dev/nvidia9" in again["diff"]["before"]
