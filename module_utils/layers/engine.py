# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `docker` (the container engine): docker answers `docker info` with a config it accepts, or, on a
Kubernetes node, containerd answers `ctr version`; on a host declared for training, a container gets the limits
training needs (`container_limits`)."""
import json
import re

from ansible.module_utils.containers.registry_image import registry_host
from ansible.module_utils.containers.versions import engine_major
from ansible.module_utils.containers.daemon_json import DaemonJsonError, engine_accepts_bom, parse as parse_daemon_json
from ansible.module_utils.host.limits import (
    MEMLOCK, STACK, UNLIMITED, LimitsParseError, at_least, describe, parse_limits)
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import (
    DEFAULT_DOCKER_CONFIG, TIMEOUT_RC, _cmd, _grep, _lines, _out, evidence, guarded, result)

REMEDY_INSTALL_DOCKER = "install docker: site.yml --tags docker (role docker)"
REMEDY_START_DOCKER = ("start it: `systemctl enable --now docker`; `journalctl -u docker -b` "
                       "says why it stopped")
# The engine whose containers the host serves: docker (site.yml's docker layer) or containerd (a
# Kubernetes node's own, seed 003). On a containerd node the layer `docker` is the engine layer and the
# container checks go through `ctr run` with the nvidia runtime as runc binary, which is what a
# RuntimeClass `nvidia` pod gets.
ENGINES = ("docker", "containerd")


def parse_docker_info(cap):
    """`docker info --format '{{json .}}'` -> (info dict or None, error text or None)."""
    if cap is None:
        return None, "docker: not found"
    text = (cap.get("stdout") or "").strip()
    info = None
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            info = json.loads(candidate)
            break
        except ValueError:
            continue
    errors = []
    if isinstance(info, dict):
        errors = [e for e in info.get("ServerErrors") or [] if e]
        if not info.get("ServerVersion") and not errors:
            errors = ["docker info returned no ServerVersion"]
    if cap.get("rc") == TIMEOUT_RC:
        return None, "docker info timed out (the daemon does not answer)"
    if cap.get("rc") != 0 or not isinstance(info, dict) or errors:
        err = errors + _grep(cap.get("stderr"), r"\S")
        return None, (err[0] if err else "docker info exited %s" % cap.get("rc"))
    return info, None


def cdi_enabled(info, daemon_config):
    """Whether the engine resolves CDI device names: Docker 25+ with features.cdi (default on 28+)."""
    if not info:
        return False
    major = engine_major(info.get("ServerVersion"))
    if major is None or major < 25:
        return False
    if info.get("CDISpecDirs"):
        return True
    feature = ((daemon_config or {}).get("features") or {}).get("cdi")
    if feature is None:
        return major >= 28
    return bool(feature)


def _engine_config_verdict(daemon_json_text, validate_cap, dockerd_version, docker_config):
    """Why dockerd refuses its config, or None: `dockerd --validate` where the engine has it (23+),
    with where the error is as a person counts it; else this module's own reading of the file as
    that engine reads it (a BOM before 23)."""
    engine = None
    if validate_cap is not None:
        output = " ".join(_lines(_out(validate_cap)))
        if validate_cap.get("rc") == 0:
            return None
        if "unknown flag" not in output and output:
            engine = output
    own = None
    if daemon_json_text is not None:
        try:
            parse_daemon_json(daemon_json_text, docker_config,
                              accepts_bom=engine_accepts_bom(dockerd_version) is not False)
        except DaemonJsonError as exc:
            own = str(exc)
    if engine and own:
        return "%s (%s)" % (engine, own.split(": ", 1)[-1])
    return engine or own


def check_docker(cap, docker_path=None, daemon_json_text=None, validate_cap=None, dockerd_version=None,
                 runtime_bin_found=None, docker_config=DEFAULT_DOCKER_CONFIG):
    """The docker daemon answers (`docker info`); when it does not, the engine's own verdict on its
    config; when it does, a default runtime whose binary is gone (every container fails)."""
    if not docker_path:
        return result("docker", "docker", "fail", "docker is not installed",
                      remedy=REMEDY_INSTALL_DOCKER, ev=evidence("command -v docker", ["docker: not found"]))
    info, error = parse_docker_info(cap)
    if info is None:
        lines = _grep(_out(cap), r"cannot connect|is the docker daemon running|error|denied") or _lines(_out(cap))[:4]
        refused = _engine_config_verdict(daemon_json_text, validate_cap, dockerd_version, docker_config)
        if refused:
            line = re.search(r"line (\d+)", refused)
            where = " at line %s" % line.group(1) if line else ""
            ev = evidence("%s; dockerd --validate --config-file %s" % (_cmd(cap), docker_config),
                          lines + [refused], cap.get("rc"))
            return result("docker", "docker", "fail", "the docker daemon cannot start: it refuses %s: %s"
                          % (docker_config, refused),
                          remedy="fix %s%s by hand (gpuhost never rewrites a file it cannot read), then "
                                 "`systemctl restart docker`" % (docker_config, where), ev=ev,
                          data={"config_error": refused})
        remedy = REMEDY_START_DOCKER
        if "permission denied" in (error or "").lower():
            remedy = "run the check as root (become: true) or as a member of the docker group"
        return result("docker", "docker", "fail", "the docker daemon is not running: %s" % error,
                      remedy=remedy, ev=evidence(_cmd(cap), lines, cap.get("rc")))
    runtimes = info.get("Runtimes") or {}
    default = info.get("DefaultRuntime")
    ev = evidence(_cmd(cap), ["ServerVersion: %s" % info.get("ServerVersion"),
                              "Runtimes: %s" % " ".join(sorted(runtimes)), "DefaultRuntime: %s" % default],
                  cap.get("rc"))
    data = {"version": info.get("ServerVersion"), "runtimes": sorted(runtimes), "default_runtime": default}
    if default == "nvidia" and runtime_bin_found is False:
        runtime = runtimes.get("nvidia") if isinstance(runtimes.get("nvidia"), dict) else {}
        return result("docker", "docker", "fail",
                      "docker's default runtime is nvidia, whose binary %s is gone: every container on this host "
                      "fails to start, GPU or not" % (runtime.get("path") or "nvidia-container-runtime"),
                      remedy="reinstall the NVIDIA Container Toolkit (site.yml --tags toolkit), or take "
                             "default-runtime out of %s and `systemctl restart docker`" % docker_config,
                      ev=ev, data=data)
    return result("docker", "docker", "ok", "docker %s running (%s)" % (info.get("ServerVersion"),
                                                                        info.get("Driver") or "no storage driver"),
                  ev=ev, data=data)


def choose_engine(requested, docker_path, ctr_path):
    """The engine to check: the one asked for, else docker where its CLI is installed, else containerd
    where ctr is, else docker (whose absence the docker layer then reports)."""
    if requested in ENGINES:
        return requested
    if docker_path:
        return "docker"
    return "containerd" if ctr_path else "docker"


def parse_ctr_version(text):
    """`ctr version` -> {"client": version or None, "server": version or None}: the server part is missing
    (and ctr says why) when containerd does not answer."""
    found, section = {"client": None, "server": None}, None
    for line in (text or "").splitlines():
        head = line.strip().rstrip(":").lower()
        if head in found and line.rstrip().endswith(":"):
            section = head
            continue
        match = re.match(r"^\s+Version:\s*(\S+)", line)
        if match and section and found[section] is None:
            found[section] = match.group(1)
    return found


def normalize_image_ref(image):
    """An image name as containerd stores it: docker's short names get docker.io/ (and library/ for
    one-part names), as `ctr images import` of a docker-save tarball names them."""
    name = (image or "").strip()
    if registry_host(name)[0] is not None:
        return name
    return "docker.io/%s%s" % ("" if "/" in name else "library/", name)


def check_containerd(cap, ctr_path):
    """containerd answers (`ctr version` shows a server)."""
    if not ctr_path:
        return result("containerd", "docker", "fail", "containerd is not installed (no ctr)",
                      remedy="install containerd (the node's Kubernetes distribution, or Debian's containerd)",
                      ev=evidence("command -v ctr", ["ctr: not found"]))
    versions = parse_ctr_version(_out(cap))
    data = {"version": versions["server"], "client_version": versions["client"]}
    lines = _lines(_out(cap))
    if not versions["server"]:
        why = _grep(_out(cap), r"failed to dial|connection|denied|error") or lines[-1:] or \
            ["ctr version exited %s" % cap.get("rc")]
        return result("containerd", "docker", "fail", "containerd is not running: %s" % why[0].strip(),
                      remedy="start it: `systemctl enable --now containerd`; `journalctl -u containerd -b` says why "
                             "it stopped (a config.toml it cannot parse names the line)",
                      ev=evidence(_cmd(cap), why, cap.get("rc")), data=data)
    return result("containerd", "docker", "ok", "containerd %s running" % versions["server"],
                  ev=evidence(_cmd(cap), [l for l in lines if "Version:" in l], cap.get("rc")), data=data)


def _engine(ctx):
    """The engine's check (named after the engine: `docker` or `containerd`)."""
    if ctx.engine == "containerd":
        return guarded("containerd", "docker", check_containerd, ctx.get("ctr_version"), ctx.get("ctr_path"))
    return guarded("docker", "docker", check_docker, ctx.get("docker_info"), ctx.get("docker_path"),
                   ctx.get("daemon_json"), ctx.get("dockerd_validate"), ctx.get("dockerd_version"),
                   ctx.get("runtime_bin_found"), ctx.opts["docker_config"])


