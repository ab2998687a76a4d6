#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Gather NVIDIA GPU, driver and GPU process facts
description:
  - Runs C(nvidia-smi -q -x) (falling back to C(--query-gpu) / C(--query-compute-apps) CSV),
    C(lspci -nn -D) (or reads C(/sys/bus/pci/devices) when lspci is absent) and reads
    C(/proc/driver/nvidia/version), and returns them as C(ansible_facts.nvidia).
  - Classifies the host into one I(state) - C(ok), C(no_gpu), C(no_driver), C(driver_not_loaded),
    C(version_mismatch) or C(error) - with a I(message) saying why.
  - Never fails because the GPU layer is broken; it fails only on its own invalid arguments.
    Read-only, so it supports check mode.
version_added: "0.1.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  nvidia_smi_path:
    description:
      - Path to nvidia-smi. Default is the one found on C(PATH).
      - A path that does not exist is reported as a missing nvidia-smi (a host without a driver),
        not as an error.
    type: path
  proc_version_path:
    description:
      - File that names the loaded kernel module (C(NVRM version:) line).
    type: path
    default: /proc/driver/nvidia/version
  timeout:
    description:
      - Seconds each nvidia-smi or lspci call may run (enforced with coreutils C(timeout) when it
        is installed). A hung GPU makes nvidia-smi block; the state is then C(error).
    type: int
    default: 30
  xid_state_path:
    description:
      - Drift's Xid state, written by M(nvidia_xid_recovery). The GPUs it took out of service this boot are returned
        as I(out_of_service), and each GPU's mark as its own I(out_of_service), so nothing new is placed on them.
    type: path
    default: /var/lib/gpuhost/xid-state.json
notes:
  - I(cuda_driver_version) is the highest CUDA version the driver supports, not an installed
    CUDA toolkit.
  - Processes get I(pid_exists) (C(/proc/<pid>) exists on this host) and I(zombie) (the pid does
    not exist, yet holds GPU memory). Inside a container the PID namespace differs.
seealso:
  - name: nvidia-smi documentation
    description: The NVIDIA System Management Interface.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Gather GPU facts
  nvidia_gpu_facts:

- name: Stop when the driver is not usable
  ansible.builtin.assert:
    that: ansible_facts.nvidia.state == 'ok'
    fail_msg: "{{ ansible_facts.nvidia.state }}: {{ ansible_facts.nvidia.message }}"

- name: Use a non-standard nvidia-smi with a short timeout
  nvidia_gpu_facts:
    nvidia_smi_path: /usr/local/nvidia/bin/nvidia-smi
    timeout: 10

