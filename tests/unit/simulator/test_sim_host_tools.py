"""lspci, ubuntu-drivers, nvidia-persistenced and hardware/install.sh of the simulated host."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from simhelpers import BIN, SIM, dump, host, make_state
from gpusim import boot, drivers, pci, persistenced, state as st

LSPCI_NN = re.compile(r"^(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] [A-Za-z0-9 /-]+ \[[0-9a-f]{4}\]: .+ "
                      r"\[[0-9a-f]{4}:[0-9a-f]{4}\]( \(rev [0-9a-f]{2}\))?$")


def test_lspci_nn_lines_have_the_real_shape(tmp_path):
    real = [l for l in host("lspci-nn-D_4xRTXPRO6000").split("\n") if l.strip()]
    assert all(LSPCI_NN.match(l) for l in real)
    s = make_state(tmp_path / "s.json", models=("rtx-pro-6000-bse", "h100"))
    out, _, rc = pci.render(s, ["-nn", "-D"])
    lines = out.strip().split("\n")
    assert rc == 0 and all(LSPCI_NN.match(l) for l in lines)
    assert "0000:17:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] " \
           "[10de:2bb5] (rev a1)" in lines
    assert lines[-1].startswith("0000:31:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB]")
    # host devices that are not NVIDIA, one of them a VGA controller: parsers must filter on 10de
    assert any("[1a03:2000]" in l and "VGA compatible controller [0300]" in l for l in lines)
    assert real[1] in [l.replace("0000:17:", "0000:38:") for l in lines]


def test_lspci_filters_and_forms(tmp_path):
    s = make_state(tmp_path / "s.json", models=("rtx-pro-6000-bse", "l4"))
    assert pci.render(s, ["-d", "10de:"])[0] == (
        "17:00.0 3D controller: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] (rev a1)\n"
        "31:00.0 3D controller: NVIDIA Corporation AD104GL [L4] (rev a1)\n")
    assert pci.render(s, ["-nn", "-d", "10de:27b8"])[0].count("\n") == 1
    assert pci.render(s, ["-n", "-s", "17:00.0"])[0] == "17:00.0 0302: 10de:2bb5 (rev a1)\n"
    assert pci.render(s, ["-s", "0000:31:00"])[0].startswith("31:00.0 3D controller: NVIDIA")
    assert pci.render(s, ["-d", "::0300"])[0].startswith("02:00.0 VGA compatible controller: ASPEED")
    k = pci.render(s, ["-k", "-d", "10de:2bb5"])[0].split("\n")
    assert k[1:4] == ["\tSubsystem: NVIDIA Corporation Device 204e", "\tKernel driver in use: nvidia",
                      "\tKernel modules: nvidiafb, nouveau, nvidia_drm, nvidia"]
    mm = pci.render(s, ["-mm", "-D", "-d", "10de:27b8"])[0]
    assert mm == '0000:31:00.0 "3D controller" "NVIDIA Corporation" "AD104GL [L4]" -ra1 -p00 "NVIDIA Corporation" ' \
                 '"Device 16ca"\n'
    assert pci.render(s, ["-z"])[2] == 2


def test_lspci_no_driver_in_use_without_loaded_module(tmp_path):
    s = make_state(tmp_path / "s.json", driver=None)
    k = pci.render(s, ["-k", "-d", "10de:"])[0]
    assert "Kernel driver in use" not in k and "Kernel modules: nvidiafb, nouveau" in k


def test_ubuntu_drivers_devices_shape(tmp_path):
    real = [l.strip() for l in host("ubuntu-drivers-devices_TeslaT4").split("\n") if l.strip()]
    s = make_state(tmp_path / "s.json")
    s["repo_branches"] = ["570", "580"]
    out = drivers.devices_text(s).strip().split("\n")
    keys = lambda lines: [l.split(":")[0].strip() if " : " in l else l.split(" ")[0] for l in lines]  # noqa: E731
    assert keys(out)[:4] == keys(real)[:4] == ["==", "modalias", "vendor", "model"]
    assert out[0] == "== /sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0 =="
    assert out[1] == "modalias : pci:v000010DEd00002BB5sv000010DEsd0000204Ebc03sc02i00"
    assert out[3] == "model    : GB202GL [RTX PRO 6000 Blackwell Server Edition]"
    drv = [l for l in out if l.startswith("driver   : nvidia-driver-")]
    assert len(drv) == 8
    assert all(re.match(r"^driver   : nvidia-driver-\d+(-server)?(-open)? - distro non-free( recommended)?$", l)
               for l in drv + [l for l in real if l.startswith("driver   : nvidia")])
    assert [l for l in drv if l.endswith("recommended")] == \
        ["driver   : nvidia-driver-580-open - distro non-free recommended"]
    assert out[-1] == real[-1] == "driver   : xserver-xorg-video-nouveau - distro free builtin"


def test_ubuntu_drivers_candidates_follow_min_branch_and_override(tmp_path):
    s = make_state(tmp_path / "s.json", models=("h100",))
    s["repo_branches"] = ["535", "570", "580"]
    text = drivers.devices_text(s)
    assert "nvidia-driver-535-server - distro non-free" in text
    assert "nvidia-driver-580 - distro non-free recommended" in text
    s = make_state(tmp_path / "s.json")
    s["repo_branches"] = ["535", "570"]
    assert "535" not in drivers.devices_text(s)
    s["ubuntu_drivers"] = {"recommended": "nvidia-driver-570"}
    assert "driver   : nvidia-driver-570 - distro non-free recommended" in drivers.devices_text(s)


def test_ubuntu_drivers_list_gpgpu_shape(tmp_path):
    real = host("ubuntu-drivers-list-gpgpu").split("\n")[0]
    pat = re.compile(r"^nvidia-driver-(\d+)((?:-server)?)((?:-open)?), \(kernel modules provided by "
                     r"linux-modules-nvidia-\1\2\3-generic[\w.-]*\)$")
    assert pat.match(real)
    s = make_state(tmp_path / "s.json")
    out = drivers.list_text(s, gpgpu=True).split("\n")
    assert out[0] == "nvidia-driver-580-server-open, (kernel modules provided by " \
                     "linux-modules-nvidia-580-server-open-generic)"
    assert all(pat.match(l) for l in out if l)
    assert "" in out   # a blank line between branches


def _persistenced_env(tmp_path, **extra):
    env = dict(os.environ, GPUSIM_STATE=str(tmp_path / "s.json"), GPUSIM_ROOT=str(tmp_path / "root"))
    env.update(extra)
    return env


def test_persistenced_functions_default_and_no_persistence_mode(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p, models=("rtx-pro-6000-bse", "h100"))
    boot.boot(str(p), root=str(root))
    o = persistenced.parse(["--verbose"])
    log = persistenced.Log(use_syslog=False)
    assert persistenced.start(o, log, 999, str(p), str(root))
    assert [g["persistence_mode"] for g in dump(p)["gpus"]] == [True, True]
    assert log.lines == ["Verbose syslog connection opened", "Started (999)", "device 0000:17:00.0 - registered",
                         "device 0000:31:00.0 - registered", "device 0000:17:00.0 - persistence mode enabled.",
                         "device 0000:31:00.0 - persistence mode enabled.", "Local RPC services initialized"]
    persistenced.stop(o, log, 999, str(p))
    assert [g["persistence_mode"] for g in dump(p)["gpus"]] == [False, False]
    assert log.lines[-1] == "Shutdown (999)"
    # Ubuntu's unit: the daemon runs but persistence stays off
    o = persistenced.parse(["--no-persistence-mode", "--verbose"])
    assert persistenced.start(o, persistenced.Log(False), 1000, str(p), str(root))
    assert [g["persistence_mode"] for g in dump(p)["gpus"]] == [False, False]
    assert dump(p)["persistenced"]["pid"] == 1000


def test_persistenced_fails_like_the_real_one(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p, loaded=False)
    boot.boot(str(p), root=str(root))
    st.update(lambda s: s["driver"].update(loaded=None), str(p))
    log = persistenced.Log(False)
    assert not persistenced.start(persistenced.parse([]), log, 1, str(p), str(root))
    assert log.lines[-1].startswith("Failed to query NVIDIA devices. Please ensure that the NVIDIA device files")
    assert not persistenced.start(persistenced.parse(["--user", "no-such-user-xyz"]), log, 1, str(p), str(root))
    with pytest.raises(ValueError):
        persistenced.parse(["--bogus"])


def test_persistenced_daemon_forks_writes_pid_and_clears_on_sigterm(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p)
    boot.boot(str(p), root=str(root))
    r = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-persistenced"), "--verbose"],
                       env=_persistenced_env(tmp_path), capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    pidfile = root / "var/run/nvidia-persistenced/nvidia-persistenced.pid"
    pid = int(pidfile.read_text())
    try:
        assert dump(p)["gpus"][0]["persistence_mode"] is True and dump(p)["persistenced"]["pid"] == pid
    finally:
        os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not pidfile.exists():
            break
        time.sleep(0.1)
    assert not pidfile.exists() and dump(p)["gpus"][0]["persistence_mode"] is False
    # and a failing start reports on stderr with exit 1
    st.update(lambda s: s["driver"].update(loaded=None), str(p))
    r = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-persistenced")], env=_persistenced_env(tmp_path),
                       capture_output=True, text=True, timeout=20)
    assert (r.returncode, r.stderr) == (1, "nvidia-persistenced failed to initialize. Check syslog for more details.\n")


def test_fault_persistenced_stopped_kills_daemon(tmp_path):
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p)
    boot.boot(str(p), root=str(root))
    env = _persistenced_env(tmp_path)
    subprocess.run([sys.executable, os.path.join(BIN, "nvidia-persistenced")], env=env, check=True, timeout=20)
    pid = dump(p)["persistenced"]["pid"]
    subprocess.run([sys.executable, os.path.join(BIN, "gpusim"), "fault", "persistenced_stopped"], env=env,
                   check=True, timeout=20)
    for _ in range(50):
        try:
            os.kill(pid, 0)
            # reap if it is our grandchild zombie? it is not our child; wait for it to vanish
            with open("/proc/%d/stat" % pid) as fh:
                if fh.read().split()[2] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.1)
    s = dump(p)
    assert s["gpus"][0]["persistence_mode"] is False and s["faults"]["persistenced_stopped"] is True
    r = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-persistenced")], env=env, capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1


def test_ubuntu_persistenced_unit_is_the_trap():
    with open(os.path.join(SIM, "units", "nvidia-persistenced.service")) as fh:
        unit = fh.read()
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n" in unit
    assert "Type=forking" in unit and "[Install]" not in unit
    with open(os.path.join(SIM, "units", "gpusim-boot.service")) as fh:
        bootunit = fh.read()
    assert "Type=oneshot" in bootunit and re.search(r"^Before=.*docker\.service.*nvidia-persistenced\.service",
                                                     bootunit, re.M)


def test_install_sh_under_a_root(tmp_path):
    root = tmp_path / "target"
    cmd = ["sh", os.path.join(SIM, "hardware", "install.sh"), "--root", str(root), "--gpus", "rtx-pro-6000-bse,l4",
           "--branches", "570,580", "--driver", "580.95.05:open"]
    env = dict(os.environ)
    env.pop("GPUSIM_STATE", None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().split("\n")[-1] == "changed"
    for f in ("usr/lib/gpu-sim/gpusim/smi.py", "usr/lib/gpu-sim/gpusim/templates/qx_v13_gpu.xml",
              "usr/local/sbin/lspci", "usr/local/bin/gpusim", "usr/local/sbin/gpusim-boot",
              "etc/systemd/system/gpusim-boot.service", "usr/lib/gpu-sim/bin/nvidia-smi", "dev/nvidia1"):
        assert (root / f).exists(), f
    assert os.readlink(str(root / "etc/systemd/system/sysinit.target.wants/gpusim-boot.service")) == \
        "/etc/systemd/system/gpusim-boot.service"
    s = st.load(str(root / "var/lib/gpu-sim/state.json"))
    assert [g["model"] for g in s["gpus"]] == ["rtx-pro-6000-bse", "l4"] and s["driver"]["loaded"]
    r = subprocess.run(cmd[:4] + ["--gpus", "h100", "--keep-state", "--no-boot"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok"
    assert len(st.load(str(root / "var/lib/gpu-sim/state.json"))["gpus"]) == 2
    assert subprocess.run(["sh", os.path.join(SIM, "hardware", "install.sh")], capture_output=True).returncode == 2


@pytest.mark.parametrize("tool", ["nvidia-smi", "lspci", "ubuntu-drivers", "gpusim", "gpusim-boot",
                                  "nvidia-persistenced"])
def test_executables_are_thin_wrappers(tool):
    path = os.path.join(BIN, tool)
    assert os.access(path, os.X_OK)
    with open(path) as fh:
        text = fh.read()
    assert text.startswith("#!/usr/bin/python3\n") and "from gpusim." in text


def test_nvidia_smi_executable_end_to_end(tmp_path):
    make_state(tmp_path / "s.json")
    env = dict(os.environ, GPUSIM_STATE=str(tmp_path / "s.json"))
    r = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-smi"), "--query-gpu=name", "--format=csv,noheader"],
                       env=env, capture_output=True, text=True, timeout=20)
    assert (r.returncode, r.stdout, r.stderr) == (0, "NVIDIA RTX PRO 6000 Blackwell Server Edition\n", "")
    st.update(lambda s: s["driver"].update(loaded=None), str(tmp_path / "s.json"))
    r = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-smi")], env=env, capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 9


def test_boot_with_only_userspace_installed_loads_nothing(tmp_path):
    # The driver's userspace packages without nvidia-kernel-dkms / linux-modules-nvidia-*: no module to load,
    # so no /proc/driver/nvidia and nvidia-smi cannot talk to a driver.
    p, root = tmp_path / "s.json", tmp_path / "root"
    make_state(p, models=("h100",), modules=None, loaded=False)
    boot.boot(str(p), root=str(root))
    after = dump(p)
    assert after["driver"]["loaded"] is None
    assert after["kernel_log"] == []
    assert not (root / "proc/driver/nvidia/version").exists()
    # The same packages with the kernel modules: loaded at this boot.
    st.update(lambda s: s["driver"]["installed"].update(kernel_modules="proprietary"), str(p))
    boot.boot(str(p), root=str(root))
    assert dump(p)["driver"]["loaded"] == {"version": "580.95.05", "kernel_modules": "proprietary"}
    assert "NVIDIA UNIX x86_64 Kernel Module  580.95.05 " in (root / "proc/driver/nvidia/version").read_text()
