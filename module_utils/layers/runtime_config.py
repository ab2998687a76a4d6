# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `runtime_config`: the nvidia runtime registered with the running engine (docker's daemon.json and
`docker info`, containerd's merged config), and the /dev/char links a systemd reload needs."""

from ansible.module_utils.containers.containerd_config import runtime_binaries
from ansible.module_utils.containers.daemon_json import DaemonJsonError, engine_accepts_bom, parse as parse_daemon_json
from ansible.module_utils.containers.dev_char import missing as dev_char_missing, wanted_links as dev_char_links
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import (
    DEFAULT_DOCKER_CONFIG, DEFAULT_RUNTIME_BINARY, ENGINE_WORDS, REMEDY_CONFIGURE, REMEDY_INSTALL_TOOLKIT, _cmd,
    _lines, _out, evidence, guarded, result)
from ansible.module_utils.layers.engine import cdi_enabled, parse_docker_info


def check_runtime(docker_cap, daemon_json_text, runtime_bin_found=None,
                  docker_config=DEFAULT_DOCKER_CONFIG):
    """The nvidia runtime is registered with the running docker (`docker info` Runtimes)."""
    info, error = parse_docker_info(docker_cap)
    config, config_error = {}, None
    try:
        config = parse_daemon_json(daemon_json_text, docker_config,
                                   accepts_bom=engine_accepts_bom((info or {}).get("ServerVersion")) is not False)
    except DaemonJsonError as exc:
        config_error = str(exc)
    configured = isinstance(config.get("runtimes"), dict) and "nvidia" in config["runtimes"]
    conf_lines = []
    if daemon_json_text is None:
        conf_lines.append("%s: no such file" % docker_config)
    elif config_error:
        conf_lines.append(config_error)
    else:
        conf_lines.append("%s runtimes: %s" % (docker_config, " ".join(sorted(config.get("runtimes") or {}))
                                               or "(none)"))
    if info is None:
        why = "docker is not installed" if docker_cap is None else "docker is not running (%s)" % error
        return result("runtime", "runtime_config", "skipped", why,
                      ev=evidence("cat %s" % docker_config, conf_lines), data={"configured": configured})
    runtimes = info.get("Runtimes") or {}
    lines = ["Runtimes: %s" % " ".join(sorted(runtimes)), "DefaultRuntime: %s" % info.get("DefaultRuntime")]
    ev = evidence("docker info --format '{{json .}}'; cat %s" % docker_config, lines + conf_lines,
                  docker_cap.get("rc"))
    data = {"configured": configured, "registered": "nvidia" in runtimes,
            "default_runtime": info.get("DefaultRuntime"), "cdi_enabled": cdi_enabled(info, config)}
    if config_error:
        return result("runtime", "runtime_config", "fail", config_error,
                      remedy="fix the JSON by hand (docker refuses to start with it), then %s" % REMEDY_CONFIGURE,
                      ev=ev, data=data)
    if "nvidia" not in runtimes:
        if configured:
            return result("runtime", "runtime_config", "fail",
                          "nvidia runtime is in %s but not registered with the running docker" % docker_config,
                          remedy="restart docker (`systemctl restart docker`)", ev=ev, data=data)
        return result("runtime", "runtime_config", "fail", "nvidia runtime not registered with docker",
                      remedy=REMEDY_CONFIGURE, ev=ev, data=data)
    path = (runtimes.get("nvidia") or {}).get("path") if isinstance(runtimes.get("nvidia"), dict) else None
    if runtime_bin_found is False:
        return result("runtime", "runtime_config", "fail", "nvidia runtime registered, but its binary %s is missing"
                      % (path or "nvidia-container-runtime"), remedy=REMEDY_INSTALL_TOOLKIT, ev=ev, data=data)
    return result("runtime", "runtime_config", "ok", "nvidia runtime registered with docker (%s)%s"
                  % (path or "nvidia-container-runtime",
                     "; CDI enabled" if data["cdi_enabled"] else ""), ev=ev, data=data)


REMEDY_DEV_CHAR = ("site.yml --tags toolkit (the links and NVIDIA's udev rule that makes them at every driver load), "
                   "or `nvidia-ctk system create-dev-char-symlinks --create-all`")


