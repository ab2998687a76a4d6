"""CDI specs as the NVIDIA Container Toolkit writes them, plus the helpers nvidia-ctk and the hook share.

Test code (the simulated GPU host). Stdlib only, Python 3.9+.

What is reproduced (checked against the toolkit's source, tags v1.17.8, v1.18.0, v1.20.0, and the corpus
capture nvidia_ctk/cdi-generate_mock-A100_nvidia.yaml made by 1.20.0):
- the spec layout: cdiVersion (the minimum version the content needs: 0.5.0 for this content), kind,
  devices `<index>`, `GPU-<uuid>` per GPU in NVML order, then `all`; the common containerEdits
  (env, deviceNodes, hooks, mounts) in the CDI struct's field order;
- which hooks each toolkit version adds (1.17: create-symlinks, enable-cuda-compat, update-ldcache;
  1.18 adds disable-device-node-modification and the NVIDIA_CTK_LIBCUDA_DIR / NVIDIA_VISIBLE_DEVICES=void
  env; 1.20 adds update-application-profile);
- the YAML style: 1.18+ (orderedyaml, yaml.v3 with 4-space indent, struct field order, "---" first line);
  1.17 (sigs.k8s.io/yaml: keys sorted, 2-space indent, sequences not indented); JSON is json.Marshal
  (compact, no newline);
- the file is written as `spec.*.tmp` in the target directory, renamed over the target, chmod 0644;
- device nodes from 1.19.0 (internal/edits/device.go): a node that is a real device on the host gets
  major, minor, fileMode (its permission bits), permissions "rwm" and a non-root gid, as runc's
  DeviceFromPath reads them (a regular file or a missing node keeps the minimal path/hostPath entry);
  from 1.19.1 a node whose group is not root and which is not world read/writable also adds that gid to
  `additionalGids` (after `mounts`, the CDI ContainerEdits field order; sorted, deduplicated; 1.19.0 had
  the code but dropped every gid), unless --feature-flag no-additional-gids-for-device-nodes; cdiVersion is
  then 0.7.0, the minimum version for additionalGids (CDI specs-go/version.go requiresV070).
  tests/fixtures/cdi_versions/README.md has the sources.
"""
import datetime
import json
import os
import re
import stat
import sys
import tempfile

try:  # the simulator core (same package)
    from gpusim import state as _state_mod
except ImportError:  # pragma: no cover - only when the core is absent
    _state_mod = None

STATE_DEFAULT_PATH = "/var/lib/gpu-sim/state.json"
LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")
CDI_HOOK_PATH = "/usr/bin/nvidia-cdi-hook"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
BINARIES = ["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server"]
CONTROL_NODES = ["nvidia-modeset", "nvidia-uvm-tools", "nvidia-uvm", "nvidiactl"]
# SONAME of the driver libraries (what ldconfig links `<lib>.so.<version>` to); default `.so.1`
SONAME_SUFFIX = {"libnvidia-nvvm": "4", "libnvidia-gpucomp": None}
NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
MODESET_MINOR = 254
UVM_MAJOR_DEFAULT = 511


# --------------------------------------------------------------------------------------------------
# state access

def load_state(path=None):
    """The simulator state (gpusim.state.load when the core is importable, else the JSON directly)."""
    if _state_mod is not None:
        return _state_mod.load(path)
    path = path or os.environ.get("GPUSIM_STATE") or STATE_DEFAULT_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            state = json.load(fh)
    except FileNotFoundError:
        state = {}
    state.setdefault("gpus", [])
    state.setdefault("driver", {"installed": None, "loaded": None})
    state["driver"].setdefault("installed", None)
    state["driver"].setdefault("loaded", None)
    state.setdefault("processes", [])
    state.setdefault("faults", {})
    return state


def driver_condition(state):
    """'no_driver' | 'not_loaded' | 'mismatch' | 'ok' (same meaning as gpusim.state.driver_state)."""
    if _state_mod is not None and hasattr(_state_mod, "driver_state"):
        return _state_mod.driver_state(state)
    drv = state.get("driver") or {}
    inst, loaded = drv.get("installed"), drv.get("loaded")
    if inst is None:
        return "no_driver"
    if loaded is None:
        return "not_loaded"
    if inst.get("version") != loaded.get("version"):
        return "mismatch"
    return "ok"


