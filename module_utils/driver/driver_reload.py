# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A driver change without a reboot: who holds the driver, whether gpuhost may let go of all of them, and the
upgrade state a half-done reload leaves behind. Pure functions, stdlib only (the module nvidia_driver_reload is
the shell that reads the host and acts).

A reload is the kernel's own way: stop everything that has the device nodes open (gpuhost's serving containers with
their grace period, and the NVIDIA services), `modprobe -r` the modules dependents first (kernel_modules.NVIDIA_MODULES,
NVIDIA's driver container's order), `modprobe` them again, start the services (the fabric manager first: CUDA needs
the fabric up) and let the handler chain configure the runtime and CDI for the new driver and start the containers.
Anything else that holds the driver (another tenant's container or process, an X server) is never stopped by
gpuhost: the host reboots instead, naming it.
"""
from ansible.module_utils.containers.gpus_path import VISIBLE, gpu_requests
from ansible.module_utils.driver.kernel_modules import NVIDIA_MODULES

# The services that keep the device nodes open, in the order they start (the fabric manager before any CUDA user:
# NVIDIA's fabric manager guide); they stop in the reverse order. DCGM's host engine and its exporter, the IMEX
# service of NVL72 trays and NVLink 5's subnet manager likewise.
SERVICES = ("nvidia-fabricmanager.service", "nvidia-imex.service", "nvlsm.service", "nvidia-persistenced.service",
            "nvidia-dcgm.service", "dcgm-exporter.service")
# What fuser/nvidia-smi print for those services' processes (fuser cuts COMMAND at 15 characters, lsof at 9).
SERVICE_COMMANDS = ("nv-fabricmanager", "nv-fabricmanage", "nvidia-imex", "nvlsm", "nvidia-persistenced",
                    "nvidia-persiste", "nv-hostengine", "dcgm-exporter")
STATE_PATH = "/var/lib/gpuhost/driver-upgrade.json"
UPGRADE_STATES = ("planned", "draining", "reloading", "verified", "rebooted", "failed")
SERVING_LABEL = ("gpuhost.layer", "vllm")


def _name(container):
    return (container.get("Name") or "").lstrip("/") or (container.get("Id") or "")[:12]


def gets_gpus(container):
    """A container whose processes open the driver: GPUs in its device requests (--gpus, CDI names), or the
    nvidia runtime's NVIDIA_VISIBLE_DEVICES naming devices."""
    if gpu_requests(container.get("HostConfig")):
        return True
    for item in (container.get("Config") or {}).get("Env") or []:
        key, _sep, value = str(item).partition("=")
        if key == VISIBLE and value.strip() not in ("", "void", "none"):
            return True
    return False


def ours(container):
    labels = (container.get("Config") or {}).get("Labels") or {}
    return labels.get(SERVING_LABEL[0]) == SERVING_LABEL[1]


def holders(containers, processes, service_pids, cgroups=None):
    """Who holds the driver, sorted out: {"containers": gpuhost's running serving containers given GPUs (stopped
    with their grace period and started again), "services": the units of SERVICES whose processes hold it,
    "foreign": [{pid or container, what}] that gpuhost will not stop}.

    containers: `docker inspect` of the running containers; processes: [{pid, command}] from `fuser -v /dev/nvidia*`
    and nvidia-smi's compute apps; service_pids: {MainPID: unit} of the active SERVICES; cgroups: {pid: its
    /proc/PID/cgroup text}, to tell a container's processes."""
    running = [c for c in containers or [] if (c.get("State") or {}).get("Running") and gets_gpus(c)]
    mine = [c for c in running if ours(c)]
    foreign = [{"container": _name(c), "what": "container %s (%s) is given GPUs and is not a gpuhost serving container"
                % (_name(c), (c.get("Config") or {}).get("Image") or "?")} for c in running if not ours(c)]
    # Every active NVIDIA service is stopped for the reload, whether or not fuser saw its files.
    services = set(service_pids.values())
    by_id = dict((c.get("Id"), c) for c in running if c.get("Id"))
    by_pid = dict(((c.get("State") or {}).get("Pid"), c) for c in running if (c.get("State") or {}).get("Pid"))
    seen = set()
    for proc in processes or []:
        pid = proc.get("pid")
        if pid in seen:
            continue
        seen.add(pid)
        if pid in service_pids:
            services.add(service_pids[pid])
            continue
        text = (cgroups or {}).get(pid) or ""
        owner = by_pid.get(pid) or next((c for cid, c in by_id.items() if cid and cid in text), None)
        if owner is not None:
            continue   # counted with its container
        command = proc.get("command") or "?"
        if command in SERVICE_COMMANDS:
            # A service's helper process (not its MainPID): its unit stops it.
            continue
        foreign.append({"pid": pid, "what": "pid %s (%s) has the driver open" % (pid, command)})
    return {"containers": [_name(c) for c in mine], "services": [u for u in SERVICES if u in services],
            "foreign": foreign}


def decide(target, loaded, modules, module_for_kernel, module_version, held, stuck=()):
    """How the installed driver `target` gets loaded: {"method": none | reload | reboot, "reason"}.

    loaded: the loaded module's version (None: none loaded); modules: the loaded NVIDIA modules
    (kernel_modules.loaded_nvidia); module_for_kernel: the running kernel's modules.dep has an nvidia module;
    module_version: that module's version where modinfo reads it (None: unknown); held: holders()'s result;
    stuck: modules in the kernel's Unloading state."""
    if loaded == target:
        return {"method": "none", "reason": "driver %s is loaded" % target}
    if stuck:
        return {"method": "reboot", "reason": "%s stuck unloading in the kernel: only a reboot clears it"
                % ", ".join(stuck)}
    if not module_for_kernel:
        return {"method": "reboot", "reason": "the running kernel has no nvidia module for driver %s (modules.dep): "
                "the new module is built for another kernel" % target}
    if module_version and module_version != target:
        return {"method": "reboot",
                "reason": "the running kernel's nvidia module is %s, not %s" % (module_version, target)}
    if held["foreign"]:
        return {"method": "reboot", "reason": "held by what gpuhost does not stop: %s"
                % "; ".join(h["what"] for h in held["foreign"])}
    return {"method": "reload", "reason": "%s -> %s: stop %s, unload %s, load %s" % (
        loaded or "none", target, ", ".join(held["containers"] + held["services"]) or "nothing",
        ", ".join(unload_order(modules)), target)}


# What a boot loads where the kernel does not say which are loaded (no /sys/module/<name>, no /proc/modules):
# `modprobe -r` skips a module that is not loaded without a word (kmod 29-34), so asking for all four is safe.
BOOT_MODULES = ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")


def unload_order(modules):
    """The loaded NVIDIA modules in the order `modprobe -r` takes them (dependents first); the boot's four where
    none is known."""
    return [name for name in NVIDIA_MODULES if name in (modules or BOOT_MODULES)]


def load_order(modules):
    """The modules to load again, nvidia first (each `modprobe` loads what it depends on)."""
    return [name for name in reversed(NVIDIA_MODULES) if name in (modules or BOOT_MODULES)]


def service_start_order(units):
    return [u for u in SERVICES if u in (units or [])]
