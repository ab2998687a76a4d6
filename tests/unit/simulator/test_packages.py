"""build_repo.py: the simulated NVIDIA apt repositories (dpkg-deb, apt-ftparchive, gpg on this machine).

One build per module into a temporary directory (about 7 s); apt-get resolves against it offline
(file: URIs, its own state directories, nothing on this machine is touched).
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM = os.path.join(ROOT, "molecule", "simulator")
PKG = os.path.join(SIM, "packages")
for p in (SIM, PKG):
    if p not in sys.path:
        sys.path.insert(0, p)

import build_repo  # noqa: E402

pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv")),
                                reason="needs dpkg-deb, apt-ftparchive, gpg, gpgv")

U = "0ubuntu0.24.04.1"
DRIVERS = [("570", "570.195.03"), ("580", "580.95.05"), ("580", "580.105.08")]
UBUNTU = ["libnvidia-compute-{B}-server", "nvidia-compute-utils-{B}-server", "nvidia-utils-{B}-server",
          "nvidia-kernel-common-{B}-server", "nvidia-headless-{B}-server", "nvidia-headless-{B}-server-open",
          "nvidia-headless-no-dkms-{B}-server", "nvidia-headless-no-dkms-{B}-server-open",
          "nvidia-kernel-source-{B}-server", "nvidia-kernel-source-{B}-server-open",
          "nvidia-dkms-{B}-server", "nvidia-dkms-{B}-server-open",
          "nvidia-driver-{B}-server", "nvidia-driver-{B}-server-open"]
# The kernel the archive's signed modules are built for (a real noble-updates one: research
# ubuntu-signed-modules-no-dkms.md 3, whose metapackage version is 6.8.0-149.149).
KVER = "6.8.0-149-generic"
KABI = "6.8.0-149.149"
# Per driver of the matrix, the per-kernel and flavour packages' version: the kernel's, '+N' per upload.
KV = {"570.195.03": KABI + "+1", "580.95.05": KABI + "+2", "580.105.08": KABI + "+3"}
KMOD = ["linux-modules-nvidia-{B}-server-generic", "linux-modules-nvidia-{B}-server-open-generic",
        "linux-modules-nvidia-{B}-server-%s" % KVER, "linux-modules-nvidia-{B}-server-open-%s" % KVER]
DEBIAN = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-smi", "libcuda1",
          "libnvidia-ml1", "libnvidia-ptxjitcompiler1", "nvidia-persistenced", "firmware-nvidia-gsp"]
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1"]


@pytest.fixture(scope="module", autouse=True)
def kernel_release():
    """Every build of this module is for KVER, whatever kernel runs the tests."""
    saved = os.environ.get("GPUSIM_KERNEL_RELEASE")
    os.environ["GPUSIM_KERNEL_RELEASE"] = KVER
    yield KVER
    if saved is None:
        del os.environ["GPUSIM_KERNEL_RELEASE"]
    else:
        os.environ["GPUSIM_KERNEL_RELEASE"] = saved


@pytest.fixture(scope="module")
def repo(tmp_path_factory, kernel_release):
    out = str(tmp_path_factory.mktemp("simrepo") / "simrepo")
    assert build_repo.main(["--out", out, "--base-url", "http://127.0.0.1:8765"]) == 0
    return out


def built_repo(tmp_path_factory):
    """The simulated repositories, built for KVER (build_repo reads the kernel release from the environment; the one
    before is put back): the CUDA-repository tests' module fixture."""
    saved = os.environ.get("GPUSIM_KERNEL_RELEASE")
    os.environ["GPUSIM_KERNEL_RELEASE"] = KVER
    try:
        out = str(tmp_path_factory.mktemp("simrepo") / "simrepo")
        assert build_repo.main(["--out", out]) == 0
    finally:
        if saved is None:
            os.environ.pop("GPUSIM_KERNEL_RELEASE", None)
        else:
            os.environ["GPUSIM_KERNEL_RELEASE"] = saved
    return out


def packages_file(path):
    """deb822 paragraphs of a Packages file."""
    with open(path) as fh:
        text = fh.read()
    out = []
    for para in text.strip().split("\n\n"):
        fields = {}
        for line in para.splitlines():
            if line.startswith(" "):
                continue
            k, _, v = line.partition(":")
            fields[k] = v.strip()
        out.append(fields)
    return out