def _char_numbers(nodes):
    """{path: (major, minor)} of the character devices among captured nodes ({path: {kind, major, minor}})."""
    return dict((path, (n["major"], n["minor"])) for path, n in (nodes or {}).items() if n and n.get("kind") == "char")


def check_dev_char(nodes, links):
    """Every NVIDIA device node has its /dev/char/MAJOR:MINOR link: without it a systemd daemon-reload takes
    the node from running containers whose cgroup systemd manages. nodes: {path: {kind, major, minor}};
    links: {link path: readlink text / None / False}."""
    wanted = dev_char_links(_char_numbers(nodes))
    command = "ls -l /dev/char"
    if not wanted:
        return result("dev_char", "runtime_config", "ok", "no NVIDIA device node to link", ev=evidence(command))
    absent = dev_char_missing(wanted, links or {})
    lines = ["%s -> %s" % (link, (links or {}).get(link) or "(absent)") for link in sorted(wanted)]
    data = {"links": wanted, "missing": absent}
    if absent:
        return result("dev_char", "runtime_config", "warn",
                      "%d of %d NVIDIA device nodes have no /dev/char link (%s): a systemd daemon-reload would take "
                      "them from running GPU containers" % (len(absent), len(wanted), ", ".join(absent)),
                      remedy=REMEDY_DEV_CHAR, ev=evidence(command, lines), data=data)
    return result("dev_char", "runtime_config", "ok", "every NVIDIA device node has its /dev/char link (%d)"
                  % len(wanted), ev=evidence(command, lines), data=data)


def check_containerd_runtime(dump_cap, runtime_bin_found=None):
    """The nvidia runtime is in the config containerd runs with (`containerd config dump`: config.toml
    and its imports merged), with the binary it names present."""
    words = ENGINE_WORDS["containerd"]
    if dump_cap is None:
        return result("runtime", "runtime_config", "skipped", "containerd is not installed",
                      ev=evidence("containerd config dump"))
    if dump_cap.get("rc") != 0:
        lines = _lines(_out(dump_cap))[:3]
        return result("runtime", "runtime_config", "fail", "containerd cannot read its config: %s"
                      % (lines[0] if lines else "exit status %s" % dump_cap.get("rc")),
                      remedy="fix /etc/containerd/config.toml (or the drop-in it imports) by hand at the place the "
                             "message names, then %s" % words["restart"],
                      ev=evidence(_cmd(dump_cap), lines, dump_cap.get("rc")))
    binaries = runtime_binaries(dump_cap.get("stdout"))
    nvidia = dict((name, path) for name, path in binaries.items() if name.startswith("nvidia"))
    lines = ["runtimes: %s" % (" ".join(sorted(binaries)) or "(none)")] + \
        ["%s BinaryName = %s" % (name, path) for name, path in sorted(nvidia.items())]
    ev = evidence(_cmd(dump_cap), lines, dump_cap.get("rc"))
    data = {"registered": "nvidia" in binaries, "runtimes": sorted(binaries), "binary": binaries.get("nvidia")}
    if "nvidia" not in binaries:
        return result("runtime", "runtime_config", "fail", "nvidia runtime not in containerd's config",
                      remedy=words["configure"], ev=ev, data=data)
    if runtime_bin_found is False:
        return result("runtime", "runtime_config", "fail", "nvidia runtime registered, but its binary %s is missing"
                      % (binaries["nvidia"] or DEFAULT_RUNTIME_BINARY), remedy=REMEDY_INSTALL_TOOLKIT, ev=ev,
                      data=data)
    return result("runtime", "runtime_config", "ok", "nvidia runtime registered with containerd (%s)"
                  % (binaries["nvidia"] or "runc, no BinaryName"), ev=ev, data=data)


def _runtime(ctx):
    if ctx.engine == "containerd":
        return guarded("runtime", "runtime_config", check_containerd_runtime, ctx.get("containerd_config_dump"),
                       ctx.get("runtime_bin_found"))
    return guarded("runtime", "runtime_config", check_runtime, ctx.get("docker_info"), ctx.get("daemon_json"),
                   ctx.get("runtime_bin_found"), ctx.opts["docker_config"])


def _dev_char(ctx):
    return guarded("dev_char", "runtime_config", check_dev_char, ctx.get("nodes"), ctx.get("dev_char_links"))


CHECKS = {"runtime_config_basics": basics("runtime_config"), "runtime": _runtime,
          "dev_char": _dev_char}