# Seed 000's training container: `--ulimit memlock=-1 --ulimit stack=67108864` (the docker role's default-ulimits
# where gpuhost_training is set, daemon_json.TRAINING_ULIMITS).
TRAINING_STACK = 67108864
TRAINING_FLAGS = "--ulimit memlock=-1 --ulimit stack=%d" % TRAINING_STACK
REMEDY_TRAINING = ("set gpuhost_training: true and run site.yml --tags docker (it merges default-ulimits memlock=-1 "
                   "and stack=%d into {config} and restarts docker), or run each training container with "
                   + TRAINING_FLAGS) % TRAINING_STACK
# runc's setrlimit(2) refused: dockerd (and so runc) may not raise a limit above its own hard limit without
# CAP_SYS_RESOURCE, as inside an unprivileged LXC or container. The type is the kernel's RLIMIT_* number.
_RLIMIT_REFUSED = re.compile(r"error setting rlimit type (\d+): operation not permitted", re.I)
RLIMIT_NAMES = {"3": "stack", "7": "nofile", "8": "memlock"}


def default_ulimits(daemon_json_text, docker_config=DEFAULT_DOCKER_CONFIG):
    """daemon.json's `default-ulimits` for memlock and stack: {name: {"Soft", "Hard"} or None}, or None where the
    file does not read (the docker check names why)."""
    try:
        config = parse_daemon_json(daemon_json_text, docker_config)
    except DaemonJsonError:
        return None
    ulimits = config.get("default-ulimits") if isinstance(config.get("default-ulimits"), dict) else {}
    return dict((name, ulimits.get(name) if isinstance(ulimits.get(name), dict) else None)
                for name in ("memlock", "stack"))


