"""nv-fabricmanager for the simulated HGX board (the test harness's; the product never sees this file).

Like NVIDIA's Fabric Manager on an NVSwitch board: started by its Type=forking unit, it checks that it is
the loaded driver's exact version, sets the NVSwitch fabric up (every GPU's Fabric State Completed,
Status Success in nvidia-smi -q / -q -x), and keeps running. Until it has, after every boot, the GPUs
show State In Progress and CUDA programs fail with 802 (cudaErrorSystemNotReady) while nvidia-smi looks
healthy. Its lines are the real ones (shared/corpus/host):
  001  "Connected to 1 node." / "Successfully configured all the available NVSwitches to route GPU NVLink
       traffic. NVLink Peer-to-Peer support will be enabled once the GPUs are successfully registered
       with the NVLink fabric."
  004  "request to query NVSwitch device information from NVSwitch driver failed with error:WARNING
       Nothing to do [NV_WARN_NOTHING_TO_DO]" (no NVSwitch), exit 1
  mismatch (another driver), exit 1, one journal line as real journals show it for 460 .. 595
       (tests/fixtures/fabric/fabricmanager_version-mismatch_journal-line_*, research 2a): "fabric manager
       NVIDIA GPU driver interface version X don't match with driver version Y. Please update with matching
       NVIDIA driver package." (corpus 006 has the same words wrapped over two lines, copied from a bug report)
  --version / -v: "Fabric Manager version is : X" (a real `nv-fabricmanager --version`, 450.102.04)
No driver loaded: exit 1 without a line of its own (no public capture of that case; nothing invented),
systemd's failure lines being the real ones. Its own version is the package's (written by the package at
install: VERSION_FILE). Not reproduced: the 570+ start script (nvidia-fabricmanager-start.sh), the config
file's contents (`-c CFG` is accepted and not read), /var/log/fabricmanager.log, NVLink partitions.
"""
import os
import signal
import sys
import time

from . import state as st

NOT_SET_UP = {"state": "In Progress", "status": "N/A"}
SET_UP = {"state": "Completed", "status": "Success"}
VERSION_FILE = "/usr/lib/gpu-sim/nv-fabricmanager.version"
RUN_DIR = "/var/run/nvidia-fabricmanager"
PID_FILE = "nv-fabricmanager.pid"
MSG_NOTHING_TO_DO = ("request to query NVSwitch device information from NVSwitch driver failed with "
                     "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")
MSG_MISMATCH = ("fabric manager NVIDIA GPU driver interface version %s don't match with driver version %s. "
                "Please update with matching NVIDIA driver package.")
MSG_VERSION = "Fabric Manager version is : %s"
DEFAULT_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
MSG_CONNECTED = "Connected to 1 node."
MSG_CONFIGURED = ("Successfully configured all the available NVSwitches to route GPU NVLink traffic. NVLink "
                  "Peer-to-Peer support will be enabled once the GPUs are successfully registered with the "
                  "NVLink fabric.")


def fabric_of(state):
    """The board's fabric as nvidia-smi shows it: None without NVSwitches (State N/A)."""
    if not state.get("nvswitches"):
        return None
    return state.get("fabric") or dict(NOT_SET_UP)


def ready(state):
    """Whether CUDA can initialise: no NVSwitch fabric, or one the fabric manager set up."""
    fabric = fabric_of(state)
    return fabric is None or fabric.get("state") == SET_UP["state"]


def reset_at_boot(state):
    """A boot leaves the fabric for the fabric manager to set up again."""
    if state.get("nvswitches"):
        state["fabric"] = dict(NOT_SET_UP)


def own_version(path=None):
    path = path or VERSION_FILE
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def start(state_path=None, version=None):
    """-> (exit code, lines): the checks and the fabric set-up of a start (before the daemon forks)."""
    state = st.load(state_path)
    if not state.get("nvswitches"):
        return 1, [MSG_NOTHING_TO_DO]
    loaded = (state["driver"].get("loaded") or {}).get("version")
    if not loaded:
        return 1, []
    version = version or own_version()
    if version != loaded:
        return 1, [MSG_MISMATCH % (version, loaded)]

    def fn(s):
        s["fabric"] = dict(SET_UP)
    st.update(fn, state_path)
    return 0, [MSG_CONNECTED, MSG_CONFIGURED]


def _daemonize(run_dir):
    if os.fork() > 0:
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.makedirs(run_dir, exist_ok=True)
    # Written whole, then renamed: the parent (and systemd) never read a half-written pid file.
    tmp = os.path.join(run_dir, PID_FILE + ".tmp")
    with open(tmp, "w") as fh:
        fh.write("%d\n" % os.getpid())
    os.rename(tmp, os.path.join(run_dir, PID_FILE))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    return True


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--version" in argv or "-v" in argv:
        sys.stdout.write(MSG_VERSION % own_version() + "\n")
        return 0
    rc, lines = start()
    stream = sys.stderr if rc else sys.stdout
    for line in lines:
        stream.write(line + "\n")
    stream.flush()
    if rc:
        return rc
    if "--no-daemon" in argv:
        return 0
    try:
        os.unlink(os.path.join(RUN_DIR, PID_FILE))
    except OSError:
        pass
    if not _daemonize(RUN_DIR):
        # the parent returns once the daemon has written its pid file, as systemd (Type=forking, PIDFile=) expects
        for _ in range(100):
            if os.path.exists(os.path.join(RUN_DIR, PID_FILE)):
                break
            time.sleep(0.05)
        return 0
    signal.signal(signal.SIGTERM, lambda *_a: os._exit(0))
    while True:
        time.sleep(3600)
