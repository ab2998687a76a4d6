"""systemd reloads and the NVIDIA device nodes of running containers (test code, stdlib only).

The real mechanism (NVIDIA/nvidia-container-toolkit#48, tests/fixtures/devchar/): where systemd manages a
container's cgroup (runc's cgroupsPath "slice:prefix:name", docker's and containerd's systemd cgroup
driver), the container's unit carries a device allow list by /dev/char/MAJOR:MINOR path
(`DeviceAllow=/dev/char/195:0 rwm`, fixture 50-DeviceAllow.conf). Every `systemctl daemon-reload`
re-applies it; a path that does not resolve is dropped, so a node without a /dev/char link is taken from
the container, and NVML inside fails with "Failed to initialize NVML: Unknown Error" (exit 255, as
utkuozdemir/nvidia_gpu_exporter#354 shows nvidia-smi's code) until the container is started again.

The simulation:
- generator(): a systemd generator (installed as /usr/lib/systemd/system-generators/gpusim-daemon-reload;
  systemd runs generators at boot and at every daemon-reload) appends one line to RELOADS: the NVIDIA
  device numbers /dev/char resolves at that moment. Generators may write only under /run.
- the hook (inject) records in the container the reload count at its start, its device numbers and
  whether systemd manages its cgroup, and binds RELOADS' directory into it (IN_CONTAINER).
- lost_devices(): the container's device numbers a reload since its start could not resolve; the
  simulated nvidia-smi in a container fails when NVML's own nodes (major 195) are among them.
"""
import json
import os

RELOAD_DIR = "/run/gpu-sim/systemd"
RELOADS_FILE = "reloads"
IN_CONTAINER = "/var/lib/gpu-sim/systemd"
DEVICES_IN_CONTAINER = "/var/lib/gpu-sim/devices.json"
NVML_MAJOR = 195
MSG_LOST = "Failed to initialize NVML: Unknown Error"
RC_LOST = 255


def resolved_numbers(dev_char="/dev/char"):
    """MAJOR:MINOR of every /dev/char entry that resolves to an NVIDIA node under /dev."""
    found = []
    for name in sorted(os.listdir(dev_char)) if os.path.isdir(dev_char) else []:
        target = os.path.realpath(os.path.join(dev_char, name))
        if os.path.basename(target).startswith("nvidia") and os.path.exists(target):
            found.append(name)
    return found


def generator(reload_dir=RELOAD_DIR, dev_char="/dev/char"):
    """One line per daemon-reload (and boot). Never fails: systemd only logs a failing generator."""
    try:
        os.makedirs(reload_dir, exist_ok=True)
        with open(os.path.join(reload_dir, RELOADS_FILE), "a") as fh:
            fh.write(json.dumps(resolved_numbers(dev_char)) + "\n")
    except OSError:
        pass
    return 0


def reload_count(reload_dir=RELOAD_DIR):
    try:
        with open(os.path.join(reload_dir, RELOADS_FILE)) as fh:
            return len(fh.read().splitlines())
    except OSError:
        return 0


def systemd_managed(cfg):
    """runc's cgroupsPath in the systemd form ("system.slice:docker:<id>"), not a cgroupfs path."""
    path = ((cfg or {}).get("linux") or {}).get("cgroupsPath") or ""
    return not path.startswith("/") and path.count(":") == 2


def container_record(numbers, cfg, reload_dir=RELOAD_DIR):
    return {"numbers": list(numbers), "systemd_cgroup": systemd_managed(cfg),
            "reloads_at_start": reload_count(reload_dir)}


def lost_devices(record, reloads_text):
    """The container's device numbers that a reload after its start could not resolve."""
    if not record or not record.get("systemd_cgroup"):
        return []
    lost = set()
    for line in (reloads_text or "").splitlines()[record.get("reloads_at_start", 0):]:
        try:
            have = set(json.loads(line))
        except ValueError:
            continue
        lost |= set(record.get("numbers") or []) - have
    return sorted(lost)


def nvml_lost(root="/"):
    """In a container: whether NVML's nodes were taken by a reload (reads what the hook left there)."""
    try:
        with open(os.path.join(root, DEVICES_IN_CONTAINER.lstrip("/"))) as fh:
            record = json.load(fh)
        with open(os.path.join(root, IN_CONTAINER.lstrip("/"), RELOADS_FILE)) as fh:
            text = fh.read()
    except (OSError, ValueError):
        return False
    return any(n.split(":")[0] == str(NVML_MAJOR) for n in lost_devices(record, text))
