"""nvidia-ctk, the NVIDIA Container Toolkit CLI, as the simulated GPU host provides it (test code).

Stdlib only, Python 3.9+ (tomllib, used only for an existing containerd config, needs 3.11).
Behaviour follows the toolkit's source (tags v1.17.8, v1.18.0, v1.20.0) and the corpus captures in
nvidia_ctk/ (made by 1.20.0):

  nvidia-ctk --version
  nvidia-ctk runtime configure --runtime=docker [--config F] [--set-as-default] [--cdi.enabled] [--dry-run]
  nvidia-ctk runtime configure --runtime=containerd [--config F] [--drop-in-config F] [...]
  nvidia-ctk cdi generate [--output F] [--format yaml|json] [--driver-root D] [--dev-root D]
                          [--feature-flag NAME ...] ...
  nvidia-ctk cdi list [--spec-dir D ...]
  nvidia-ctk system create-device-nodes [--control-devices] [--load-kernel-modules] [--dry-run]
  nvidia-ctk config [--config-file F] [--in-place] [--output F] [--set key=value ...]
  nvidia-ctk hook <name> ...             (the same hooks as nvidia-cdi-hook)

Logging is logrus' text format (stderr is never a terminal here): time="..." level=info msg="...".
Errors end the program with `level=error msg="<error>"` and exit status 1, as main() does.
The version is the one of the package that installed the executable (substituted at build time).
"""
import decimal
import math
import os
import stat
import sys

from gpusim import cdi as _cdi
from gpusim.cdi import Logger, go_quote

DEFAULT_VERSION = "1.18.0"
DEFAULT_COMMIT = "f8daa5e26de9fd7eb79259040b6dd5a52060048c"
# the commits the release tags point at (NVIDIA/nvidia-container-toolkit)
RELEASE_COMMITS = {
    "1.17.8": "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
    "1.18.0": "f8daa5e26de9fd7eb79259040b6dd5a52060048c",
}

DEFAULT_DOCKER_CONFIG = "/etc/docker/daemon.json"
DEFAULT_CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DEFAULT_CONTAINERD_DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"
DEFAULT_CRIO_CONFIG = "/etc/crio/crio.conf"
DEFAULT_CRIO_DROPIN = "/etc/crio/crio.conf.d/99-nvidia.toml"
RUNTIME_SPECIFIC_DEFAULT = "RUNTIME_SPECIFIC_DEFAULT"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"

# `nvidia-ctk config` with no file: the defaults (corpus nvidia-container-runtime_config-default.toml)
DEFAULT_TOOLKIT_CONFIG = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""


class CtkError(Exception):
    """An error main() logs as level=error and exits 1 for."""


class GoPanic(Exception):
    """A Go runtime panic: printed as Go prints it, exit status 2."""

    def __init__(self, message, frame):
        Exception.__init__(self, message)
        self.frame = frame


# ==================================================================================================
# encoding/json (Go) — decode as json.NewDecoder(...).Decode(&map), encode as json.MarshalIndent
# ==================================================================================================


class GoJSONError(Exception):
    """Message text is exactly Go's err.Error()."""


class _EOF(Exception):
    pass


def quote_char(c):
    """encoding/json's quoteChar(byte): the byte as a rune, strconv.Quote'd, in single quotes."""
    if c == ord("'"):
        return "'\\''"
    if c == ord('"'):
        return "'\"'"
    return "'" + go_quote(chr(c))[1:-1] + "'"


_SPACE = b" \t\r\n"


class _Parser:
    def __init__(self, data):
        self.d = data
        self.i = 0
        self.n = len(data)

    def err(self, c, ctx):
        raise GoJSONError("invalid character %s %s" % (quote_char(c), ctx))

    def peek(self):
        if self.i >= self.n:
            raise _EOF()
        return self.d[self.i]

    def skip_ws(self):
        while self.i < self.n and self.d[self.i] in _SPACE:
            self.i += 1

    def value(self):
        self.skip_ws()
        c = self.peek()
        if c == ord("{"):
            self.i += 1
            return self.obj()
        if c == ord("["):
            self.i += 1
            return self.arr()
        if c == ord('"'):
            self.i += 1
            return self.string()
        if c == ord("-") or ord("0") <= c <= ord("9"):
            return self.number()
        if c == ord("t"):
            return self.literal(b"true", True)
        if c == ord("f"):
            return self.literal(b"false", False)
        if c == ord("n"):
            return self.literal(b"null", None)
        self.err(c, "looking for beginning of value")

    def literal(self, word, val):
        self.i += 1
        for expect in word[1:]:
            c = self.peek()
            if c != expect:
                self.err(c, "in literal %s (expecting %s)" % (word.decode(), quote_char(expect)))
            self.i += 1
        return val

    def number(self):
        start = self.i
        c = self.peek()
        if c == ord("-"):
            self.i += 1
            c = self.peek()
            if not (ord("0") <= c <= ord("9")):
                self.err(c, "in numeric literal")
        if c == ord("0"):
            self.i += 1
        else:
            while self.i < self.n and ord("0") <= self.d[self.i] <= ord("9"):
                self.i += 1
        if self.i < self.n and self.d[self.i] == ord("."):
            self.i += 1
            c = self.peek()
            if not (ord("0") <= c <= ord("9")):
                self.err(c, "after decimal point in numeric literal")
            while self.i < self.n and ord("0") <= self.d[self.i] <= ord("9"):
                self.i += 1
        if self.i < self.n and self.d[self.i] in b"eE":
            self.i += 1
            c = self.peek()
            if c in b"+-":
                self.i += 1
                c = self.peek()
            if not (ord("0") <= c <= ord("9")):
                self.err(c, "in exponent of numeric literal")
            while self.i < self.n and ord("0") <= self.d[self.i] <= ord("9"):
                self.i += 1
        text = self.d[start:self.i].decode("ascii")
        # a number at the very end of the input is complete only for a top-level value; inside a
        # container the Decoder still needs the next byte, which is EOF -> "unexpected EOF".
        f = float(text)
        if math.isinf(f):
            raise GoJSONError("json: cannot unmarshal number %s into Go value of type float64" % text)
        return f

    def string(self):
        out = bytearray()
        while True:
            c = self.peek()
            if c == ord('"'):
                self.i += 1
                return out.decode("utf-8", errors="replace")
            if c == ord("\\"):
                self.i += 1
                c = self.peek()
                simple = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b",
                          ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
                if c in simple:
                    out += simple[c]
                    self.i += 1
                elif c == ord("u"):
                    self.i += 1
                    code = self.hex4()
                    if 0xD800 <= code < 0xDC00:
                        # a high surrogate: Go pairs it with a following \\uDC00-\\uDFFF if present
                        save = self.i
                        if self.i + 1 < self.n and self.d[self.i] == ord("\\") and self.d[self.i + 1] == ord("u"):
                            self.i += 2
                            low = self.hex4()
                            if 0xDC00 <= low < 0xE000:
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                                out += chr(code).encode("utf-8")
                                continue
                            self.i = save
                        out += "\ufffd".encode("utf-8")
                    elif 0xDC00 <= code < 0xE000:
                        out += "\ufffd".encode("utf-8")
                    else:
                        out += chr(code).encode("utf-8")
                else:
                    self.err(c, "in string escape code")
            elif c < 0x20:
                self.err(c, "in string literal")
            else:
                out.append(c)
                self.i += 1

    def hex4(self):
        code = 0
        for _ in range(4):
            c = self.peek()
            if c in b"0123456789abcdefABCDEF":
                code = code * 16 + int(chr(c), 16)
                self.i += 1
            else:
                self.err(c, "in \\u hexadecimal character escape")
        return code

    def obj(self):
        result = {}
        self.skip_ws()
        c = self.peek()
        if c == ord("}"):
            self.i += 1
            return result
        while True:
            self.skip_ws()
            c = self.peek()
            if c != ord('"'):
                self.err(c, "looking for beginning of object key string")
            self.i += 1
            key = self.string()
            self.skip_ws()
            c = self.peek()
            if c != ord(":"):
                self.err(c, "after object key")
            self.i += 1
            result[key] = self.value()
            self.skip_ws()
            c = self.peek()
            if c == ord(","):
                self.i += 1
                continue
            if c == ord("}"):
                self.i += 1
                return result
            self.err(c, "after object key:value pair")

    def arr(self):
        result = []
        self.skip_ws()
        c = self.peek()
        if c == ord("]"):
            self.i += 1
            return result
        while True:
            result.append(self.value())
            self.skip_ws()
            c = self.peek()
            if c == ord(","):
                self.i += 1
                continue
            if c == ord("]"):
                self.i += 1
                return result
            self.err(c, "after array element")