- name: Show each GPU's memory
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} {{ item.name }}: {{ item.memory_used_mib }}/{{ item.memory_total_mib }} MiB"
  loop: "{{ ansible_facts.nvidia.gpus }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(nvidia).
  returned: always
  type: complex
  contains:
    nvidia:
      description: GPU, driver and process facts.
      returned: always
      type: complex
      contains:
        state:
          description: One of C(ok), C(no_gpu), C(no_driver), C(driver_not_loaded), C(version_mismatch), C(error).
          type: str
          sample: ok
        message:
          description: Why the host is in this state.
          type: str
          sample: 1 GPU(s) visible to nvidia-smi
        driver_version_kernel:
          description: Version of the loaded kernel module (from the proc file); null when none is loaded.
          type: str
          sample: 590.44.01
        driver_version_userspace:
          description: Userspace driver (NVML) version from nvidia-smi; on a mismatch the C(NVML library version).
          type: str
          sample: 590.44.01
        driver_branch:
          description: Driver branch (major version) of the kernel module, else of userspace.
          type: int
          sample: 590
        cuda_driver_version:
          description: Highest CUDA version the driver supports (not an installed toolkit).
          type: str
          sample: "13.1"
        gpu_count:
          description: Number of GPUs nvidia-smi lists.
          type: int
          sample: 1
        gpus:
          description:
            - One entry per GPU with C(index), C(name), C(product_brand) (nvidia-smi's "Product Brand", e.g.
              C(GeForce), C(NVIDIA), C(Tesla); null in the CSV form), C(datacenter) (true for a datacenter part,
              false for a GeForce or TITAN card, null when not known, e.g. a workstation card; CUDA forward
              compatibility works only on datacenter GPUs), C(uuid), C(pci_bus_id), C(pci_address),
              C(pci_device_id) (C(0x2bb4)), C(pci_vendor_id), C(pci_id) (C(10de:2bb4)), C(minor_number),
              C(architecture), C(compute_capability), C(min_driver_branch),
              C(open_kernel_modules_required), C(memory_total_mib), C(memory_used_mib), C(memory_free_mib),
              C(memory_reserved_mib), C(persistence_mode) (true/false/null), C(driver_model), C(compute_mode),
              C(mig_mode) (true/false/null), C(mig_mode_pending) (true/false/null, the mode after the next
              GPU reset or reboot), C(mig_devices), C(utilization_gpu), C(utilization_memory),
              C(power_draw_w), C(power_limit_w), C(temperature_c), C(fan_speed_pct), C(performance_state),
              C(clocks_event_reasons_active) (list of names such as C(sw_power_cap); null when not reported).
            - Empty unless I(state) is C(ok).
          type: list
          elements: dict
        processes:
          description:
            - GPU processes with C(pid), C(name), C(used_mib), C(type), C(gpu_index), C(pci_bus_id),
              C(gpu_uuid), C(gpu_instance_id), C(compute_instance_id), C(pid_exists), C(zombie).
          type: list
          elements: dict
        pci_devices:
          description: NVIDIA GPU functions on the PCI bus (vendor 10de, class 0300/0302/0380), with architecture facts.
          type: list
          elements: dict
        pci_source:
          description: Where I(pci_devices) came from, C(lspci) or C(sysfs); null when the bus could not be read.
          type: str
        kernel_modules:
          description: The loaded kernel module, C(loaded), C(flavor) (C(open)/C(proprietary)), C(version), C(arch), C(nvrm_line).
          type: dict
        nvidia_smi_path:
          description: The nvidia-smi used; null when none was found.
          type: str
        nvidia_smi_form:
          description: Which nvidia-smi output the facts came from (C(xml), C(csv_query_gpu), C(error)).
          type: str
        nvswitches:
          description: PCI addresses of the NVSwitch functions on the bus (HGX boards; 10de:1af1, 10de:22a3).
          type: list
          elements: str
        fabric:
          description:
            - C(need) - what the host's NVLink fabric needs - V(fabric_manager) (NVSwitches on the PCI bus, HGX
              A100/H100/H200), V(fabric_manager+nvlsm) (HGX B200/B300/B100, NVLink 5 - the fabric manager with NVLSM),
              V(imex) (a GB200/GB300 NVL compute tray, or a Fabric block naming a clique - the IMEX service, no fabric
              manager) or V(none); C(needed) (a fabric manager is needed), C(reason) (in words), C(services) (the
              units to run - C(nvidia-fabricmanager) or C(nvidia-imex)).
            - C(state) (C(ready), C(not_ready), C(failed), C(unhealthy), C(not_applicable), C(unknown)), C(message),
              C(fix), and C(gpus) (each GPU's C(pci_bus_id), C(state), C(status), C(clique_id), C(cluster_uuid),
              C(health_summary) from C(nvidia-smi -q -x)).
          type: dict
        topology:
          description:
            - C(nvidia-smi topo -m) as C(devices), C(gpus), C(links) (device to device to cell such as C(NV18),
              C(PIX), C(SYS)), C(cpu_affinity), C(numa_affinity), C(gpu_numa_id); null where it did not answer.
          type: dict
        warnings:
          description: Things worth a look that do not change the state.
          type: list
          elements: str
        out_of_service:
          description:
            - The GPUs drift took out of service this boot (index, bus_id, uuid, since, xids, reason); each GPU of
              I(gpus) that is out of service carries its own mark as I(out_of_service).
          type: list
          elements: dict
"""


from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpu.gpu_facts import error_facts, gather
from ansible.module_utils.gpu.xid_policy import BOOT_ID_PATH, STATE_PATH, with_out_of_service
from ansible.module_utils.host.runner import module_host_io

ARGUMENT_SPEC = dict(
    nvidia_smi_path=dict(type="path"),
    proc_version_path=dict(type="path", default="/proc/driver/nvidia/version"),
    timeout=dict(type="int", default=30),
    xid_state_path=dict(type="path", default=STATE_PATH),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    io = module_host_io(module)
    try:
        facts = gather(io, module.params["nvidia_smi_path"], module.params["proc_version_path"])
    except Exception as exc:  # a bug here must not fail the play; report it as the state
        facts = error_facts("nvidia_gpu_facts internal error: %s: %s" % (type(exc).__name__, exc))
    path = module.params["xid_state_path"]
    facts = with_out_of_service(facts, io.read(path), (io.read(BOOT_ID_PATH) or "").strip(), path)
    module.exit_json(changed=False, ansible_facts={"nvidia": facts})


if __name__ == "__main__":
    main()
