"""The container side of the simulated NVIDIA Container Toolkit (test code, stdlib only, Python 3.9+).

- nvidia-container-runtime-hook (`prestart`): what docker's `--gpus` and the nvidia runtime run before
  the container starts. Reads the OCI state (stdin: `pid`, `bundle`) and the bundle's config.json
  (`root.path`, `process.env`: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES), then does what
  libnvidia-container's `nvidia-container-cli configure` does for the simulated driver: the driver
  files into the rootfs (nvidia-smi, libnvidia-ml, libcuda + `.so.1` links), the simulator's library
  and a state copy with only the visible GPUs (re-indexed from 0, "container": true so that
  nvidia-smi lists no processes, as in a real container), and the device nodes via
  `nsenter --target <pid> --mount mknod -m 666 <rootfs>/dev/nvidiaN c 195 N` (a plain mknod from the
  hook's namespace is hidden by runc's /dev tmpfs). A broken driver ends it with the real
  libnvidia-container texts and exit 1, which docker reports as
  `... error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'
  nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown`.
- nvidia-container-runtime: a runc wrapper; on `create` it adds the prestart hook to the bundle's
  config.json when the container asks for GPUs, then execs the low-level runtime (runc, crun).
- nvidia-cdi-hook: the createContainer hooks a CDI spec names (create-symlinks, update-ldcache, ...).
- nvidia-container-cli: `--version`, `info`, `list` (what people run to check the toolkit).

Testing without a container: call inject() with a fake rootfs and make_node=<callable>, or set
GPUSIM_HOOK_NO_NSENTER=1 (nodes are made with a plain mknod, or recorded in
<rootfs>/dev/.gpusim-nodes when mknod is not permitted).
"""
import copy
import json
import os
import re
import shutil
import stat
import subprocess
import sys

from gpusim import cdi as _cdi
from gpusim import mig as _mig
from gpusim import reload as _reload

DEFAULT_VERSION = "1.18.0"
RELEASE_COMMITS = {
    "1.17.8": "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
    "1.18.0": "f8daa5e26de9fd7eb79259040b6dd5a52060048c",
}
HOST_LIB_DIR = "/usr/lib/x86_64-linux-gnu"
CONTAINER_LIB_DIR = "/usr/lib/x86_64-linux-gnu"
GPUSIM_LIB = "/usr/lib/gpu-sim"
STATE_IN_CONTAINER = "/var/lib/gpu-sim/state.json"
HOOK_PATH = "/usr/bin/nvidia-container-runtime-hook"

# libnvidia-container's capability → files (the subset the simulated driver ships)
UTILITY_BINS = ["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"]
COMPUTE_BINS = ["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"]
UTILITY_LIBS = ["libnvidia-ml", "libnvidia-cfg"]
COMPUTE_LIBS = ["libcuda", "libcudadebugger", "libnvidia-opencl", "libnvidia-ptxjitcompiler",
                "libnvidia-nvvm", "libnvidia-gpucomp"]
ALL_CAPS = ["compat32", "compute", "display", "graphics", "ngx", "utility", "video"]
DEFAULT_CAPS = ["utility", "compute"]

ERR_NO_LIBRARY = ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
                  "cannot open shared object file: no such file or directory")
ERR_NOT_LOADED = "nvidia-container-cli: initialization error: nvml error: driver not loaded"
ERR_MISMATCH = "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch"
DRIVER_ERRORS = {"no_driver": ERR_NO_LIBRARY, "not_loaded": ERR_NOT_LOADED, "mismatch": ERR_MISMATCH}

CUDA_BY_BRANCH = {"535": "12.2", "550": "12.4", "555": "12.5", "560": "12.6", "565": "12.7",
                  "570": "12.8", "575": "12.9", "580": "13.0", "590": "13.1"}


class HookError(Exception):
    """A failure printed on stderr as is (the libnvidia-container text), exit status 1."""


def _version(version):
    return version or os.environ.get("GPUSIM_CTK_VERSION") or DEFAULT_VERSION


def _commit(version, commit):
    return commit if commit else RELEASE_COMMITS.get(version, "")


# ==================================================================================================
# reading the container's configuration
# ==================================================================================================

