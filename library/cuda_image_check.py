#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check an image's CUDA requirement (NVIDIA_REQUIRE_*) against the host driver before it starts."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: cuda_image_check
short_description: Refuse an image built for a newer CUDA than the host driver supports
description:
  - Reads an image's environment (C(docker image inspect) C(Config.Env)) the way NVIDIA's container
    toolkit does (every C(NVIDIA_REQUIRE_*) except C(NVIDIA_REQUIRE_JETPACK*), legacy C(CUDA_VERSION),
    C(NVIDIA_DISABLE_REQUIRE)) and evaluates it against the driver's CUDA version, driver version and
    GPU brands. Space-separated terms are alternatives, comma-separated terms are all required.
  - 'Fails (naming the image layer, both CUDA versions and the fixes) when no alternative holds: the
    toolkit would refuse the container with "unsatisfied condition: cuda>=X", or, where it does not
    check (CDI mode), CUDA would fail at initialisation. Also fails when the image is admitted only
    through CUDA forward compatibility on a GPU that cannot use it (error 804).'
  - Warns, without failing, when the image runs only through forward compatibility on a GPU that may
    be a datacenter part, when the image sets C(NVIDIA_DISABLE_REQUIRE), and when the driver's CUDA
    version is unknown. Read-only.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  env:
    description:
      - The image's environment, a list of C(NAME=value) as C(docker image inspect --format
        '{{json .Config.Env}}') prints it, or a dict.
    type: raw
    required: true
  driver_cuda_version:
    description:
      - The highest CUDA version the driver supports (nvidia-smi's "CUDA Version";
        C(ansible_facts.nvidia.cuda_driver_version) from nvidia_gpu_facts). Empty or null gives
        verdict C(unknown).
    type: str
  driver_version:
    description:
      - The driver version (C(ansible_facts.nvidia.driver_version_userspace)), for C(driver) terms.
        Without it those terms are assumed to hold, as the toolkit does without a driver.
    type: str
  gpus:
    description:
      - The GPUs the container gets, as nvidia_gpu_facts lists them (C(ansible_facts.nvidia.gpus), or the
        entries of the container's GPUs). Their C(product_brand) gives I(gpu_brands) and their
        C(datacenter) gives I(datacenter) (false when any GPU is not a datacenter part, true when all are),
        where those options are not given.
      - An image that runs only through CUDA forward compatibility is then refused on a GeForce or TITAN
        GPU (forward compatibility works only on datacenter GPUs; CUDA fails with error 804) and passes
        with a warning on a datacenter GPU.
    type: list
    elements: dict
  gpu_brands:
    description:
      - nvidia-smi's "Product Brand" of each GPU the container gets (C(GeForce), C(NVIDIA), C(Tesla),
        ...), for C(brand) terms. Without it (and without I(gpus)) they are assumed to hold, as the
        toolkit does without a GPU.
    type: list
    elements: str
  datacenter:
    description:
      - Whether the GPUs are datacenter parts, on which CUDA forward compatibility works. Null is unknown
        (then taken from I(gpus)); GeForce and TITAN brands count as false.
    type: bool
  image:
    description: The image's name, used in messages.
    type: str
    default: image
notes:
  - Supports check mode.
  - The minimum driver per CUDA version comes from the CUDA Toolkit Release Notes, Table 3.
"""

EXAMPLES = r"""
- name: Read the image's configuration
  ansible.builtin.command: docker image inspect {{ item.image }}
  register: vllm_image_inspect
  changed_when: false

- name: The host driver runs the image's CUDA on the host's GPUs
  cuda_image_check:
    env: "{{ (vllm_image_inspect.stdout | from_json)[0].Config.Env }}"
    driver_cuda_version: "{{ ansible_facts.nvidia.cuda_driver_version }}"
    driver_version: "{{ ansible_facts.nvidia.driver_version_userspace }}"
    gpus: "{{ ansible_facts.nvidia.gpus }}"
    image: "{{ item.image }}"
"""

RETURN = r"""
verdict:
  description: >-
    ok (the driver's CUDA is at least the image's), forward_compat (admitted through a brand/driver
    alternative: CUDA runs only through the image's cuda-compat on a datacenter GPU), refused, skipped
    (NVIDIA_DISABLE_REQUIRE), unknown (no driver CUDA version).
  returned: always
  type: str
image_cuda:
  description: The CUDA version the image was built for (major.minor), or null.
  returned: always
  type: str
driver_cuda:
  description: The driver's CUDA version as given.
  returned: always
  type: str
requirements:
  description: The requirement strings the toolkit would check.
  returned: always
  type: list
  elements: str
failed_requirement:
  description: The requirement that failed (variable, requirement, brand), or null.
  returned: always
  type: dict
satisfied_by:
  description: The alternative of each requirement that holds (e.g. cuda>=12.8).
  returned: always
  type: list
  elements: str
gpu_brands:
  description: The GPU brands the requirement was evaluated for (given, or from I(gpus)); null when unknown.
  returned: always
  type: list
  elements: str
datacenter:
  description: Whether the GPUs are datacenter parts (given, or from I(gpus)); null when unknown.
  returned: always
  type: bool
assumed:
  description: Terms that held only because their fact (GPU brand, driver version) was not given.
  returned: always
  type: list
  elements: str
toolkit_error:
  description: What nvidia-container-cli prints for the failed requirement, or null.
  returned: always
  type: str
fixes:
  description: The ways out, most direct first (driver branch, older-CUDA image, forward compatibility).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.containers.cuda_requirement import CudaRequirementError, check, gpu_classes, summary


def main():
    module = AnsibleModule(
        argument_spec=dict(
            env=dict(type="raw", required=True),
            driver_cuda_version=dict(type="str"),
            driver_version=dict(type="str"),
            gpus=dict(type="list", elements="dict"),
            gpu_brands=dict(type="list", elements="str"),
            datacenter=dict(type="bool"),
            image=dict(type="str", default="image"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not isinstance(p["env"], (list, dict)):
        module.fail_json(msg="image layer: env must be the image's Config.Env list (NAME=value) or a dict, "
                             "not %s" % type(p["env"]).__name__)
    try:
        brands, datacenter = gpu_classes(p["gpus"])
        if p["gpu_brands"] is not None:
            brands = p["gpu_brands"]
        if p["datacenter"] is not None:
            datacenter = p["datacenter"]
        result = check(p["env"], p["driver_cuda_version"], driver_version=p["driver_version"],
                       gpu_brands=brands, datacenter=datacenter, image=p["image"])
    except CudaRequirementError as exc:
        module.fail_json(msg="image layer: %s: %s" % (p["image"], exc))
    if result["verdict"] == "refused":
        module.fail_json(msg=summary(result), **result)
    warnings = [result["message"]] if result["verdict"] in ("forward_compat", "skipped", "unknown") else []
    module.exit_json(changed=False, warnings=warnings, **result)


if __name__ == "__main__":
    main()