def index(repo, rel):
    return {(p["Package"], p["Version"]): p for p in packages_file(os.path.join(repo, rel))}


def test_layout_and_summary(repo):
    with open(os.path.join(repo, "repo.json")) as fh:
        summary = json.load(fh)
    assert summary["repos"] == {
        "ubuntu": {"layout": "dists", "path": "ubuntu/", "suites": ["noble-updates"],
                   "components": ["main", "multiverse", "restricted"]},
        "debian": {"layout": "dists", "path": "debian/", "suites": ["bookworm", "trixie"],
                   "components": ["non-free", "non-free-firmware"]},
        "cuda-debian12": {"layout": "flat", "path": "cuda/repos/debian12/x86_64/", "suites": ["/"], "components": []},
        "cuda-ubuntu2404": {"layout": "flat", "path": "cuda/repos/ubuntu2404/x86_64/", "suites": ["/"],
                            "components": []},
        "libnvidia-container": {"layout": "flat", "path": "libnvidia-container/stable/deb/amd64/", "suites": ["/"],
                                "components": []}}
    for rel in ("ubuntu/dists/noble-updates/restricted/binary-amd64/Packages.gz",
                "ubuntu/dists/noble-updates/main/binary-amd64/Packages",
                "debian/dists/trixie/non-free-firmware/binary-amd64/Packages",
                "debian/dists/bookworm/non-free/binary-amd64/Packages",
                "libnvidia-container/stable/deb/amd64/Packages.gz",
                "libnvidia-container/gpgkey", "keys/gpusim-archive-keyring.gpg",
                "keys/gpusim-archive-keyring.asc", "keys/FINGERPRINT"):
        assert os.path.isfile(os.path.join(repo, rel)), rel
    with open(os.path.join(repo, "libnvidia-container/stable/deb/nvidia-container-toolkit.list")) as fh:
        assert fh.read() == ("deb http://127.0.0.1:8765/libnvidia-container/stable/deb/$(ARCH) /\n"
                             "#deb http://127.0.0.1:8765/libnvidia-container/experimental/deb/$(ARCH) /\n")


def test_ubuntu_packages_and_depends(repo):
    idx = index(repo, "ubuntu/dists/noble-updates/restricted/binary-amd64/Packages")
    expected = {(n.format(B=b), "%s-%s" % (v, U)) for b, v in DRIVERS for n in UBUNTU}
    expected |= {(n.format(B=b), KV[v]) for b, v in DRIVERS for n in KMOD}
    assert set(idx) == expected
    dv = "580.95.05-" + U
    # Canonical's debian/control (research 1): the driver metapackage pulls DKMS; the no-dkms headless
    # metapackage does not, and brings no nvidia-smi (nvidia-utils); headless = no-dkms + dkms.
    driver = idx[("nvidia-driver-580-server-open", dv)]["Depends"]
    assert ("nvidia-dkms-580-server-open (<= 580.95.05-1), nvidia-dkms-580-server-open (>= 580.95.05)" in driver
            and "nvidia-utils-580-server (= %s)" % dv in driver and "linux-modules" not in driver)
    no_dkms = idx[("nvidia-headless-no-dkms-580-server-open", dv)]["Depends"]
    assert "dkms" not in no_dkms.replace("no-dkms", "") and "nvidia-utils" not in no_dkms
    assert "nvidia-kernel-source-580-server-open (= %s)" % dv in no_dkms
    assert idx[("nvidia-headless-580-server", dv)]["Depends"] == (
        "nvidia-headless-no-dkms-580-server, nvidia-dkms-580-server")
    dkms = idx[("nvidia-dkms-580-server", dv)]
    assert dkms["Provides"] == dkms["Conflicts"] == "nvidia-dkms-kernel"
    utils = idx[("nvidia-utils-580-server", dv)]
    assert (utils["Provides"], utils["Conflicts"], utils["Replaces"]) == ("nvidia-utils",) * 3
    # the flavour metapackage: the kernel's version, the per-kernel package at it, kernel-common >= the
    # driver (packages.ubuntu.com); the per-kernel one pins kernel-common to one driver (the 515 stanza)
    meta = idx[("linux-modules-nvidia-580-server-open-generic", KV["580.95.05"])]
    assert meta["Depends"] == ("linux-modules-nvidia-580-server-open-%s (= %s), nvidia-kernel-common-580-server "
                               "(>= 580.95.05)" % (KVER, KV["580.95.05"]))
    per_kernel = idx[("linux-modules-nvidia-580-server-open-" + KVER, KV["580.95.05"])]
    assert per_kernel["Depends"] == (
        "linux-image-%s | linux-image-unsigned-%s, nvidia-kernel-common-580-server (<= 580.95.05-1), "
        "nvidia-kernel-common-580-server (>= 580.95.05)" % (KVER, KVER))
    assert per_kernel["Conflicts"] == per_kernel["Replaces"] == ", ".join(sorted(
        n % KVER for n in ("linux-modules-nvidia-570-server-%s", "linux-modules-nvidia-570-server-open-%s",
                           "linux-modules-nvidia-580-server-%s")))
    assert utils["Filename"] == ("pool/restricted/n/nvidia-graphics-drivers-580-server/"
                                 "nvidia-utils-580-server_%s_amd64.deb" % dv)
    main = index(repo, "ubuntu/dists/noble-updates/main/binary-amd64/Packages")
    # and a newer kernel (the next major release) the archive has no signed nvidia modules for
    assert set(main) == {("ubuntu-drivers-common", "1:0.9.7.6ubuntu3.2"), ("linux-image-generic", KABI),
                         ("linux-image-" + KVER, KABI), ("linux-image-7.0.0-1-generic", "7.0.0-1.1")}
    assert not [n for n, _v in idx if n.endswith("-7.0.0-1-generic")]
    assert main[("linux-image-generic", KABI)]["Depends"] == "linux-image-" + KVER


