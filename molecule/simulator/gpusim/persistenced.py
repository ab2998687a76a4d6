"""nvidia-persistenced for the simulated host.

Like the real daemon (NVIDIA/nvidia-persistenced, nvidia-persistenced.c): it forks into the background
(the packaged unit is Type=forking), writes /var/run/nvidia-persistenced/nvidia-persistenced.pid, logs to
syslog, and on SIGTERM/SIGINT shuts down. While it runs *with* persistence mode (the default) every GPU
it registered has persistence mode on in the state; at shutdown it turns off what it turned on. With
`--no-persistence-mode` — what Ubuntu's nvidia-compute-utils unit passes:
  ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
— it runs, registers the GPUs and reports healthy, and persistence stays off. That is the trap a role
must fix with a drop-in (`ExecStart=` then `ExecStart=/usr/bin/nvidia-persistenced --user
nvidia-persistenced --verbose`).

Syslog lines (journal of a real host, verbatim):
  Verbose syslog connection opened / Now running with user ID 126 and group ID 139 / Started (51327) /
  device 0000:01:00.0 - registered / device 0000:01:00.0 - persistence mode enabled. /
  Local RPC services initialized / Received signal 15 / Shutdown (51327)
Failure (stderr, exit 1): `nvidia-persistenced failed to initialize. Check syslog for more details.`

Not reproduced: the RPC socket that nvidia-smi uses to ask the daemon to change persistence
(nvidia-smi -pm writes the state directly), dropping privileges to --user (the simulated daemon keeps
root so that it can write the state; it does chown its runtime directory to the user), NUMA onlining.
"""
import os
import pwd
import signal
import sys
import time

from . import boot as bootmod
from . import state as st

RUN_DIR = "/var/run/nvidia-persistenced"
PID_FILE = "nvidia-persistenced.pid"
FAIL = "nvidia-persistenced failed to initialize. Check syslog for more details."
HELP = """
nvidia-persistenced:  version {version}

  The NVIDIA Persistence Daemon.

  A tool for maintaining persistent driver state, specifically for use by the NVIDIA Linux driver.

  Copyright (C) 2013-2018 NVIDIA Corporation.

nvidia-persistenced [options]

  -v, --version
      Print the utility version and exit.

  -h, --help
      Print usage information for the command line options and exit.

  -V, --verbose
      Controls how much information is printed. By default, nvidia-persistenced will only print errors
      and warnings to syslog for unexpected events, as well as startup and shutdown notices. Specifying
      this flag will cause nvidia-persistenced to also print notices to syslog on state transitions,
      such as when persistence mode is enabled or disabled, and informational messages on startup and
      exit.

  -u USERNAME, --user=USERNAME
      Runs nvidia-persistenced with the user permissions of the user specified by the USERNAME
      argument. This user must have write access to the /var/run/nvidia-persistenced directory.

  -g GROUPNAME, --group=GROUPNAME
      Runs nvidia-persistenced with the group permissions of the group specified by the GROUPNAME
      argument.

  --persistence-mode
      By default, nvidia-persistenced starts with persistence mode enabled for all devices. Use this
      option to explicitly request this behavior.

  --no-persistence-mode
      When this option is given, nvidia-persistenced will not enable persistence mode for any devices
      on startup.

  --uvm-persistence-mode
  --no-uvm-persistence-mode
  --nvidia-cfg-path=PATH

"""


class Options:
    def __init__(self):
        self.user = None
        self.group = None
        self.persistence = True
        self.verbose = False
        self.version = False
        self.help = False


def parse(argv):
    o = Options()
    i = 0
    while i < len(argv):
        a = argv[i]
        name, _, val = a.partition("=")
        if name in ("-u", "--user", "-g", "--group", "--nvidia-cfg-path"):
            if not val:
                i += 1
                if i >= len(argv):
                    raise ValueError(a)
                val = argv[i]
            if name in ("-u", "--user"):
                o.user = val
            elif name in ("-g", "--group"):
                o.group = val
        elif a == "--persistence-mode":
            o.persistence = True
        elif a == "--no-persistence-mode":
            o.persistence = False
        elif a in ("--uvm-persistence-mode", "--no-uvm-persistence-mode"):
            pass
        elif a in ("-V", "--verbose"):
            o.verbose = True
        elif a in ("-v", "--version"):
            o.version = True
        elif a in ("-h", "--help"):
            o.help = True
        else:
            raise ValueError(a)
        i += 1
    return o


class Log:
    """syslog(3) under the ident nvidia-persistenced; kept in .lines for tests."""

    def __init__(self, use_syslog=True):
        self.lines = []
        self.sys = None
        if use_syslog:
            try:
                import syslog
                syslog.openlog("nvidia-persistenced", syslog.LOG_PID, syslog.LOG_DAEMON)
                self.sys = syslog
            except Exception:   # pragma: no cover - no syslog module
                self.sys = None

    def __call__(self, msg, err=False):
        self.lines.append(msg)
        if self.sys:
            self.sys.syslog(self.sys.LOG_ERR if err else self.sys.LOG_NOTICE, msg)