def decode(data, go_type="docker.Config"):
    """Decode the first value of data into a Go map; raise GoJSONError with Go's text.

    Returns the dict, or None for a top-level `null` (Go sets the map to nil).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    p = _Parser(data)
    p.skip_ws()
    if p.i >= p.n:
        raise GoJSONError("EOF")
    try:
        val = p.value()
    except _EOF:
        raise GoJSONError("unexpected EOF")
    if val is None:
        return None
    if not isinstance(val, dict):
        kind = {list: "array", str: "string", float: "number", bool: "bool"}[type(val)]
        raise GoJSONError("json: cannot unmarshal %s into Go value of type %s" % (kind, go_type))
    return val


# --------------------------------------------------------------------------------------------------

def format_float(f):
    """strconv.AppendFloat(f, 'f' or 'e', -1, 64) as encoding/json's floatEncoder uses it."""
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        s = repr(f)  # shortest digits; Python writes e-07 / e+21 like Go before the cleanup
        if "e" not in s:
            s = "%e" % f
        mant, exp = s.split("e")
        if mant.endswith(".0"):
            mant = mant[:-2]
        sign = exp[0] if exp[0] in "+-" else "+"
        digits = exp.lstrip("+-").lstrip("0") or "0"
        if len(digits) < 2:
            digits = "0" + digits
        s = "%se%s%s" % (mant, sign, digits)
        # encoding/json: clean up e-09 to e-9
        if len(s) >= 4 and s[-4] == "e" and s[-3] == "-" and s[-2] == "0":
            s = s[:-2] + s[-1]
        return s
    d = decimal.Decimal(repr(f)).normalize()
    return format(d, "f")


