#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_driver_package_style: auto on Debian: Debian's archive, or NVIDIA's CUDA repository."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_style
short_description: Debian's archive or NVIDIA's CUDA repository for these GPUs (package style auto)
description:
  - Reads C(apt-cache madison nvidia-driver) of the host's apt sources and the GPUs' minimum driver
    branch. On Debian, when no branch the archive offers reaches that minimum (Debian 12 has 535, Debian 13
    550; Blackwell needs 570), the driver can only come from NVIDIA's CUDA repository and the style is
    C(nvidia); otherwise C(debian). Ubuntu is always C(ubuntu). Read-only.
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  distribution:
    description: The host's distribution (ansible_facts.distribution).
    type: str
    required: true
  pci_devices:
    description: The NVIDIA GPUs on the PCI bus (nvidia_gpu_facts' pci_devices).
    type: list
    elements: dict
    required: true
  distribution_version:
    description: The host's release (ansible_facts.distribution_version), for the repository's directory.
    type: str
  architecture:
    description: The host's architecture (ansible_facts.architecture), for the repository's directory.
    type: str
    default: x86_64
  cuda_repo_base_url:
    description: Where NVIDIA's CUDA repositories are; the host's is C(<base>/<distro>/<arch>/).
    type: str
    default: https://developer.download.nvidia.com/compute/cuda/repos
  cuda_repo_distro:
    description:
      - NVIDIA's directory for this host (debian12, debian13, ubuntu2204, ubuntu2404) when its facts name none
        gpuhost knows, as on a derivative of Ubuntu or Debian; the key and the package naming follow it.
    type: str
  cuda_repo_url:
    description:
      - NVIDIA's CUDA repository URL when it is not the one of O(cuda_repo_base_url) (a mirror); its own
        nvidia-driver versions do not count as the archive's.
    type: str
  sources_pending:
    description:
      - A check run that adds the Debian sources itself (apt has not read them yet). With nothing in the
        sources the style stays C(debian) and the reason says so.
    type: bool
    default: false
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Debian's archive or NVIDIA's repository
  nvidia_driver_style:
    distribution: "{{ ansible_facts['distribution'] }}"
    pci_devices: "{{ ansible_facts.nvidia.pci_devices }}"
"""

RETURN = r"""
style:
  description: ubuntu, debian or nvidia.
  returned: success
  type: str
reason:
  description: Why, with the branches the archive offers and the GPUs' minimum.
  returned: success
  type: str
min_branch:
  description: The GPUs' minimum driver branch (null when none is known).
  returned: success
  type: int
repository:
  description:
    - The host's CUDA repository - distro, arch, family (debian or ubuntu naming), url, key_url, key_file,
      fingerprint (module_utils/driver/cuda_repo.py); null when NVIDIA has none gpuhost knows for this host.
  returned: success
  type: dict
repository_error:
  description: Why there is no repository (null when there is one).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.driver.cuda_repo import CudaRepoError, archive_branches, auto_style, repository
from ansible.module_utils.driver.driver_request import gpu_summary, min_branch
from ansible.module_utils.host.runner import C_LOCALE, ModuleHostIO


def decide(distribution, pci_devices, madison_text, cuda_repo_url=None, sources_pending=False, named_distro=None):
    """(style, reason, min_branch): cuda_repo.auto_style, a pending check run that cannot read the sources, and a
    derivative (neither Debian nor Ubuntu) that names its CUDA repository: that repository is its only driver source."""
    floor = min_branch(gpu_summary(pci_devices))
    if named_distro and (distribution or "").lower() not in ("debian", "ubuntu"):
        return "nvidia", ("%s: no archive style is known for it, and nvidia_driver_cuda_repo_distro names NVIDIA's "
                          "%s repository" % (distribution, named_distro)), floor
    if (distribution or "").lower() == "debian" and sources_pending \
            and not archive_branches(madison_text, exclude_url=cuda_repo_url):
        return "debian", ("Debian: the apt sources this run adds are not read yet (check mode); the real run "
                          "decides between Debian's archive and NVIDIA's CUDA repository"), floor
    style, reason = auto_style(distribution, floor, madison_text, cuda_repo_url=cuda_repo_url)
    return style, reason, floor


def main():
    module = AnsibleModule(
        argument_spec=dict(
            distribution=dict(type="str", required=True),
            pci_devices=dict(type="list", elements="dict", required=True),
            distribution_version=dict(type="str"),
            architecture=dict(type="str", default="x86_64"),
            cuda_repo_base_url=dict(type="str", default="https://developer.download.nvidia.com/compute/cuda/repos"),
            cuda_repo_distro=dict(type="str"),
            cuda_repo_url=dict(type="str"),
            sources_pending=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    repo, repo_error = None, None
    try:
        repo = repository(params["distribution"], params["distribution_version"], params["architecture"],
                          params["cuda_repo_base_url"], distro=params["cuda_repo_distro"])
        if params["cuda_repo_url"]:
            url = params["cuda_repo_url"].rstrip("/") + "/"
            repo.update(url=url, key_url=url + repo["key_file"])
    except CudaRepoError as exc:
        repo_error = str(exc)
        if params["cuda_repo_distro"]:
            module.fail_json(msg="nvidia_driver: %s" % repo_error)
    text = ""
    if (params["distribution"] or "").lower() == "debian":
        cache = module.get_bin_path("apt-cache", required=True)
        rc, text, err = ModuleHostIO(module, environ_update=C_LOCALE).run([cache, "madison", "nvidia-driver"])
        if rc not in (0, 100):
            module.fail_json(msg="nvidia_driver: apt-cache madison nvidia-driver failed (%d): %s" % (rc, err.strip()))
    try:
        style, reason, floor = decide(params["distribution"], params["pci_devices"], text,
                                      repo["url"] if repo else None, params["sources_pending"],
                                      named_distro=repo["distro"] if repo and params["cuda_repo_distro"] else None)
    except CudaRepoError as exc:
        module.fail_json(msg="nvidia_driver: %s; set nvidia_driver_package_style" % exc)
    module.exit_json(changed=False, style=style, reason=reason, min_branch=floor, repository=repo,
                     repository_error=repo_error)


if __name__ == "__main__":
    main()
