"""The simulated host's state: one JSON file, default /var/lib/gpu-sim/state.json.

Contract (DESIGN.md, "Shared contracts"):
  load(path=None) -> dict with every key of schema 1 present (defaults filled in)
  save(state, path=None) -> atomic (temp file in the same directory + fsync + rename)
  visible_gpus(state, env=None) -> the GPUs a process sees under $NVIDIA_VISIBLE_DEVICES
The path comes from $GPUSIM_STATE when set.
"""
import copy
import json
import os

DEFAULT_PATH = "/var/lib/gpu-sim/state.json"
SCHEMA = 1

DEFAULT_FAULTS = {
    "module_not_loaded": False,      # boot leaves driver.loaded null
    "missing_device_nodes": [],      # e.g. ["nvidia-uvm"] — boot does not create these nodes
    "persistenced_stopped": False,   # nvidia-persistenced exits at once (as if it crashed)
}

DEFAULT_GPU = {
    "index": 0,
    "model": "rtx-pro-6000-bse",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "pci_bus_id": "00000000:17:00.0",
    "serial": "0000000000000",
    "memory_used_mib": 0,            # extra memory held besides processes and driver overhead
    "utilization_gpu": 0,
    "utilization_memory": 0,
    "temperature_c": 34,
    "power_draw_w": None,            # None: the model's idle draw
    "persistence_mode": False,
    "compute_mode": "Default",
    "mig_mode": False,
    "clocks_event_reasons": [],
    "fan_speed": None,               # None: N/A on passively cooled boards, 0 % on a model with a fan
    "performance_state": "P8",
}

DEFAULT_STATE = {
    "schema": SCHEMA,
    "gpus": [],
    "driver": {"installed": None, "loaded": None, "modules": None},
    # branches NVIDIA's repo offers for this distro (ubuntu-drivers candidates), newest last
    "repo_branches": ["570", "580"],
    "processes": [],
    "kernel_log": [],
    "faults": DEFAULT_FAULTS,
    "boot": {"count": 0, "id": None},
    "persistenced": {"pid": None, "persistence": False},
}


def path_from_env(env=None):
    env = os.environ if env is None else env
    return env.get("GPUSIM_STATE") or DEFAULT_PATH


def default_state():
    return copy.deepcopy(DEFAULT_STATE)


def fill_defaults(state):
    """Fill every missing key with its default; return the same dict."""
    for key, value in DEFAULT_STATE.items():
        if key not in state:
            state[key] = copy.deepcopy(value)
    faults = state["faults"]
    for key, value in DEFAULT_FAULTS.items():
        faults.setdefault(key, copy.deepcopy(value))
    drv = state["driver"]
    drv.setdefault("installed", None)
    drv.setdefault("loaded", None)
    # The loaded NVIDIA kernel modules (gpusim/kmod.py); None: what a boot loads, while the driver is loaded.
    drv.setdefault("modules", None)
    for i, gpu in enumerate(state["gpus"]):
        for key, value in DEFAULT_GPU.items():
            if key not in gpu:
                gpu[key] = i if key == "index" else copy.deepcopy(value)
    for proc in state["processes"]:
        proc.setdefault("type", "C")
        proc.setdefault("gpu_index", 0)
        proc.setdefault("used_mib", 0)
        proc.setdefault("name", "python3")
    return state


def load(path=None):
    """Read the state; a missing file gives the default (no GPUs, no driver)."""
    path = path or path_from_env()
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except FileNotFoundError:
        state = {}
    return fill_defaults(state)


def save(state, path=None):
    """Write atomically: temp file in the same directory, fsync, rename."""
    path = path or path_from_env()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    import tempfile  # pylint: disable=import-outside-toplevel  # writers only: readers start faster
    fd, tmp = tempfile.mkstemp(prefix=".state.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(state, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def update(fn, path=None):
    """Load, apply fn(state) (mutating it), save; return the state. Serialised with flock."""
    import fcntl
    path = path or path_from_env()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    lock_path = os.path.join(directory, ".state.lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load(path)
        fn(state)
        save(state, path)
    if os.path.abspath(path) == os.path.abspath(DEFAULT_PATH):
        # The simulated /proc/modules follows the state (who holds the modules, which are loaded): gpusim/kmod.py.
        from . import kmod  # pylint: disable=import-outside-toplevel  # kmod reads the state module
        kmod.refresh(state)
    return state


def visible_gpus(state, env=None):
    """GPUs visible under $NVIDIA_VISIBLE_DEVICES.

    Unset or empty: all GPUs (a host process). `all`: all. `none` / `void`: none (the real toolkit:
    `none` gives a container no GPU but the driver files, `void` nothing at all). Otherwise a comma
    list of indexes and/or UUIDs (`GPU-...`, prefix match like the real toolkit is not done: whole
    UUID). Unknown entries are ignored here; the hook reports them with the toolkit's error.
    """
    env = os.environ if env is None else env
    gpus = list(state.get("gpus", []))
    value = env.get("NVIDIA_VISIBLE_DEVICES")
    if value is None or value.strip() == "" or value.strip() == "all":
        return gpus
    value = value.strip()
    if value in ("none", "void"):
        return []
    chosen = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        for gpu in gpus:
            if (item.isdigit() and int(item) == gpu.get("index")) or item == gpu.get("uuid"):
                if gpu not in chosen:
                    chosen.append(gpu)
    return chosen


def driver_state(state):
    """One of: 'no_driver', 'not_loaded', 'mismatch', 'ok'."""
    drv = state["driver"]
    inst, loaded = drv.get("installed"), drv.get("loaded")
    if inst is None:
        return "no_driver"
    if loaded is None:
        return "not_loaded"
    if inst.get("version") != loaded.get("version"):
        return "mismatch"
    return "ok"