def nvml_gpus(state):
    """The GPUs NVML enumerates (same rule as nvidia-smi's): a board that needs the open modules is
    absent under the proprietary ones, and a branch older than the board's first branch lacks it."""
    loaded = (state.get("driver") or {}).get("loaded") or {}
    try:
        from gpusim import catalogue
    except ImportError:  # pragma: no cover
        catalogue = None
    try:
        branch = int(str(loaded.get("version", "")).split(".")[0])
    except ValueError:
        branch = 0
    out = []
    for gpu in state.get("gpus", []):
        model = {}
        if catalogue is not None:
            try:
                model = catalogue.get(gpu.get("model"))
            except Exception:  # an unknown model: no restriction
                model = {}
        if model.get("needs_open_modules") and loaded.get("kernel_modules", "open") != "open":
            continue
        if branch and branch < int(model.get("min_branch", 0) or 0):
            continue
        out.append(gpu)
    return out


def soname(filename):
    """`libcuda.so.580.95.05` -> `libcuda.so.1` (None when the SONAME is the versioned name itself)."""
    stem = filename.split(".so.")[0]
    suffix = SONAME_SUFFIX.get(stem, "1")
    return None if suffix is None else "%s.so.%s" % (stem, suffix)


def gpu_minor(gpu):
    return int(gpu.get("minor", gpu.get("index", 0)))


def _mig_devices(gpu):
    try:
        from gpusim import mig
    except ImportError:  # pragma: no cover
        return []
    return mig.devices(gpu)


def mig_cap_minors(gpu, gi, ci):
    """Minors of /dev/nvidia-caps/nvidia-cap<N> for `gpu<minor>/gi<gi>/access` and `.../ci<ci>/access`
    (gpusim/mig.py cap_minors; DESIGN.md, MIG)."""
    from gpusim import mig
    return mig.cap_minors(gpu, gi, ci)


# --------------------------------------------------------------------------------------------------
# Go / logrus compatible text

_NAMED_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                  "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(text):
    """strconv.Quote: double-quoted, Go escapes, printable Unicode kept."""
    out = ['"']
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        elif ord(ch) < 0x80 or not ch.isprintable():
            code = ord(ch)
            if code < 0x80:
                out.append("\\x%02x" % code)
            elif code < 0x10000:
                out.append("\\u%04x" % code)
            else:
                out.append("\\U%08x" % code)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_LOGRUS_PLAIN = re.compile(r"^[A-Za-z0-9\-._/@^+]*$")


