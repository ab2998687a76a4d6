# gpusim: record a driver package in the *installed* part of the simulated host's state.
# Run by the simulated driver packages' maintainer scripts as
#   python3 - add|remove PACKAGE VERSION FLAVOUR   (FLAVOUR: open | proprietary | - for none)
# The loaded driver changes only at boot (gpusim-boot). Test code (gpuhost molecule simulator).
import json
import os
import sys
import tempfile

action, package, version, flavour = sys.argv[1:5]
flavour = None if flavour in ("", "-") else flavour


def apply(state):
    drv = state.setdefault("driver", {"installed": None, "loaded": None})
    inst = drv.get("installed")
    if action == "add":
        if not inst:
            inst = {"version": version, "kernel_modules": None, "packages": []}
        pkgs = set(inst.get("packages") or [])
        pkgs.add(package)
        inst["packages"] = sorted(pkgs)
        inst["version"] = version
        if flavour:
            inst["kernel_modules"] = flavour
        drv["installed"] = inst
        return
    if not inst:
        return
    pkgs = [p for p in (inst.get("packages") or []) if p != package]
    inst["packages"] = pkgs
    if flavour and inst.get("kernel_modules") == flavour and inst.get("version") == version:
        inst["kernel_modules"] = None
    drv["installed"] = inst if pkgs else None


sys.path.insert(0, "/usr/lib/gpu-sim")
try:
    from gpusim import state as gpusim_state
except ImportError:
    gpusim_state = None
if gpusim_state is not None and hasattr(gpusim_state, "update"):
    gpusim_state.update(apply)
else:
    path = os.environ.get("GPUSIM_STATE") or "/var/lib/gpu-sim/state.json"
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except FileNotFoundError:
        state = {}
    apply(state)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state.", suffix=".tmp", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