def read_container(state_json, bundle=None):
    """(pid, rootfs, env dict, config dict, config path) from the OCI state and the bundle's config.json."""
    st = json.loads(state_json) if state_json.strip() else {}
    bundle = st.get("bundle") or bundle or os.getcwd()
    cfg_path = os.path.join(bundle, "config.json")
    with open(cfg_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    root = (cfg.get("root") or {}).get("path") or "rootfs"
    if not os.path.isabs(root):
        root = os.path.join(bundle, root)
    env = {}
    for item in (cfg.get("process") or {}).get("env") or []:
        if "=" in item:
            k, v = item.split("=", 1)
            env[k] = v
    return st.get("pid"), os.path.abspath(root), env, cfg, cfg_path


def requested_devices(env):
    """None when the container asks for no GPU (the hook then does nothing); else the device list."""
    value = env.get("NVIDIA_VISIBLE_DEVICES")
    if value is None:
        # a legacy CUDA image (CUDA_VERSION set, no NVIDIA_REQUIRE_CUDA semantics needed here) gets all
        return ["all"] if env.get("CUDA_VERSION") else None
    value = value.strip()
    if value == "" or value == "void":
        return None
    if value == "none":
        return []
    return [v.strip() for v in value.split(",") if v.strip()]


def capabilities(env):
    value = env.get("NVIDIA_DRIVER_CAPABILITIES")
    if value is None or value.strip() == "":
        return list(DEFAULT_CAPS)
    caps = [c.strip() for c in value.split(",") if c.strip()]
    if "all" in caps:
        return list(ALL_CAPS)
    return [c for c in caps if c in ALL_CAPS]


def select_gpus(state, devices):
    """The GPUs NVML knows that the device list names, in NVML (host) order; HookError when unknown."""
    return select_devices(state, devices)[0]


def _mig_match(gpus, dev):
    """(gpu, (gi id, ci id)) for a MIG device named by its UUID (`MIG-...`) or `<gpu index>:<mig index>` (the
    MIG device's index as `nvidia-smi -L` numbers it); None otherwise."""
    for gpu in gpus:
        for d in _mig.devices(gpu):
            if dev == d["uuid"] or dev == "%s:%d" % (gpu.get("index"), d["index"]):
                return gpu, (d["gi"]["id"], d["ci"]["id"])
    return None


def select_devices(state, devices):
    """(GPUs in NVML order, {gpu uuid: [(gi, ci), ...]} for the GPUs given only as MIG devices)."""
    gpus = _cdi.nvml_gpus(state)
    if devices == ["all"] or "all" in devices:
        return list(gpus), {}
    chosen = []
    migs = {}
    for dev in devices:
        mig = _mig_match(gpus, dev) if (dev.startswith("MIG-") or ":" in dev) else None
        if mig is not None:
            gpu, ids = mig
            migs.setdefault(gpu.get("uuid"), [])
            if ids not in migs[gpu.get("uuid")]:
                migs[gpu.get("uuid")].append(ids)
            if gpu not in chosen:
                chosen.append(gpu)
            continue
        match = None
        for gpu in gpus:
            uuid = gpu.get("uuid", "")
            if (dev.isdigit() and int(dev) == gpu.get("index")) or dev == uuid or \
                    (dev.startswith("GPU-") and len(dev) > 4 and uuid.startswith(dev)):
                match = gpu
                break
        if match is None:
            raise HookError("nvidia-container-cli: device error: %s: unknown device" % dev)
        if match not in chosen:
            chosen.append(match)
        migs[match.get("uuid")] = None     # the whole GPU
    migs = {k: v for k, v in migs.items() if v is not None}
    return [g for g in gpus if g in chosen], migs


def container_state(state, gpus, migs=None):
    """The state copy a container gets: only its GPUs, re-indexed from 0 in host order (as NVML in the
    container enumerates them), `minor` kept (the device node's number), the processes on those GPUs
    re-pointed at the new indexes, and "container": true (nvidia-smi lists no processes in a container:
    other PID namespace)."""
    copy_ = copy.deepcopy(state)
    remap = {}
    new = []
    for n, gpu in enumerate(gpus):
        g = copy.deepcopy(gpu)
        g["minor"] = _cdi.gpu_minor(gpu)
        remap[gpu.get("index")] = n
        g["index"] = n
        if g.get("mig_instances"):
            # A MIG-enabled GPU: the container reaches only the MIG devices it was given (their
            # /dev/nvidia-caps nodes); given the GPU whole it sees no MIG device (gpusim/mig.py).
            keep = (migs or {}).get(gpu.get("uuid")) or []
            g["mig_instances"] = [dict(gi, cis=[c for c in gi.get("cis") or [] if (gi["id"], c["id"]) in keep])
                                  for gi in g["mig_instances"] if any(gi["id"] == k[0] for k in keep)]
        new.append(g)
    procs = []
    for proc in state.get("processes", []):
        if proc.get("gpu_index") in remap:
            p = copy.deepcopy(proc)
            p["gpu_index"] = remap[proc.get("gpu_index")]
            procs.append(p)
    copy_["gpus"] = new
    copy_["processes"] = procs
    copy_["container"] = True
    return copy_


# ==================================================================================================
# injecting into the rootfs
# ==================================================================================================

def _inside(rootfs, path):
    """rootfs + path, refusing a destination that a symlink in the rootfs points outside it."""
    dest = os.path.join(rootfs, path.lstrip("/"))
    parent = os.path.realpath(os.path.dirname(dest))
    real_root = os.path.realpath(rootfs)
    if parent != real_root and not parent.startswith(real_root + os.sep):
        raise HookError("nvidia-container-cli: mount error: path %s escapes the container root" % path)
    return dest


def _copy_file(src, rootfs, dest_path, mode=None):
    dest = _inside(rootfs, dest_path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.lexists(dest):
        os.unlink(dest)
    shutil.copyfile(src, dest)
    os.chmod(dest, mode if mode is not None else (os.stat(src).st_mode & 0o7777))
    return dest_path


def _symlink(target, rootfs, link_path):
    dest = _inside(rootfs, link_path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.lexists(dest):
        os.unlink(dest)
    os.symlink(target, dest)
    return link_path


def _driver_libs(version, names, host_root="/"):
    out = []
    libdir = os.path.join(host_root, HOST_LIB_DIR.lstrip("/"))
    for name in names:
        path = os.path.join(libdir, "%s.so.%s" % (name, version))
        if os.path.isfile(path):
            out.append(path)
    return out


def _uvm_major(host_root="/"):
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        try:
            st = os.stat(os.path.join(host_root, "dev", name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            return os.major(st.st_rdev)
    return _cdi.UVM_MAJOR_DEFAULT


def nsenter_mknod(pid, path, major, minor):
    """Create a device node in the container's mount namespace (runc's /dev tmpfs lives there)."""
    cmd = ["nsenter", "--target", str(pid), "--mount", "mknod", "-m", "666", path, "c", str(major), str(minor)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if res.returncode != 0 and "File exists" not in res.stderr:
        raise HookError("nvidia-container-cli: mount error: mknod %s failed: %s" % (path, res.stderr.strip()))


def direct_mknod(rootfs):
    """A node maker for tests: plain mknod, or a record in <rootfs>/dev/.gpusim-nodes when not permitted."""
    def make(pid, path, major, minor):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.lexists(path):
                os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
                os.chmod(path, 0o666)
        except PermissionError:
            with open(os.path.join(rootfs, "dev", ".gpusim-nodes"), "a") as fh:
                fh.write("%s c %d %d\n" % (path, major, minor))
    return make


def inject(state, rootfs, env, pid=None, make_node=None, host_root="/", gpusim_src=None, cfg=None):
    """Do what `nvidia-container-cli configure` does for the simulated driver. Returns what was done.

    HookError for a broken driver or an unknown device. make_node(pid, path, major, minor) makes a
    device node (default: nsenter into the container's mount namespace).
    """
    devices = requested_devices(env)
    if devices is None:
        return {"skipped": True}
    condition = _cdi.driver_condition(state)
    if condition != "ok":
        raise HookError(DRIVER_ERRORS[condition])
    gpus, migs = select_devices(state, devices)
    caps = capabilities(env)
    version = state["driver"]["loaded"]["version"]
    done = {"files": [], "links": [], "nodes": [], "gpus": [g.get("uuid") for g in gpus]}

    # the simulator's own library and the state copy (what the simulated nvidia-smi needs)
    src = gpusim_src or os.path.dirname(os.path.abspath(__file__))
    dest_pkg = _inside(rootfs, GPUSIM_LIB + "/gpusim")
    if os.path.realpath(src) != os.path.realpath(dest_pkg):
        if os.path.lexists(dest_pkg):
            shutil.rmtree(dest_pkg)
        shutil.copytree(src, dest_pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    done["files"].append(GPUSIM_LIB + "/gpusim")
    state_dest = _inside(rootfs, STATE_IN_CONTAINER)
    os.makedirs(os.path.dirname(state_dest), exist_ok=True)
    with open(state_dest, "w", encoding="utf-8") as fh:
        json.dump(container_state(state, gpus, migs), fh, indent=2, sort_keys=True)
        fh.write("\n")
    done["files"].append(STATE_IN_CONTAINER)

    bins, libs = [], []
    if "utility" in caps:
        bins += UTILITY_BINS
        libs += UTILITY_LIBS
    if "compute" in caps:
        bins += COMPUTE_BINS
        libs += COMPUTE_LIBS
    for name in bins:
        host = os.path.join(host_root, "usr/bin", name)
        if os.path.isfile(host):
            done["files"].append(_copy_file(host, rootfs, "/usr/bin/" + name, 0o755))
    for lib in _driver_libs(version, libs, host_root):
        base = os.path.basename(lib)
        done["files"].append(_copy_file(lib, rootfs, CONTAINER_LIB_DIR + "/" + base, 0o755))
        soname = _cdi.soname(base)
        if soname:
            done["links"].append(_symlink(base, rootfs, CONTAINER_LIB_DIR + "/" + soname))

    if make_node is None:
        make_node = nsenter_mknod
    nodes = []
    for gpu in gpus:
        m = _cdi.gpu_minor(gpu)
        nodes.append(("/dev/nvidia%d" % m, _cdi.NVIDIA_MAJOR, m))
    nodes.append(("/dev/nvidiactl", _cdi.NVIDIA_MAJOR, _cdi.NVIDIACTL_MINOR))
    # libnvidia-container loads nvidia-uvm and makes its nodes (nvidia-modprobe -u -c=0, load-kmods) for
    # compute; where that cannot work (the fault: the host has no nvidia-uvm node and cannot make one) the
    # container starts without them and CUDA fails to initialise in it.
    uvm_unavailable = "nvidia-uvm" in ((state.get("faults") or {}).get("missing_device_nodes") or [])
    if "compute" in caps and not uvm_unavailable:
        uvm = _uvm_major(host_root)
        nodes.append(("/dev/nvidia-uvm", uvm, 0))
        nodes.append(("/dev/nvidia-uvm-tools", uvm, 1))
    if "display" in caps or "graphics" in caps:
        nodes.append(("/dev/nvidia-modeset", _cdi.NVIDIA_MAJOR, _cdi.MODESET_MINOR))
    for path, major, minor in nodes:
        make_node(pid, os.path.join(rootfs, path.lstrip("/")), major, minor)
        done["nodes"].append(path)
    # What a later systemd daemon-reload can take from this container (gpusim/reload.py).
    record = _reload.container_record(["%d:%d" % (major, minor) for _p, major, minor in nodes], cfg,
                                      os.path.join(host_root, _reload.RELOAD_DIR.lstrip("/")))
    with open(_inside(rootfs, _reload.DEVICES_IN_CONTAINER), "w", encoding="utf-8") as fh:
        json.dump(record, fh, sort_keys=True)
        fh.write("\n")
    done["files"].append(_reload.DEVICES_IN_CONTAINER)
    return done


def nsenter_bind_reloads(pid, rootfs):
    """Bind the host's reload record into the container (its mount namespace, before pivot_root), so the
    simulated NVML there sees the reloads that happen while it runs."""
    os.makedirs(_reload.RELOAD_DIR, exist_ok=True)
    mountpoint = _inside(rootfs, _reload.IN_CONTAINER)
    os.makedirs(mountpoint, exist_ok=True)
    subprocess.run(["nsenter", "--target", str(pid), "--mount", "mount", "--bind", _reload.RELOAD_DIR, mountpoint],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def nsenter_bind_load(pid, rootfs):
    """Bind the host's load records read-write into the container at the same path (gpusim/load.py), so a serving
    engine there records its work where the host's nvidia-smi, and every other container's, reads it."""
    from . import load as _load  # pylint: disable=import-outside-toplevel
    host_dir = _load.load_dir()
    try:   # load is a reading, never a reason for the container not to start
        os.makedirs(host_dir, exist_ok=True)
        os.chmod(host_dir, 0o1777)   # whatever user the engine runs as may write its record (as /tmp)
        mountpoint = _inside(rootfs, _load.LOAD_DIR)
        os.makedirs(mountpoint, exist_ok=True)
    except (OSError, HookError):
        return
    subprocess.run(["nsenter", "--target", str(pid), "--mount", "mount", "--bind", host_dir, mountpoint],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


# ==================================================================================================
# nvidia-container-runtime-hook
# ==================================================================================================

HOOK_USAGE = """Usage of %s:
  -config string
    \tconfiguration file
  -debug
    \tenable debug output
  -version
    \tenable version output

Commands:
  prestart
        run the prestart hook
  poststart
        no-op
  poststop
        no-op
"""


def hook_main(argv=None, version=None, commit=None, stdin=None, stderr=None, make_node=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    stderr = stderr or sys.stderr
    stdin = stdin or sys.stdin
    version = _version(version)
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "nvidia-container-runtime-hook"
    args = []
    it = iter(argv)
    for a in it:
        body = a.lstrip("-")
        if a.startswith("-") and body.split("=")[0] in ("debug", "version", "config"):
            name = body.split("=")[0]
            if name == "version":
                sys.stdout.write("NVIDIA Container Runtime Hook version %s\n" % "\n".join(
                    [version] + (["commit: " + _commit(version, commit)] if _commit(version, commit) else [])))
                return 0
            if name == "config" and "=" not in body:
                next(it, None)
            continue
        if a.startswith("-"):
            stderr.write("flag provided but not defined: %s\n" % a)
            stderr.write(HOOK_USAGE % prog)
            return 2
        args.append(a)
    if not args:
        stderr.write(HOOK_USAGE % prog)
        return 2
    if args[0] in ("poststart", "poststop"):
        return 0
    if args[0] != "prestart":
        stderr.write(HOOK_USAGE % prog)
        return 2
    try:
        pid, rootfs, env, _cfg, _p = read_container(stdin.read())
    except (OSError, ValueError) as exc:
        stderr.write("error getting hook config: %s\n" % exc)
        return 1
    if requested_devices(env) is None:
        return 0
    stderr.write("Auto-detected mode as 'legacy'\n")
    stderr.flush()
    if not os.environ.get("GPUSIM_HOOK_SKIP_CLI_CHECK") and shutil.which(
            "nvidia-container-cli", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") is None:
        stderr.write('couldn\'t find binary nvidia-container-cli in /usr/local/sbin:/usr/local/bin:/usr/sbin:'
                     '/usr/bin:/sbin:/bin : exec: "nvidia-container-cli": executable file not found in $PATH\n')
        return 1
    real = make_node is None and not os.environ.get("GPUSIM_HOOK_NO_NSENTER")
    if make_node is None and not real:
        make_node = direct_mknod(rootfs)
    try:
        inject(_cdi.load_state(), rootfs, env, pid=pid, make_node=make_node, cfg=_cfg)
    except HookError as exc:
        stderr.write("%s\n" % exc)
        return 1
    if real:
        nsenter_bind_reloads(pid, rootfs)
        nsenter_bind_load(pid, rootfs)
        register_device_user(pid)
    return 0


def register_device_user(pid, state_path=None):
    """A container given GPUs holds the driver's device nodes while its processes run (the module's refcount:
    gpusim/kmod.py); the entries of processes that are gone are dropped."""
    from .smi import pid_alive  # pylint: disable=import-outside-toplevel

    def fn(s):
        users = [u for u in s.get("device_users") or [] if pid_alive(u.get("pid")) and u.get("pid") != pid]
        s["device_users"] = users + [{"pid": int(pid)}]
    if pid:
        _state_mod().update(fn, state_path)


def _state_mod():
    from . import state  # pylint: disable=import-outside-toplevel
    return state


# ==================================================================================================
# nvidia-container-runtime
# ==================================================================================================

def _toolkit_config_runtimes(path="/etc/nvidia-container-runtime/config.toml"):
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return ["runc", "crun"]
    section = ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            section = s.strip("[]").strip()
        elif section == "nvidia-container-runtime" and re.match(r"^runtimes\s*=", s):
            return re.findall(r'"([^"]*)"', s) or ["runc", "crun"]
    return ["runc", "crun"]


def find_low_level_runtime(candidates=None):
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    for name in candidates or _toolkit_config_runtimes():
        path = name if os.path.isabs(name) else shutil.which(name)
        if path and os.path.realpath(path) != me and os.access(path, os.X_OK):
            return path
    return None


def add_prestart_hook(cfg_path, hook_path=HOOK_PATH):
    """Add [nvidia-container-runtime-hook prestart] to config.json unless a hook of that name is there."""
    with open(cfg_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    env = {}
    for item in (cfg.get("process") or {}).get("env") or []:
        if "=" in item:
            k, v = item.split("=", 1)
            env[k] = v
    if requested_devices(env) is None:
        return False
    hooks = cfg.setdefault("hooks", {})
    prestart = hooks.setdefault("prestart", [])
    for h in prestart:
        if os.path.basename(h.get("path", "")) in ("nvidia-container-runtime-hook", "nvidia-container-toolkit"):
            return False
    prestart.append({"path": hook_path, "args": ["nvidia-container-runtime-hook", "prestart"]})
    data = json.dumps(cfg, separators=(",", ":"))
    with open(cfg_path, "w", encoding="utf-8") as fh:
        fh.write(data)
    return True


def _bundle_from_args(args):
    for n, a in enumerate(args):
        if a in ("--bundle", "-b") and n + 1 < len(args):
            return args[n + 1]
        if a.startswith("--bundle="):
            return a.split("=", 1)[1]
    return os.getcwd()


def runtime_main(argv=None, version=None, commit=None, execv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    version = _version(version)
    runc = find_low_level_runtime()
    if "--version" in argv or "-v" in argv:
        sys.stdout.write("NVIDIA Container Runtime version %s\n" % version)
        if _commit(version, commit):
            sys.stdout.write("commit: %s\n" % _commit(version, commit))
        sys.stdout.write("spec: 1.2.1\n\n")
        sys.stdout.flush()
    if runc is None:
        sys.stderr.write("ERROR: error constructing low-level runtime: failed to locate any of "
                         "[runc crun] in PATH\n")
        return 1
    if "create" in argv:
        bundle = _bundle_from_args(argv)
        cfg_path = os.path.join(bundle, "config.json")
        try:
            add_prestart_hook(cfg_path)
        except (OSError, ValueError) as exc:
            sys.stderr.write("ERROR: error loading OCI specification: %s\n" % exc)
            return 1
    (execv or os.execv)(runc, [runc] + argv)
    return 0


# ==================================================================================================
# nvidia-cdi-hook (and `nvidia-ctk hook`)
# ==================================================================================================

_NVIDIA_LIB = re.compile(r"^(lib(?:cuda|cudadebugger|nvidia-[A-Za-z0-9_-]+|vdpau_nvidia))\.so\.\d+\.\d+(\.\d+)?$")


def _container_root(opts_spec, stdin):
    if opts_spec:
        with open(opts_spec, encoding="utf-8") as fh:
            cfg = json.load(fh)
        bundle = os.path.dirname(opts_spec)
    else:
        st = json.loads(stdin.read() or "{}")
        if st.get("pid") and not os.environ.get("GPUSIM_HOOK_NO_NSENTER"):
            register_device_user(st["pid"])
        bundle = st.get("bundle") or os.getcwd()
        with open(os.path.join(bundle, "config.json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
    root = (cfg.get("root") or {}).get("path") or "rootfs"
    if not os.path.isabs(root):
        root = os.path.join(bundle, root)
    return root


def cdi_hook_main(argv=None, version=None, commit=None, prog="nvidia-cdi-hook", stdin=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    stdin = stdin or sys.stdin
    version = _version(version)
    if not argv or argv[0] in ("--version", "-v"):
        if argv:
            sys.stdout.write("NVIDIA CDI Hook version %s\n" % "\n".join(
                [version] + (["commit: " + _commit(version, commit)] if _commit(version, commit) else [])))
            return 0
        sys.stderr.write("Usage: %s <hook> [options]\n" % prog)
        return 1
    name, args = argv[0], argv[1:]
    links, folders, spec = [], [], None
    it = iter(args)
    for a in it:
        key, _, val = a.partition("=")
        if key in ("--link", "--folder", "--container-spec", "--host-driver-version", "--ldconfig-path"):
            if not _:
                val = next(it, "")
            if key == "--link":
                links.append(val)
            elif key == "--folder":
                folders.append(val)
            elif key == "--container-spec":
                spec = val
    known = ("create-symlinks", "update-ldcache", "enable-cuda-compat", "disable-device-node-modification",
             "update-application-profile", "chmod", "create-soname-symlinks")
    if name not in known:
        sys.stderr.write('time="%s" level=error msg="No help topic for \'%s\'"\n' % (_cdi.rfc3339_now(), name))
        return 3
    if name in ("enable-cuda-compat", "disable-device-node-modification", "update-application-profile", "chmod"):
        return 0
    try:
        root = _container_root(spec, stdin)
    except (OSError, ValueError) as exc:
        sys.stderr.write('time="%s" level=error msg=%s\n' % (
            _cdi.rfc3339_now(), _cdi.go_quote("failed to load container state: %s" % exc)))
        return 1
    if name == "create-symlinks":
        for link in links:
            target, sep, path = link.partition("::")
            if not sep:
                continue
            dest = os.path.join(root, path.lstrip("/"))
            if os.path.lexists(dest):
                continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.symlink(target, dest)
        return 0
    # update-ldcache / create-soname-symlinks: the SONAME links ldconfig would make for the driver libs
    for folder in folders:
        d = os.path.join(root, folder.lstrip("/"))
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            m = _NVIDIA_LIB.match(n)
            if not m:
                continue
            so = _cdi.soname(n)
            link = os.path.join(d, so) if so else None
            if link and not os.path.lexists(link):
                os.symlink(n, link)
    return 0


# ==================================================================================================
# nvidia-container-cli (libnvidia-container-tools)
# ==================================================================================================

def cli_main(argv=None, version=None, commit=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    version = _version(version)
    if not argv or "--help" in argv or "-h" in argv:
        sys.stdout.write("Usage: nvidia-container-cli [OPTION...] COMMAND [ARG...]\n"
                         "Command line utility for manipulating NVIDIA GPU containers.\n\n"
                         " Commands:\n   configure [...]\n   info [...]\n   list [...]\n")
        return 0 if argv else 1
    if "--version" in argv or "-V" in argv:
        sys.stdout.write("cli-version: %s\nlib-version: %s\nbuild date: 2025-10-20T12:00+00:00\n"
                         "build revision: %s\nbuild compiler: x86_64-linux-gnu-gcc-8 8.3.0\n"
                         "build platform: x86_64\n" % (version, version, _commit(version, commit)))
        return 0
    cmds = [a for a in argv if not a.startswith("-")]
    cmd = cmds[0] if cmds else ""
    if cmd not in ("info", "list", "configure"):
        sys.stderr.write("nvidia-container-cli: unknown command: %s\n" % cmd)
        return 1
    state = _cdi.load_state()
    condition = _cdi.driver_condition(state)
    if condition != "ok":
        sys.stderr.write(DRIVER_ERRORS[condition] + "\n")
        return 1
    ver = state["driver"]["loaded"]["version"]
    gpus = _cdi.nvml_gpus(state)
    if cmd == "configure":
        sys.stderr.write("nvidia-container-cli: the simulated configure runs inside the hook only\n")
        return 1
    if cmd == "list":
        out = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
        out += ["/dev/nvidia%d" % _cdi.gpu_minor(g) for g in gpus]
        out += [p for p in (os.path.join("/usr/bin", b) for b in UTILITY_BINS + COMPUTE_BINS) if os.path.isfile(p)]
        out += _driver_libs(ver, UTILITY_LIBS + COMPUTE_LIBS)
        sys.stdout.write("\n".join(out) + "\n")
        return 0
    try:
        from gpusim.catalogue import MODELS
    except ImportError:  # pragma: no cover
        MODELS = {}
    try:
        from gpusim.catalogue import cuda_version
        cuda = cuda_version(ver)
    except ImportError:  # pragma: no cover
        cuda = CUDA_BY_BRANCH.get(ver.split(".")[0], "13.0")
    lines = ["NVRM version:   %s" % ver, "CUDA version:   %s" % cuda, ""]
    for gpu in gpus:
        model = MODELS.get(gpu.get("model"), {})
        lines += ["Device Index:   %d" % gpu.get("index", 0),
                  "Device Minor:   %d" % _cdi.gpu_minor(gpu),
                  "Model:          %s" % model.get("name", gpu.get("model", "")),
                  "Brand:          %s" % model.get("brand", "NVIDIA"),
                  "GPU UUID:       %s" % gpu.get("uuid", ""),
                  "Bus Location:   %s" % gpu.get("pci_bus_id", ""),
                  "Architecture:   %s" % model.get("compute_capability", ""),
                  ""]
    sys.stdout.write("\n".join(lines[:-1]) + "\n")
    return 0