def test_debian_packages_and_depends(repo):
    for suite in ("bookworm", "trixie"):
        nonfree = index(repo, "debian/dists/%s/non-free/binary-amd64/Packages" % suite)
        firmware = index(repo, "debian/dists/%s/non-free-firmware/binary-amd64/Packages" % suite)
        assert set(nonfree) == {(n, v + "-1") for _b, v in DRIVERS for n in DEBIAN if n != "firmware-nvidia-gsp"}
        assert set(firmware) == {("firmware-nvidia-gsp", v + "-1") for _b, v in DRIVERS}
    drv = nonfree[("nvidia-driver", "580.95.05-1")]
    assert drv["Depends"] == ("nvidia-kernel-dkms (= 580.95.05-1) | nvidia-kernel-580.95.05 | "
                              "nvidia-open-kernel-dkms (= 580.95.05-1) | nvidia-open-kernel-580.95.05, "
                              "libcuda1 (= 580.95.05-1), libnvidia-ml1 (= 580.95.05-1), "
                              "firmware-nvidia-gsp (= 580.95.05-1)")
    assert drv["Recommends"] == "nvidia-smi (= 580.95.05-1), nvidia-persistenced"
    assert nonfree[("nvidia-open-kernel-dkms", "580.95.05-1")]["Conflicts"] == "nvidia-kernel-dkms"
    assert nonfree[("nvidia-smi", "570.195.03-1")]["Depends"] == "libnvidia-ml1 (= 570.195.03-1)"


def test_toolkit_packages_and_depends(repo):
    idx = index(repo, "libnvidia-container/stable/deb/amd64/Packages")
    assert set(idx) == {(n, v) for v in ("1.17.8-1", "1.18.0-1") for n in TOOLKIT}
    assert idx[("nvidia-container-toolkit", "1.18.0-1")]["Depends"] == (
        "nvidia-container-toolkit-base (= 1.18.0-1), libnvidia-container-tools (= 1.18.0-1), "
        "libnvidia-container-tools (<< 2.0.0)")
    assert idx[("nvidia-container-toolkit", "1.17.8-1")]["Depends"] == (
        "nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (>= 1.17.8-1), "
        "libnvidia-container-tools (<< 2.0.0)")
    assert idx[("libnvidia-container-tools", "1.18.0-1")]["Depends"] == "libnvidia-container1 (>= 1.18.0-1)"
    assert idx[("nvidia-container-toolkit-base", "1.18.0-1")]["Breaks"] == (
        "nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook, nvidia-container-toolkit (<= 1.10.0-1)")
    assert idx[("nvidia-container-toolkit", "1.18.0-1")]["Filename"] == "./nvidia-container-toolkit_1.18.0-1_amd64.deb"


