"""The nvidia_driver_* modules run by real ansible on local files (check mode, diff, changed)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")
pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")
HOST = os.path.join(FIXTURES, "host")


def run_module(module, args, *flags):
    env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(ROOT, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run([ANSIBLE, "localhost", "-c", "local", "-m", module, "-a", json.dumps(args), *flags],
                          capture_output=True, text=True, env=env, timeout=120, cwd="/")
    out = json.loads(proc.stdout)
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


def fixture(name):
    with open(os.path.join(HOST, name), encoding="utf-8") as handle:
        return handle.read()


def test_sources_check_mode_then_write(tmp_path):
    path = tmp_path / "debian.sources"
    original = fixture("debian.sources_bookworm_debootstrap.txt")
    path.write_text(original)
    args = {"path": str(path), "legacy_path": str(tmp_path / "sources.list"), "components": ["non-free", "non-free-firmware"]}
    check = run_module("nvidia_driver_sources", args, "--check", "--diff")
    assert check["changed"] is True and path.read_text() == original
    assert "Components: main non-free non-free-firmware" in check["diff"]["after"]
    done = run_module("nvidia_driver_sources", args)
    assert done["changed"] is True and len(done["changes"]) == 2
    assert path.read_text().count("Components: main non-free non-free-firmware\n") == 2
    assert run_module("nvidia_driver_sources", args)["changed"] is False
    assert sorted(os.listdir(tmp_path)) == ["debian.sources"]


def test_sources_legacy_file_and_missing_files(tmp_path):
    legacy = tmp_path / "sources.list"
    legacy.write_text("deb http://deb.debian.org/debian bookworm main\n")
    args = {"path": str(tmp_path / "none.sources"), "legacy_path": str(legacy), "components": ["non-free"]}
    assert run_module("nvidia_driver_sources", args)["changed"] is True
    assert legacy.read_text() == "deb http://deb.debian.org/debian bookworm main non-free\n"
    legacy.unlink()
    failed = run_module("nvidia_driver_sources", args)
    assert failed.get("failed") and "no Debian sources" in failed["msg"]


def test_persistenced_dropin_written_kept_and_removed(tmp_path):
    units = tmp_path / "lib"
    units.mkdir()
    (units / "nvidia-persistenced.service").write_text(fixture("nvidia-persistenced.service_ubuntu-nvidia-compute-utils.txt"))
    dropin = tmp_path / "etc" / "nvidia-persistenced.service.d" / "gpuhost.conf"
    args = {"unit_dirs": [str(tmp_path / "etc"), str(units)], "dropin": str(dropin)}
    check = run_module("nvidia_driver_persistenced", args, "--check")
    assert check["changed"] is True and not dropin.exists() and check["static"] is True
    first = run_module("nvidia_driver_persistenced", args)
    assert first["changed"] is True and "--no-persistence-mode" not in dropin.read_text().split("[Service]")[1]
    assert run_module("nvidia_driver_persistenced", args)["changed"] is False
    gone = run_module("nvidia_driver_persistenced", dict(args, state="absent"))
    assert gone["changed"] is True and not dropin.exists()


def test_persistenced_missing_unit(tmp_path):
    result = run_module("nvidia_driver_persistenced", {"unit_dirs": [str(tmp_path)], "dropin": str(tmp_path / "d.conf")})
    assert result["changed"] is False and result["found"] is False


def test_plan_precheck_refuses_without_touching_the_host():
    lspci = {"is_nvidia_gpu": True, "device_id": "2bb5", "pci_id": "10de:2bb5", "pci_address": "0000:17:00.0",
             "product": "RTX PRO 6000 Blackwell Server Edition"}
    args = {"package_style": "ubuntu", "branch": "535", "pci_devices": [lspci], "query_host": False}
    refused = run_module("nvidia_driver_plan", args)
    assert refused.get("failed") and "needs driver branch >= 570" in refused["msg"]
    ok = run_module("nvidia_driver_plan", dict(args, branch="auto"))
    assert ok["changed"] is False and ok["kernel_modules"] == "open" and ok["branch"] is None


def test_apt_source_conflicts_reads_the_sources_directory(tmp_path):
    """cuda-keyring's real list in a sources directory; gpuhost's own file is not counted; nothing changes."""
    with open(os.path.join(FIXTURES, "cuda_repo", "cuda-debian13-x86_64.list"), encoding="utf-8") as handle:
        keyring_list = handle.read()
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "cuda-debian13-x86_64.list").write_text(keyring_list)
    own = tmp_path / "sources.list.d" / "nvidia-cuda.sources"
    own.write_text("Types: deb\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64\n"
                   "Suites: /\nSigned-By: /etc/apt/keyrings/nvidia-cuda.asc\n")
    args = {"uri": "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64",
            "signed_by": "/etc/apt/keyrings/nvidia-cuda.asc", "own_path": str(own),
            "sources_dir": str(tmp_path / "sources.list.d"), "sources_list": str(tmp_path / "sources.list"),
            "layer": "nvidia_driver", "fix": "apt purge cuda-keyring"}
    found = run_module("apt_source_conflicts", args, "--check")
    assert found["changed"] is False and found["failed"] is True
    assert [(c["path"].rsplit("/", 1)[1], c["signed_by"]) for c in found["conflicts"]] == [
        ("cuda-debian13-x86_64.list", "/usr/share/keyrings/cuda-archive-keyring.gpg")]
    assert found["msg"].startswith("nvidia_driver: %s already names" % (tmp_path / "sources.list.d" / "cuda-debian13-x86_64.list"))
    assert "Signed-By /usr/share/keyrings/cuda-archive-keyring.gpg;" in found["msg"]
    assert found["msg"].endswith("apt purge cuda-keyring. Nothing was changed.")
    (tmp_path / "sources.list.d" / "cuda-debian13-x86_64.list").unlink()
    clean = run_module("apt_source_conflicts", args)
    assert clean["conflicts"] == [] and not clean.get("failed")
