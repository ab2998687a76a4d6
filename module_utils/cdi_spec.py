# -*- coding: utf-8 -*-
"""Pure reading of NVIDIA CDI specs (as `nvidia-ctk cdi generate` writes them). No Ansible imports.

The spec has no field naming the driver version: it shows only in versioned library mounts
(`libcuda.so.<ver>`) and in the `enable-cuda-compat --host-driver-version=<ver>` hook argument
(corpus nvidia_ctk/cdi-generate_mock-A100_nvidia.yaml). That is how a stale spec is recognised.
"""
import json
import re

_LIBCUDA = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)\b")
_HOST_DRIVER = re.compile(r"--host-driver-version=(\d+\.\d+(?:\.\d+)?)\b")
_KIND = re.compile(r"^kind:\s*\"?([^\s\"]+)\"?\s*$", re.M)
_CDI_VERSION = re.compile(r"^cdiVersion:\s*\"?([0-9.]+)\"?\s*$", re.M)
_CDI_LIST_LINE = re.compile(r"^([a-z0-9.-]+/[a-z0-9_.-]+)=(\S+)$", re.I)

# `/var/run/cdi` wins over `/etc/cdi` for a device defined in both (CDI spec dirs are read in order
# and later ones override), which is why a spec left there shadows the managed one.
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


class CdiSpecError(ValueError):
    """The file is not a CDI spec."""


def _json_spec(text):
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def read_spec(text):
    """Summary of a spec: kind, cdi_version, devices (names), driver_versions (set as sorted list).

    Accepts the YAML layout nvidia-ctk writes and the JSON form (`--format=json`).
    Raises CdiSpecError when the text has no CDI kind/version or no devices.
    """
    if text is None or not text.strip():
        raise CdiSpecError("empty file")
    data = _json_spec(text)
    if data is not None:
        kind, version = data.get("kind"), data.get("cdiVersion")
        devices = [d.get("name") for d in data.get("devices") or [] if isinstance(d, dict)]
    else:
        kind_m, version_m = _KIND.search(text), _CDI_VERSION.search(text)
        kind = kind_m.group(1) if kind_m else None
        version = version_m.group(1) if version_m else None
        devices = _yaml_device_names(text)
    if not kind or not version:
        raise CdiSpecError("no cdiVersion/kind: not a CDI spec")
    if not devices:
        raise CdiSpecError("spec of kind %s lists no devices" % kind)
    versions = set(_LIBCUDA.findall(text)) | set(_HOST_DRIVER.findall(text))
    return {"kind": kind, "cdi_version": version, "devices": devices, "driver_versions": sorted(versions)}


def _yaml_device_names(text):
    """Names of the entries of the top-level `devices:` list, in both layouts nvidia-ctk writes:
    fields in struct order with lists indented (1.18+: `    - name: "0"`), and sorted keys with lists
    at the parent's indent (1.17 and earlier, through sigs.k8s.io/yaml: `- containerEdits:` ... `  name:`)."""
    names, inside, item_indent, key_indent = [], False, None, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^devices:\s*$", line):
            inside = True
            continue
        if not inside:
            continue
        indent = len(line) - len(line.lstrip())
        item = re.match(r"^(\s*)-(\s+)(.*)$", line)
        if indent == 0 and not item:
            break
        if item_indent is None and item:
            item_indent = indent
        if item and indent == item_indent:
            key_indent = indent + 1 + len(item.group(2))
            field = item.group(3)
        elif indent == key_indent:
            field = line.strip()
        else:
            continue
        match = re.match(r"^name:\s*(.+?)\s*$", field)
        if match:
            names.append(_unquote(match.group(1)))
    return names


def _unquote(value):
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return json.loads(value)
        except ValueError:
            return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    return value


def staleness(spec, loaded_driver_version):
    """Reasons a spec no longer fits the loaded driver (empty list: fresh)."""
    if not loaded_driver_version:
        return []
    found = spec.get("driver_versions") or []
    if not found:
        return ["the spec names no driver version (no versioned libcuda mount, no --host-driver-version)"]
    wrong = [v for v in found if v != loaded_driver_version]
    if wrong:
        return ["the spec was made for driver %s, the loaded driver is %s"
                % (", ".join(wrong), loaded_driver_version)]
    return []


def parse_cdi_list(stdout):
    """Fully qualified device names from `nvidia-ctk cdi list` stdout (log lines go to stderr)."""
    names = []
    for line in (stdout or "").splitlines():
        match = _CDI_LIST_LINE.match(line.strip())
        if match:
            names.append("%s=%s" % (match.group(1), match.group(2)))
    return names


def shadowing(specs_by_path, managed_path):
    """Paths of specs of the same kind that take precedence over `managed_path`.

    `specs_by_path` maps a spec path to its read_spec() summary; a spec in a later CDI dir
    overrides devices of the same kind in an earlier one.
    """
    managed = specs_by_path.get(managed_path)
    if managed is None:
        return []
    def rank(path):
        for index, directory in enumerate(CDI_DIRS):
            if path.startswith(directory.rstrip("/") + "/"):
                return index
        return -1
    mine = rank(managed_path)
    return sorted(p for p, s in specs_by_path.items()
                  if p != managed_path and s.get("kind") == managed["kind"] and rank(p) > mine
                  and set(s.get("devices") or []) & set(managed.get("devices") or []))