def test_signatures_verify_with_the_exported_key(repo):
    keyring = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    for d in ("ubuntu/dists/noble-updates", "debian/dists/bookworm", "debian/dists/trixie",
              "libnvidia-container/stable/deb/amd64"):
        d = os.path.join(repo, d)
        for cmd in (["gpgv", "--keyring", keyring, os.path.join(d, "InRelease")],
                    ["gpgv", "--keyring", keyring, os.path.join(d, "Release.gpg"), os.path.join(d, "Release")]):
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
            assert res.returncode == 0, res.stderr
            assert "Good signature" in res.stderr
    with open(os.path.join(repo, "debian/dists/trixie/Release")) as fh:
        release = "\n" + fh.read()
    assert "\nSuite: trixie\n" in release and "\nCodename: trixie\n" in release
    assert "\nComponents: non-free non-free-firmware\n" in release and "\nArchitectures: amd64\n" in release
    assert re.search(r"^ [0-9a-f]{64} +\d+ non-free/binary-amd64/Packages.gz$", release, re.M)


def test_fingerprint_files_and_armored_key(repo, tmp_path):
    with open(os.path.join(repo, "keys", "FINGERPRINT")) as fh:
        fpr = fh.read()
    assert re.match(r"^[0-9A-F]{40}\n$", fpr)
    with open(os.path.join(repo, "repo.json")) as fh:
        assert json.load(fh)["fingerprint"] == fpr.strip()
    res = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys",
                          os.path.join(repo, "libnvidia-container", "gpgkey")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                         env=dict(os.environ, GNUPGHOME=str(tmp_path)))
    assert "fpr:::::::::%s:" % fpr.strip() in res.stdout
    # the role's step: gpg --dearmor of NVIDIA's gpgkey gives the binary keyring
    deb = subprocess.run(["gpg", "--batch", "--dearmor"], input=open(os.path.join(repo, "libnvidia-container",
                                                                                  "gpgkey"), "rb").read(),
                         stdout=subprocess.PIPE, env=dict(os.environ, GNUPGHOME=str(tmp_path)))
    with open(os.path.join(repo, "keys", "gpusim-archive-keyring.gpg"), "rb") as fh:
        assert deb.stdout == fh.read()


