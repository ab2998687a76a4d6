# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure reading of NVIDIA CDI specs (as `nvidia-ctk cdi generate` writes them). No Ansible imports.

The spec has no field naming the driver version: it shows only in versioned library mounts
(`libcuda.so.<ver>`) and in the `enable-cuda-compat --host-driver-version=<ver>` hook argument
(corpus nvidia_ctk/cdi-generate_mock-A100_nvidia.yaml). That is how a stale spec is recognised.
"""
import json
import re

from ansible.module_utils.containers.versions import version_tuple

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


# ---------------------------------------------------------------------------------------------
# Spec versions: which one the toolkit writes, which ones the engines read.
# Every number below was read from the sources named in tests/fixtures/cdi_versions/README.md.

# The toolkit's feature flag that drops `additionalGids` from the spec (pkg/nvcdi/api.go, from v1.19.0).
# The NVIDIA Container Toolkit 1.19.1 release notes ("Known Issues") recommend it for engines that do
# not read CDI spec 0.7.0: `nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes`.
FEATURE_NO_ADDITIONAL_GIDS = "no-additional-gids-for-device-nodes"

ENGINES = ("docker", "containerd", "podman")

# For each engine, (first release, the container-device-interface module it builds with, the highest spec
# version that module reads), in release order: moby vendor.mod, containerd go.mod and podman go.mod at the
# release tags. A version below the first row has no CDI support (docker < 25, containerd < 1.7,
# podman < 4.1). Docker 25.0.17 took CDI v0.8.1 in with containerd v1.7.33, so it reads more than 26.0.
# Releases after the last row checked (docker 29.7.2, containerd 2.3.4, podman 5.8.2) are taken as that
# row: a lower bound.
_ENGINE_CDI = {
    "docker": (((25, 0, 0), "v0.6.2", "0.6.0"), ((25, 0, 17), "v0.8.1", "0.8.0"),
               ((26, 0, 0), "v0.6.2", "0.6.0"), ((26, 1, 0), "v0.7.1", "0.7.0"), ((26, 1, 1), "v0.7.2", "0.7.0"),
               ((27, 4, 0), "v0.8.0", "0.8.0"), ((28, 0, 1), "v0.8.1", "0.8.0"), ((28, 1, 0), "v1.0.1", "1.0.0"),
               ((29, 2, 0), "v1.1.0", "1.1.0")),
    "containerd": (((1, 7, 0), "v0.5.4", "0.5.0"), ((1, 7, 12), "v0.6.1", "0.6.0"), ((1, 7, 13), "v0.6.2", "0.6.0"),
                   ((1, 7, 16), "v0.7.2", "0.7.0"), ((1, 7, 27), "v0.8.1", "0.8.0"), ((2, 0, 0), "v0.8.0", "0.8.0"),
                   ((2, 0, 3), "v0.8.1", "0.8.0"), ((2, 0, 5), "v1.0.0", "1.0.0"), ((2, 1, 0), "v1.0.1", "1.0.0"),
                   ((2, 2, 1), "v1.1.0", "1.1.0")),
    "podman": (((4, 1, 0), "v0.4.0", "0.4.0"), ((4, 3, 0), "v0.5.2", "0.5.0"), ((4, 4, 0), "v0.5.3", "0.5.0"),
               ((4, 5, 0), "v0.5.4", "0.5.0"), ((4, 7, 0), "v0.6.1", "0.6.0"), ((4, 8, 0), "v0.6.2", "0.6.0"),
               ((5, 1, 0), "v0.7.2", "0.7.0"), ((5, 2, 0), "v0.8.0", "0.8.0"), ((5, 5, 0), "v1.0.1", "1.0.0")),
}


def newer(version_a, version_b):
    """Whether spec (or any dotted) version a is above b."""
    a, b = version_tuple(version_a), version_tuple(version_b)
    return a is not None and b is not None and a > b


def toolkit_spec_version(toolkit_version, feature_flags=(), restricted_nodes=True):
    """The cdiVersion `nvidia-ctk cdi generate` writes for a GPU host (device names index and uuid).

    The toolkit writes the lowest version its content needs (since 1.12; recomputed on save since 1.16):
    0.5.0 for device names that start with a digit, 0.7.0 as soon as a device node gets `additionalGids`.
    From 1.19.1 it adds them for every device node that is not world read/writable and whose group is not
    root (DRM nodes /dev/dri/card*, renderD*; /dev/nvidia* created 0660 with a group), unless generated
    with --feature-flag no-additional-gids-for-device-nodes. 1.19.0 had the code but dropped every GID
    (fixed by "fix: Additional GIDs are dropped due to file mode mask" in 1.19.1).
    restricted_nodes: whether the host has such nodes (True: the worst case). None for a toolkit older
    than 1.12 or a version that cannot be read.
    """
    version = version_tuple(toolkit_version)
    if version is None or version < (1, 12, 0):
        return None
    if restricted_nodes and version >= (1, 19, 1) and FEATURE_NO_ADDITIONAL_GIDS not in (feature_flags or ()):
        return "0.7.0"
    return "0.5.0"


def toolkit_has_feature_flag(toolkit_version):
    """Whether `nvidia-ctk cdi generate` knows --feature-flag no-additional-gids-for-device-nodes (1.19.0+;
    1.18 has the --feature-flag option but not this flag, 1.17 has neither)."""
    version = version_tuple(toolkit_version)
    return version is not None and version >= (1, 19, 0)


def _engine_row(engine, version):
    parsed = version_tuple(version)
    if parsed is None:
        return None
    row = None
    for candidate in _ENGINE_CDI.get(engine, ()):
        if parsed >= candidate[0]:
            row = candidate
    return row


def engine_reads(engine, version):
    """The highest CDI spec version an engine release reads ('0.6.0' for docker 26.0.x), or None when that
    release has no CDI support or its version cannot be read."""
    row = _engine_row(engine, version)
    return row[2] if row else None


def engine_first_reading(engine, spec_version):
    """The release of an engine from which on every release reads a spec version ('26.1.0' for docker and
    0.7.0), or None when no release checked does."""
    first = None
    for start, _module, reads in reversed(_ENGINE_CDI.get(engine, ())):
        if newer(spec_version, reads):
            break
        first = "%d.%d.%d" % start
    return first


def too_new_message(engine, version, reads, spec_version, path=None):
    """The finding, in one wording for the role, the module and the diagnosis."""
    return "spec version too new for %s %s: %s cdiVersion %s, %s %s reads up to %s" % (
        engine, version, ("%s is" % path) if path else "the spec is", spec_version, engine, version, reads)


def too_new_for(spec_version, engines):
    """The engines that cannot read a spec: [(engine, version, reads)], for {engine: version} (a version of
    None, or of a release without CDI, is skipped)."""
    found = []
    for engine in sorted(engines or {}):
        version = engines[engine]
        reads = engine_reads(engine, version)
        if reads and spec_version and newer(spec_version, reads):
            found.append((engine, version, reads))
    return found


def engine_compat(toolkit_version, engines):
    """Whether to generate with --feature-flag no-additional-gids-for-device-nodes, and why.

    toolkit_version: what `nvidia-ctk --version` says; engines: {engine: version or None} of the engines
    present. Returns {"feature_flags": [...], "spec_version": what the toolkit will write at most,
    "engines": {engine: {"version", "reads"}}, "reasons": [...], "unreadable_by": [messages for engines
    that cannot read even that], "refresh_feature_flags": [...]}. The flag is passed only where it helps:
    a toolkit that may write 0.7.0 and an engine that reads less. refresh_feature_flags is the flag
    wherever an engine reads less than 0.7.0, whatever the toolkit installed now: nvidia-cdi-refresh
    (1.18+) regenerates the spec as soon as a package upgrade brings 1.19.1, before anything else runs,
    and 1.18 takes the variable and ignores a flag name it does not know (pkg/nvcdi WithFeatureFlags).
    """
    result = {"feature_flags": [], "spec_version": toolkit_spec_version(toolkit_version), "reasons": [],
              "unreadable_by": [],
              "refresh_feature_flags": [FEATURE_NO_ADDITIONAL_GIDS] if too_new_for("0.7.0", engines) else [],
              "engines": dict((e, {"version": v, "reads": engine_reads(e, v)}) for e, v in (engines or {}).items())}
    if result["spec_version"] is None:
        result["reasons"].append("toolkit version %s: the spec version it writes is not known here"
                                 % (toolkit_version or "unknown"))
        return result
    blocked = too_new_for(result["spec_version"], engines)
    if blocked and toolkit_has_feature_flag(toolkit_version):
        result["feature_flags"] = [FEATURE_NO_ADDITIONAL_GIDS]
        result["reasons"] = ["%s; generating with --feature-flag %s (spec %s)" % (
            too_new_message(e, v, r, result["spec_version"]), FEATURE_NO_ADDITIONAL_GIDS,
            toolkit_spec_version(toolkit_version, result["feature_flags"]))
            for e, v, r in blocked]
        result["spec_version"] = toolkit_spec_version(toolkit_version, result["feature_flags"])
    result["unreadable_by"] = [too_new_message(e, v, r, result["spec_version"])
                               for e, v, r in too_new_for(result["spec_version"], engines)]
    return result
