#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_dcgm_plan
short_description: Plan DCGM 4 on a GPU host, its packages, version, the CUDA repository and its apt pin
description:
  - Finds NVIDIA's CUDA repository for the host's release (as the nvidia_driver role does), the CUDA major of DCGM's
    diagnostic plugins (the one the driver reports, 12 for Maxwell, Pascal and Volta GPUs, which CUDA 13 dropped),
    and what apt is to do. C(datacenter-gpu-manager-4-core) and C(datacenter-gpu-manager-4-cuda<N>) at one version
    (O(version), else the installed one, else the repository's newest), DCGM 3's C(datacenter-gpu-manager) and other
    majors' plugins to remove.
  - Where the driver is not NVIDIA's own (no C(nvidia-driver-pinning-*) package), the pin file's text that keeps apt
    from taking a driver, fabric manager or toolkit package from the CUDA repository.
  - Read-only; it runs the same in check mode.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  distribution:
    description: The host's distribution (ansible_facts.distribution).
    type: str
    required: true
  distribution_version:
    description: Its version (ansible_facts.distribution_version).
    type: str
    required: true
  architecture:
    description: The machine (ansible_facts.architecture).
    type: str
    required: true
  cuda_repo_base_url:
    description: Where NVIDIA's CUDA repositories are (one directory per release under it).
    type: str
    default: https://developer.download.nvidia.com/compute/cuda/repos
  cuda_repo_url:
    description: The CUDA repository's URL; empty, NVIDIA's for the host's release.
    type: str
    default: ""
  cuda_repo_distro:
    description: The CUDA repository's release name (ubuntu2404, debian12) where the host's differs.
    type: str
    default: ""
  version:
    description: The DCGM 4 release to install (C(4.5.2)); empty keeps the installed one, or takes the newest.
    type: str
    default: ""
  cuda_major:
    description: The CUDA major of the diagnostic's plugins; empty, the driver's.
    type: str
    default: ""
  refresh_index:
    description: Read the repository's versions (C(apt-cache madison)); false where the source is still to be added.
    type: bool
    default: true
  timeout:
    description: Seconds each command may run.
    type: int
    default: 120
"""

EXAMPLES = r"""
- name: Plan DCGM
  nvidia_dcgm_plan:
    distribution: "{{ ansible_facts['distribution'] }}"
    distribution_version: "{{ ansible_facts['distribution_version'] }}"
    architecture: "{{ ansible_facts['architecture'] }}"
  register: nvidia_dcgm_plan
"""

RETURN = r"""
repository:
  description: The CUDA repository (url, family, key_url, fingerprint); null where NVIDIA has none for the release.
  returned: always
  type: dict
cuda_major:
  description: The CUDA major of the diagnostic's plugins, and why (cuda_reason).
  returned: always
  type: int
cuda_reason:
  description: Why that major.
  returned: always
  type: str
packages:
  description: The DCGM packages this host gets.
  returned: always
  type: list
  elements: str
install:
  description: The name=version specs apt is to install (empty where they are installed).
  returned: always
  type: list
  elements: str
remove:
  description: DCGM 3 and other majors' plugins to remove.
  returned: always
  type: list
  elements: str
version:
  description: The DCGM release (upstream version) after the plan.
  returned: always
  type: str
pin:
  description: The apt pin file's text, or null where the driver is NVIDIA's own (its pinning package governs).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.driver import cuda_repo
from ansible.module_utils.gpu.dcgm_install import CORE, CUDA_PACKAGE, DcgmPlanError, cuda_major, pin_text, plan
from ansible.module_utils.gpu.gpu_facts import build_facts, capture as capture_gpu
from ansible.module_utils.host import dpkg
from ansible.module_utils.host.runner import module_host_io
from ansible.module_utils.layers.base import DEFAULT_PROC_VERSION


def main():
    module = AnsibleModule(argument_spec=dict(
        distribution=dict(type="str", required=True),
        distribution_version=dict(type="str", required=True),
        architecture=dict(type="str", required=True),
        cuda_repo_base_url=dict(type="str", default=cuda_repo.DEFAULT_BASE_URL),
        cuda_repo_url=dict(type="str", default=""),
        cuda_repo_distro=dict(type="str", default=""),
        version=dict(type="str", default=""),
        cuda_major=dict(type="str", default=""),
        refresh_index=dict(type="bool", default=True),
        timeout=dict(type="int", default=120),
    ), supports_check_mode=True)
    params = module.params
    io = module_host_io(module)
    try:
        repository = cuda_repo.repository(params["distribution"], params["distribution_version"],
                                          params["architecture"], base_url=params["cuda_repo_base_url"],
                                          distro=params["cuda_repo_distro"] or None)
    except cuda_repo.CudaRepoError as exc:
        module.fail_json(msg="dcgm: %s (for DCGM: nvidia_dcgm_cuda_repo_distro)" % exc)
    if params["cuda_repo_url"]:
        # The repository elsewhere (a mirror): its key beside it, under NVIDIA's file name.
        url = params["cuda_repo_url"].rstrip("/") + "/"
        repository = dict(repository, url=url, key_url=url + repository["key_file"])
    facts = build_facts(capture_gpu(io, None, DEFAULT_PROC_VERSION))
    try:
        major, why = cuda_major(facts.get("cuda_driver_version"), [g.get("architecture") for g in facts["gpus"]],
                                params["cuda_major"])
    except DcgmPlanError as exc:
        module.fail_json(msg="dcgm: %s" % exc)
    packages_text = io.run(dpkg.query_argv(io.which("dpkg-query") or "dpkg-query"))[1]
    madison = ""
    if params["refresh_index"]:
        madison = io.run([io.which("apt-cache") or "apt-cache", "madison", CORE, CUDA_PACKAGE % major])[1]
    try:
        found = plan(packages_text, madison, major, params["version"] or None)
    except DcgmPlanError as exc:
        if params["refresh_index"]:
            module.fail_json(msg="dcgm: %s" % exc)
        # --check before the source exists: say what would come, from the names alone.
        found = {"packages": [CORE, CUDA_PACKAGE % major], "install": [CORE, CUDA_PACKAGE % major], "remove": [],
                 "version": params["version"] or None, "driver_from_cuda_repo": False}
    module.exit_json(changed=False, repository=repository, cuda_major=major, cuda_reason=why,
                     packages=found["packages"], install=found["install"], remove=found["remove"],
                     version=found["version"], pin=None if found["driver_from_cuda_repo"] else pin_text())


if __name__ == "__main__":
    main()
