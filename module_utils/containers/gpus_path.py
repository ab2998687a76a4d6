# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which way docker's `--gpus` reaches an NVIDIA GPU: the legacy hook or CDI. Pure, Python stdlib only.

`--gpus all` is a DeviceRequest {Driver: "", Count: -1, Capabilities: [["gpu"]]} (docker/cli
opts/gpus.go; `device=0,1` gives DeviceIDs, `N` gives Count N). The daemon hands it to the device driver
whose capabilities match "gpu" (moby daemon/devices.go). Verified in moby's source (tags v28.5.2,
docker-v29.0.0 ... docker-v29.7.2 and master of 2026-08-23; tests/fixtures/gpus_path/README.md):

- docker < 29.2: one driver, "nvidia", registered when `nvidia-container-runtime-hook` is on dockerd's PATH
  at start. It appends NVIDIA_VISIBLE_DEVICES=<all|ids> to the OCI spec and the hook as a prestart hook
  (the legacy path). CDI serves only `--device vendor.com/class=name` (Driver "cdi").
- docker >= 29.2.0 (moby#50228, merged 2026-01-20): `nvidia-cdi-hook` on dockerd's PATH at start registers
  "nvidia.cdi", the hook registers "nvidia.runtime-hook", and "nvidia" tries them in that order and takes
  the first that updates the spec without an error. nvidia.cdi maps the request to CDI names
  (`all` -> nvidia.com/gpu=all, `device=0` -> nvidia.com/gpu=0, count N -> nvidia.com/gpu=0..N-1) and
  injects them through docker's CDI driver. It fails, and docker falls back to the hook with the daemon
  log line "Ignoring previous errors updating spec", when CDI is off (features.cdi false; then docker
  info's CDISpecDirs is empty) or a name is not in a spec (`unresolvable CDI devices ...`).
  A spec that resolves but is stale (an older driver's libraries) is NOT a fallback: the container
  fails later in runc ("failed to fulfil mount request").
- docker >= 29.3.0 (moby#52048): with neither NVIDIA binary at start and CDI on, an AMD driver answers
  `--gpus`: "AMD CDI spec not found" (an nvidia.com spec is there) or "failed to discover GPU vendor
  from CDI: no known GPU vendor found". Without any driver: `could not select device driver "" with
  capabilities: [[gpu]]`.
- moby#52704 (open, not in any release up to docker-v29.7.2) would put the hook first again.

Seen from outside: `docker info` has CDISpecDirs (API 1.44, docker 25+; empty when CDI is off) and, from
28.2 (API 1.50), DiscoveredDevices [{Source: "cdi", ID: "nvidia.com/gpu=0"}] (omitted when empty). Which
driver a container got is not in `docker inspect` (HostConfig.DeviceRequests is the request as sent,
Config.Env is the image's and -e's), only in the process environment: NVIDIA's CDI spec sets
NVIDIA_VISIBLE_DEVICES=void (toolkit >= 1.15.0, pkg/nvcdi/wrapper.go), the hook path appends the requested
ids (`all`). The nvidia runtime (`--runtime=nvidia` or default-runtime nvidia) in cdi / jit-cdi mode
(jit-cdi is its default from toolkit 1.18.0) removes docker's hook and injects through CDI too: void again.
"""
import re

from ansible.module_utils.containers import versions
from ansible.module_utils.containers.versions import version_tuple

GPUS_CDI_VERSION = (29, 2)        # moby#50228 (docker-v29.2.0)
AMD_FALLBACK_VERSION = (29, 3)    # moby#52048 (docker-v29.3.0)
DRIVER_BY_NAME_VERSION = (29, 0)  # moby#50717: an explicit driver name wins over capabilities
NVIDIA_KIND = "nvidia.com/gpu"
CDI_HOOK = "nvidia-cdi-hook"
RUNTIME_HOOK = "nvidia-container-runtime-hook"
PATHS = ("cdi", "legacy", "unknown")
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
FALLBACK_LOG = "Ignoring previous errors updating spec"

_GPU_CAPS = frozenset(("gpu", "nvidia", "compute", "compat32", "graphics", "utility", "video", "display"))


def _result(path, reason):
    if path not in PATHS:
        raise ValueError("bad path %r" % path)
    return {"path": path, "reason": reason}


def engine_version(info):
    """docker info's ServerVersion -> (major, minor, patch); '26.1.5+dfsg1' (Debian) -> (26, 1, 5)."""
    return version_tuple(versions.engine_version((info or {}).get("ServerVersion")))


def _version_text(version):
    return ".".join(str(part) for part in version)


def cdi_devices(info):
    """The CDI device names docker info lists (DiscoveredDevices entries whose Source is cdi)."""
    devices = []
    for entry in (info or {}).get("DiscoveredDevices") or []:
        if isinstance(entry, dict) and (entry.get("Source") or "cdi") == "cdi" and entry.get("ID"):
            devices.append(entry["ID"])
    return devices


def cdi_on(info):
    """Whether the daemon's CDI driver has spec directories: CDISpecDirs is emptied when features.cdi is
    false (or cdi-spec-dirs is [""]); a listed CDI device also proves it (an excerpt may lack the dirs)."""
    return bool((info or {}).get("CDISpecDirs")) or bool(cdi_devices(info))


def gpu_requests(host_config):
    """The DeviceRequests of a HostConfig that ask for NVIDIA GPUs (--gpus, compose's driver: nvidia,
    --device nvidia.com/gpu=...). A request for no device (`--gpus 0`) asks for nothing."""
    wanted = []
    for req in (host_config or {}).get("DeviceRequests") or []:
        if not isinstance(req, dict):
            continue
        driver = req.get("Driver") or ""
        ids = req.get("DeviceIDs") or []
        caps = set(c for group in req.get("Capabilities") or [] for c in group or [])
        if driver == "cdi":
            if any(str(i).startswith(NVIDIA_KIND + "=") for i in ids):
                wanted.append(req)
            continue
        if driver.startswith("nvidia") or (driver == "" and caps & _GPU_CAPS):
            if ids or (req.get("Count") or 0) != 0:
                wanted.append(req)
    return wanted


def requested_names(host_config=None):
    """The CDI names docker 29.2+ turns the GPU request into (nvidia.com/gpu=all without a HostConfig)."""
    names = []
    for req in gpu_requests(host_config) if host_config is not None else []:
        ids = [str(i) for i in req.get("DeviceIDs") or []]
        count = req.get("Count") or 0
        if not ids:
            ids = ["all"] if count < 0 else [str(i) for i in range(count)]
        names += [i if "=" in i else "%s=%s" % (NVIDIA_KIND, i) for i in ids]
    return names or ["%s=all" % NVIDIA_KIND]


def visible_devices(env):
    """The value NVIDIA_VISIBLE_DEVICES has for the container's process: the last entry of the list
    (docker's hook path appends; CDI replaces the entry in place), or None."""
    value = None
    for item in env or []:
        key, sep, val = str(item).partition("=")
        if sep and key == VISIBLE:
            value = val
    return value


def _explicit_driver(host_config):
    drivers = set((req.get("Driver") or "") for req in gpu_requests(host_config))
    for driver in ("cdi", "nvidia.cdi", "nvidia.runtime-hook"):
        if driver in drivers:
            return driver
    return None


def _no_driver_error(version, info):
    if version >= AMD_FALLBACK_VERSION and cdi_on(info):
        if any(d.startswith(NVIDIA_KIND + "=") for d in cdi_devices(info)):
            return "AMD CDI spec not found"
        return "failed to discover GPU vendor from CDI: no known GPU vendor found"
    return 'could not select device driver "" with capabilities: [[gpu]]'


def predict(info, cdi_hook_on_path, runtime_hook_on_path=None, host_config=None):
    """The path docker's daemon gives a --gpus request, from docker info and the host's PATH (dockerd's
    PATH when it started: it looks the binaries up once). runtime_hook_on_path None: not checked."""
    if not info:
        return _result("unknown", "docker info is not available")
    version = engine_version(info)
    if version is None:
        return _result("unknown", "docker's ServerVersion %r is not a version" % info.get("ServerVersion"))
    shown = info.get("ServerVersion")
    explicit = _explicit_driver(host_config)
    if explicit == "cdi":
        return _result("cdi", "the request names CDI devices (--device %s, Driver \"cdi\"): docker's CDI driver"
                       % ", ".join(requested_names(host_config)))
    if explicit in ("nvidia.cdi", "nvidia.runtime-hook") and version >= GPUS_CDI_VERSION:
        path = "cdi" if explicit == "nvidia.cdi" else "legacy"
        return _result(path, "the request names the driver %s (docker %s picks a driver by name, moby#50717)"
                       % (explicit, shown))
    if version < GPUS_CDI_VERSION:
        if runtime_hook_on_path is False:
            return _result("unknown", "docker %s serves --gpus only through %s, which is not on PATH: --gpus fails "
                           "(%s)" % (shown, RUNTIME_HOOK, _no_driver_error(version, {})))
        return _result("legacy", "docker %s serves --gpus only through %s (CDI takes --gpus from docker 29.2.0, "
                       "moby#50228)" % (shown, RUNTIME_HOOK))
    if not cdi_hook_on_path:
        if runtime_hook_on_path is False:
            return _result("unknown", "neither %s nor %s is on PATH: docker %s registers no NVIDIA driver and "
                           "--gpus fails (%s)" % (CDI_HOOK, RUNTIME_HOOK, shown, _no_driver_error(version, info)))
        return _result("legacy", "%s is not on PATH: docker %s registers no nvidia.cdi driver and --gpus goes "
                       "through %s" % (CDI_HOOK, shown, RUNTIME_HOOK))
    if not cdi_on(info):
        if runtime_hook_on_path is False:
            return _result("unknown", "docker %s has CDI off (no CDISpecDirs) and %s is not on PATH: --gpus fails "
                           "(no CDI device driver registered)" % (shown, RUNTIME_HOOK))
        return _result("legacy", "docker %s has CDI off (docker info lists no CDISpecDirs: features.cdi false): "
                       "nvidia.cdi fails and docker falls back to %s" % (shown, RUNTIME_HOOK))
    names = requested_names(host_config)
    listed = cdi_devices(info)
    missing = [n for n in names if n not in listed]
    if not missing:
        return _result("cdi", "docker %s with %s on PATH, CDI on and %s listed in docker info: --gpus goes through "
                       "CDI (moby#50228; %s is only the fallback)" % (shown, CDI_HOOK, ", ".join(names), RUNTIME_HOOK))
    if runtime_hook_on_path is False:
        return _result("cdi", "docker %s sends --gpus through CDI, but docker info lists no %s and %s is not on "
                       "PATH: --gpus fails (CDI device injection failed: unresolvable CDI devices %s)"
                       % (shown, ", ".join(missing), RUNTIME_HOOK, ", ".join(missing)))
    return _result("legacy", "docker %s tries CDI first, but docker info lists no %s: the injection fails "
                   "(unresolvable CDI devices) and docker falls back to %s (daemon log: \"%s\")"
                   % (shown, ", ".join(missing), RUNTIME_HOOK, FALLBACK_LOG))


def observe(env=None, host_config=None, runtime=None):
    """The path a container took, from its process environment (/proc/<pid>/environ, or `env` run as the
    container's command: NOT docker inspect's Config.Env) and its HostConfig (docker inspect)."""
    if host_config is not None and not gpu_requests(host_config):
        value = visible_devices(env)
        via = ((host_config or {}).get("Runtime") or runtime or "") == "nvidia" and value not in (None, "", "void")
        return _result("unknown", "the container asks for no NVIDIA GPU in HostConfig.DeviceRequests (no --gpus)%s"
                       % ("; the nvidia runtime injects by %s=%s instead" % (VISIBLE, value) if via else ""))
    explicit = _explicit_driver(host_config)
    if explicit in ("cdi", "nvidia.cdi"):
        return _result("cdi", "the container's request names the %s driver" % explicit)
    if explicit == "nvidia.runtime-hook":
        return _result("legacy", "the container's request names the nvidia.runtime-hook driver")
    if env is None:
        return _result("unknown", "the container's environment was not read")
    value = visible_devices(env)
    if value is None:
        return _result("unknown", "%s is not in the environment read (docker inspect's Config.Env lacks what the "
                       "daemon injects: read /proc/<pid>/environ)" % VISIBLE)
    nvidia_runtime = runtime == "nvidia" or (runtime or "").endswith("nvidia-container-runtime")
    if value == "void":
        by = ("docker's CDI driver or the nvidia runtime in cdi/jit-cdi mode" if nvidia_runtime
              else "docker's CDI driver (docker 29.2+)")
        return _result("cdi", "%s=void: set by NVIDIA's CDI spec, so %s injected the GPUs" % (VISIBLE, by))
    return _result("legacy", "%s=%s: the value docker's hook path sets from --gpus; %s injected the GPUs%s"
                   % (VISIBLE, value, RUNTIME_HOOK, " (nvidia runtime in legacy mode)" if nvidia_runtime else ""))


# Failure texts, most specific first: (regex, path, what it says about the path).
_ERRORS = (
    (r"invoking the NVIDIA Container Runtime Hook directly", "legacy",
     "docker used %s, which refuses: the toolkit's mode is cdi (config.toml); use --runtime=nvidia or "
     "--device nvidia.com/gpu=all" % RUNTIME_HOOK),
    (r"AMD CDI spec not found|failed to discover GPU vendor from CDI", "unknown",
     "docker 29.3+ found neither %s nor %s on its PATH when it started (its AMD driver answered): install the "
     "toolkit and restart docker" % (CDI_HOOK, RUNTIME_HOOK)),
    (r"no CDI device driver registered", "unknown",
     "docker 29.2+ has CDI off and no %s to fall back to" % RUNTIME_HOOK),
    (r'could not select device driver "(?:nvidia)?" with capabilities: \[\[gpu\]\]', "unknown",
     "docker registered no NVIDIA driver (no %s on its PATH when it started)" % RUNTIME_HOOK),
    (r"CDI device injection failed", "cdi",
     "docker's CDI driver failed and nothing took over (docker 29.2+ without %s, or --device)" % RUNTIME_HOOK),
    (r"failed to inject CDI devices: [^\n]*runtime\.nvidia\.com/", "cdi",
     "the nvidia runtime's jit-cdi mode (runtime.nvidia.com devices) could not make its spec "
     "(NVIDIA/nvidia-container-toolkit#1537)"),
    (r"error modifying OCI spec: failed to inject CDI devices", "cdi",
     "the nvidia runtime (cdi mode) could not resolve the CDI devices"),
    (r"nvidia-container-cli|Auto-detected mode as 'legacy'|error running (?:prestart )?hook #\d", "legacy",
     "%s ran (nvidia-container-cli) and failed" % RUNTIME_HOOK),
    (r"(?:failed to fulfil mount request|error mounting)[^\n]*(?:nvidia|libcuda)", "cdi",
     "a driver file the OCI spec names is missing: a CDI spec older than the driver (the legacy hook finds "
     "the files itself)"),
)


def classify_error(text):
    """Which path a failed `docker run --gpus` took, from its error text; None when the text says nothing."""
    for pattern, path, meaning in _ERRORS:
        match = re.search(pattern, text or "")
        if match:
            return _result(path, "%s (%r)" % (meaning, match.group(0)))
    return None


def gpus_path(info, cdi_hook_on_path, env=None, host_config=None, runtime_hook_on_path=None, error_text=None):
    """{"path": "cdi" | "legacy" | "unknown", "reason": ...} for docker's --gpus on this host.

    info: docker info as stack_check.parse_docker_info returns it (or info_from_text's); cdi_hook_on_path:
    whether nvidia-cdi-hook is on PATH; env: a container's process environment (list of "K=V"), host_config:
    its HostConfig (docker inspect); runtime_hook_on_path: whether nvidia-container-runtime-hook is (None:
    not checked); error_text: the output of a failed `docker run --gpus`. What the container shows wins over
    what docker info predicts; the reason says where they differ."""
    if host_config is not None and not gpu_requests(host_config):
        return observe(env, host_config, (info or {}).get("DefaultRuntime"))
    predicted = predict(info, cdi_hook_on_path, runtime_hook_on_path, host_config)
    runtime = (host_config or {}).get("Runtime") or (info or {}).get("DefaultRuntime")
    if env is not None or _explicit_driver(host_config):
        seen = observe(env, host_config, runtime)
        if seen["path"] == "unknown":
            return _result(predicted["path"], "%s; %s" % (predicted["reason"], seen["reason"]))
        if seen["path"] == predicted["path"]:
            return _result(seen["path"], "%s, as docker info predicts: %s" % (seen["reason"], predicted["reason"]))
        if seen["path"] == "legacy" and predicted["path"] == "cdi":
            return _result("legacy", "%s, although docker info predicted CDI: docker fell back to the hook (CDI "
                           "injection failed; daemon log \"%s\")" % (seen["reason"], FALLBACK_LOG))
        if seen["path"] == "cdi" and predicted["path"] == "legacy" and runtime == "nvidia":
            return _result("cdi", "%s; docker itself took the hook path (%s) and the nvidia runtime (jit-cdi, its "
                           "default from toolkit 1.18.0) replaced the hook" % (seen["reason"], predicted["reason"]))
        return _result(seen["path"], "%s (docker info predicted %s: %s)"
                       % (seen["reason"], predicted["path"], predicted["reason"]))
    if error_text:
        failed = classify_error(error_text)
        if failed is not None:
            return failed
    return predicted


def report_line(result, subject="--gpus"):
    """One line for a report: '--gpus path: cdi (docker 29.4.2 with ...)'."""
    return "%s path: %s (%s)" % (subject, result.get("path", "unknown"), result.get("reason") or "no reason")


def info_from_text(text):
    """The fields gpus_path reads, from `docker info`'s text output (as people paste it): ServerVersion,
    CDISpecDirs, DiscoveredDevices, Runtimes, DefaultRuntime; the same keys as `--format '{{json .}}'`."""
    info = {"CDISpecDirs": [], "DiscoveredDevices": []}
    section = None
    for line in (text or "").splitlines():
        line = line.rstrip("\r")
        item = re.match(r"^  (\S.*)$", line)
        if section and item:
            if section == "dirs":
                info["CDISpecDirs"].append(item.group(1).strip())
            else:
                source, _sep, ident = item.group(1).partition(": ")
                info["DiscoveredDevices"].append({"Source": source.strip(), "ID": ident.strip()})
            continue
        section = None
        stripped = line.strip()
        if stripped == "CDI spec directories:":
            section = "dirs"
        elif stripped == "Discovered Devices:":
            section = "devices"
        elif stripped.startswith("Server Version:"):
            info["ServerVersion"] = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("Runtimes:"):
            info["Runtimes"] = dict((name, {}) for name in stripped.split(":", 1)[1].split())
        elif stripped.startswith("Default Runtime:"):
            info["DefaultRuntime"] = stripped.split(":", 1)[1].strip()
    return info