def rfc3339_now():
    now = datetime.datetime.now().astimezone().replace(microsecond=0)
    off = now.utcoffset()
    base = now.strftime("%Y-%m-%dT%H:%M:%S")
    if not off:
        return base + "Z"
    secs = int(off.total_seconds())
    sign = "+" if secs >= 0 else "-"
    secs = abs(secs)
    return "%s%s%02d:%02d" % (base, sign, secs // 3600, (secs % 3600) // 60)


LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Logger:
    """logrus' TextFormatter when stderr is not a terminal: time="..." level=... msg="..."."""

    def __init__(self, stream=None, level="info"):
        self.stream = stream
        self.level = level

    def _emit(self, level, msg):
        if LEVELS[level] < LEVELS[self.level]:
            return
        value = msg if (msg and _LOGRUS_PLAIN.match(msg)) else go_quote(msg)
        stream = self.stream or sys.stderr
        stream.write('time="%s" level=%s msg=%s\n' % (rfc3339_now(), level, value))
        stream.flush()

    def debug(self, msg):
        self._emit("debug", msg)

    def info(self, msg):
        self._emit("info", msg)

    def warning(self, msg):
        self._emit("warning", msg)

    def error(self, msg):
        self._emit("error", msg)


# --------------------------------------------------------------------------------------------------
# toolkit version features

def version_tuple(version):
    nums = re.findall(r"\d+", version or "")
    return tuple(int(n) for n in nums[:3]) if nums else (99, 0, 0)


def features(toolkit_version):
    v = version_tuple(toolkit_version)
    return {
        "libcuda_dir_env": v >= (1, 18, 0),
        "void_env": v >= (1, 18, 0),
        "disable_device_node_modification": v >= (1, 18, 0),
        "update_application_profile": v >= (1, 20, 0),
        "ordered_yaml": v >= (1, 18, 0),
        "current_cdi_version": "1.1.0" if v >= (1, 19, 0) else ("1.0.0" if v >= (1, 18, 0) else "0.8.0"),
        # up to 1.18 the version was logged before Save set the minimum one ("fix: Log actual CDI spec
        # version", 1.19.0-rc.3)
        "log_min_version": v >= (1, 19, 0),
        # cdi generate --feature-flag (and NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS): from 1.18.0
        "feature_flag_option": v >= (1, 18, 0),
        # the no-additional-gids-for-device-nodes feature flag: from 1.19.0
        "no_additional_gids_flag": v >= (1, 19, 0),
        # device nodes described from the host's node (major, minor, fileMode, permissions, gid): 1.19.0
        "device_node_info": v >= (1, 19, 0),
        # additionalGids for group-only device nodes, effective from 1.19.1
        "additional_gids": v >= (1, 19, 1),
        # list flags of cdi generate split "a,b" into two values: urfave/cli v2 (1.17) and v3.6+ per
        # command (1.19+); 1.18's urfave/cli v3.4.1 took the root's DisableSliceFlagSeparator for all
        "split_list_flags": not ((1, 18, 0) <= v < (1, 19, 0)),
    }


# --------------------------------------------------------------------------------------------------
# driver discovery (what the simulated driver packages installed)

def _rooted(root, path):
    return os.path.join(root, path.lstrip("/")) if root and root != "/" else path


def find_versioned_libs(version, driver_root="/"):
    """Libraries `*.so.<version>` in the multiarch dirs, named as ldcache lists them (/lib/x86_64-linux-gnu)."""
    found = {}
    suffix = ".so." + version
    for libdir in LIB_DIRS:
        real = _rooted(driver_root, libdir)
        if not os.path.isdir(real):
            continue
        for dirpath, dirnames, filenames in os.walk(real):
            dirnames.sort()
            rel = os.path.relpath(dirpath, real)
            if rel.count(os.sep) > 1:
                continue
            for name in filenames:
                if name.endswith(suffix):
                    sub = "" if rel == "." else rel + "/"
                    key = "/lib/x86_64-linux-gnu/" + sub + name
                    found.setdefault(key, True)
    return sorted(found)


def find_binaries(driver_root="/"):
    out = []
    for name in BINARIES:
        for d in ("/usr/bin", "/usr/sbin"):
            if os.path.exists(_rooted(driver_root, d + "/" + name)):
                out.append(d + "/" + name)
                break
    return out


def find_firmware(version, driver_root="/"):
    d = "/lib/firmware/nvidia/" + version
    real = _rooted(driver_root, d)
    if not os.path.isdir(real):
        return []
    return sorted(d + "/" + n for n in os.listdir(real) if n.startswith("gsp") and n.endswith(".bin"))


def find_control_nodes(dev_root="/"):
    return ["/dev/" + n for n in CONTROL_NODES if os.path.exists(_rooted(dev_root, "/dev/" + n))]


# --------------------------------------------------------------------------------------------------
# spec building

def _hook(args, feats):
    return {"hookName": "createContainer", "path": CDI_HOOK_PATH, "args": ["nvidia-cdi-hook"] + args,
            "env": ["NVIDIA_CTK_DEBUG=false"]}


NO_ADDITIONAL_GIDS = "no-additional-gids-for-device-nodes"


def lstat_device(path):
    """(major, minor, permission bits, gid) of a device node, as runc's DeviceFromPath reads it (lstat;
    char, block or fifo), or None for anything else (a missing path, a regular file, a symlink)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode), st.st_gid


def device_node(path, dev_root, feats, feature_flags=()):
    """(the CDI deviceNode entry, its additional gids) for a node the spec names."""
    entry = {"path": path, "hostPath": path}
    if not feats["device_node_info"]:
        return entry, []
    info = lstat_device(_rooted(dev_root, path))
    if info is None:
        return entry, []
    major, minor, mode, gid = info
    for key, value in (("major", major), ("minor", minor), ("fileMode", mode)):
        if value:
            entry[key] = value
    entry["permissions"] = "rwm"
    if gid:
        entry["gid"] = gid
    world_rw = mode & 0o4 and mode & 0o2
    skip = feats["no_additional_gids_flag"] and NO_ADDITIONAL_GIDS in (feature_flags or ())
    if feats["additional_gids"] and gid and mode and not world_rw and not skip:
        return entry, [gid]
    return entry, []


def _edits(nodes, gids):
    edits = {"deviceNodes": nodes}
    if gids:
        edits["additionalGids"] = sorted(set(gids))
    return edits


def build_spec(state, toolkit_version, driver_root="/", dev_root=None, vendor="nvidia.com", cls="gpu",
               no_all_device=False, extra_mounts=None, feature_flags=()):
    """The spec dict (insertion order = the CDI struct field order) for the state's GPUs."""
    dev_root = driver_root if dev_root is None else dev_root
    feats = features(toolkit_version)
    version = state["driver"]["loaded"]["version"]
    devices = []
    all_nodes, all_gids = [], []
    for gpu in state.get("gpus", []):
        node, gids = device_node("/dev/nvidia%d" % gpu_minor(gpu), dev_root, feats, feature_flags)
        edits = _edits([node], gids)
        all_nodes.append(node)
        all_gids += gids
        for name in (str(gpu.get("index", 0)), gpu["uuid"]):
            devices.append({"name": name, "containerEdits": json.loads(json.dumps(edits))})
    # MIG devices after the GPUs (nvcdi: the GPU specs, then the MIG device specs), named `<gpu>:<mig>` and by
    # the MIG UUID (pkg/nvcdi/namer.go; research mig.md §5): the parent's node and the GI / CI capability nodes
    for gpu in state.get("gpus", []):
        for mig in _mig_devices(gpu):
            paths = ["/dev/nvidia%d" % gpu_minor(gpu)] + [
                "/dev/nvidia-caps/nvidia-cap%d" % m for m in mig_cap_minors(gpu, mig["gi"]["id"], mig["ci"]["id"])]
            pairs = [device_node(pth, dev_root, feats, feature_flags) for pth in paths]
            edits = _edits([e for e, _g in pairs], [g for _e, gs in pairs for g in gs])
            for entry, gids in pairs[1:]:
                all_nodes.append(entry)
                all_gids += gids
            for name in ("%d:%d" % (gpu.get("index", 0), mig["index"]), mig["uuid"]):
                devices.append({"name": name, "containerEdits": json.loads(json.dumps(edits))})
    if not no_all_device and devices:
        devices.append({"name": "all", "containerEdits": json.loads(json.dumps(_edits(all_nodes, all_gids)))})

    libs = find_versioned_libs(version, driver_root)
    env = []
    if feats["libcuda_dir_env"]:
        env.append("NVIDIA_CTK_LIBCUDA_DIR=/lib/x86_64-linux-gnu")
    if feats["void_env"]:
        env.append("NVIDIA_VISIBLE_DEVICES=void")
    hooks = []
    if any(os.path.basename(l).startswith("libcuda.so.") for l in libs):
        hooks.append(_hook(["create-symlinks", "--link",
                            "libcuda.so.1::/lib/x86_64-linux-gnu/libcuda.so"], feats))
    hooks.append(_hook(["enable-cuda-compat", "--host-driver-version=" + version], feats))
    folders = []
    for lib in libs:
        d = os.path.dirname(lib)
        if d not in folders:
            folders.append(d)
    if folders:
        args = ["update-ldcache"]
        for d in folders:
            args += ["--folder", d]
        hooks.append(_hook(args, feats))
    if feats["disable_device_node_modification"]:
        hooks.append(_hook(["disable-device-node-modification"], feats))
    if feats["update_application_profile"]:
        hooks.append(_hook(["update-application-profile"], feats))

    mounts = []
    for path in libs + find_firmware(version, driver_root) + find_binaries(driver_root) + list(extra_mounts or []):
        mounts.append({"hostPath": path, "containerPath": path, "options": list(MOUNT_OPTIONS)})

    common = {}
    if env:
        common["env"] = env
    control = [device_node(n, dev_root, feats, feature_flags) for n in find_control_nodes(dev_root)]
    if control:
        common["deviceNodes"] = [entry for entry, _gids in control]
    if hooks:
        common["hooks"] = hooks
    if mounts:
        common["mounts"] = mounts
    common_gids = sorted(set(g for _entry, gids in control for g in gids))
    if common_gids:
        common["additionalGids"] = common_gids
    # the minimum version the content needs: 0.5.0 for device names that start with a digit (and
    # hostPath), 0.7.0 once anything has additionalGids
    needs_070 = common_gids or any(d["containerEdits"].get("additionalGids") for d in devices)
    spec = {"cdiVersion": "0.7.0" if needs_070 else "0.5.0", "kind": "%s/%s" % (vendor, cls), "devices": devices,
            "containerEdits": common}
    return spec


# --------------------------------------------------------------------------------------------------
# YAML / JSON emitters (no PyYAML on the targets)

_YAML_NEEDS_QUOTE_WORDS = {"", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False",
                           "FALSE", "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off",
                           "Off", "OFF", "y", "Y", "n", "N", ".inf", ".Inf", ".INF", "-.inf", ".nan",
                           ".NaN", ".NAN", "<<", "="}
_NUMBERISH = re.compile(r"^[-+]?(\.?[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|0x[0-9a-fA-F_]+|0o?[0-7_]+|"
                        r"[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?)$")


def yaml_scalar(value):
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    s = str(value)
    quote = (s in _YAML_NEEDS_QUOTE_WORDS or _NUMBERISH.match(s) is not None
             or s[0] in "!&*{}[]|>'\"%@`#,?:" or (s[0] == "-" and (len(s) == 1 or s[1] == " "))
             or s != s.strip() or ": " in s or " #" in s or s.endswith(":")
             or any(ord(c) < 0x20 for c in s))
    if not quote:
        return s
    return json.dumps(s, ensure_ascii=False)


def emit_yaml_ordered(spec):
    """orderedyaml (yaml.v3, indent 4): the 1.18+ style of the corpus file.

    yaml.v3's layout, read off the corpus file: a mapping's children sit 4 columns in, except in a
    mapping that is itself a sequence item (`- key: ...`), whose children sit 2 columns in from its keys.
    """
    lines = ["---"]

    def emit_map(d, indent, first_prefix=None, in_seq_item=False):
        pad = " " * indent
        step = 2 if in_seq_item else 4
        first = True
        for k, v in d.items():
            lead = first_prefix if (first and first_prefix is not None) else pad
            first = False
            if isinstance(v, dict) and v:
                lines.append("%s%s:" % (lead, k))
                emit_map(v, indent + step)
            elif isinstance(v, list) and v:
                lines.append("%s%s:" % (lead, k))
                emit_seq(v, indent + step)
            elif isinstance(v, (dict, list)):
                lines.append("%s%s: %s" % (lead, k, "{}" if isinstance(v, dict) else "[]"))
            else:
                lines.append("%s%s: %s" % (lead, k, yaml_scalar(v)))

    def emit_seq(items, indent):
        pad = " " * indent
        for item in items:
            if isinstance(item, dict) and item:
                emit_map(item, indent + 2, first_prefix=pad + "- ", in_seq_item=True)
            else:
                lines.append("%s- %s" % (pad, yaml_scalar(item)))

    emit_map(spec, 0)
    return "\n".join(lines) + "\n"


def emit_yaml_sorted(spec):
    """sigs.k8s.io/yaml (go-yaml v2 via JSON): keys sorted, 2 spaces, sequences at the key's column."""
    lines = ["---"]

    def emit_map(d, indent, first_prefix=None):
        pad = " " * indent
        first = True
        for k in sorted(d):
            v = d[k]
            lead = first_prefix if (first and first_prefix is not None) else pad
            first = False
            if isinstance(v, dict) and v:
                lines.append("%s%s:" % (lead, k))
                emit_map(v, indent + 2)
            elif isinstance(v, list) and v:
                lines.append("%s%s:" % (lead, k))
                emit_seq(v, indent)
            elif isinstance(v, (dict, list)):
                lines.append("%s%s: %s" % (lead, k, "{}" if isinstance(v, dict) else "[]"))
            else:
                lines.append("%s%s: %s" % (lead, k, yaml_scalar(v)))

    def emit_seq(items, indent):
        pad = " " * indent
        for item in items:
            if isinstance(item, dict) and item:
                emit_map(item, indent + 2, first_prefix=pad + "- ")
            else:
                lines.append("%s- %s" % (pad, yaml_scalar(item)))

    emit_map(spec, 0)
    return "\n".join(lines) + "\n"


def emit_json(spec):
    return json.dumps(spec, separators=(",", ":"), ensure_ascii=False).replace(
        "<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(spec, fmt, toolkit_version):
    if fmt == "json":
        return emit_json(spec)
    if features(toolkit_version)["ordered_yaml"]:
        return emit_yaml_ordered(spec)
    return emit_yaml_sorted(spec)


def write_spec_file(path, data, mode=0o644):
    """As the CDI cache writes a spec: spec.*.tmp in the target dir, rename over the target, chmod."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="spec.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.chmod(path, mode)


# --------------------------------------------------------------------------------------------------
# reading specs (cdi list, the simulated runtimes)

DEFAULT_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]


def _parse_yaml_min(text):
    """Just enough YAML for CDI specs: the top-level `kind` and the names of `devices`, in both layouts
    this module emits (ordered with indented lists; sorted keys with lists at the parent's indent)."""
    kind = None
    names = []
    in_devices = False
    item_indent = key_indent = None
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip()
        if not line.strip() or line.strip() == "---" or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        item = re.match(r"^-(\s+)(.*)$", stripped)
        if indent == 0 and not (in_devices and item):
            in_devices = stripped.startswith("devices:")
            if stripped.startswith("kind:"):
                kind = _unquote(stripped[5:].strip())
            continue
        if not in_devices:
            continue
        if item and item_indent is None:
            item_indent = indent
        if item and indent == item_indent:
            key_indent = indent + 1 + len(item.group(1))
            field = item.group(2)
        elif indent == key_indent:
            field = stripped
        else:
            continue
        if field.startswith("name:"):
            names.append(_unquote(field[5:].strip()))
    return {"kind": kind, "devices": [{"name": n} for n in names]}


def _unquote(s):
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        if s[0] == '"':
            try:
                return json.loads(s)
            except ValueError:
                return s[1:-1]
        return s[1:-1].replace("''", "'")
    return s


def read_spec(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".json"):
        return json.loads(text)
    return _parse_yaml_min(text)


def list_devices(spec_dirs=None):
    """Qualified device names from all specs; a later directory overrides an earlier one (priority)."""
    spec_dirs = spec_dirs or DEFAULT_SPEC_DIRS
    resolved = {}
    errors = {}
    for prio, d in enumerate(spec_dirs):
        try:
            entries = sorted(os.listdir(d))
        except OSError:
            continue
        seen_here = {}
        for name in entries:
            if not (name.endswith(".yaml") or name.endswith(".json")):
                continue
            path = os.path.join(d, name)
            if not os.path.isfile(path):
                continue
            try:
                spec = read_spec(path)
            except (OSError, ValueError) as exc:
                errors[path] = str(exc)
                continue
            kind = spec.get("kind")
            if not kind:
                errors[path] = "invalid spec: missing kind"
                continue
            for dev in spec.get("devices") or []:
                qname = "%s=%s" % (kind, dev.get("name"))
                if qname in seen_here:
                    errors[path] = "conflicting device %s (specs %s, %s)" % (
                        go_quote(qname), go_quote(seen_here[qname]), go_quote(path))
                    continue
                seen_here[qname] = path
                resolved[qname] = (prio, path)
    return sorted(resolved), errors