def test_second_run_is_skipped_and_input_change_rebuilds(repo, monkeypatch, capsys):
    with open(os.path.join(repo, "keys", "FINGERPRINT")) as fh:
        fpr = fh.read().strip()
    assert build_repo.main(["--out", repo]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == \
        {"out": repo, "fingerprint": fpr, "rebuilt": False}
    assert build_repo.up_to_date(repo)["fingerprint"] == fpr
    monkeypatch.setattr(build_repo, "inputs_hash", lambda: "0" * 64)
    assert build_repo.up_to_date(repo) is None


def deb_path(repo, name, version, flat=False):
    for dirpath, _d, files in os.walk(repo):
        f = "%s_%s_amd64.deb" % (name, version.split(":")[-1])
        if f in files:
            return os.path.join(dirpath, f)
    raise FileNotFoundError(name)


def extract(deb, dest):
    subprocess.run(["dpkg-deb", "-x", deb, str(dest)], check=True)
    subprocess.run(["dpkg-deb", "-e", deb, str(dest / "DEBIAN")], check=True)
    return dest


def test_deb_contents_units_and_conffiles(repo, tmp_path):
    base = extract(deb_path(repo, "nvidia-container-toolkit-base", "1.18.0-1"), tmp_path / "b18")
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
        with open(os.path.join(PKG, "files", unit)) as src:
            assert (base / "etc" / "systemd" / "system" / unit).read_text() == src.read()
    svc = (base / "etc" / "systemd" / "system" / "nvidia-cdi-refresh.service").read_text()
    assert "Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml\n" in svc
    assert "EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env\n" in svc
    path_unit = (base / "etc" / "systemd" / "system" / "nvidia-cdi-refresh.path").read_text()
    assert "PathChanged=/lib/modules/%v/modules.dep\nPathChanged=/lib/modules/%v/modules.dep.bin\n" \
           "PathChanged=/usr/bin/nvidia-ctk\n" in path_unit
    assert (base / "DEBIAN" / "conffiles").read_text() == (
        "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env\n/etc/systemd/system/nvidia-cdi-refresh.path\n"
        "/etc/systemd/system/nvidia-cdi-refresh.service\n")
    postinst = (base / "DEBIAN" / "postinst").read_text()
    assert "/usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place" \
        in postinst and "systemctl enable --now nvidia-cdi-refresh.path" in postinst and "#DEBHELPER#" not in postinst
    b17 = extract(deb_path(repo, "nvidia-container-toolkit-base", "1.17.8-1"), tmp_path / "b17")
    assert not (b17 / "etc").exists()
    assert "nvidia-cdi-refresh" not in (b17 / "DEBIAN" / "postinst").read_text()
    utils = extract(deb_path(repo, "nvidia-utils-580-server", "580.95.05-" + U), tmp_path / "u")
    with open(os.path.join(SIM, "bin", "nvidia-smi"), "rb") as fh:
        assert (utils / "usr" / "bin" / "nvidia-smi").read_bytes() == fh.read()
    assert os.stat(str(utils / "usr" / "bin" / "nvidia-smi")).st_mode & 0o777 == 0o755
    listing = subprocess.run(["dpkg-deb", "-c", deb_path(repo, "nvidia-utils-580-server", "580.95.05-" + U)],
                             stdout=subprocess.PIPE, universal_newlines=True).stdout
    assert "root/root" in listing and "./usr/bin/nvidia-smi" in listing
    cu = extract(deb_path(repo, "nvidia-compute-utils-580-server", "580.95.05-" + U), tmp_path / "cu")
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose" in \
        (cu / "lib" / "systemd" / "system" / "nvidia-persistenced.service").read_text()


def test_driver_libraries_are_elf_with_soname(repo, tmp_path):
    lib = extract(deb_path(repo, "libnvidia-compute-580-server", "580.95.05-" + U), tmp_path / "l")
    d = lib / "usr" / "lib" / "x86_64-linux-gnu"
    assert os.readlink(str(d / "libcuda.so.1")) == "libcuda.so.580.95.05"
    data = (d / "libcuda.so.580.95.05").read_bytes()
    assert data[:4] == b"\x7fELF" and b"libcuda.so.1\0" in data
    if shutil.which("ldconfig") or os.path.exists("/sbin/ldconfig"):
        for link in d.iterdir():
            if link.is_symlink():
                link.unlink()
        subprocess.run([shutil.which("ldconfig") or "/sbin/ldconfig", "-n", str(d)], check=True)
        assert os.readlink(str(d / "libcuda.so.1")) == "libcuda.so.580.95.05"       # ldconfig read the SONAME
        assert os.readlink(str(d / "libnvidia-nvvm.so.4")) == "libnvidia-nvvm.so.580.95.05"


def test_toolkit_version_substituted_in_executables(repo, tmp_path):
    for v, commit in (("1.17.8", "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d"),
                      ("1.18.0", "f8daa5e26de9fd7eb79259040b6dd5a52060048c")):
        base = extract(deb_path(repo, "nvidia-container-toolkit-base", v + "-1"), tmp_path / v)
        res = subprocess.run([sys.executable, str(base / "usr" / "bin" / "nvidia-ctk"), "--version"],
                             stdout=subprocess.PIPE, universal_newlines=True,
                             env=dict(os.environ, PYTHONPATH=SIM))
        assert res.stdout == "NVIDIA Container Toolkit CLI version %s\ncommit: %s\n" % (v, commit)


def run_script(path, arg, env):
    res = subprocess.run(["sh", str(path), arg], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    assert res.returncode == 0, res.stderr
    return res


def test_maintainer_scripts_update_installed_state_and_modules(repo, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"schema": 1, "gpus": [], "driver": {"installed": None, "loaded": None}}))
    env = dict(os.environ, GPUSIM_STATE=str(state), GPUSIM_ROOT=str(tmp_path / "root"), PYTHONPATH=SIM)
    dv = "580.95.05-" + U
    mods = extract(deb_path(repo, "linux-modules-nvidia-580-server-open-" + KVER, KV["580.95.05"]), tmp_path / "m")
    prop = extract(deb_path(repo, "linux-modules-nvidia-580-server-" + KVER, KV["580.95.05"]), tmp_path / "p")
    compute = extract(deb_path(repo, "libnvidia-compute-580-server", dv), tmp_path / "c")

    run_script(compute / "DEBIAN" / "postinst", "configure", env)
    inst = json.loads(state.read_text())["driver"]["installed"]
    assert inst == {"version": "580.95.05", "kernel_modules": None, "packages": ["libnvidia-compute-580-server"]}
    run_script(mods / "DEBIAN" / "postinst", "configure", env)
    s = json.loads(state.read_text())
    assert s["driver"]["installed"] == {"version": "580.95.05", "kernel_modules": "open",
                                        "packages": ["libnvidia-compute-580-server",
                                                     "linux-modules-nvidia-580-server-open-" + KVER]}
    assert s["driver"]["loaded"] is None                    # only a boot loads a module
    # the per-kernel package's modules belong to its kernel, whatever kernel runs the script
    dep = tmp_path / "root" / "lib" / "modules" / KVER / "modules.dep"
    assert "kernel/nvidia-580srv-open/nvidia.ko:\n" in dep.read_text()
    assert (dep.parent / "kernel" / "nvidia-580srv-open" / "nvidia-uvm.ko").is_file()
    # a second configure (reinstall) does not duplicate the modules.dep lines
    run_script(mods / "DEBIAN" / "postinst", "configure", env)
    assert dep.read_text().count("kernel/nvidia-580srv-open/nvidia.ko:") == 1
    # removing the other flavour (as a Conflicts switch does) leaves this one
    run_script(prop / "DEBIAN" / "postrm", "remove", env)
    assert json.loads(state.read_text())["driver"]["installed"]["kernel_modules"] == "open"
    run_script(mods / "DEBIAN" / "postrm", "upgrade", env)  # an upgrade's old postrm changes nothing
    assert json.loads(state.read_text())["driver"]["installed"]["kernel_modules"] == "open"
    run_script(mods / "DEBIAN" / "postrm", "remove", env)
    inst = json.loads(state.read_text())["driver"]["installed"]
    assert inst == {"version": "580.95.05", "kernel_modules": None, "packages": ["libnvidia-compute-580-server"]}
    assert "nvidia-580srv-open" not in dep.read_text()
    assert not (dep.parent / "kernel" / "nvidia-580srv-open").exists()
    run_script(compute / "DEBIAN" / "postrm", "remove", env)
    assert json.loads(state.read_text())["driver"]["installed"] is None