def _ulimit_text(entry):
    if entry is None:
        return "not set"
    soft = entry.get("Soft")
    return "unlimited" if soft == -1 else describe(soft) if isinstance(soft, int) else repr(soft)


def check_container_limits(cap, daemon_json_text, training, docker_config=DEFAULT_DOCKER_CONFIG):
    """On a host declared for training (gpuhost_training), the limits a fresh container gets (`cat
    /proc/self/limits` in the check image): memlock unlimited (NCCL, UCX and data loaders pin host memory;
    docker's default is 64 KiB or 8 MiB) and a stack of at least 64 MiB, seed 000's training flags."""
    command = "docker run --rm --entrypoint cat <check image> /proc/self/limits"
    if not training:
        return result("container_limits", "docker", "skipped",
                      "the host is not declared for training (gpuhost_training)", ev=evidence(command))
    if cap is None:
        return result("container_limits", "docker", "skipped", "container check disabled (container_check)",
                      ev=evidence(command))
    ulimits = default_ulimits(daemon_json_text, docker_config)
    if ulimits is None:
        daemon_line = "%s: unreadable (the docker check names why)" % docker_config
    else:
        daemon_line = "%s default-ulimits: memlock %s, stack %s" % (
            docker_config, _ulimit_text(ulimits["memlock"]), _ulimit_text(ulimits["stack"]))
    data = {"default_ulimits": ulimits, "needs": {"memlock": UNLIMITED, "stack": TRAINING_STACK}}
    remedy = REMEDY_TRAINING.format(config=docker_config)
    out = _out(cap)
    refused = _RLIMIT_REFUSED.search(out)
    if cap.get("rc") != 0 and refused:
        limit = RLIMIT_NAMES.get(refused.group(1), "type %s" % refused.group(1))
        return result("container_limits", "docker", "fail",
                      "containers cannot start with the %s limit docker asks for: the kernel refused it (%s) - "
                      "dockerd may not raise a limit above its own without CAP_SYS_RESOURCE (docker inside an "
                      "unprivileged LXC or container)" % (limit, refused.group(0)),
                      remedy="run docker where it may raise limits (a VM, a privileged LXC or the host), or lower "
                             "%s's default-ulimits (and --ulimit) to dockerd's own hard limits "
                             "(`cat /proc/$(pidof dockerd)/limits`)" % docker_config,
                      ev=evidence(_cmd(cap), _grep(out, r"rlimit") + [daemon_line], cap.get("rc")),
                      data=dict(data, refused=limit))
    limits = None
    if cap.get("rc") == 0:
        try:
            limits = parse_limits(cap.get("stdout"))
        except LimitsParseError:
            limits = None
    if not limits or MEMLOCK not in limits or STACK not in limits:
        lines = _lines(out)[:4]
        return result("container_limits", "docker", "warn",
                      "could not read the limits a container gets: %s"
                      % (lines[0] if lines else "exit status %s" % cap.get("rc")),
                      remedy="check that the check image is loaded (`docker image ls`) and runs `cat`",
                      ev=evidence(_cmd(cap), lines + [daemon_line], cap.get("rc")), data=data)
    memlock, stack = limits[MEMLOCK], limits[STACK]
    data.update({"memlock": memlock, "stack": stack})
    rows = [l.strip() for l in _lines(cap.get("stdout")) if l.strip().startswith((MEMLOCK, STACK))]
    ev = evidence(_cmd(cap), rows + [daemon_line], cap.get("rc"))
    short = []
    if memlock["soft"] != UNLIMITED:
        short.append("memlock %s (training needs unlimited: NCCL and data loaders pin host memory, and fail "
                     "with 'Cannot allocate memory' or 'cannot allocate pinned memory')" % describe(memlock["soft"]))
    if not at_least(stack["soft"], TRAINING_STACK):
        short.append("stack %s (training needs %s)" % (describe(stack["soft"]), describe(TRAINING_STACK)))
    if not short:
        return result("container_limits", "docker", "ok",
                      "a container gets the training limits: memlock %s, stack %s"
                      % (describe(memlock["soft"]), describe(stack["soft"])), ev=ev, data=data)
    if ulimits and ulimits["memlock"] and ulimits["stack"]:
        # daemon.json asks for limits the container does not get: a value gpuhost kept (an operator's, lower),
        # or a daemon that has not read the file since.
        wanted = (ulimits["memlock"].get("Soft") == -1 and isinstance(ulimits["stack"].get("Soft"), int)
                  and ulimits["stack"]["Soft"] >= TRAINING_STACK)
        remedy = ("restart docker (`systemctl restart docker`): it reads default-ulimits when it starts" if wanted else
                  "raise %s's default-ulimits by hand to memlock -1 and stack %d (gpuhost keeps the values the "
                  "file already has), then `systemctl restart docker`; or run each training container with %s"
                  % (docker_config, TRAINING_STACK, TRAINING_FLAGS))
    return result("container_limits", "docker", "fail",
                  "a container on this training host gets %s" % "; ".join(short), remedy=remedy, ev=ev, data=data)


def _container_limits(ctx):
    training = ctx.opts.get("training")
    if training and ctx.engine != "docker":
        return result("container_limits", "docker", "skipped",
                      "the training limits checked are docker's default-ulimits (a Kubernetes node's pods get "
                      "containerd's own)", ev=evidence())
    if training and ctx.check("docker")["status"] != "ok":
        return result("container_limits", "docker", "skipped", "docker is not running",
                      ev=evidence("docker info"))
    return guarded("container_limits", "docker", check_container_limits, ctx.get("container_limits"),
                   ctx.get("daemon_json"), training, ctx.opts["docker_config"])


CHECKS = {"docker_basics": basics("docker"), "docker": _engine, "container_limits": _container_limits}
