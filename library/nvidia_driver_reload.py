#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_reload
short_description: Load an installed NVIDIA driver without a reboot, or say why the host must reboot
description:
  - After a driver package change the old kernel module stays loaded (nvidia-smi says Driver/library version
    mismatch) until it is unloaded. Where the running kernel has the new module and nothing but gpuhost's serving
    containers and the NVIDIA services hold the driver, this module stops them (each container with its stop
    timeout), unloads the NVIDIA modules dependents first (C(modprobe -r nvidia_drm nvidia_modeset nvidia_uvm ...
    nvidia), as NVIDIA's driver container does), loads them again, checks the loaded version and C(nvidia-smi),
    and starts the services again (the fabric manager first). The serving containers are left for the caller to
    start once the runtime and CDI follow the new driver (the role's handler chain).
  - "Who holds the driver is read from C(docker inspect) of the running containers, C(fuser -v /dev/nvidia*) where
    psmisc is installed, and nvidia-smi's compute apps. A holder gpuhost does not own (another tenant's container
    or process, an X server) is never stopped - the result asks for a reboot and names it. So does a module that
    will not unload (C(modprobe: FATAL: Module nvidia is in use.)), a running kernel without the new module, or a
    module stuck unloading."
  - Writes the upgrade's state to O(state_path) as it goes (planned, draining, reloading, verified, or failed and
    rebooted by the role), so a half-done upgrade is visible (diagnose) and the next run resumes it.
  - In check mode it predicts reload or reboot and changes nothing.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  version:
    description: The installed driver's version, the one to load (e.g. C(580.105.08)).
    type: str
    required: true
  stop_timeout:
    description: Seconds each serving container gets to stop (C(docker stop -t)).
    type: int
    default: 60
  state_path:
    description: The driver upgrade's state (JSON), written atomically with a backup.
    type: path
    default: /var/lib/gpuhost/driver-upgrade.json
  timeout:
    description: Seconds each command may run (an unload that hangs is not waited for forever).
    type: int
    default: 120
  dcgm_gate_level:
    description:
      - Where DCGM's host engine was one of the stopped holders, run C(dcgmi diag -r LEVEL -j) once it runs again on
        the new driver, before the serving containers come back (2 adds the memory and PCIe tests to level 1's). A
        test that fails stops the run (the containers stay stopped, the upgrade state says failed), naming the GPU,
        the test and DCGM's message. 0, no gate.
    type: int
    default: 0
    choices: [0, 1, 2, 3, 4]
"""

EXAMPLES = r"""
- name: Load the new driver without a reboot where nothing else holds it
  nvidia_driver_reload:
    version: 580.105.08
    stop_timeout: 60
  register: reload
"""

RETURN = r"""
dcgm:
  description: DCGM's gate after the reload (status, summary), or null where it did not run.
  returned: always
  type: dict
method:
  description: C(reload) (done, or predicted under check mode), C(reboot) (the host must reboot, see reason) or C(none).
  returned: always
  type: str
reason:
  description: What was done, or why a reboot is needed (the holder, the module in use).
  returned: always
  type: str
reloaded:
  description: The driver was reloaded by this run.
  returned: always
  type: bool
stopped_containers:
  description: The serving containers stopped for the reload (left stopped for the caller to start).
  returned: always
  type: list
  elements: str
services:
  description: The NVIDIA services stopped and started again.
  returned: always
  type: list
  elements: str
holders:
  description: What held the driver - containers, services and foreign holders (pid or container and what).
  returned: always
  type: dict
steps:
  description: Each command run, with its rc and output.
  returned: always
  type: list
  elements: dict
upgrade_state:
  description: The state written to O(state_path) (state, from, to, method, reason, since).
  returned: always
  type: dict
"""

import json
import platform
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.driver import driver_reload as dr
from ansible.module_utils.driver import kernel_modules as km
from ansible.module_utils.driver.secure_boot import dep_module_path
from ansible.module_utils.gpu.dcgm_diag import FAILED, run_diag, summary
from ansible.module_utils.gpu.dcgm_install import SERVICE as HOSTENGINE_UNIT
from ansible.module_utils.gpu.host_parse import HostParseError, parse_proc_version
from ansible.module_utils.host.runner import ModuleHostIO, step_record
from ansible.module_utils.runs.atomic_file import read_text, write_atomic

PROC_MODULES = "/proc/modules"
PROC_VERSION = "/proc/driver/nvidia/version"


def _loaded_version(io):
    try:
        return parse_proc_version(io.read(PROC_VERSION) or "")["version"]
    except HostParseError:
        return None


def _containers(io, docker):
    if not docker:
        return []
    rc, out, _err = io.run([docker, "ps", "-q", "--no-trunc"])
    ids = [line.strip() for line in (out or "").splitlines() if line.strip()] if rc == 0 else []
    if not ids:
        return []
    rc, out, _err = io.run([docker, "inspect"] + ids)
    try:
        return json.loads(out) if rc == 0 else []
    except ValueError:
        return []


def _processes(io, smi):
    procs = []
    fuser = io.which("fuser")
    if fuser:
        nodes = ["/dev/" + n for n in sorted(io.listdir("/dev") or []) if n.startswith("nvidia")]
        if nodes:
            # fuser writes its table to stderr
            _rc, out, err = io.run([fuser, "-v"] + nodes)
            procs += [{"pid": h["pid"], "command": h["command"]}
                      for h in km.holders_by_pid(km.parse_fuser((out or "") + "\n" + (err or ""))).values()]
    if smi:
        rc, out, _err = io.run([smi, "--query-compute-apps=pid,process_name", "--format=csv,noheader"])
        for line in (out or "").splitlines() if rc == 0 else []:
            pid, _sep, name = line.partition(",")
            if pid.strip().isdigit():
                procs.append({"pid": int(pid.strip()), "command": name.strip().rsplit("/", 1)[-1]})
    return procs


def _service_pids(io, systemctl):
    out = {}
    for unit in dr.SERVICES if systemctl else ():
        rc, text, _err = io.run([systemctl, "show", "-p", "MainPID", "-p", "ActiveState", unit])
        values = dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)
        if values.get("ActiveState") == "active" and values.get("MainPID", "0").isdigit() and int(values["MainPID"]):
            out[int(values["MainPID"])] = unit
    return out


def _active(io, systemctl, unit):
    return (io.run([systemctl, "is-active", unit])[1] or "").strip() == "active"


class Reload(object):
    def __init__(self, module, io):
        self.module, self.io = module, io
        self.steps = []
        self.path = module.params["state_path"]
        self.record = {}

    def run(self, argv, what=None):
        result = self.io.run(argv)
        self.steps.append(step_record(what or " ".join(argv), result))
        return result

    def state(self, name, **more):
        self.record = dict(self.record, state=name, since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **more)
        text = json.dumps(self.record, indent=2, sort_keys=True) + "\n"
        if read_text(self.path) != text:
            write_atomic(self.module, self.path, text, mode=0o644)


def main():
    module = AnsibleModule(argument_spec=dict(
        version=dict(type="str", required=True),
        stop_timeout=dict(type="int", default=60),
        state_path=dict(type="path", default=dr.STATE_PATH),
        timeout=dict(type="int", default=120),
        dcgm_gate_level=dict(type="int", default=0, choices=[0, 1, 2, 3, 4]),
    ), supports_check_mode=True)
    params = module.params
    io = ModuleHostIO(module, timeout=params["timeout"])
    target = params["version"]
    modules = km.parse_proc_modules(io.read(PROC_MODULES))
    # NVIDIA's own scripts read /sys/module/<name>; /proc/modules says the same and the state (Unloading).
    loaded_modules = [m for m in km.NVIDIA_MODULES if io.exists("/sys/module/%s/initstate" % m)] \
        or km.loaded_nvidia(modules)
    loaded = _loaded_version(io)
    release = platform.release()
    dep = io.read("/lib/modules/%s/modules.dep" % release) or ""
    modinfo = io.which("modinfo")
    module_version = None
    if modinfo:
        rc, out, _err = io.run([modinfo, "-k", release, "-F", "version", "nvidia"])
        module_version = (out or "").strip() or None if rc == 0 else None
    docker, systemctl = io.which("docker"), io.which("systemctl")
    smi = io.which("nvidia-smi")
    containers = _containers(io, docker)
    procs = _processes(io, smi if loaded else None)
    cgroups = dict((p["pid"], io.read("/proc/%d/cgroup" % p["pid"])) for p in procs)
    held = dr.holders(containers, procs, _service_pids(io, systemctl), cgroups)
    decision = dr.decide(target, loaded, loaded_modules, bool(dep_module_path(dep)), module_version, held,
                         km.unloading(modules))
    result = dict(method=decision["method"], reason=decision["reason"], reloaded=False, stopped_containers=[],
                  services=[], holders=held, steps=[], upgrade_state={}, changed=False, dcgm=None)
    if decision["method"] != "reload" or module.check_mode:
        result["changed"] = decision["method"] == "reload"
        module.exit_json(**result)

    job = Reload(module, io)
    job.record = {"from": loaded, "to": target, "method": "reload"}
    job.state("draining", containers=held["containers"])
    result["changed"] = True
    stopped = []
    for name in held["containers"]:
        if job.run([docker, "stop", "-t", str(params["stop_timeout"]), name])[0] == 0:
            stopped.append(name)
    units = [u for u in reversed(dr.SERVICES) if _active(io, systemctl, u)] if systemctl else []
    services = []
    for unit in units:
        if job.run([systemctl, "stop", unit])[0] == 0:
            services.append(unit)
    result.update(stopped_containers=stopped, services=dr.service_start_order(services))

    def give_up(reason):
        # The modules could not be swapped: the role reboots (the services come back with the boot).
        job.state("failed", reason=reason)
        result.update(method="reboot", reason=reason, steps=job.steps, upgrade_state=job.record)
        module.exit_json(**result)

    job.state("reloading", containers=stopped, services=services)
    modprobe = io.which("modprobe") or "modprobe"
    unload = dr.unload_order(loaded_modules)
    if unload:
        rc, out, err = job.run([modprobe, "-r"] + unload)
        if rc != 0:
            busy = km.in_use((out or "") + "\n" + (err or ""))
            give_up("modprobe -r %s failed: %s" % (" ".join(unload), "; ".join(
                "module %s is in use" % b["module"] for b in busy) or (err or out or "rc %d" % rc).strip()))
    for name in dr.load_order(loaded_modules):
        rc, out, err = job.run([modprobe, name])
        if rc != 0:
            give_up("modprobe %s failed: %s" % (name, (err or out or "rc %d" % rc).strip()))
    now = _loaded_version(io)
    if now != target:
        give_up("after the reload the kernel runs driver %s, not %s" % (now or "none", target))
    rc, _out, _err = job.run([smi or "nvidia-smi", "-L"])
    if rc != 0:
        give_up("nvidia-smi fails after the reload (rc %d)" % rc)
    for unit in dr.service_start_order(services):
        job.run([systemctl, "start", unit])
    level = params["dcgm_gate_level"]
    argv, output, diag = run_diag(io, level) if level and HOSTENGINE_UNIT in services else (None, None, None)
    if diag:
        said = summary(diag, level)
        job.steps.append({"step": " ".join(argv), "rc": output[0], "output": said})
        result["dcgm"] = {"status": diag["status"], "summary": said}
        if diag["status"] in FAILED:
            job.state("failed", containers=stopped, services=services, reason=said)
            result.update(steps=job.steps, upgrade_state=job.record)
            module.fail_json(msg="driver: %s runs after the reload, but DCGM's gate fails: %s. The serving containers "
                                 "stay stopped (%s): take the GPU out of service or replace it, then start them"
                                 % (target, said, ", ".join(stopped) or "none"), **result)
    job.state("verified", containers=stopped, services=services)
    result.update(reloaded=True, reason=decision["reason"], steps=job.steps, upgrade_state=job.record)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