def test_ubuntu_dkms_builds_for_the_running_kernel(repo, tmp_path):
    env = dict(os.environ, GPUSIM_STATE=str(tmp_path / "s.json"), GPUSIM_ROOT=str(tmp_path / "root"),
               PYTHONPATH=SIM)
    dkms = extract(deb_path(repo, "nvidia-dkms-580-server-open", "580.95.05-" + U), tmp_path / "d")
    run_script(dkms / "DEBIAN" / "postinst", "configure", env)
    dep = (tmp_path / "root" / "lib" / "modules" / os.uname().release / "modules.dep").read_text()
    assert "updates/dkms/nvidia.ko:\n" in dep      # where Ubuntu's DKMS installs the modules
    assert json.loads((tmp_path / "s.json").read_text())["driver"]["installed"]["kernel_modules"] == "open"


def test_debian_dkms_module_names_match_the_1_20_refresh_condition_only(repo, tmp_path):
    env = dict(os.environ, GPUSIM_STATE=str(tmp_path / "s.json"), GPUSIM_ROOT=str(tmp_path / "root"),
               PYTHONPATH=SIM)
    dkms = extract(deb_path(repo, "nvidia-kernel-dkms", "580.95.05-1"), tmp_path / "d")
    run_script(dkms / "DEBIAN" / "postinst", "configure", env)
    dep = (tmp_path / "root" / "lib" / "modules" / os.uname().release / "modules.dep").read_text()
    assert "updates/dkms/nvidia-current.ko:" in dep
    assert not re.search(r"/nvidia.ko", dep)                        # 1.18.0's ExecCondition: grep -qE '/nvidia.ko'
    assert re.search(r"/(nvidia|nvidia-current)[.]ko", dep)         # 1.20.0's
    assert json.loads((tmp_path / "s.json").read_text())["driver"]["installed"]["kernel_modules"] == "proprietary"


# --------------------------------------------------------------------------------------------------
# apt resolves the repositories (offline, file: URIs, an apt of its own)