def _ids(o):
    if o.user:
        pw = pwd.getpwnam(o.user)     # KeyError when the user does not exist
        uid, gid = pw.pw_uid, pw.pw_gid
    else:
        uid, gid = os.getuid(), os.getgid()
    if o.group:
        import grp
        gid = grp.getgrnam(o.group).gr_gid
    return uid, gid


def start(o, log, pid, state_path=None, root="/"):
    """Check the driver and register the GPUs; True when the daemon may run."""
    if o.verbose:
        log("Verbose syslog connection opened")
    try:
        uid, gid = _ids(o)
    except KeyError:
        log("Failed to obtain user information for %s" % (o.user or o.group), err=True)
        return False
    if o.user or o.group:
        log("Now running with user ID %d and group ID %d" % (uid, gid))
    state = st.load(state_path)
    if state["faults"].get("persistenced_stopped"):
        log("Failed to initialize the daemon", err=True)
        return False
    if st.driver_state(state) != "ok" or not os.path.exists(os.path.join(root, "dev/nvidiactl")):
        log("Failed to query NVIDIA devices. Please ensure that the NVIDIA device files (/dev/nvidia*) exist, "
            "and that user %d has read and write permissions for those files." % uid, err=True)
        return False
    log("Started (%d)" % pid)
    enabled = []

    def fn(s):
        gpus = [g for g in s["gpus"] if bootmod.driven(s, g)]
        for g in gpus:
            if o.verbose:
                log("device %s - registered" % g["pci_bus_id"][4:].lower())
        for g in gpus:
            if o.persistence and not g.get("persistence_mode"):
                g["persistence_mode"] = True
                enabled.append(g["uuid"])
                if o.verbose:
                    log("device %s - persistence mode enabled." % g["pci_bus_id"][4:].lower())
        s["persistenced"] = {"pid": pid, "persistence": o.persistence, "enabled": enabled,
                             "user": o.user}
    st.update(fn, state_path)
    if o.verbose:
        log("Local RPC services initialized")
    return True


def stop(o, log, pid, state_path=None, signum=signal.SIGTERM):
    if o.verbose:
        log("Received signal %d" % signum)

    def fn(s):
        mine = (s.get("persistenced") or {}).get("enabled") or []
        for g in s["gpus"]:
            if g["uuid"] in mine and g.get("persistence_mode"):
                g["persistence_mode"] = False
                if o.verbose:
                    log("device %s - persistence mode disabled." % g["pci_bus_id"][4:].lower())
        if (s.get("persistenced") or {}).get("pid") == pid:
            s["persistenced"] = {"pid": None, "persistence": False, "enabled": []}
    st.update(fn, state_path)
    if o.verbose:
        log("Socket closed.")
        log("PID file unlocked.")
        log("PID file closed.")
    log("Shutdown (%d)" % pid)


def _write_pid(run_dir, pid, o):
    os.makedirs(run_dir, exist_ok=True)
    if o.user:
        try:
            uid, gid = _ids(o)
            os.chown(run_dir, uid, gid)
        except (KeyError, PermissionError):
            pass
    with open(os.path.join(run_dir, PID_FILE), "w") as fh:
        fh.write("%d\n" % pid)


def run_daemon(o, log, state_path=None, root="/", run_dir=RUN_DIR, ready=None):
    pid = os.getpid()
    _write_pid(run_dir, pid, o)
    if not start(o, log, pid, state_path, root):
        try:
            os.unlink(os.path.join(run_dir, PID_FILE))
        except OSError:
            pass
        if ready:
            ready(False)
        return 1
    stopping = []

    def on_signal(signum, _frame):
        stopping.append(signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if ready:
        ready(True)
    while not stopping:
        time.sleep(0.2)
    stop(o, log, pid, state_path, stopping[0])
    try:
        os.unlink(os.path.join(run_dir, PID_FILE))
    except OSError:
        pass
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        o = parse(argv)
    except ValueError as exc:
        sys.stderr.write("nvidia-persistenced: Unrecognized option: '%s'\n" % exc)
        return 1
    version = "unknown"
    try:
        version = (st.load()["driver"].get("installed") or {}).get("version", version)
    except Exception:
        pass
    if o.help:
        sys.stdout.write(HELP.format(version=version))
        return 0
    if o.version:
        sys.stdout.write("\nnvidia-persistenced:  version %s\n\n" % version)
        return 0
    log = Log()
    # GPUSIM_ROOT (tests only): the directory standing for "/" (its dev/ and var/run/)
    root = os.environ.get("GPUSIM_ROOT", "/")
    run_dir = os.path.join(root, RUN_DIR.lstrip("/"))
    if os.environ.get("GPUSIM_PERSISTENCED_FOREGROUND"):
        return run_daemon(o, log, root=root, run_dir=run_dir)
    r, w = os.pipe()
    child = os.fork()
    if child:
        os.close(w)
        ok = os.read(r, 1)
        if ok != b"1":
            sys.stderr.write(FAIL + "\n")
            return 1
        return 0
    os.close(r)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    def ready(ok):
        os.write(w, b"1" if ok else b"0")
        os.close(w)
    rc = run_daemon(o, log, root=root, run_dir=run_dir, ready=ready)
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
