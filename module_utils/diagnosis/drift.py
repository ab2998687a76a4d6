# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Drift of a GPU host against what gpuhost converged it to. Pure functions (no Ansible but module_utils).

Inputs: the host's record (`ansible_local.gpuhost`, written by the roles), the live stack
(the result of gpu_stack_check), the dpkg state of the recorded driver packages and the state of the
recorded serving containers. Output: per layer, what drifted and whether a drift run may repair it.
Pure but for the two readers at the end (dpkg_state, serving_state), which take the host's io.
"""

from ansible.module_utils.containers.daemon_json import DaemonJsonError, parse as parse_json_object
from ansible.module_utils.gpu.xid_policy import gpu_label
# DPKG_FORMAT: the format dpkg_state asks dpkg-query for (host/dpkg.py's, one for every reader).
from ansible.module_utils.host.dpkg import FORMAT as DPKG_FORMAT  # pylint: disable=unused-import
from ansible.module_utils.host.dpkg import parse as parse_dpkg, query_argv
from ansible.module_utils.layers.registry import DRIFT_LAYERS as LAYERS, get as registry_layer, repair_roles as all_repair_roles

# How a drift run may deal with a finding: `auto` through the roles' own tasks and handlers (runtime
# configure, CDI regenerate, docker restart, serving restart), `reboot` only where reboots are allowed,
# `manual` never on its own.
AUTO, REBOOT, MANUAL = "auto", "reboot", "manual"


def finding(code, message, repair, container=None):
    out = {"code": code, "message": message, "repair": repair}
    if container is not None:
        out["container"] = container
    return out


def _stack_layer(stack, layer):
    return (stack.get("layers") or {}).get(layer) or {}


def _stack_check(stack, name):
    for check in stack.get("checks") or []:
        if check.get("name") == name:
            return check
    return {}


def parse_dpkg_status(stdout):
    """{package: {"version", "want", "status", ...}} (dpkg's words: want hold/install, status installed...) of
    `dpkg-query -W -f=DPKG_FORMAT PKG...`, read by the one dpkg parser (host/dpkg.py); a version dpkg does not
    know reads '' as the fingerprint has always recorded it."""
    return dict((name, dict(state, version=state["version"] or "")) for name, state in parse_dpkg(stdout).items())


def _driver_broken(stack):
    """The driver cannot serve a GPU (not installed, not loaded, a GPU off the bus): no drift role repairs that."""
    return stack.get("gpu_state") in ("no_driver", "driver_not_loaded", "error")


def driver_findings(record, stack, dpkg, allow_reboot, serving):
    rec = record.get("driver") or {}
    recorded = rec.get("version")
    loaded = stack.get("driver_version")
    state = stack.get("gpu_state")
    out = []
    installed = sorted({p["version"].split("-")[0] for p in dpkg.values()
                        if p.get("status") == "installed" and p.get("version")})
    # A kernel upgrade that left the next boot without a module: a reboot would come up without the driver, so
    # a pending reboot is not repaired until the module is there (the driver role refuses it too).
    boot = _stack_check(stack, "next_boot")
    stranded = boot.get("status") == "warn" and bool((boot.get("data") or {}).get("next_boot"))
    if state == "version_mismatch" or (loaded and installed and loaded not in installed):
        newest = installed[-1] if installed else "?"
        out.append(finding("reboot_pending",
                           "driver %s is installed but %s is loaded (NVML: driver/library version mismatch) — "
                           "a reboot loads it" % (newest, loaded or "?"),
                           REBOOT if allow_reboot and not stranded else MANUAL))
    elif recorded and loaded and loaded != recorded:
        out.append(finding("driver_changed",
                           "driver %s is loaded, %s was converged — the runtime configuration and CDI spec "
                           "must follow (handler chain `gpuhost driver changed`)" % (loaded, recorded), AUTO))
    elif _driver_broken(stack):
        out.append(finding("driver_broken", "driver layer: %s" % (stack.get("message") or state), MANUAL))
    if stranded:
        out.append(finding("kernel_stranded", "driver layer: %s" % boot.get("summary"), MANUAL))
    for name in rec.get("packages") or []:
        pkg = dpkg.get(name)
        if pkg is None or pkg.get("status") != "installed":
            out.append(finding("package_missing", "driver package %s is not installed" % name, AUTO))
        elif pkg.get("want") != "hold":
            out.append(finding("hold_missing", "driver package %s is not held (unattended upgrades can "
                                               "replace it behind the toolkit's back)" % name, AUTO))
    return out


def _layer_failed(stack, layer, code, repair, what):
    info = _stack_layer(stack, layer)
    if info.get("status") == "fail":
        return [finding(code, "%s: %s" % (what, info.get("summary") or "failed"), repair)]
    return []


def fabric_findings(record, stack, dpkg, allow_reboot, serving):
    """The fabric manager missing, left at another version by a driver upgrade, or stopped: the driver role
    installs it at the loaded driver's version and (re)starts it."""
    return _layer_failed(stack, "fabric", "fabric_manager", AUTO, "NVSwitch fabric")


def persistence_findings(record, stack, dpkg, allow_reboot, serving):
    """Persistence mode off (the persistence check), and the MIG layout that differs from the declared one (the
    mig_layout check of the same layer: lost at a reboot whose boot unit did not re-apply it, or changed by
    hand); the nvidia_mig role applies it again."""
    mig = _stack_check(stack, "mig_layout")
    out = []
    if mig.get("status") == "fail":
        out.append(finding("mig_layout", "MIG layout: %s" % (mig.get("summary") or "differs"), AUTO))
        if _stack_check(stack, "persistence").get("status") != "fail":
            return out
    return _layer_failed(stack, "persistence", "persistence_off", AUTO, "persistence mode") + out


def docker_findings(record, stack, dpkg, allow_reboot, serving):
    return _layer_failed(stack, "docker", "docker_down", AUTO, "docker")


def toolkit_findings(record, stack, dpkg, allow_reboot, serving):
    return _layer_failed(stack, "toolkit", "toolkit_missing", AUTO, "toolkit")


def cdi_findings(record, stack, dpkg, allow_reboot, serving):
    """A stale, shadowed, missing or wrong-sized spec (the checker's cdi_spec verdict), or one recorded
    for another driver than the loaded one."""
    check = _stack_check(stack, "cdi_spec")
    if check.get("status") == "fail":
        return [finding("cdi_stale", "CDI spec: %s" % (check.get("summary") or "failed"), AUTO)]
    rec = (record.get("cdi") or {}).get("driver_version")
    loaded = stack.get("driver_version")
    if rec and loaded and rec != loaded:
        return [finding("cdi_stale", "CDI spec recorded for driver %s, %s is loaded" % (rec, loaded), AUTO)]
    return []


def runtime_config_findings(record, stack, dpkg, allow_reboot, serving):
    """The nvidia runtime entry gone (the checker's runtime_config verdict), or docker last set up
    for another driver than the loaded one: after every driver update the runtime is configured again
    and docker restarted, or `--gpus` starts failing."""
    failed = _layer_failed(stack, "runtime_config", "runtime_stale", AUTO, "toolkit configuration")
    if failed:
        return failed
    rec = (record.get("runtime") or {}).get("driver_version")
    loaded = stack.get("driver_version")
    if rec and loaded and rec != loaded:
        return [finding("runtime_stale",
                        "toolkit configuration: the nvidia runtime was configured and docker restarted under "
                        "driver %s, %s is loaded — re-run `nvidia-ctk runtime configure --runtime=docker` and "
                        "restart docker" % (rec, loaded), AUTO)]
    return []


def container_findings(record, stack, dpkg, allow_reboot, serving):
    """A fresh GPU container that fails (--gpus, CDI, the CUDA probe); a running serving container that
    lost its GPUs is the serving layer's."""
    if _stack_layer(stack, "container").get("status") != "fail":
        return []
    failed = [c for c in stack.get("checks") or [] if c.get("layer") == "container" and c.get("status") == "fail"]
    fresh = [c for c in failed if c.get("name") != "serving_gpus"]
    if failed and not fresh:
        return []
    summary = fresh[0].get("summary") if fresh else _stack_layer(stack, "container").get("summary")
    if _driver_broken(stack):
        # The driver below fails the container (e.g. "GPU is lost"): the toolkit role cannot repair that.
        return [finding("gpus_broken", "containers: %s (the driver layer fails below them: see it first)"
                        % (summary or "failed"), MANUAL)]
    return [finding("gpus_broken", "containers: %s" % (summary or "failed"), AUTO)]


def serving_findings(record, stack, dpkg, allow_reboot, serving):
    out = []
    # Running, but its NVML lost the GPU devices (a systemd reload without /dev/char links): the toolkit
    # role makes the links, then the container is started again.
    lost = _stack_check(stack or {}, "serving_gpus")
    if lost.get("status") == "fail":
        for name in (lost.get("data") or {}).get("lost") or []:
            out.append(finding("serving_lost_gpus", "serving container %s lost its GPU devices (%s)"
                               % (name, lost["data"].get("cause") or "a systemd reload"), AUTO, container=name))
    for inst in (record.get("vllm") or {}).get("instances") or []:
        name = inst.get("name") if isinstance(inst, dict) else inst
        live = (serving or {}).get(name) or {}
        if not live.get("running"):
            out.append(finding("serving_down", "serving container %s is not running (%s)"
                               % (name, live.get("status") or "absent"), AUTO))
        elif live.get("healthy") is False:
            out.append(finding("serving_unhealthy", "serving container %s does not answer /health" % name, AUTO))
    return out


def health_findings(record, stack, dpkg, allow_reboot, serving):
    """The Xids no drift run has dealt with yet (the xid check's plans against drift's cursor) and the GPUs out of
    service this boot. A plan the policy may carry out is repaired by the recovery role (restart the GPU's
    serving containers, reset the GPU, mark it out of service); a refused reset waits for the operator; a GPU out
    of service comes back with a restart, where reboots are allowed."""
    data = _stack_check(stack, "xid").get("data") or {}
    out = []
    for plan in data.get("plans") or []:
        if plan.get("action") == "IGNORE":
            continue
        if plan.get("blocked"):
            out.append(finding("xid_reset_refused", plan["say"], MANUAL))
        elif plan.get("action") == "RESTART_APP":
            out.append(finding("xid_restart_app", plan["say"], AUTO))
        elif plan.get("action") == "RESET_GPU":
            out.append(finding("xid_reset_gpu", plan["say"], AUTO))
        else:
            out.append(finding("xid_out_of_service", plan["say"], AUTO))
    for mark in data.get("out_of_service") or []:
        out.append(finding("gpu_out_of_service", "%s is out of service since %s (%s): a host restart brings it back"
                           % (gpu_label(mark.get("index"), mark.get("bus_id")), mark.get("since"), mark.get("reason")),
                           REBOOT if allow_reboot else MANUAL))
    return out


def repair_roles(layers):
    """The roles a drift run repairs these layers with, in site.yml's order: the drifted layers' own and no
    other, so that a repair changes what drifted and leaves the rest of the host alone. A change travels up
    through the handler chain (a driver change: runtime configure, CDI regenerate, docker and serving
    restarts), and the check after the repair finds any layer it left behind."""
    wanted = set(role for name in layers for role in registry_layer(name).repair)
    return [role for role in all_repair_roles() if role in wanted]


def compare(record, stack, dpkg, serving=None, allow_reboot=False):
    """Per-layer drift: {layer: {"state": "ok"|"drift", "findings": [...]}} plus totals."""
    record = record or {}
    # Each layer the registry marks for drift has its <layer>_findings here, with one signature.
    layers = dict((layer, globals()[layer + "_findings"](record, stack, dpkg, allow_reboot, serving))
                  for layer in LAYERS)
    result = {}
    for layer in LAYERS:
        found = layers[layer]
        result[layer] = {"state": "drift" if found else "ok", "findings": found}
    all_findings = [f for layer in LAYERS for f in layers[layer]]
    return {
        "layers": result,
        "drifted": bool(all_findings),
        "repairable": [f["code"] for f in all_findings if f["repair"] in (AUTO, REBOOT)],
        "repair_roles": repair_roles([layer for layer in LAYERS
                                      if any(f["repair"] in (AUTO, REBOOT) for f in layers[layer])]),
        "manual": [f["message"] for f in all_findings if f["repair"] == MANUAL],
        "recorded_driver_version": (record.get("driver") or {}).get("version"),
        "loaded_driver_version": stack.get("driver_version"),
    }


def read_record(text, path):
    """(the record, None) of the record file's text ({} where there is none yet), or (None, what is wrong and the
    fix) where it is not a JSON object."""
    try:
        return parse_json_object(text, path), None
    except DaemonJsonError as exc:
        return None, "gpuhost record: %s; run site.yml to write it again" % exc


def recorded_packages(record):
    return (record.get("driver") or {}).get("packages") or []


def recorded_instances(record):
    instances = (record.get("vllm") or {}).get("instances") or []
    return [i.get("name") if isinstance(i, dict) else i for i in instances]


def dpkg_state(io, packages):
    """The dpkg state of packages (names or dpkg-query patterns: the recorded driver packages, the fingerprint's)
    (io: the host's, runner.py)."""
    if not packages:
        return {}
    _rc, out, _err = io.run(query_argv("dpkg-query", packages))
    # rc 1 only means some package is unknown (a pattern matched nothing); the known ones are still printed.
    return parse_dpkg_status(out)


def serving_state(io, docker, names):
    """{name: {running, status}} of the recorded serving containers, as docker inspects them."""
    state = {}
    for name in names:
        if not docker:
            state[name] = {"running": False, "status": "no docker CLI"}
            continue
        rc, out, _err = io.run([docker, "inspect", "-f", "{{.State.Status}}", name])
        status = out.strip() if rc == 0 else "absent"
        state[name] = {"running": status == "running", "status": status}
    return state
