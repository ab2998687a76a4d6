"""Shared helpers for the simulator-core tests (imported by test_sim_*.py; not a conftest so that
other test files in this directory keep their own)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM = os.path.join(ROOT, "molecule", "simulator")
if SIM not in sys.path:
    sys.path.insert(0, SIM)
# real captures: the project's copies (tests/fixtures, file names kept)
CORPUS = os.path.join(ROOT, "tests", "fixtures", "nvidia_smi")
HOST = os.path.join(ROOT, "tests", "fixtures", "host")
BIN = os.path.join(SIM, "bin")

from gpusim import ctl, smi, state as st  # noqa: E402

NOW = 1784016758.0   # a fixed clock for the renderers


def corpus(name, directory=None):
    directory = directory or CORPUS
    for f in sorted(os.listdir(directory)):
        if f.startswith(name):
            with open(os.path.join(directory, f), encoding="utf-8", newline="") as fh:
                return fh.read()
    raise FileNotFoundError(name)


def host(name):
    return corpus(name, HOST)


def make_state(path, models=("rtx-pro-6000-bse",), driver="580.95.05", modules="open", loaded=True, **extra):
    s = ctl.init_state(list(models), branches=["570", "580"])
    if driver:
        s["driver"]["installed"] = {"version": driver, "kernel_modules": modules, "packages": []}
        s["driver"]["loaded"] = {"version": driver, "kernel_modules": modules} if loaded else None
    s.update(extra)
    st.save(s, str(path))
    return s


def edit(path, fn):
    s = st.load(str(path))
    fn(s)
    st.save(s, str(path))
    return s


def run_smi(path, *argv, euid=0):
    return smi.run(list(argv), state_path=str(path), now=NOW, euid=euid)


def dump(path):
    with open(str(path)) as fh:
        return json.load(fh)