def _enc_string(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append("\\u%04x" % o)
        elif 0xD800 <= o < 0xE000:
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def marshal_indent(value, indent="    ", prefix=""):
    parts = []

    def enc(v, level):
        if v is None:
            parts.append("null")
        elif v is True:
            parts.append("true")
        elif v is False:
            parts.append("false")
        elif isinstance(v, (int, float)):
            parts.append(format_float(float(v)))
        elif isinstance(v, str):
            parts.append(_enc_string(v))
        elif isinstance(v, dict):
            if not v:
                parts.append("{}")
                return
            parts.append("{")
            keys = sorted(v, key=lambda k: k.encode("utf-8", "surrogatepass"))
            for n, k in enumerate(keys):
                parts.append("\n" + prefix + indent * (level + 1))
                parts.append(_enc_string(k) + ": ")
                enc(v[k], level + 1)
                if n < len(keys) - 1:
                    parts.append(",")
            parts.append("\n" + prefix + indent * level + "}")
        elif isinstance(v, (list, tuple)):
            if not v:
                parts.append("[]")
                return
            parts.append("[")
            for n, item in enumerate(v):
                parts.append("\n" + prefix + indent * (level + 1))
                enc(item, level + 1)
                if n < len(v) - 1:
                    parts.append(",")
            parts.append("\n" + prefix + indent * level + "]")
        else:
            raise TypeError("cannot marshal %r" % (v,))

    enc(value, 0)
    return "".join(parts)


def go_type_name(v):
    """The dynamic type name Go prints in an interface conversion panic."""
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    if isinstance(v, dict):
        return "map[string]interface {}"
    return type(v).__name__


# ==================================================================================================
# go-toml v1 (pelletier/go-toml Tree.Marshal): simple values first, then tables, each group sorted;
# a table header is preceded by an empty line; each nesting level is indented by two spaces.
# ==================================================================================================

def _toml_bare(key):
    return bool(key) and all(c.isalnum() and c.isascii() or c in "_-" for c in key)


def _toml_key(key):
    return key if _toml_bare(key) else '"' + _toml_escape(key) + '"'


def _toml_escape(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\f":
            out.append("\\f")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append("\\u%04X" % o)
        else:
            out.append(ch)
    return "".join(out)


def _toml_value(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == int(v):
            return "%.1f" % v
        return repr(v).lower()
    if isinstance(v, str):
        return '"' + _toml_escape(v) + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if hasattr(v, "isoformat"):
        return v.isoformat()
    raise TypeError("unsupported TOML value %r" % (v,))


def _is_table_array(v):
    return isinstance(v, list) and v and all(isinstance(x, dict) for x in v)


def toml_dumps(tree):
    out = []

    def write(t, indent, keyspace):
        simple = sorted(k for k, v in t.items() if not isinstance(v, dict) and not _is_table_array(v))
        complex_ = sorted(k for k, v in t.items() if isinstance(v, dict) or _is_table_array(v))
        for k in simple:
            out.append("%s%s = %s\n" % (indent, _toml_key(k), _toml_value(t[k])))
        for k in complex_:
            combined = _toml_key(k) if not keyspace else keyspace + "." + _toml_key(k)
            v = t[k]
            if isinstance(v, dict):
                out.append("\n%s[%s]\n" % (indent, combined))
                write(v, indent + "  ", combined)
            else:
                for sub in v:
                    out.append("\n%s[[%s]]\n" % (indent, combined))
                    write(sub, indent + "  ", combined)

    write(tree, "", "")
    return "".join(out)


def toml_load_file(path):
    """pelletier/go-toml LoadFile for a config that exists (comments are not kept, as there)."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        if not data.strip():
            return {}
        raise CtkError("tomllib unavailable")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        text = str(exc)
        import re
        m = re.search(r"\(at line (\d+), column (\d+)\)", text)
        if m:
            text = "(%s, %s): %s" % (m.group(1), m.group(2), text[:m.start()].strip())
        raise CtkError(text)


def _get_path(tree, keys):
    cur = tree
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _set_path(tree, keys, value):
    cur = tree
    for k in keys[:-1]:
        nxt = cur.get(k)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[k] = nxt
        cur = nxt
    cur[keys[-1]] = value


def _delete_path(tree, keys):
    parent = _get_path(tree, keys[:-1]) if len(keys) > 1 else tree
    if isinstance(parent, dict):
        parent.pop(keys[-1], None)


# ==================================================================================================
# files as Go writes them
# ==================================================================================================

def raw_write(path, output, stdout):
    """pkg/config.Raw(path).Write(output): stdout + newline; empty removes; else os.Create (in place)."""
    if path == "":
        stdout.write(output + "\n")
        stdout.flush()
        return len(output.encode("utf-8"))
    if output == "":
        try:
            os.remove(path)
        except OSError as exc:
            raise CtkError("unable to remove empty file: %s" % _go_path_error("remove", path, exc))
        return 0
    directory = os.path.dirname(path)
    if directory:
        try:
            os.makedirs(directory, 0o755, exist_ok=True)
        except OSError as exc:
            raise CtkError("unable to create directory %s: %s" % (directory, _go_path_error("mkdir", directory, exc)))
    data = output.encode("utf-8")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise CtkError("unable to open %s for writing: %s" % (path, _go_path_error("open", path, exc)))
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)
    return len(data)


_ERRNO_TEXT = {2: "no such file or directory", 13: "permission denied", 21: "is a directory",
               20: "not a directory", 1: "operation not permitted", 17: "file exists",
               30: "read-only file system", 28: "no space left on device"}


def _go_errno(exc):
    return _ERRNO_TEXT.get(getattr(exc, "errno", None), (getattr(exc, "strerror", None) or str(exc)).lower())


def _go_path_error(op, path, exc):
    return "%s %s: %s" % (op, path, _go_errno(exc))


# ==================================================================================================
# runtime configure
# ==================================================================================================

def _panic_nil_map():
    raise GoPanic("assignment to entry in nil map",
                  "github.com/NVIDIA/nvidia-container-toolkit/pkg/config/engine/docker.(*Config).AddRuntime(...)")


def docker_load(path, log):
    try:
        info = os.stat(path)
    except FileNotFoundError:
        log.info("Config file does not exist; using empty config")
        return {}
    except OSError:
        info = None
    log.info("Loading config from %s" % path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CtkError("unable to load config for runtime docker: unable to read config: %s"
                       % _go_path_error("read" if info is not None and stat.S_ISDIR(info.st_mode) else "open",
                                        path, exc))
    try:
        return decode(data)
    except GoJSONError as exc:
        raise CtkError("unable to load config for runtime docker: %s" % exc)


def docker_add_runtime(cfg, name, path, set_as_default):
    if cfg is None:
        _panic_nil_map()
    if "runtimes" in cfg:
        runtimes = cfg["runtimes"]
        if not isinstance(runtimes, dict):
            raise GoPanic("interface conversion: interface {} is %s, not map[string]interface {}"
                          % go_type_name(runtimes),
                          "github.com/NVIDIA/nvidia-container-toolkit/pkg/config/engine/docker.(*Config).AddRuntime(...)")
    else:
        runtimes = {}
    runtimes[name] = {"path": path, "args": []}
    cfg["runtimes"] = runtimes
    if set_as_default:
        cfg["default-runtime"] = name


def docker_enable_cdi(cfg):
    # config["features"].(map[string]bool) never holds for a decoded map: the map is replaced whole
    cfg["features"] = {"cdi": True}


def configure_docker(o, log, stdout):
    cfg = docker_load(o["config"], log)
    docker_add_runtime(cfg, o["nvidia-runtime-name"], o["nvidia-runtime-path"], o["nvidia-set-as-default"])
    if o["cdi.enabled"]:
        docker_enable_cdi(cfg)
    output = marshal_indent(cfg, "    ")
    out_path = "" if o["dry-run"] else o["config"]
    try:
        n = raw_write(out_path, output, stdout)
    except CtkError as exc:
        raise CtkError("unable to flush config: %s" % exc)
    if out_path:
        log.info(("Removed empty config from %s" if n == 0 else "Wrote updated config to %s") % out_path)
        log.info("It is recommended that docker daemon be restarted.")


def _containerd_load(path):
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return {}
    if stat.S_ISDIR(info.st_mode):
        raise CtkError("failed to load config: config file %s is a directory" % path)
    try:
        return toml_load_file(path)
    except OSError as exc:
        raise CtkError("failed to load config: %s" % _go_path_error("open", path, exc))
    except CtkError as exc:
        raise CtkError("failed to load config: %s" % exc)


def configure_containerd(o, log, stdout, toolkit_version=DEFAULT_VERSION):
    """1.18+: the NVIDIA runtime goes into a drop-in file and the top-level config gets an `imports` line;
    before 1.18 (no --drop-in-config) the top-level config itself is rewritten."""
    top_path = o["config"]
    dropin = o["drop-in-config"]
    legacy = _cdi.version_tuple(toolkit_version) < (1, 18, 0)
    try:
        source = _containerd_load(top_path)
        if not source:
            version = 2
        else:
            v = source.get("version")
            if v is None:
                version = 1
            elif isinstance(v, int) and not isinstance(v, bool):
                version = v
            else:
                raise CtkError("failed to parse config version: unsupported type for version field: %s" % v)
    except CtkError as exc:
        raise CtkError("unable to load config for runtime containerd: %s" % exc)
    log.info("Using config version %d" % version)
    plugin = {1: "cri", 2: "io.containerd.grpc.v1.cri"}.get(version, "io.containerd.cri.v1.runtime")
    log.info("Using CRI runtime plugin name %s" % go_quote(plugin))
    if version == 1:
        raise CtkError("unable to update config: the simulated nvidia-ctk does not handle containerd "
                       "version 1 configs")
    import copy
    top = copy.deepcopy(source)
    dest = {}
    cri = _get_path(source, ["plugins", plugin])
    if legacy:
        dest = copy.deepcopy(source)
    elif isinstance(cri, dict):
        _set_path(dest, ["plugins", plugin], copy.deepcopy(cri))

    # engine.Config.AddRuntime: options from the source's default runtime, runc or crun
    default_rt = _get_path(source, ["plugins", plugin, "containerd", "default_runtime_name"])
    candidates = []
    if isinstance(default_rt, str) and default_rt and not default_rt.startswith("nvidia"):
        candidates.append(default_rt)
    candidates += ["runc", "crun"]
    options = None
    for r in candidates:
        found = _get_path(source, ["plugins", plugin, "containerd", "runtimes", r])
        if isinstance(found, dict):
            options = copy.deepcopy(found)
            break
    if options is None:
        log.warning("Could not infer options from runtimes [%s]" % " ".join(candidates))
        options = {"runtime_type": "io.containerd.runc.v2", "runtime_root": "", "runtime_engine": "",
                   "privileged_without_host_devices": False}
    name = o["nvidia-runtime-name"]
    rt_path = ["plugins", plugin, "containerd", "runtimes", name]
    dest["version"] = version
    _set_path(dest, rt_path, options)
    rtype = _get_path(dest, rt_path + ["runtime_type"])
    if not isinstance(rtype, str) or rtype == "":
        _set_path(dest, rt_path + ["runtime_type"], "io.containerd.runc.v2")
    _set_path(dest, rt_path + ["options", "BinaryName"], o["nvidia-runtime-path"])
    default_path = ["plugins", plugin, "containerd", "default_runtime_name"]
    if o["nvidia-set-as-default"]:
        _set_path(dest, default_path, name)
    elif _get_path(dest, default_path) == name:
        _delete_path(dest, default_path)
    if o["cdi.enabled"]:
        _set_path(dest, ["plugins", plugin, "enable_cdi"], True)

    if legacy:
        out_path = "" if o["dry-run"] else top_path
        try:
            n = raw_write(out_path, toml_dumps(dest), stdout)
        except CtkError as exc:
            raise CtkError("unable to flush config: %s" % exc)
        if out_path:
            log.info(("Removed empty config from %s" if n == 0 else "Wrote updated config to %s") % out_path)
            log.info("It is recommended that containerd daemon be restarted.")
        return
    out_path = "" if o["dry-run"] else dropin
    try:
        if out_path == "":
            log.info("Drop-in config:")
        n = raw_write(out_path, toml_dumps(dest), stdout)
        pattern = "/etc/containerd/conf.d/*.toml" if out_path == "" else os.path.dirname(out_path) + "/*.toml"
        if n == 0:
            keys = list(top)
            if len(keys) == 2 and "version" in top and isinstance(top.get("imports"), list) \
                    and top["imports"] == [pattern]:
                del top["imports"]
            if list(top) == ["version"]:
                del top["version"]
        else:
            imports = [x for x in (top.get("imports") or []) if isinstance(x, str)] \
                if isinstance(top.get("imports"), list) else []
            if pattern not in imports:
                imports.append(pattern)
                if not top:
                    top["version"] = version
                top["imports"] = imports
        if out_path == "":
            log.info("Top-level config:")
            raw_write("", toml_dumps(top), stdout)
        else:
            try:
                raw_write(top_path, toml_dumps(top), stdout)
            except CtkError as exc:
                raise CtkError("failed to save top-level config: %s" % exc)
    except CtkError as exc:
        raise CtkError("unable to flush config: %s" % exc)
    if out_path:
        log.info(("Removed empty config from %s" if n == 0 else "Wrote updated config to %s") % out_path)
        log.info("It is recommended that containerd daemon be restarted.")


RUNTIME_CONFIGURE_FLAGS = {
    "dry-run": ("bool", []),
    "runtime": ("string", []),
    "config": ("string", []),
    "drop-in-config": ("string", []),
    "executable-path": ("string", []),
    "config-mode": ("string", []),
    "config-source": ("string", []),
    "oci-hook-path": ("string", []),
    "nvidia-runtime-name": ("string", []),
    "nvidia-runtime-path": ("string", ["runtime-path"]),
    "nvidia-runtime-hook-path": ("string", []),
    "nvidia-set-as-default": ("bool", ["set-as-default"]),
    "cdi.enabled": ("bool", ["cdi.enable", "enable-cdi"]),
}


def cmd_runtime_configure(args, log, stdout, env, toolkit_version=DEFAULT_VERSION):
    flags = dict(RUNTIME_CONFIGURE_FLAGS)
    if _cdi.version_tuple(toolkit_version) < (1, 18, 0):
        del flags["drop-in-config"]          # added in 1.18.0
    o = parse_flags(args, flags, {
        "dry-run": False, "runtime": "docker", "config": "", "drop-in-config": RUNTIME_SPECIFIC_DEFAULT,
        "executable-path": "", "config-mode": "", "config-source": "file", "oci-hook-path": "",
        "nvidia-runtime-name": "nvidia", "nvidia-runtime-path": "nvidia-container-runtime",
        "nvidia-runtime-hook-path": "/usr/bin/nvidia-container-runtime-hook",
        "nvidia-set-as-default": False, "cdi.enabled": False})[0]
    mode = o["config-mode"]
    if mode in ("oci-hook", "hook"):
        raise CtkError("the simulated nvidia-ctk does not create OCI hook files")
    if mode not in ("", "config-file", "config"):
        log.warning("Ignoring unsupported config mode for %s: %s" % (o["runtime"], go_quote(mode)))
    rt = o["runtime"]
    if rt not in ("containerd", "crio", "docker"):
        raise CtkError("unrecognized runtime '%s'" % rt)
    if rt in ("containerd", "crio"):
        if o["nvidia-runtime-path"] == "nvidia-container-runtime":
            o["nvidia-runtime-path"] = "/usr/bin/nvidia-container-runtime"
        if not os.path.isabs(o["nvidia-runtime-path"]):
            raise CtkError("the NVIDIA runtime path %s is not an absolute path" % go_quote(o["nvidia-runtime-path"]))
    if rt not in ("containerd", "docker"):
        if o["cdi.enabled"]:
            log.warning("Ignoring cdi.enabled flag for %s" % rt)
        o["cdi.enabled"] = False
    if o["executable-path"] and rt == "docker":
        log.warning("Ignoring executable-path=%s flag for %s" % (go_quote(o["executable-path"]), rt))
    if o["config-source"] == "command":
        if rt == "docker":
            log.warning("A command Config Source is not supported for docker; using file")
        else:
            raise CtkError("the simulated nvidia-ctk reads the runtime config from its file only")
    elif o["config-source"] != "file":
        raise CtkError("unrecognized Config Source: %s" % o["config-source"])
    if not o["config"]:
        o["config"] = {"containerd": DEFAULT_CONTAINERD_CONFIG, "crio": DEFAULT_CRIO_CONFIG,
                       "docker": DEFAULT_DOCKER_CONFIG}[rt]
    if o["drop-in-config"] == RUNTIME_SPECIFIC_DEFAULT:
        o["drop-in-config"] = {"containerd": DEFAULT_CONTAINERD_DROPIN, "crio": DEFAULT_CRIO_DROPIN,
                               "docker": ""}[rt]
    if o["drop-in-config"] and rt == "docker":
        raise CtkError("runtime docker does not support drop-in configs")
    if o["drop-in-config"] and not os.path.isabs(o["drop-in-config"]):
        raise CtkError("the drop-in-config path %s is not an absolute path" % go_quote(o["drop-in-config"]))
    if rt == "docker":
        configure_docker(o, log, stdout)
    elif rt == "containerd":
        configure_containerd(o, log, stdout, toolkit_version)
    else:
        raise CtkError("unable to load config for runtime crio: the simulated nvidia-ctk does not "
                       "configure cri-o")
    return 0


# ==================================================================================================
# cdi generate / cdi list
# ==================================================================================================

NO_DRIVER_LINES = [
    ("warning", "Ignoring error in locating libnvidia-sandboxutils.so.1: libnvidia-sandboxutils.so.1: "
                "not found\nlibnvidia-sandboxutils.so.1: not found"),
    ("warning", "Failed to init nvsandboxutils: ERROR_LIBRARY_LOAD; ignoring"),
]

NVML_ERROR = {"not_loaded": "ERROR_DRIVER_NOT_LOADED", "mismatch": "ERROR_LIB_RM_VERSION_MISMATCH"}


CDI_GENERATE_FLAGS = {
    "config-search-path": ("list", []),
    "output": ("string", []),
    "format": ("string", []),
    "mode": ("string", ["discovery-mode"]),
    "dev-root": ("string", []),
    "device-name-strategy": ("list", []),
    "driver-root": ("string", []),
    "library-search-path": ("list", []),
    "nvidia-cdi-hook-path": ("string", ["nvidia-ctk-path"]),
    "ldconfig-path": ("string", []),
    "vendor": ("string", ["cdi-vendor"]),
    "class": ("string", ["cdi-class"]),
    "csv.file": ("list", []),
    "csv.ignore-pattern": ("list", []),
    "disable-hook": ("list", ["disable-hooks"]),
    "enable-hook": ("list", ["enable-hooks"]),
    "feature-flag": ("list", ["feature-flags"]),
    "no-all-device": ("bool", []),
    "device-id": ("list", ["device-ids", "device", "devices"]),
}
CDI_GENERATE_ENV = {
    "output": "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH",
    "format": "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT",
    "mode": "NVIDIA_CTK_CDI_GENERATE_MODE",
    "dev-root": "NVIDIA_CTK_DEV_ROOT",
    "driver-root": "NVIDIA_CTK_DRIVER_ROOT",
    "vendor": "NVIDIA_CTK_CDI_GENERATE_VENDOR",
    "class": "NVIDIA_CTK_CDI_GENERATE_CLASS",
    "no-all-device": "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE",
}


def cmd_cdi_generate(args, log, stdout, env, toolkit_version):
    feats = _cdi.features(toolkit_version)
    flags = dict(CDI_GENERATE_FLAGS)
    env_vars = dict(CDI_GENERATE_ENV)
    if feats["feature_flag_option"]:
        env_vars["feature-flag"] = "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS"
    else:
        del flags["feature-flag"]          # 1.17: "flag provided but not defined: -feature-flag"
    defaults = {"output": "", "format": "yaml", "mode": "auto", "dev-root": "", "driver-root": "",
                "vendor": "nvidia.com", "class": "gpu", "no-all-device": False, "device-id": ["all"],
                "device-name-strategy": ["index", "uuid"]}
    for key, var in env_vars.items():
        if env.get(var) not in (None, ""):
            val = env[var]
            if key == "no-all-device":
                defaults[key] = val.lower() in ("1", "true", "t")
            elif flags[key][0] == "list":
                defaults[key] = [val]
            else:
                defaults[key] = val
    o, explicit = parse_flags(args, flags, defaults)[:2]
    if feats["split_list_flags"]:
        for name, (kind, _aliases) in flags.items():
            if kind == "list":
                o[name] = [part for value in o[name] for part in value.split(",")]
    # Feature flags the toolkit does not know are accepted and do nothing (pkg/nvcdi WithFeatureFlags).
    fmt = o["format"].lower()
    if fmt not in ("json", "yaml"):
        raise CtkError("invalid output format: %s" % fmt)
    mode = o["mode"].lower()
    if mode not in ("auto", "nvml", "wsl", "management", "gdm", "gds", "mofed", "csv", "imex"):
        raise CtkError("invalid discovery mode: %s" % mode)
    for strategy in o["device-name-strategy"]:
        if strategy not in ("index", "uuid", "type-index"):
            raise CtkError("invalid device name strategy: %s" % strategy)
    out = o["output"]
    ext = os.path.splitext(out)[1].lower()
    implied = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(ext, "")
    if implied:
        if "format" not in explicit and not env.get("NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT"):
            fmt = implied
        elif implied != fmt:
            log.warning("Requested output format %s does not match format implied by output file name: %s"
                        % (go_quote(fmt), go_quote(implied)))
    if "none" in o["device-id"] and not o["no-all-device"]:
        log.warning("Disabling generation of 'all' device")
        o["no-all-device"] = True

    state = _cdi.load_state()
    condition = _cdi.driver_condition(state)
    driver_root = o["driver-root"] or "/"
    dev_root = o["dev-root"] or driver_root
    for level, msg in NO_DRIVER_LINES:
        getattr(log, level)(msg)
    if condition == "no_driver":
        log.warning("Ignoring error in locating libnvidia-ml.so.1: libnvidia-ml.so.1: not found\n"
                    "libnvidia-ml.so.1: not found")
        log.warning("Unsupported platform detected: unknown; assuming nvml")
        log.info("Auto-detected mode as 'nvml'")
        log.warning("Could not determine driver version: libnvsandboxutils is not available\n"
                    "failed to initialize nvml: ERROR_LIBRARY_NOT_FOUND")
        raise CtkError("failed to generate CDI spec: failed to create device CDI specs: failed to construct "
                       "device spec generators: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")
    installed = state["driver"]["installed"]
    log.info("Using /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % installed.get("version"))
    log.info("Auto-detected mode as 'nvml'")
    if condition != "ok":
        code = NVML_ERROR[condition]
        log.warning("Could not determine driver version: libnvsandboxutils is not available\n"
                    "failed to initialize nvml: %s" % code)
        raise CtkError("failed to generate CDI spec: failed to create device CDI specs: failed to construct "
                       "device spec generators: failed to initialize NVML: %s" % code)

    gpus = _cdi.nvml_gpus(state)
    wanted = o["device-id"]
    if "all" not in wanted:
        chosen = []
        for ident in wanted:
            if ident == "none":
                continue
            match = [g for g in gpus if (ident.isdigit() and int(ident) == g.get("index")) or ident == g.get("uuid")]
            if not match:
                raise CtkError("failed to generate CDI spec: failed to create device CDI specs: failed to get "
                               "device spec generators: identifier is not a valid UUID or index: %s" % go_quote(ident))
            chosen += [g for g in match if g not in chosen]
        gpus = chosen
    for gpu in gpus:
        node = "/dev/nvidia%d" % _cdi.gpu_minor(gpu)
        log.info("Selecting %s as %s" % (node, node))
    version = state["driver"]["loaded"]["version"]
    log.info("Using driver version %s" % version)
    present = _cdi.find_control_nodes(dev_root)
    for n in _cdi.CONTROL_NODES:
        p = "/dev/" + n
        if p in present:
            log.info("Selecting %s as %s" % (p, p))
        else:
            log.warning("Could not locate %s: pattern %s not found" % (p, p))
    for lib in _cdi.find_versioned_libs(version, driver_root):
        log.info("Selecting %s as %s" % (lib, lib))
    for ipc in ("/nvidia-persistenced/socket", "/nvidia-fabricmanager/socket", "/tmp/nvidia-mps"):
        log.warning("Could not locate %s: pattern %s not found" % (ipc, ipc))
    if not _cdi.find_firmware(version, driver_root):
        pattern = "nvidia/%s/gsp*.bin" % version
        log.warning("Could not locate %s: pattern %s not found" % (pattern, pattern))
    found_bins = [os.path.basename(b) for b in _cdi.find_binaries(driver_root)]
    for b in _cdi.BINARIES:
        if b not in found_bins:
            log.warning("Could not locate %s: pattern %s not found" % (b, b))

    sub = dict(state)
    sub["gpus"] = gpus
    extra = []
    if os.path.isdir(os.path.join(driver_root, "usr/lib/gpu-sim")):
        # simulator only: what the simulated nvidia-smi needs inside a CDI container
        extra = ["/usr/lib/gpu-sim", "/var/lib/gpu-sim"]
    spec = _cdi.build_spec(sub, toolkit_version, driver_root=driver_root, dev_root=dev_root,
                           vendor=o["vendor"], cls=o["class"], no_all_device=o["no-all-device"],
                           extra_mounts=extra, feature_flags=o.get("feature-flag") or [])
    if not spec["devices"]:
        raise CtkError("failed to generate CDI spec: failed to create device CDI specs: no NVIDIA devices found")
    data = _cdi.render(spec, fmt, toolkit_version)
    if out == "":
        stdout.write(data)
        stdout.flush()
    else:
        path = out
        if os.path.splitext(path)[1] not in (".yaml", ".json"):
            path += "." + fmt
        if os.path.dirname(path) in ("", "."):
            path = os.path.join(os.getcwd(), os.path.basename(path))
        try:
            _cdi.write_spec_file(path, data, 0o644)
        except OSError as exc:
            raise CtkError("failed to write spec: failed to create Spec file: %s"
                           % _go_path_error("open", path, exc))
    log.info("Generated CDI spec with version %s"
             % (spec["cdiVersion"] if feats["log_min_version"] else feats["current_cdi_version"]))
    return 0


def cmd_cdi_list(args, log, stdout, env):
    defaults = {"spec-dir": list(_cdi.DEFAULT_SPEC_DIRS)}
    if env.get("NVIDIA_CTK_CDI_SPEC_DIRS"):
        defaults["spec-dir"] = env["NVIDIA_CTK_CDI_SPEC_DIRS"].split(",")
    o = parse_flags(args, {"spec-dir": ("list", [])}, defaults)[0]
    if not o["spec-dir"]:
        raise CtkError("at least one CDI specification directory must be specified")
    devices, errors = _cdi.list_devices(o["spec-dir"])
    if errors:
        log.warning("The following registry errors were reported:")
        for k, e in errors.items():
            log.warning("%s: %s" % (k, e))
    log.info("Found %d CDI devices" % len(devices))
    for d in devices:
        stdout.write(d + "\n")
    stdout.flush()
    return 0


# ==================================================================================================
# system create-device-nodes
# ==================================================================================================

def _uvm_major(dev_root):
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        try:
            st = os.stat(os.path.join(dev_root, "dev", name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            return os.major(st.st_rdev)
    return _cdi.UVM_MAJOR_DEFAULT


def _truthy(value):
    return (value or "").lower() in ("1", "true", "t")


def cmd_create_dev_char_symlinks(args, log, stdout, env):
    """`nvidia-ctk system create-dev-char-symlinks` (cmd/nvidia-ctk/system/create-dev-char-symlinks, v1.18):
    /dev/char/MAJOR:MINOR -> <driver-root>/dev/<node> for the NVIDIA nodes that exist, or with --create-all
    for every node the loaded module can have (control, modeset, UVM, one per GPU). logrus lines: "Creating
    link %s => %s" per node, "Could not create symlink: symlink <target> <link>: file exists" where a link is
    there; nothing is created under --dry-run (tests/fixtures/devchar/README.md)."""
    defaults = {"dev-char-path": env.get("DEV_CHAR_PATH") or "/dev/char",
                "driver-root": env.get("NVIDIA_DRIVER_ROOT") or env.get("DRIVER_ROOT") or "/",
                "create-all": _truthy(env.get("CREATE_ALL")),
                "load-kernel-modules": _truthy(env.get("LOAD_KERNEL_MODULES")),
                "create-device-nodes": _truthy(env.get("CREATE_DEVICE_NODES")),
                "dry-run": _truthy(env.get("DRY_RUN"))}
    o = parse_flags(args, {"dev-char-path": ("string", []), "driver-root": ("string", []),
                           "create-all": ("bool", []), "load-kernel-modules": ("bool", []),
                           "create-device-nodes": ("bool", []), "dry-run": ("bool", [])}, defaults)[0]
    for flag in ("load-kernel-modules", "create-device-nodes"):
        if o[flag] and not o["create-all"]:
            log.warning("%s is only applicable when create-all is set; ignoring" % flag)
    dev = os.path.join(o["driver-root"], "dev")
    if o["create-all"]:
        state = _cdi.load_state()
        if not (state.get("driver") or {}).get("loaded"):
            raise CtkError("failed to create symlink creator: missing required device major nvidia-frontend")
        uvm = _uvm_major(o["driver-root"])
        nodes = [("nvidiactl", _cdi.NVIDIA_MAJOR, _cdi.NVIDIACTL_MINOR),
                 ("nvidia-modeset", _cdi.NVIDIA_MAJOR, _cdi.MODESET_MINOR),
                 ("nvidia-uvm", uvm, 0), ("nvidia-uvm-tools", uvm, 1)]
        nodes += [("nvidia%d" % _cdi.gpu_minor(g), _cdi.NVIDIA_MAJOR, _cdi.gpu_minor(g)) for g in state["gpus"]]
    else:
        nodes = []
        for name in sorted(os.listdir(dev)) if os.path.isdir(dev) else []:
            try:
                st = os.stat(os.path.join(dev, name))
            except OSError:
                continue
            if name.startswith("nvidia") and stat.S_ISCHR(st.st_mode):
                nodes.append((name, os.major(st.st_rdev), os.minor(st.st_rdev)))
        if not nodes:
            log.info("No NVIDIA devices found in %s" % dev)
            return 0
    for name, major, minor in nodes:
        link = os.path.join(o["dev-char-path"], "%d:%d" % (major, minor))
        target = os.path.join(dev, name)
        log.info("Creating link %s => %s" % (link, target))
        if o["dry-run"]:
            continue
        os.makedirs(o["dev-char-path"], exist_ok=True)
        try:
            os.symlink(target, link)
        except OSError as exc:
            log.warning("Could not create symlink: symlink %s %s: %s" % (target, link, _go_errno(exc)))
    return 0


def cmd_create_device_nodes(args, log, stdout, env):
    defaults = {"root": env.get("ROOT") or env.get("NVIDIA_DRIVER_ROOT") or env.get("DRIVER_ROOT") or "/",
                "dev-root": env.get("NVIDIA_DEV_ROOT") or env.get("DEV_ROOT") or "",
                "control-devices": False, "load-kernel-modules": False,
                "dry-run": (env.get("DRY_RUN") or "").lower() in ("1", "true", "t")}
    o = parse_flags(args, {"root": ("string", ["driver-root"]), "dev-root": ("string", []),
                           "control-devices": ("bool", []), "load-kernel-modules": ("bool", []),
                           "dry-run": ("bool", [])}, defaults)[0]
    if o["dev-root"] == "" and o["root"] != "":
        log.info("Using dev-root %s" % go_quote(o["root"]))
        o["dev-root"] = o["root"]
    state = _cdi.load_state()
    loaded = (state.get("driver") or {}).get("loaded")
    if o["load-kernel-modules"]:
        if o["dry-run"]:
            pass
        elif not loaded:
            # /sbin/modprobe nvidia fails: the simulated module is loaded only by a boot
            raise CtkError("failed to load NVIDIA kernel modules: failed to load module nvidia: exit status 1")
    if o["control-devices"]:
        # majors come from /proc/devices, which lists nvidia-frontend / nvidia-uvm only with the module in
        if not loaded:
            raise CtkError("failed to create NVIDIA control device nodes: failed to create device node nvidiactl: "
                           "failed to determine major: invalid device node")
        log.info("Creating control device nodes at %s" % o["dev-root"])
        uvm = _uvm_major(o["dev-root"])
        nodes = [("nvidiactl", _cdi.NVIDIA_MAJOR, _cdi.NVIDIACTL_MINOR),
                 ("nvidia-modeset", _cdi.NVIDIA_MAJOR, _cdi.MODESET_MINOR),
                 ("nvidia-uvm", uvm, 0), ("nvidia-uvm-tools", uvm, 1)]
        made = []
        for name, major, minor in nodes:
            path = os.path.join(o["dev-root"], "dev", name)
            if o["dry-run"]:
                log.info("Running: mknod --mode=0666 %s c %d %d" % (path, major, minor))
                continue
            if os.path.lexists(path):
                log.info("Skipping: %s already exists" % path)
                continue
            try:
                os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
                os.chmod(path, 0o666)
            except OSError as exc:
                raise CtkError("failed to create NVIDIA control device nodes: failed to create device node %s: %s"
                               % (name, _go_errno(exc)))
            made.append(name)
        # The missing_device_node fault stands for "nothing made this node this boot"; once made, containers
        # get it (libnvidia-container finds the host's node).
        if made and _cdi._state_mod is not None:
            def clear(s):
                s["faults"]["missing_device_nodes"] = [n for n in s["faults"]["missing_device_nodes"]
                                                       if n not in made]
            _cdi._state_mod.update(clear)
    return 0


# ==================================================================================================
# config (the toolkit's own config file; the package's postinst runs `config --in-place`)
# ==================================================================================================

def _toml_literal(value, sep):
    low = value.lower()
    if low in ("true", "false"):
        return low
    try:
        int(value)
        return value
    except ValueError:
        pass
    if sep and sep in value:
        return "[" + ", ".join('"%s"' % _toml_escape(v) for v in value.split(sep)) + "]"
    return '"%s"' % _toml_escape(value)


def _apply_set(text, key, value):
    """Set key (dotted, the last part is the key) in a TOML text keeping its layout and comments."""
    lines = text.split("\n")
    sections = {"": -1}
    current = ""
    for n, line in enumerate(lines):
        s = line.strip()
        if s.startswith("[") and s.endswith("]") and not s.startswith("[["):
            current = s[1:-1].strip()
            sections[current] = n
    parts = key.split(".")
    section, name = "", key
    for cut in range(len(parts) - 1, 0, -1):
        cand = ".".join(parts[:cut])
        if cand in sections:
            section, name = cand, ".".join(parts[cut:])
            break
    else:
        if len(parts) > 1:
            section, name = ".".join(parts[:-1]), parts[-1]
    if section and section not in sections:
        if lines and lines[-1] == "":
            lines.pop()
        lines += ["", "[%s]" % section, "%s = %s" % (name, value), ""]
        return "\n".join(lines)
    start = sections[section] + 1
    end = len(lines)
    for sec, idx in sections.items():
        if idx >= start and idx < end:
            end = idx
    import re
    pat = re.compile(r"^\s*#?\s*" + re.escape(name) + r"\s*=")
    for n in range(start, end):
        if pat.match(lines[n]):
            lines[n] = "%s = %s" % (name, value)
            return "\n".join(lines)
    insert = start
    while insert < end and lines[insert].strip() != "":
        insert += 1
    lines.insert(insert, "%s = %s" % (name, value))
    return "\n".join(lines)


def cmd_config(args, log, stdout, env):
    o, explicit, rest = parse_flags(args, {
        "config-file": ("string", ["config"]), "set": ("list", []), "set-list-separator": ("string", []),
        "in-place": ("bool", ["i"]), "output": ("string", ["o"])},
        {"config-file": env.get("NVIDIA_CTK_CONFIG_FILE_PATH") or TOOLKIT_CONFIG, "set": [],
         "set-list-separator": ",", "in-place": False, "output": ""})
    if rest and rest[0] == "default":
        stdout.write(DEFAULT_TOOLKIT_CONFIG)
        return 0
    if not o["set-list-separator"]:
        raise CtkError("set-list-separator must be set")
    path = o["config-file"]
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = DEFAULT_TOOLKIT_CONFIG
    except OSError as exc:
        raise CtkError("unable to create config: %s" % _go_path_error("open", path, exc))
    for item in o["set"]:
        if "=" in item:
            key, value = item.split("=", 1)
            lit = _toml_literal(value, o["set-list-separator"])
        else:
            key, lit = item, "true"
        text = _apply_set(text, key.strip(), lit)
    output = path if o["in-place"] else o["output"]
    if output:
        directory = os.path.dirname(output)
        if directory:
            os.makedirs(directory, 0o755, exist_ok=True)
        fd = os.open(output, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        stdout.write(text)
    return 0


# ==================================================================================================
# command line (urfave/cli style: --flag value, --flag=value, -flag; bool flags take no value)
# ==================================================================================================

def parse_flags(args, spec, defaults):
    """Parse leading flags; return (options, explicitly-set names, remaining args)."""
    names = {}
    for name, (kind, aliases) in spec.items():
        names[name] = name
        for a in aliases:
            names[a] = name
    o = dict(defaults)
    for name, (kind, _a) in spec.items():
        if name not in o:
            o[name] = [] if kind == "list" else (False if kind == "bool" else "")
    explicit = set()
    rest = list(args)
    lists_seen = set()
    while rest:
        a = rest[0]
        if a == "--":
            rest.pop(0)
            break
        if not a.startswith("-") or a == "-":
            break
        rest.pop(0)
        body = a.lstrip("-")
        value = None
        if "=" in body:
            body, value = body.split("=", 1)
        if body in ("h", "help"):
            raise HelpRequested()
        if body not in names:
            raise CtkError("flag provided but not defined: -%s" % body)
        name = names[body]
        kind = spec[name][0]
        if kind == "bool":
            if value is None:
                o[name] = True
            elif value.lower() in ("1", "t", "true"):
                o[name] = True
            elif value.lower() in ("0", "f", "false"):
                o[name] = False
            else:
                raise CtkError('invalid value "%s" for flag -%s: parse error' % (value, body))
        else:
            if value is None:
                if not rest:
                    raise CtkError("flag needs an argument: -%s" % body)
                value = rest.pop(0)
            if kind == "list":
                if name not in lists_seen:
                    o[name] = []
                    lists_seen.add(name)
                o[name].append(value)
            else:
                o[name] = value
        explicit.add(name)
    return o, explicit, rest


class HelpRequested(Exception):
    pass


USAGE = """NAME:
   NVIDIA Container Toolkit CLI - Tools to configure the NVIDIA Container Toolkit

USAGE:
   NVIDIA Container Toolkit CLI [global options] [command [command options]]

VERSION:
   %s

COMMANDS:
   hook     A collection of hooks that may be injected into an OCI spec
   runtime  A collection of runtime-related utilities for the NVIDIA Container Toolkit
   info     Provide information about the system
   cdi      Provide tools for interacting with Container Device Interface specifications
   system   A collection of system-related utilities for the NVIDIA Container Toolkit
   config   Interact with the NVIDIA Container Toolkit configuration
   help, h  Shows a list of commands or help for one command

GLOBAL OPTIONS:
   --debug, -d     Enable debug-level logging (default: false) [$NVIDIA_CTK_DEBUG]
   --quiet         Suppress all output except for errors; overrides --debug (default: false) [$NVIDIA_CTK_QUIET]
   --config value  Path to the config file [$NVIDIA_CTK_CONFIG]
   --help, -h      show help
   --version, -v   print the version
"""


def version_text(version, commit):
    lines = [version]
    if commit:
        lines.append("commit: " + commit)
    return "NVIDIA Container Toolkit CLI version %s\n" % "\n".join(lines)


def main(argv=None, version=None, commit=None, stdout=None, stderr=None, env=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    env = os.environ if env is None else env
    version = version or env.get("GPUSIM_CTK_VERSION") or DEFAULT_VERSION
    if commit is None:
        commit = RELEASE_COMMITS.get(version, DEFAULT_COMMIT)
    log = Logger(stderr, "info")
    try:
        g, _explicit, rest = parse_flags(argv, {
            "debug": ("bool", ["d"]), "quiet": ("bool", []), "config": ("string", []),
            "version": ("bool", ["v"])},
            {"debug": (env.get("NVIDIA_CTK_DEBUG") or "").lower() in ("1", "true", "t"),
             "quiet": (env.get("NVIDIA_CTK_QUIET") or "").lower() in ("1", "true", "t"),
             "config": env.get("NVIDIA_CTK_CONFIG") or "", "version": False})
        if g["version"]:
            stdout.write(version_text(version, commit))
            return 0
        log.level = "error" if g["quiet"] else ("debug" if g["debug"] else "info")
        if not rest or rest[0] in ("help", "h"):
            stdout.write(USAGE % version_text(version, commit).split(" version ", 1)[1].rstrip("\n"))
            return 0
        cmd, rest = rest[0], rest[1:]
        if cmd == "runtime":
            if not rest or rest[0] != "configure":
                raise CtkError("the simulated nvidia-ctk implements only `runtime configure`")
            return cmd_runtime_configure(rest[1:], log, stdout, env, version)
        if cmd == "cdi":
            if rest and rest[0] == "generate":
                return cmd_cdi_generate(rest[1:], log, stdout, env, version)
            if rest and rest[0] == "list":
                return cmd_cdi_list(rest[1:], log, stdout, env)
            raise CtkError("the simulated nvidia-ctk implements only `cdi generate` and `cdi list`")
        if cmd == "system":
            if rest and rest[0] == "create-device-nodes":
                return cmd_create_device_nodes(rest[1:], log, stdout, env)
            if rest and rest[0] == "create-dev-char-symlinks":
                return cmd_create_dev_char_symlinks(rest[1:], log, stdout, env)
            raise CtkError("the simulated nvidia-ctk implements only `system create-device-nodes` and "
                           "`system create-dev-char-symlinks`")
        if cmd == "config":
            return cmd_config(rest, log, stdout, env)
        if cmd == "hook":
            from gpusim import hook as _hook
            return _hook.cdi_hook_main(rest, prog="nvidia-ctk hook")
        raise CtkError("No help topic for '%s'" % cmd)
    except HelpRequested:
        stdout.write(USAGE % version)
        return 0
    except CtkError as exc:
        log.error(str(exc))
        return 1
    except GoPanic as exc:
        stderr.write("panic: %s\n\ngoroutine 1 [running]:\n%s\n\t/build/pkg/config/engine/docker/docker.go\n"
                     "main.main()\n\t/build/cmd/nvidia-ctk/main.go\n" % (exc, exc.frame))
        stderr.flush()
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
