"""nv-hostengine (DCGM's host engine) for the simulated host (test code, stdlib only).

Like the real one (NVIDIA/DCGM hostengine/src/main.cpp, HostEngineCommandLine.cpp at 4.4.2 / 4.5.2):
- `nv-hostengine -n --service-account nvidia-dcgm` is what nvidia-dcgm.service runs (-n: stay in the foreground);
  without -n it forks, the child writes --pid (default /var/run/nvhostengine.pid) and the parent exits 0.
- It loads NVML: with a usable driver it manages the GPUs NVML enumerates and holds their device files open (so
  `modprobe -r nvidia`, `nvidia-smi -r` and a MIG mode change see it, gpusim/kmod.py and gpusim/mig.py); without one
  DCGM 4 logs "Cannot load NVML; DCGM will proceed without managing GPUs." (DcgmHostEngineHandler::LoadNvml) and runs
  with no GPU, which it never picks up later (NVIDIA/gpu-operator#2854: "Started host engine version 4.4.2 using
  port number: 5555" with no NVML, and never recovers).
- stdout `Started host engine version <V> using port number: 5555`; syslog `DCGM initialized` (the journal lines of
  a real `systemctl enable --now nvidia-dcgm`); a second engine on the port: `Err: Failed to start DCGM Server: -7`
  (NVIDIA/DCGM#21), exit 255; `-t`: `Host engine successfully terminated.` / `Unable to terminate host engine, it may
  not be running.`; not root: `nv-hostengine running as non-root. Some functionality will be limited.` on stderr.
- --service-account is only checked when a diagnostic runs (DcgmDiagManager), as the real engine does.
State (key `hostengine`): {"pid", "version", "port", "service_account", "gpus": [UUIDs it manages], "daemon"};
`pid` null once it stopped. Not simulated: the DCGM API socket (dcgmi reads the state), --domain-socket, modules,
log files (-f), `--version`'s build lines other than `Version : <V>`.
"""
import os
import signal
import sys
import time

from . import dcgm
from . import state as st

PID_FILE = "/var/run/nvhostengine.pid"
MSG_STARTED = "Started host engine version %s using port number: %d"
MSG_NON_ROOT = "nv-hostengine running as non-root. Some functionality will be limited."
MSG_SERVER = "Err: Failed to start DCGM Server: %d"
PARSE_ERROR = "An error occured trying to parse the command line."


class Options:
    def __init__(self):
        self.daemon = True
        self.service_account = None
        self.port = dcgm.DEFAULT_PORT
        self.pid_file = PID_FILE
        self.term = False
        self.version = False


def parse(argv):
    o = Options()
    i = 0
    valued = {"-p": "port", "--port": "port", "--pid": "pid_file", "--service-account": "service_account",
              "-f": None, "--log-filename": None, "--log-level": None, "-b": None, "--bind-interface": None,
              "--denylist-modules": None, "--home-dir": None}
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if name in valued:
            if not eq:
                if i + 1 >= len(argv):
                    raise ValueError("Missing a value for this argument! for argument %s" % name.lstrip("-"))
                i += 1
                val = argv[i]
            attr = valued[name]
            if attr == "port":
                o.port = int(val)
            elif attr:
                setattr(o, attr, val)
        elif a in ("-n", "--no-daemon"):
            o.daemon = False
        elif a in ("-t", "--term"):
            o.term = True
        elif a == "--version":
            o.version = True
        elif a in ("--log-rotate",):
            pass
        else:
            raise ValueError("Couldn't find match for argument for argument %s" % a)
        i += 1
    return o


def start(o, pid, state_path=None, version=None):
    """Register the engine in the state: (exit code, stdout lines)."""
    result = {}

    def fn(s):
        he = dcgm.hostengine(s)
        if he and int(he.get("port") or dcgm.DEFAULT_PORT) == o.port and he.get("pid") != pid:
            result["busy"] = True      # the port is taken: dcgmEngineRun fails (DCGM_ST_INIT_ERROR, -7)
            return
        gpus = [g["uuid"] for g in dcgm.nvml_gpus(s)]
        s["hostengine"] = {"pid": pid, "version": version, "port": o.port, "service_account": o.service_account,
                           "gpus": gpus, "daemon": o.daemon}
    st.update(fn, state_path)
    if result.get("busy"):
        return 255, [MSG_SERVER % -7]
    return 0, [MSG_STARTED % (version, o.port)]


def stop(pid, state_path=None):
    def fn(s):
        he = s.get("hostengine") or {}
        if he.get("pid") == pid:
            s["hostengine"] = dict(he, pid=None, gpus=[])
    st.update(fn, state_path)


def _syslog(msg):
    try:
        import syslog
        syslog.openlog("nv-hostengine", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_NOTICE, msg)
    except Exception:   # pragma: no cover - no syslog
        pass


def _read_pid(path):
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def terminate(pid_file):
    pid = _read_pid(pid_file)
    if pid and dcgm.pid_alive(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        for _ in range(100):
            if not dcgm.pid_alive(pid):
                break
            time.sleep(0.05)
        print("Host engine successfully terminated.")
        return 0
    print("Unable to terminate host engine, it may not be running.")
    return 1


def serve(o, state_path=None, version=None, ready=None):
    """Run until SIGTERM/SIGINT (the unit's stop): register, say so, hold the GPUs, unregister."""
    pid = os.getpid()
    _syslog("DCGM initialized")
    rc, lines = start(o, pid, state_path, version)
    for line in lines:
        print(line)
    sys.stdout.flush()
    if rc:
        if ready:
            ready(False)
        return rc
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, _f: stopping.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _f: stopping.append(signum))
    if ready:
        ready(True)
    try:
        while not stopping:
            time.sleep(0.2)
    finally:
        stop(pid, state_path)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get("GPUSIM_ROOT") or "/"
    version = dcgm.installed_version(root) or "4.5.2"
    try:
        o = parse(argv)
    except ValueError as exc:
        sys.stderr.write("Argument parsing error: %s\n" % exc)
        sys.stderr.write("nv-hostengine failed to parse command line arguments: %s\n" % PARSE_ERROR)
        return 255
    if o.version:
        print("Version : %s" % version)
        return 0
    if os.geteuid() != 0:
        sys.stderr.write(MSG_NON_ROOT + "\n")
    pid_file = os.path.join(root, o.pid_file.lstrip("/"))
    if o.term:
        return terminate(pid_file)
    if not o.daemon:
        return serve(o, version=version)
    running = _read_pid(pid_file)
    if running and dcgm.pid_alive(running):
        print("Host engine already running with pid %d" % running)
        return 1
    r, w = os.pipe()
    if os.fork():
        os.close(w)
        ok = os.read(r, 1)
        return 0 if ok == b"1" else 255
    os.close(r)
    os.setsid()

    def ready(ok):
        if ok:
            os.makedirs(os.path.dirname(pid_file), exist_ok=True)
            with open(pid_file, "w") as fh:
                fh.write("%d\n" % os.getpid())
        os.write(w, b"1" if ok else b"0")
        os.close(w)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    rc = serve(o, version=version, ready=ready)
    try:
        os.unlink(pid_file)
    except OSError:
        pass
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