def apt(repo, tmp_path, sources, *args):
    a = tmp_path / "apt"
    if not a.exists():
        for d in ("etc/sources.list.d", "etc/preferences.d", "etc/trusted.gpg.d", "lists/partial",
                  "cache/archives/partial", "log"):
            (a / d).mkdir(parents=True)
        (a / "etc" / "sources.list.d" / "sim.sources").write_text(sources)
        (a / "status").write_text("".join(
            "Package: %s\nStatus: install ok installed\nPriority: optional\nVersion: %s\nArchitecture: amd64\n"
            "Description: preinstalled\n\n" % pv for pv in (("python3", "3.11.2-1"), ("adduser", "3.134"))))
    opts = ["-o", "Dir::Etc=%s" % (a / "etc"), "-o", "Dir::Etc::sourcelist=/dev/null",
            "-o", "Dir::Etc::sourceparts=%s" % (a / "etc" / "sources.list.d"),
            "-o", "Dir::Etc::preferencesparts=%s" % (a / "etc" / "preferences.d"),
            "-o", "Dir::Etc::trustedparts=%s" % (a / "etc" / "trusted.gpg.d"),
            "-o", "Dir::State=%s" % a, "-o", "Dir::State::Lists=%s" % (a / "lists"),
            "-o", "Dir::State::status=%s" % (a / "status"), "-o", "Dir::Cache=%s" % (a / "cache"),
            "-o", "Dir::Log=%s" % (a / "log"), "-o", "APT::Architecture=amd64", "-o", "APT::Architectures=amd64",
            "-o", "APT::Sandbox::User=root", "-o", "Debug::NoLocking=1", "-o", "APT::Get::List-Cleanup=0",
            "-o", "Acquire::Languages=none", "-o", "Dir::Bin::dpkg=/bin/true"]
    res = subprocess.run(["apt-get", "-q"] + opts + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, env=dict(os.environ, LC_ALL="C"))
    return res


def installs(res):
    return dict(re.findall(r"^Inst (\S+) \((\S+) ", res.stdout, re.M))


@pytest.fixture
def ubuntu_apt(repo, tmp_path):
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    sources = ("Types: deb\nURIs: file:%s/ubuntu\nSuites: noble-updates\nComponents: restricted main\n"
               "Signed-By: %s\n\n"
               "Types: deb\nURIs: file:%s/libnvidia-container/stable/deb/amd64\nSuites: /\nSigned-By: %s\n"
               % (repo, key, repo, key))
    res = apt(repo, tmp_path, sources, "update")
    assert res.returncode == 0 and "W:" not in res.stderr and "E:" not in res.stderr, res.stdout + res.stderr
    return lambda *a: apt(repo, tmp_path, sources, *a)


UBUNTU_USERSPACE = ("libnvidia-compute-{B}-server", "nvidia-compute-utils-{B}-server",
                    "nvidia-kernel-common-{B}-server", "nvidia-kernel-source-{B}-server-open")


def test_apt_resolves_ubuntu_driver_metapackages(ubuntu_apt):
    # the full driver pulls DKMS (research 1) ...
    res = ubuntu_apt("-s", "install", "nvidia-driver-580-server-open")
    assert res.returncode == 0, res.stdout + res.stderr
    dv = "580.105.08-" + U
    assert installs(res) == {n.format(B="580"): dv for n in UBUNTU_USERSPACE + (
        "nvidia-utils-{B}-server", "nvidia-dkms-{B}-server-open", "nvidia-driver-{B}-server-open")}
    # ... the no-DKMS set ubuntu-drivers --gpgpu installs does not (research 2), nvidia-utils added for nvidia-smi
    res = ubuntu_apt("-s", "install", "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                     "linux-modules-nvidia-580-server-open-generic")
    assert res.returncode == 0, res.stdout + res.stderr
    got = installs(res)
    assert got == dict({n.format(B="580"): dv for n in UBUNTU_USERSPACE + (
        "nvidia-utils-{B}-server", "nvidia-headless-no-dkms-{B}-server-open")},
        **{"linux-modules-nvidia-580-server-open-generic": KV["580.105.08"],
           "linux-modules-nvidia-580-server-open-" + KVER: KV["580.105.08"], "linux-image-" + KVER: KABI})
    res = ubuntu_apt("-s", "install", "nvidia-driver-570-server")
    assert res.returncode == 0 and installs(res)["nvidia-dkms-570-server"] == "570.195.03-" + U


def test_apt_pinned_older_driver_and_toolkit(ubuntu_apt):
    dv = "580.95.05-" + U
    names = ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server", "libnvidia-compute-580-server",
             "nvidia-compute-utils-580-server", "nvidia-kernel-common-580-server", "nvidia-kernel-source-580-server"]
    kmod = ["linux-modules-nvidia-580-server-generic", "linux-modules-nvidia-580-server-" + KVER]
    res = ubuntu_apt("-s", "install", *["%s=%s" % (n, dv) for n in names] + ["%s=%s" % (n, KV["580.95.05"])
                                                                             for n in kmod])
    assert res.returncode == 0, res.stdout + res.stderr
    assert set(v for n, v in installs(res).items() if n in names) == {dv}
    # the signed modules of another driver do not fit the pinned userspace
    res = ubuntu_apt("-s", "install", *["%s=%s" % (n, dv) for n in names] + ["%s=%s" % (n, KV["580.105.08"])
                                                                             for n in kmod])
    assert res.returncode == 100 and "nvidia-kernel-common-580-server (>= 580.105.08)" in res.stdout, res.stdout
    res = ubuntu_apt("-s", "install", *["%s=1.17.8-1" % n for n in TOOLKIT])     # NVIDIA's documented pin
    assert res.returncode == 0, res.stdout + res.stderr
    assert installs(res) == {n: "1.17.8-1" for n in TOOLKIT}
    res = ubuntu_apt("-s", "install", "nvidia-container-toolkit")
    assert installs(res) == {n: "1.18.0-1" for n in TOOLKIT}


