"""DCGM in the simulated NVIDIA CUDA repositories (specs/cuda.datacenter-gpu-manager*.json): the real names, epoch,
relations and files of NVIDIA/DCGM's packaging (cmake/packaging.cmake at 4.4.2 / 4.5.2, 3.3.9), in both
cuda/repos/debian12 and cuda/repos/ubuntu2404; apt resolves them offline as in test_packages.py."""
import os
import re
import subprocess

import pytest

from test_packages import KVER, apt, build_repo, built_repo, installs, packages_file  # noqa: F401 (the helpers)

pytestmark = pytest.mark.skipif(any(__import__("shutil").which(t) is None
                                    for t in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv")),
                                reason="needs dpkg-deb, apt-ftparchive, gpg, gpgv")

REPOS = {"debian12": "cuda/repos/debian12/x86_64", "ubuntu2404": "cuda/repos/ubuntu2404/x86_64"}
PKG = os.path.join(os.path.dirname(build_repo.__file__))
V4 = ("1:4.4.2-1", "1:4.5.2-1")
# what a Debian/Ubuntu target has before DCGM (essential or common packages the real Depends name)
BASE = (("libc6", "2.36-9"), ("lshw", "02.19.git.2021.06.19.996aaad9c7-2"), ("passwd", "1:4.13+dfsg1-1"),
        ("login", "1:4.13+dfsg1-1"), ("libnuma1", "2.0.16-1"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return built_repo(tmp_path_factory)


def stanzas(repo, which):
    return {(p["Package"], p["Version"]): p for p in packages_file(os.path.join(repo, REPOS[which], "Packages"))}


def apt_on(repo, tmp_path, which, installed=()):
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    src = "Types: deb\nURIs: file:%s/%s/\nSuites: /\nSigned-By: %s\n" % (repo, REPOS[which], key)
    res = apt(repo, tmp_path, src, "update")
    assert res.returncode == 0 and "E:" not in res.stderr, res.stdout + res.stderr
    status = tmp_path / "apt" / "status"
    text = status.read_text()
    for name, version in BASE:
        text += ("Package: %s\nStatus: install ok installed\nPriority: optional\nVersion: %s\nArchitecture: amd64\n"
                 "Description: preinstalled\n\n" % (name, version))
    for name, version, extra in installed:
        text += ("Package: %s\nStatus: %s\nPriority: optional\nVersion: %s\nArchitecture: amd64\n%s"
                 "Description: installed\n\n" % (name, "hold ok installed" if "hold" in extra else
                                                  "install ok installed", version,
                                                  "".join(l + "\n" for l in extra if l != "hold")))
    status.write_text(text)
    return lambda *a: apt(repo, tmp_path, src, *a)


@pytest.mark.parametrize("which", sorted(REPOS))
def test_the_real_names_versions_and_relations(repo, which):
    got = stanzas(repo, which)
    for v in V4:
        core = got[("datacenter-gpu-manager-4-core", v)]
        assert core["Pre-Depends"] == "passwd, login" and core["Depends"] == "libc6 (>= 2.27), lshw"
        assert core["Conflicts"] == "datacenter-gpu-manager" and "Replaces" not in core
        assert core["Maintainer"] == "dcgm-support <dcgm-support@nvidia.com>"
        assert core["Description"] == ("CUDA-version agnostic components of NVIDIA® Datacenter GPU Manager (DCGM)")
        for major in (12, 13):
            plugins = got[("datacenter-gpu-manager-4-cuda%d" % major, v)]
            assert plugins["Depends"] == "datacenter-gpu-manager-4-core (= %s)" % v
            assert plugins["Provides"] == "datacenter-gpu-manager-4 (= %s)" % v
            assert plugins["Filename"].endswith("datacenter-gpu-manager-4-cuda%d_%s_amd64.deb" % (major, v[2:]))
    old = got[("datacenter-gpu-manager", "1:3.3.9")]
    assert old["Filename"].endswith("datacenter-gpu-manager_3.3.9_amd64.deb") and old["Depends"] == "libc6 (>= 2.17)"
    assert old["Conflicts"].startswith("datacenter-gpu-manager, datacenter-gpu-manager-fabricmanager (<<2.0)")


def _extract(repo, which, name, version, dest):
    deb = os.path.join(repo, REPOS[which], "%s_%s_amd64.deb" % (name, version.split(":", 1)[-1]))
    subprocess.run(["dpkg-deb", "-x", deb, str(dest)], check=True)
    subprocess.run(["dpkg-deb", "-e", deb, str(dest / "DEBIAN")], check=True)
    return dest


def test_the_core_package_installs_the_real_unit_tools_and_postinst(repo, tmp_path):
    root = _extract(repo, "debian12", "datacenter-gpu-manager-4-core", "1:4.5.2-1", tmp_path / "core")
    unit = (root / "usr/lib/systemd/system/nvidia-dcgm.service").read_text()
    body = [l for l in unit.splitlines() if l and not l.startswith("#")]
    assert body == ["[Unit]", "Description=NVIDIA DCGM service", "After=nvidia-gpu-reset.target",
                    "Wants=nvidia-gpu-reset.target", "[Service]", "User=root", "PrivateTmp=false",
                    'Environment="DCGM_HOME_DIR=/var/log/nvidia-dcgm"',
                    "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", "Restart=on-abort",
                    "[Install]", "Alias=dcgm.service", "WantedBy=multi-user.target"]
    for tool in ("dcgmi", "nv-hostengine"):
        assert os.access(str(root / "usr/bin" / tool), os.X_OK)
    assert (root / "usr/lib/gpu-sim/dcgm.version").read_text() == "4.5.2\n"
    assert os.readlink(str(root / "usr/lib/x86_64-linux-gnu/libdcgm.so.4")) == "libdcgm.so.4.5.2"
    postinst = (root / "DEBIAN" / "postinst").read_text()
    assert postinst == open(os.path.join(PKG, "maint", "datacenter-gpu-manager-4-core.postinst")).read()
    assert "useradd -Urs /usr/sbin/nologin ${service_user}" in postinst and "service_user=nvidia-dcgm" in postinst
    assert "systemctl" not in postinst      # CPack: nothing enables or starts nvidia-dcgm
    plugins = _extract(repo, "ubuntu2404", "datacenter-gpu-manager-4-cuda13", "1:4.4.2-1", tmp_path / "c13")
    assert (plugins / "usr/libexec/datacenter-gpu-manager-4/plugins/cuda13/libMemory.so.4").is_symlink()
    old = _extract(repo, "debian12", "datacenter-gpu-manager", "1:3.3.9", tmp_path / "old")
    assert "Conflicts=dcgm.service" in (old / "usr/lib/systemd/system/nvidia-dcgm.service").read_text()
    assert "DEPRECATED" in (old / "usr/lib/systemd/system/dcgm.service").read_text()


@pytest.mark.parametrize("which", sorted(REPOS))
def test_apt_takes_the_newest_unless_the_version_is_pinned(repo, tmp_path, which):
    run = apt_on(repo, tmp_path, which)
    res = run("-s", "install", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13")
    assert res.returncode == 0, res.stdout + res.stderr
    assert installs(res) == {"datacenter-gpu-manager-4-core": "1:4.5.2-1",
                             "datacenter-gpu-manager-4-cuda13": "1:4.5.2-1"}
    res = run("-s", "install", "datacenter-gpu-manager-4-core=1:4.4.2-1", "datacenter-gpu-manager-4-cuda13=1:4.4.2-1")
    assert res.returncode == 0 and set(installs(res).values()) == {"1:4.4.2-1"}, res.stdout + res.stderr
    # the plugins pin the core: an older core with the newest plugins cannot be installed
    res = run("-s", "install", "datacenter-gpu-manager-4-core=1:4.4.2-1", "datacenter-gpu-manager-4-cuda13")
    assert res.returncode == 100 and "datacenter-gpu-manager-4-core (= 1:4.5.2-1)" in res.stdout, res.stdout


def test_a_held_dcgm_stays_at_its_version(repo, tmp_path):
    held = [("datacenter-gpu-manager-4-core", "1:4.4.2-1", ["Pre-Depends: passwd, login",
                                                             "Depends: libc6 (>= 2.27), lshw", "hold"]),
            ("datacenter-gpu-manager-4-cuda13", "1:4.4.2-1", ["Depends: datacenter-gpu-manager-4-core (= 1:4.4.2-1)",
                                                               "hold"])]
    run = apt_on(repo, tmp_path, "debian12", installed=held)
    res = run("-s", "dist-upgrade")
    assert res.returncode == 0 and "Inst datacenter-gpu-manager" not in res.stdout, res.stdout
    assert re.search(r"kept back:\n\s+datacenter-gpu-manager-4-core datacenter-gpu-manager-4-cuda13", res.stdout)
    free = held[:1] + [(held[1][0], held[1][1], held[1][2][:1])]
    free = [(n, v, [x for x in e if x != "hold"]) for n, v, e in free]
    res = apt_on(repo, tmp_path / "free", "debian12", installed=free)("-s", "dist-upgrade")
    upgrades = dict(re.findall(r"^Inst (\S+) \[1:4\.4\.2-1\] \((\S+) ", res.stdout, re.M))
    assert upgrades == {"datacenter-gpu-manager-4-core": "1:4.5.2-1", "datacenter-gpu-manager-4-cuda13": "1:4.5.2-1"}


@pytest.mark.parametrize("which", sorted(REPOS))
def test_dcgm_4_removes_dcgm_3(repo, tmp_path, which):
    installed = [("datacenter-gpu-manager", "1:3.3.9", ["Depends: libc6 (>= 2.17)",
                                                        "Provides: datacenter-gpu-manager",
                                                        "Conflicts: datacenter-gpu-manager"])]
    run = apt_on(repo, tmp_path, which, installed=installed)
    res = run("-s", "install", "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12")
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.findall(r"^Remv (\S+) ", res.stdout, re.M) == ["datacenter-gpu-manager"]
    assert set(installs(res)) == {"datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"}
