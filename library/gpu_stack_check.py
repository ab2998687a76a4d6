#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_stack_check
short_description: Diagnose a GPU serving host layer by layer and name the first broken layer
description:
  - Checks, bottom up, every layer a container needs to reach an NVIDIA GPU and returns, per check, a
    status (C(ok), C(warn), C(fail), C(skipped)), the evidence (the command run and the output lines
    that decided) and a remedy.
  - "Layers and their checks: C(driver) (GPU on the PCI bus, kernel module and its version, device nodes
    C(/dev/nvidia0..N) c 195 N, C(/dev/nvidiactl) c 195 255, C(/dev/nvidia-uvm), NVML works and the
    userspace library matches the kernel module); C(persistence) (persistence mode on every GPU);
    C(docker) (the daemon answers C(docker info)); C(toolkit) (toolkit packages, C(nvidia-ctk),
    the runtime hook); C(runtime_config) (the nvidia runtime registered with the running docker);
    C(cdi) (the spec is present, a CDI spec, fresh for the loaded driver, not shadowed by
    C(/var/run/cdi), its cdiVersion one the engine reads, else 'spec version too new for <engine> <version>',
    C(nvidia-ctk cdi list) resolves C(nvidia.com/gpu=all)); C(container) (a C(--rm)
    container started with C(--gpus all), and with C(--device nvidia.com/gpu=all) where the engine
    supports CDI, lists the host's GPUs; NVIDIA's vectorAdd CUDA sample runs in a C(--gpus all) container;
    C(dcgm) (where DCGM is installed or gpuhost_dcgm asks for it: DCGM 4, its host engine running, the diagnostic's
    plugins for the driver's CUDA major); C(nvidia-smi -L) inside every running serving container, label C(gpuhost.layer=vllm), lists its GPUs - a
    container whose NVML says Unknown Error lost its devices to a systemd reload - and no serving container,
    running or restarting, is given a MIG-enabled GPU whole (its C(nvidia-smi -L), and C(docker inspect)'s
    device requests)); C(runtime_config) also
    warns when an NVIDIA device node has no C(/dev/char) link (what such a reload needs);
    C(health) (GPU memory held by pids that do not exist,
    active throttle reasons other than C(gpu_idle), Xid errors in the kernel log since boot)."
  - "Every layer that owns something on the host (the registry's C(owns)) is checked first by its generic
    C(<layer>_basics) check: its packages installed (a held package counts), none left half done by dpkg
    (C(iU), C(iF)), package sets at one version; its config files parse (C(daemon.json), the runtime's
    C(config.toml), the CDI spec); free space where it writes (docker's data-root and C(/var/lib/gpuhost), and
    C(no space left on device) in the engine's own failure); the users its units run as exist; its units not
    masked, failed or restarting in a loop, with the journal's reason (C(journalctl -u UNIT -b -n 20)). A
    generic cause is so named on its own layer, before that layer's checks see the symptom."
  - The first layer, in that order, with a failing check is returned as RV(failed_layer) and in
    RV(message), with its remedy.
  - Never fails the task because the host is broken (the diagnosis is the result), unless
    O(fail_on_required) is set.
  - Read-only. It writes no file and restarts nothing. The one side effect is the container check -
    C(docker run --rm --pull never --network none IMAGE nvidia-smi -L), then NVIDIA's CUDA sample
    (O(cuda_probe_image), C(/cuda-samples/vectorAdd)) the same way - which create containers that
    docker removes when they exit, pull nothing and change nothing on the host; O(container_check)
    turns them off. With O(training), one more such container reads the limits it gets
    (C(--entrypoint cat IMAGE /proc/self/limits)).
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  required_layers:
    description:
      - Layers whose failure counts. A failing check in another layer is reported as C(warn).
      - Default is every layer but C(health).
    type: list
    elements: str
    choices: [hardware, driver, fabric, persistence, dcgm, docker, toolkit, runtime_config, cdi, container, serving, health]
    default: [hardware, driver, fabric, persistence, docker, toolkit, runtime_config, cdi, container]
  not_required:
    description:
      - Layers taken out of O(required_layers), for a play that does not manage them (C(gpu_validate) passes
        C(persistence) where the play does not run the C(nvidia_persistence) role).
    type: list
    elements: str
    choices: [hardware, driver, fabric, persistence, dcgm, docker, toolkit, runtime_config, cdi, container, serving, health]
    default: []
  fail_on_required:
    description: Fail the task (with the whole diagnosis in the result) when a required layer fails.
    type: bool
    default: false
  check_image:
    description:
      - Image of the container check. It must already be on the host (the check does not pull) and
        carry what the host's C(nvidia-smi), injected by the toolkit, needs (glibc); a CUDA base image.
    type: str
    default: nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04
  cuda_probe_image:
    description:
      - Image of the CUDA probe (check C(container_cuda)), run with C(--gpus all) after the container check
        passed. C(nvidia-smi) needs no CUDA; only a CUDA program proves that CUDA initialises in a container
        (C(/dev/nvidia-uvm), the driver's CUDA against the image's). Must be on the host (not pulled); an
        absent image is a warning. An empty string turns the probe off.
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
  cuda_probe_command:
    description: The probe's command in that image; it must print C(Test PASSED) and exit 0.
    type: list
    elements: str
    default: [/cuda-samples/vectorAdd]
  container_check:
    description: Run the container checks (a C(--rm) container each).
    type: bool
    default: true
  cdi_container_check:
    description:
      - The C(--device nvidia.com/gpu=all) container. C(auto) runs it where the engine resolves CDI
        names (Docker 25+ with C(features.cdi), default on from 28).
    type: str
    choices: [auto, always, never]
    default: auto
  compare_record:
    description:
      - Compare the host with gpuhost's record too (what site.yml converged it to), as M(gpuhost_drift) does, in
        the same call (drift.yml's check). The result's RV(drift). A record that is not JSON fails the task,
        naming the fix; a host without one has nothing recorded to drift from.
    type: bool
    default: false
  allow_reboot:
    description:
      - With I(compare_record), whether a pending reboot may be repaired (C(nvidia_driver_reboot=auto)).
      - The Xid check's plans say whether a GPU that needs a host restart (Xid 79) or whose reset fails gets one.
    type: bool
    default: false
  xid_state_path:
    description:
      - What drift did about the Xids so far (its cursor per GPU) and the GPUs it took out of service this boot
        (M(nvidia_xid_recovery) writes it). The C(xid) check counts only the Xids after the cursor, each with
        what drift does about it (RV(checks) data C(plans)), and fails for a GPU out of service.
    type: path
    default: /var/lib/gpuhost/xid-state.json
  record_path:
    description: gpuhost's record (the serving containers it deployed; with I(compare_record), the driver too).
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
  gpus_path_container:
    description:
      - Run a second C(--gpus all) container (its process environment) to see which path C(--gpus) took (the
        legacy hook or CDI). false predicts the path from C(docker info) and C(PATH) instead, one container
        fewer (site.yml's fast path, which needs no path).
    type: bool
    default: true
  dcgm_expected:
    description:
      - DCGM is asked for on this host (gpuhost_dcgm), so the C(dcgm) layer fails where DCGM 4 is not installed.
        False, a host without DCGM skips the layer and the GPU diagnostic.
    type: bool
    default: false
  dcgm_diag_level:
    description:
      - "The level of C(dcgmi diag -r N -j) the health layer's C(dcgm_diag) check runs where DCGM runs: 1 (software
        checks, seconds), 2 (adds memory and PCIe, minutes), 3 or 4 (stress, 15 minutes and more). A test that fails
        fails the health layer naming the GPU, the test and DCGM's message. 0, no diagnostic."
    type: int
    default: 1
    choices: [0, 1, 2, 3, 4]
  training:
    description:
      - "The host is declared for training (gpuhost_training): the C(container_limits) check (docker layer) runs one
        more C(--rm) container and fails unless it gets seed 000's training limits: memlock unlimited and a stack
        of at least 64 MiB (C(--ulimit memlock=-1 --ulimit stack=67108864)). NCCL and data loaders pin host
        memory; docker's default memlock is 64 KiB or 8 MiB. The evidence says whether daemon.json sets
        C(default-ulimits). False, the check is skipped."
    type: bool
    default: false
  kernel_log_command:
    description:
      - "Command whose output is the kernel log since boot, searched for C(NVRM: Xid) lines. A string
        is split like a shell would (no shell runs), or give a list."
      - C(journalctl -k -b --no-pager) where C(dmesg) is restricted.
    type: raw
    default: dmesg
  cdi_spec_path:
    description: The managed CDI spec.
    type: path
    default: /etc/cdi/nvidia.yaml
  toolkit_packages:
    description: Packages that make up the NVIDIA Container Toolkit (checked with C(dpkg-query)).
    type: list
    elements: str
    default: [nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools, libnvidia-container1]
  docker_config:
    description: docker's daemon.json (read to tell "not configured" from "configured, docker not restarted").
    type: path
    default: /etc/docker/daemon.json
  benign_clock_reasons:
    description: Clocks event reasons that are not throttling.
    type: list
    elements: str
    default: [gpu_idle]
  nvidia_smi_path:
    description: Path of nvidia-smi; looked up on C(PATH) when not given.
    type: path
  proc_version_path:
    description: File naming the loaded kernel module.
    type: path
    default: /proc/driver/nvidia/version
  container_engine:
    description:
      - The engine whose containers the host serves. C(docker) checks docker (C(docker info), C(--gpus all)).
        C(containerd) checks a Kubernetes node's containerd - the server answers C(ctr version), the nvidia
        runtime is in C(containerd config dump) (config.toml and its imports merged) with its binary present,
        and a C(ctr run --rm) container through that binary lists the GPUs (what a RuntimeClass C(nvidia) pod
        runs); the layer C(docker) is then the containerd engine.
      - C(auto) takes docker where its CLI is installed, else containerd where C(ctr) is.
    type: str
    choices: [auto, docker, containerd]
    default: auto
  containerd_namespace:
    description:
      - containerd namespace of the check images (C(ctr -n)); Kubernetes keeps its images in C(k8s.io).
    type: str
    default: default
  mig_layout:
    description:
      - The declared MIG layout (the nvidia_mig role's nvidia_mig_layout, GPU index to profile names or V(disabled)).
        The C(mig_layout) check (persistence layer) fails where a GPU's MIG mode or GPU instances
        (C(nvidia-smi mig -lgi)) differ from it, as after a reboot whose boot unit did not re-apply it. Unset or
        empty, the check is skipped.
    type: dict
  timeout:
    description:
      - Seconds each command may run (coreutils C(timeout) when installed). A container that outlives it
        is left to docker, which removes it when it exits.
    type: int
    default: 120
notes:
  - Supports check mode; it runs the same read-only checks (the container check included) in check mode.
  - Run it as root (C(become)) - C(docker) and C(dmesg) need it.
  - "Xid meanings follow NVIDIA's Xid catalogue: U(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)."
seealso:
  - module: nvidia_gpu_facts
"""

EXAMPLES = r"""
- name: Diagnose the host
  gpu_stack_check:
  register: diagnosis

- name: Say which layer broke
  ansible.builtin.debug:
    msg: "{{ diagnosis.message }}"
  when: diagnosis.failed_layer

- name: Fail unless driver, docker and toolkit work; the simulated kernel log; no CDI
  gpu_stack_check:
    required_layers: [driver, docker, toolkit, runtime_config, container]
    fail_on_required: true
    check_image: local/gpuhost-cuda-check:1
    kernel_log_command: journalctl -k -b --no-pager
"""

RETURN = r"""
ok:
  description: No required layer failed.
  returned: always
  type: bool
  sample: false
failed_layer:
  description: The first required layer (bottom up) with a failing check; null when none.
  returned: always
  type: str
  sample: runtime_config
message:
  description: The first failure with its remedy, or what works and what warns.
  returned: always
  type: str
  sample: >-
    toolkit configuration: nvidia runtime not registered with docker — run
    `nvidia-ctk runtime configure --runtime=docker` and restart docker
remedy:
  description: Remedy of the first failure; null when none.
  returned: always
  type: str
layers:
  description: Per layer C(status), C(required), C(title), C(checks) (names), C(summary), C(remedy).
  returned: always
  type: dict
checks:
  description:
    - Every check in order, each with C(name), C(layer), C(status), C(required), C(summary), C(remedy),
      C(evidence) (C(command), C(rc), C(lines)) and C(data).
    - "Names: hardware, pci, kernel_module, module_signature, next_boot, device_nodes, nvml, fabric, persistence, dcgm, docker (containerd on a
      containerd engine), container_limits, toolkit, runtime, dev_char, cdi_spec,
      cdi_list, container_gpus, gpus_path, container_cdi, container_cuda, serving_gpus, serving_running, zombies,
      throttle, xid, compute_mode, dcgm_diag (the health layer's C(dcgmi diag -r N -j), see O(dcgm_diag_level))."
  returned: always
  type: list
  elements: dict
counts:
  description: Number of checks per status.
  returned: always
  type: dict
  sample: {ok: 12, warn: 1, fail: 1, skipped: 1}
required_layers:
  description: The layers that counted.
  returned: always
  type: list
  elements: str
driver_version:
  description: Loaded kernel module version (else the userspace one); null without a driver.
  returned: always
  type: str
  sample: 580.95.05
gpu_count:
  description: GPUs nvidia-smi lists.
  returned: always
  type: int
gpu_state:
  description: The nvidia_gpu_facts state (C(ok), C(no_gpu), C(no_driver), C(driver_not_loaded), C(version_mismatch), C(error)).
  returned: always
  type: str
gpus:
  description: C(index), C(name), C(uuid) of each GPU.
  returned: always
  type: list
  elements: dict
hardware:
  description:
    - Each GPU on the bus - C(index) (PCI order where nvidia-smi cannot tell), C(bus_id), C(uuid) (null
      when nvidia-smi cannot see it), C(name), C(xids), C(mig_mode) and C(state) (C(healthy), C(lost),
      C(faulty) - a hardware Xid -, C(mig)).
  returned: always
  type: list
  elements: dict
docker_version:
  description: Server version of the running docker; null when it does not answer or the engine is containerd.
  returned: always
  type: str
container_engine:
  description: The engine checked (C(docker), C(containerd)).
  returned: always
  type: str
  sample: docker
engine_version:
  description: Server version of that engine; null when it does not answer.
  returned: always
  type: str
toolkit_version:
  description: C(nvidia-ctk --version); null when absent.
  returned: always
  type: str
cdi_devices:
  description: Device names C(nvidia-ctk cdi list) resolves.
  returned: always
  type: list
  elements: str
gpus_path:
  description:
    - Which way docker's C(--gpus) reached the GPUs - C(path) (C(legacy), the nvidia-container-runtime-hook;
      C(cdi), docker 29.2+ with nvidia-cdi-hook, or the nvidia runtime in cdi/jit-cdi mode; C(unknown)),
      C(reason) (what decided it) and C(predicted) (what docker info and PATH predict; it differs after a
      fallback from CDI to the hook).
    - Read from the C(--gpus all) check container's process environment (NVIDIA_VISIBLE_DEVICES=void on the
      CDI path), else a failed run's error text; null when docker does not run or the engine is containerd.
  returned: always
  type: dict
  sample: {path: legacy, predicted: legacy, reason: "NVIDIA_VISIBLE_DEVICES=all: ..."}
drift:
  description:
    - With I(compare_record), M(gpuhost_drift)'s result (C(layers), C(drifted), C(repairable), C(repair_roles),
      C(manual), C(recorded_driver_version), C(loaded_driver_version)) for this host's live stack.
  returned: when compare_record
  type: dict
images:
  description:
    - The check image's, the CUDA probe's and each serving container's CUDA requirement judged against the
      driver and the host's GPUs (cuda_image_check's result for each image the host has, in that order, with
      C(summary)); empty when the container check is off or docker is not running.
    - C(verdict) C(refused) is an image the driver cannot run (CUDA error 804 on a GeForce through forward
      compatibility, or the toolkit's "unsatisfied condition"); C(forward_compat), C(unknown), C(skipped) warn.
  returned: always
  type: list
  elements: dict
  sample: [{image: "local/gpuhost-cuda-check:1", verdict: ok, image_cuda: "12.8", driver_cuda: "13.0",
            message: "local/gpuhost-cuda-check:1 needs CUDA 12.8; ...", summary: "..."}]
xids:
  description: Xid codes seen since boot, each with C(code), C(count), C(gpus), C(description), C(cause), C(action).
  returned: always
  type: list
  elements: dict
"""


import os

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.host.runner import module_host_io
from ansible.module_utils.layers.stack_check import (
    DEFAULT_CHECK_IMAGE, DEFAULT_CUDA_PROBE_COMMAND, DEFAULT_CUDA_PROBE_IMAGE, DEFAULT_REQUIRED_LAYERS,
    DEFAULT_TOOLKIT_PACKAGES, LAYERS, capture, evaluate,
    kernel_log_argv)

ARGUMENT_SPEC = dict(
    required_layers=dict(type="list", elements="str", choices=list(LAYERS), default=list(DEFAULT_REQUIRED_LAYERS)),
    not_required=dict(type="list", elements="str", choices=list(LAYERS), default=[]),
    fail_on_required=dict(type="bool", default=False),
    check_image=dict(type="str", default=DEFAULT_CHECK_IMAGE),
    cuda_probe_image=dict(type="str", default=DEFAULT_CUDA_PROBE_IMAGE),
    cuda_probe_command=dict(type="list", elements="str", default=list(DEFAULT_CUDA_PROBE_COMMAND)),
    container_check=dict(type="bool", default=True),
    cdi_container_check=dict(type="str", choices=["auto", "always", "never"], default="auto"),
    gpus_path_container=dict(type="bool", default=True),
    compare_record=dict(type="bool", default=False),
    allow_reboot=dict(type="bool", default=False),
    record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
    xid_state_path=dict(type="path", default="/var/lib/gpuhost/xid-state.json"),
    training=dict(type="bool", default=False),
    dcgm_expected=dict(type="bool", default=False),
    dcgm_diag_level=dict(type="int", default=1, choices=[0, 1, 2, 3, 4]),
    kernel_log_command=dict(type="raw", default="dmesg"),
    cdi_spec_path=dict(type="path", default="/etc/cdi/nvidia.yaml"),
    toolkit_packages=dict(type="list", elements="str", default=list(DEFAULT_TOOLKIT_PACKAGES)),
    docker_config=dict(type="path", default="/etc/docker/daemon.json"),
    benign_clock_reasons=dict(type="list", elements="str", default=["gpu_idle"]),
    nvidia_smi_path=dict(type="path"),
    proc_version_path=dict(type="path", default="/proc/driver/nvidia/version"),
    container_engine=dict(type="str", choices=["auto", "docker", "containerd"], default="auto"),
    containerd_namespace=dict(type="str", default="default"),
    timeout=dict(type="int", default=120),
    mig_layout=dict(type="dict"),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    argv = kernel_log_argv(params["kernel_log_command"])
    if not argv:
        module.fail_json(msg="kernel_log_command is empty")
    options = {
        "required_layers": [l for l in params["required_layers"] if l not in params["not_required"]],
        "check_image": params["check_image"],
        "cuda_probe_image": params["cuda_probe_image"],
        "cuda_probe_command": params["cuda_probe_command"],
        "container_check": params["container_check"],
        "cdi_container_check": params["cdi_container_check"],
        "gpus_path_container": params["gpus_path_container"],
        "compare_record": params["compare_record"],
        "allow_reboot": params["allow_reboot"],
        "record_path": params["record_path"],
        "xid_state_path": params["xid_state_path"],
        "training": params["training"],
        "dcgm_expected": params["dcgm_expected"],
        "dcgm_diag_level": params["dcgm_diag_level"],
        "kernel_log_command": argv,
        "kernel_log_command_text": " ".join(argv),
        "cdi_spec_path": params["cdi_spec_path"],
        "toolkit_packages": params["toolkit_packages"],
        "docker_config": params["docker_config"],
        "benign_clock_reasons": params["benign_clock_reasons"],
        "nvidia_smi_path": params["nvidia_smi_path"],
        "proc_version_path": params["proc_version_path"],
        "container_engine": params["container_engine"],
        "containerd_namespace": params["containerd_namespace"],
        "mig_layout": params["mig_layout"],
    }
    io = module_host_io(module)
    io.statvfs = os.statvfs   # free space where the layers write (the docker layer's data-root), read-only
    diagnosis = evaluate(capture(io, options), options)
    if (diagnosis.get("drift") or {}).get("error"):
        module.fail_json(msg=diagnosis["drift"]["error"], changed=False, **dict((k, v) for k, v in diagnosis.items()
                                                                                if k != "drift"))
    if params["fail_on_required"] and diagnosis["failed_layer"]:
        module.fail_json(msg=diagnosis["message"], changed=False, **dict((k, v) for k, v in diagnosis.items()
                                                                         if k != "message"))
    module.exit_json(changed=False, **diagnosis)


if __name__ == "__main__":
    main()