def test_apt_resolves_debian_driver(repo, tmp_path):
    key = os.path.join(repo, "keys", "gpusim-archive-keyring.gpg")
    sources = ("Types: deb\nURIs: file:%s/debian\nSuites: trixie\nComponents: non-free non-free-firmware\n"
               "Signed-By: %s\n" % (repo, key))
    res = apt(repo, tmp_path, sources, "update")
    assert res.returncode == 0 and "W:" not in res.stderr, res.stdout + res.stderr
    res = apt(repo, tmp_path, sources, "-s", "install", "nvidia-driver")
    assert res.returncode == 0, res.stdout + res.stderr
    got = installs(res)
    assert got["nvidia-kernel-dkms"] == "580.105.08-1" and "nvidia-open-kernel-dkms" not in got
    assert {"nvidia-smi", "nvidia-persistenced", "firmware-nvidia-gsp", "libcuda1"} <= set(got)
    res = apt(repo, tmp_path, sources, "-s", "--no-install-recommends", "install", "nvidia-open-kernel-dkms",
              "nvidia-driver")
    got = installs(res)
    assert res.returncode == 0 and "nvidia-kernel-dkms" not in got and "nvidia-smi" not in got
    assert got["nvidia-open-kernel-dkms"] == "580.105.08-1"



def test_fabric_manager_packages_lock_the_exact_driver(repo):
    """Ubuntu's fabric manager and NSCQ (multiverse) Depend on the virtual nvidia-kernel-common-<B>-server-<V>,
    which only that driver's nvidia-kernel-common-<B>-server Provides (docs/research/hgx-fabric-manager.md 1b)."""
    multiverse = index(repo, "ubuntu/dists/noble-updates/multiverse/binary-amd64/Packages")
    restricted = index(repo, "ubuntu/dists/noble-updates/restricted/binary-amd64/Packages")
    for b, v in DRIVERS:
        for name in ("nvidia-fabricmanager-%s" % b, "libnvidia-nscq-%s" % b):
            stanza = multiverse[(name, "%s-%s" % (v, U))]
            assert stanza["Depends"] == "nvidia-kernel-common-%s-server-%s" % (b, v)
        fm = multiverse[("nvidia-fabricmanager-%s" % b, "%s-%s" % (v, U))]
        # as the real debian/control (canonical/apt-packaging-fabric-manager, research 1a)
        assert fm["Provides"] == fm["Conflicts"] == fm["Replaces"] == "nvidia-fabricmanager"
        assert "/f/fabric-manager-%s/" % b in fm["Filename"]   # source fabric-manager-<B>, as Ubuntu's pool
        common = restricted[("nvidia-kernel-common-%s-server" % b, "%s-%s" % (v, U))]
        assert "nvidia-kernel-common-%s-server-%s" % (b, v) in common["Provides"]
