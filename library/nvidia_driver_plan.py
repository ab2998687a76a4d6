#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Decide which NVIDIA driver packages a host gets, refuse what cannot work, and say whether to reboot."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_plan
short_description: Choose the NVIDIA driver packages for a host, refuse what cannot drive its GPUs
description:
  - Read-only. Chooses the driver branch, kernel module flavour and apt packages for the host's
    NVIDIA GPUs and compares them with what dpkg has installed; returns the apt specs to install and
    the action (V(none), V(install), V(upgrade), V(downgrade), V(change)).
  - Fails, naming the GPU, the branch and the fix, when the request cannot drive the GPUs - a branch
    below a GPU's minimum, proprietary kernel modules on a GPU that requires the open ones (Blackwell,
    Grace Hopper), open modules on a GPU without a GSP - before anything is installed.
  - Ubuntu style, by default without DKMS, as C(ubuntu-drivers install --gpgpu) does -
    C(nvidia-headless-no-dkms-<branch>-server[-open]), C(nvidia-utils-<branch>-server) (nvidia-smi), Canonical's
    signed modules for the running kernel's flavour (C(linux-modules-nvidia-<branch>-server[-open]-<flavour>))
    and for the running kernel itself (C(...-<kernel release>)), each at the version built against the driver.
    A flavour without signed modules in the archive is refused, listing the flavours that have them; installed
    DKMS packages (C(nvidia-dkms-*) and the C(nvidia-driver-*)/C(nvidia-headless-*) that pull it) are returned
    in RV(remove). With O(dkms=true) - C(nvidia-driver-<branch>-server[-open]) (or the desktop
    C(nvidia-driver-<branch>[-open])), which pulls C(nvidia-dkms-*). With O(branch=auto) the recommendation of
    C(ubuntu-drivers devices) within the flavour.
    Debian style - C(nvidia-driver) and companions from non-free, the version picking the branch.
  - With O(gpu_facts) (the C(nvidia) facts of nvidia_gpu_facts) also says whether a reboot is needed
    (the installed driver is not the loaded kernel module, or NVML reports a version mismatch).
version_added: "1.0.0"
author: gpuhost maintainers (!UNKNOWN)
options:
  package_style:
    description:
      - Packaging of the driver - V(ubuntu) (Ubuntu and derivatives), V(debian), or V(nvidia) (NVIDIA's CUDA
        repository, named as O(cuda_repo_family) says).
    type: str
    required: true
    choices: [ubuntu, debian, nvidia]
  cuda_repo_family:
    description:
      - With O(package_style=nvidia) - the naming of the host's CUDA repository, V(debian) (Debian's names for every
        branch) or V(ubuntu) (branch-suffixed up to 580, unsuffixed from 590).
    type: str
    default: debian
    choices: [debian, ubuntu]
  flavor:
    description: Ubuntu package flavour - V(server) (C(-server), headless datacenter branch) or V(desktop).
    type: str
    default: server
    choices: [server, desktop]
  kernel_modules:
    description: V(auto) takes the open modules when a GPU requires them, else the proprietary ones.
    type: str
    default: auto
    choices: [auto, open, proprietary]
  branch:
    description: Driver branch (V(580)) or V(auto).
    type: str
    default: auto
  version:
    description: Exact driver version within the branch (V(580.95.05)); empty for the installed or newest one.
    type: str
    default: ""
  upgrade:
    description: Plan the newest version of the branch instead of keeping the installed one.
    type: bool
    default: false
  pci_devices:
    description: The C(pci_devices) fact of nvidia_gpu_facts (NVIDIA GPU functions on the PCI bus).
    type: list
    elements: dict
    default: []
  gpu_facts:
    description: The C(nvidia) facts of nvidia_gpu_facts, for the reboot decision.
    type: dict
  query_host:
    description: V(false) only checks the request against the GPUs (no command runs).
    type: bool
    default: true
  dkms:
    description:
      - Ubuntu style - build the kernel module with DKMS (C(nvidia-driver-<branch>-server[-open])) instead of
        installing Canonical's signed prebuilt modules. The Debian style is always DKMS.
    type: bool
    default: false
  kernel_flavour:
    description:
      - Ubuntu style without DKMS - the kernel flavour whose signed modules to install (V(generic),
        V(generic-hwe-24.04), V(aws), ...). V(auto) - the installed C(linux-image-<flavour>) metapackage that
        depends on the running kernel's image.
    type: str
    default: auto
  debian_packages:
    description: Debian-style packages installed besides the kernel module package.
    type: list
    elements: str
    default: [nvidia-driver, firmware-nvidia-gsp, nvidia-smi, nvidia-persistenced]
  debian_kernel_packages:
    description: Debian-style kernel module package per flavour (keys V(open), V(proprietary)).
    type: dict
    default: {open: nvidia-open-kernel-dkms, proprietary: nvidia-kernel-dkms}
  extra_packages:
    description: More packages of the driver installed, held and upgraded with it.
    type: list
    elements: str
    default: []
  fabric_manager:
    description:
      - Whether the driver comes with what the host's NVLink fabric needs, at exactly the driver's version, held and
        upgraded with it - the fabric manager and NSCQ on NVSwitch (HGX A100/H100/H200) hosts, also NVLSM
        (C(nvlsm), C(infiniband-diags), C(libibumad3), at their own versions) on HGX B200/B300/B100 (NVLink 5),
        the IMEX service (C(nvidia-imex)) and no fabric manager on GB200/GB300 compute trays.
      - Names - Ubuntu's archive C(nvidia-fabricmanager-<branch>), C(libnvidia-nscq-<branch>),
        C(nvidia-imex-<branch>); NVIDIA's CUDA repository the same up to 575 and C(nvidia-fabricmanager),
        C(libnvidia-nscq), C(nvidia-imex) from 580.
      - V(auto) installs what the host needs (from O(nvswitches), O(pci_devices), O(architecture) and O(fabric));
        V(always) is refused on a host without an NVSwitch fabric of its own (the fabric manager exits with
        NV_WARN_NOTHING_TO_DO there); V(never) leaves all of these out.
      - A host that needs them in the Debian style is refused (Debian's archive has none of them), naming
        nvidia_driver_package_style nvidia (NVIDIA's CUDA repository) for the driver and the fabric manager
        together; so is an NVLink 5 host in the Ubuntu style (Ubuntu's archive has no NVLSM). A pinned package
        the sources lack at the driver's version fails the plan, naming both.
    type: str
    default: auto
    choices: [auto, always, never]
  nvswitches:
    description: PCI addresses of the NVSwitch functions (nvidia_gpu_facts' C(nvswitches)).
    type: list
    elements: str
    default: []
  architecture:
    description:
      - The CPU architecture (ansible_facts.architecture). GB300 trays (aarch64) and HGX B300 boards (x86_64)
        share PCI ids; the architecture tells them apart where the GPU's name does not.
    type: str
  fabric:
    description:
      - nvidia_gpu_facts' C(fabric); its C(gpus) (each GPU's Fabric block) tell a multi-node NVLink tray (a clique
        with a cluster UUID) or an NVSwitch fabric where the GPUs and the PCI bus do not.
    type: dict
    default: {}
  reboot:
    description: The role's reboot policy; with V(never) a needed reboot is also reported as a warning.
    type: str
    default: auto
    choices: [auto, always, never]
  nvidia_smi_path:
    description: Path whose owning package tells the installed driver version.
    type: path
    default: /usr/bin/nvidia-smi
  record_path:
    description:
      - "The host's record (local facts file); the C(held_versions) of its C(driver) section tells which
        holds gpuhost made, and on which version. A hold is gpuhost's only when gpuhost held that package at the
        version installed now; any other hold on a driver package is the operator's (an operator who downgrades
        the driver and holds the same names holds it). Read from the file, so it also works with
        C(gather_facts: false)."
      - Records older than C(held_versions) count their C(held_by_gpuhost) (older still, their C(packages)) as
        gpuhost's when their C(version) is the installed driver's.
    type: path
    default: /etc/ansible/facts.d/gpuhost.fact
  release_operator_holds:
    description:
      - Whether a driver change may release holds the operator made, and override the apt pins the operator
        wrote. When false, a plan that changes the driver while the operator holds its packages, or while a
        preferences file other than O(pin_path) pins them to another version (or bars the planned one), fails,
        naming the packages, both versions (the pin file) and this option.
    type: bool
    default: false
  pin_path:
    description:
      - gpuhost's own apt preferences file for the driver (the role's C(nvidia_driver_apt_pin_path)). Every
        other file apt reads pins from - C(/etc/apt/preferences) and the files of C(/etc/apt/preferences.d)
        apt accepts (no extension or C(.pref); alphanumerics, C(-), C(_), C(.) in the name) - is the operator's.
    type: path
    default: /etc/apt/preferences.d/gpuhost-nvidia-driver.pref
  sources_pending:
    description:
      - The apt sources the driver comes from are added by this same run, which is in check mode, so apt cannot
        know their packages yet. When the sources hold no package of the branch, the plan is a prediction
        (RV(predicted)) naming the packages and the branch instead of failing.
    type: bool
    default: false
notes:
  - Supports check mode; it never changes the host.
  - Runs C(dpkg-query), C(apt-cache madison) and, for Ubuntu with O(branch=auto), C(ubuntu-drivers devices);
    for Ubuntu without DKMS also C(apt-cache pkgnames) and C(apt-cache show) of the signed-modules packages;
    reads the apt preferences files.
  - Only version pins, and negative pins on every source (release C(*)), count as standing in the way;
    other release and origin pins choose where a version comes from. C(src:) patterns are not matched.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  nvidia_gpu_facts:

- name: Plan the driver of an Ubuntu host
  nvidia_driver_plan:
    package_style: ubuntu
    branch: auto
    pci_devices: "{{ ansible_facts.nvidia.pci_devices }}"
  register: driver_plan

- name: Install it
  ansible.builtin.apt:
    name: "{{ driver_plan.install }}"
  when: driver_plan.action != 'none'
"""

RETURN = r"""
branch:
  description: The driver branch.
  returned: success
  type: int
  sample: 580
branch_source:
  description: Where the branch came from.
  returned: success
  type: str
  sample: ubuntu-drivers recommends branch 580
kernel_modules:
  description: V(open) or V(proprietary).
  returned: success
  type: str
kernel_modules_reason:
  description: Why that flavour.
  returned: success
  type: str
fabric_manager:
  description: Whether the fabric manager's packages (and NVLSM's on NVLink 5) are part of the driver.
  returned: success
  type: bool
fabric_manager_reason:
  description: Why (the NVSwitches on the bus, the GPUs, the Fabric block; or why not).
  returned: success
  type: str
fabric_need:
  description:
    - What the host's NVLink fabric needs - V(fabric_manager), V(fabric_manager+nvlsm), V(imex) or V(none)
      (module_utils/driver/fabric_manager.fabric_need), also with O(fabric_manager=never).
  returned: success
  type: str
fabric_services:
  description: The units to enable and start - C(nvidia-fabricmanager) (which also starts NVLSM) or C(nvidia-imex).
  returned: success
  type: list
  elements: str
packages:
  description: The packages named to apt, main package first.
  returned: when query_host
  type: list
  elements: str
  sample: [nvidia-driver-580-server-open]
install:
  description: apt specs (C(name=version)) of those packages.
  returned: when query_host
  type: list
  elements: str
  sample: [nvidia-driver-580-server-open=580.95.05-0ubuntu0.24.04.1]
version:
  description: Upstream driver version planned.
  returned: when query_host
  type: str
  sample: 580.95.05
action:
  description: V(none), V(install), V(upgrade), V(downgrade) or V(change) (another branch or module flavour).
  returned: when query_host
  type: str
predicted:
  description: The plan is a prediction from names only (O(sources_pending)); RV(version) is then V(<branch>.*).
  returned: when predicted
  type: bool
installed:
  description: The installed driver - C(package) (ships nvidia-smi), C(version), C(upstream), C(branch),
    C(kernel_modules), C(packages) (installed packages of that driver, what the role holds), C(held),
    C(versions) (package to dpkg version).
  returned: when query_host
  type: dict
verify_errors:
  description: How the installed driver differs from the plan (a transitional package pulling another branch).
  returned: when query_host
  type: list
  elements: str
reboot:
  description: C(required), C(reason), C(installed), C(loaded) (kernel module version).
  returned: when gpu_facts is given
  type: dict
disruption:
  description:
    - What this plan does to the host's serving, for site.yml's rollout plan - empty when nothing (no driver
      change, no reboot), else the change (C(driver change 570.195.03 -> 580.95.05)) or the reboot's reason.
  returned: when query_host
  type: str
holds:
  description:
    - The held driver packages by who held them, C(ours) (gpuhost held them on the version installed now) and
      C(operator); and what the role records after holding the rest, C(gpuhost) (names) and
      C(gpuhost_versions) (C(name=version), the dpkg version held).
  returned: when query_host
  type: dict
  sample: {ours: [], operator: [nvidia-driver-570-server], gpuhost: [nvidia-utils-570-server],
           gpuhost_versions: [nvidia-utils-570-server=570.195.03-0ubuntu0.24.04.1]}
operator_pins:
  description:
    - The stanzas of apt preferences files other than O(pin_path) that stand in the way of the planned change
      (empty when RV(action) is V(none)); a file a package of the driver ships (NVIDIA's
      C(nvidia-driver-pinning-<branch>)) changes with the driver and is not counted - C(file), C(line), C(packages) (the driver packages they match),
      C(patterns), C(pin), C(priority), C(effect) (V(pinned) to another version, or V(barred) the planned
      one) and C(wanted) (the version compared).
  returned: when query_host
  type: list
  elements: dict
  sample: [{file: /etc/apt/preferences.d/operator-nvidia, line: 1, packages: [nvidia-driver-580-server-open],
            patterns: [nvidia-*], pin: version 580.105.08*, priority: 1001, effect: pinned,
            wanted: 580.95.05-0ubuntu0.24.04.1}]
remove:
  description:
    - Installed packages the plan removes before it installs - with Canonical's signed modules chosen, the DKMS
      packages (their module in C(updates/dkms) would load before the signed one, and Secure Boot rejects it).
  returned: when query_host
  type: list
  elements: str
  sample: [nvidia-dkms-580-server-open, nvidia-driver-580-server-open]
purge:
  description:
    - NVIDIA's pinning packages of other branches that a branch change removed, their preferences file still on
      disk (dpkg status C(rc)); the role purges them after the install.
  returned: when query_host
  type: list
  elements: str
  sample: [nvidia-driver-pinning-590]
kernel:
  description:
    - Ubuntu without DKMS - the running kernel C(release), its C(flavour) and where that came from
      (C(flavour_source)), and C(notes) (e.g. the flavour's metapackage left out because the archive's version
      follows another driver). V(null) for DKMS.
  returned: when query_host
  type: dict
  sample: {release: 6.8.0-149-generic, flavour: generic, notes: [],
           flavour_source: linux-image-generic depends on linux-image-6.8.0-149-generic}
unattended_upgrades:
  description: Whether the unattended-upgrades package is installed.
  returned: when query_host
  type: bool
gpus:
  description: The GPUs with their architecture, minimum branch and open-module requirement.
  returned: success
  type: list
  elements: dict
"""

import json
import os
import platform

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.driver.apt_preferences import (
    PREFERENCES, PREFERENCES_PARTS, operator_pin_error, operator_pins, preference_files)
from ansible.module_utils.driver.driver_packages import (
    parse_dpkg_owners, parse_dpkg_query, parse_dpkg_search, parse_kernel_images, parse_madison)
from ansible.module_utils.driver.driver_plan import (
    disruption, hold_owners, operator_hold_error, plan, reboot_decision, verify_installed)
from ansible.module_utils.driver.driver_request import DriverChoiceError, gpu_summary, precheck
from ansible.module_utils.host.dpkg import query_argv as dpkg_query_argv
from ansible.module_utils.host.runner import ModuleHostIO

_C = {"LC_ALL": "C", "LANG": "C"}


class HostQuery(object):
    """The commands plan() may ask for, run through the module's HostIO (read-only)."""

    def __init__(self, module):
        self.module = module
        self.io = ModuleHostIO(module, environ_update=_C)
        self._dpkg = None

    def _run(self, argv, ok=(0,)):
        rc, out, err = self.io.run(argv)
        if rc not in ok:
            self.module.fail_json(msg="%s exited %d: %s" % (" ".join(argv), rc, (err or out).strip()[:500]))
        return rc, out

    def dpkg(self):
        if self._dpkg is None:
            query = self.module.get_bin_path("dpkg-query", required=True)
            self._dpkg = parse_dpkg_query(self._run(dpkg_query_argv(query))[1])
        return self._dpkg

    def smi_owner(self):
        query = self.module.get_bin_path("dpkg-query", required=True)
        rc, out = self._run([query, "-S", self.module.params["nvidia_smi_path"]], ok=(0, 1))
        return parse_dpkg_search(out) if rc == 0 else None

    def owners(self, paths):
        """{path: owning package} of the paths a package ships (dpkg-query exits 1 when one has no owner)."""
        if not paths:
            return {}
        query = self.module.get_bin_path("dpkg-query", required=True)
        return parse_dpkg_owners(self._run([query, "-S"] + list(paths), ok=(0, 1))[1])

    def madison(self, packages):
        cache = self.module.get_bin_path("apt-cache", required=True)
        return parse_madison(self._run([cache, "madison"] + list(packages), ok=(0, 100))[1])

    def kernel_release(self):
        return platform.release()

    def kernel_images(self):
        query = self.module.get_bin_path("dpkg-query", required=True)
        rc, out = self._run(dpkg_query_argv(query, ["linux-image-*"], extra=["${Depends}"]), ok=(0, 1))
        return parse_kernel_images(out)

    def pkgnames(self, prefix):
        cache = self.module.get_bin_path("apt-cache", required=True)
        return self._run([cache, "pkgnames", prefix], ok=(0, 1))[1]

    def show(self, packages):
        """Every version apt knows of each package (exit 100 with nothing printed when it knows none)."""
        cache = self.module.get_bin_path("apt-cache", required=True)
        return self._run([cache, "show"] + list(packages), ok=(0, 100))[1]

    def ubuntu_drivers(self):
        tool = self.module.get_bin_path("ubuntu-drivers")
        if not tool:
            return None
        return self._run([tool, "devices"])[1]

    def preferences(self):
        """[(path, text)] of the apt preferences files apt reads (regular files, or links to one)."""
        try:
            names = os.listdir(PREFERENCES_PARTS)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        files = []
        for path in preference_files(names, PREFERENCES, PREFERENCES_PARTS):
            if not os.path.isfile(path):
                continue
            try:
                with open(path, "r", encoding="utf-8", errors="replace") as handle:
                    files.append((path, handle.read()))
            except OSError as exc:
                self.module.fail_json(msg="nvidia_driver: cannot read the apt preferences file %s (%s)" % (path, exc))
        return files


def read_driver_record(module, path):
    """The record's driver section, or None when there is no record."""
    try:
        with open(path, "r", encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        module.fail_json(msg="nvidia_driver: the record %s is not JSON (%s); it tells gpuhost's holds from the "
                             "operator's. Fix: restore it from its backup, or remove it" % (path, exc))
    return record.get("driver") if isinstance(record, dict) else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            package_style=dict(type="str", required=True, choices=["ubuntu", "debian", "nvidia"]),
            cuda_repo_family=dict(type="str", default="debian", choices=["debian", "ubuntu"]),
            flavor=dict(type="str", default="server", choices=["server", "desktop"]),
            kernel_modules=dict(type="str", default="auto", choices=["auto", "open", "proprietary"]),
            branch=dict(type="str", default="auto"),
            version=dict(type="str", default=""),
            upgrade=dict(type="bool", default=False),
            pci_devices=dict(type="list", elements="dict", default=[]),
            gpu_facts=dict(type="dict"),
            query_host=dict(type="bool", default=True),
            dkms=dict(type="bool", default=False),
            kernel_flavour=dict(type="str", default="auto"),
            debian_packages=dict(type="list", elements="str",
                                 default=["nvidia-driver", "firmware-nvidia-gsp", "nvidia-smi", "nvidia-persistenced"]),
            debian_kernel_packages=dict(type="dict", default={"open": "nvidia-open-kernel-dkms",
                                                              "proprietary": "nvidia-kernel-dkms"}),
            extra_packages=dict(type="list", elements="str", default=[]),
            fabric_manager=dict(type="str", default="auto", choices=["auto", "always", "never"]),
            nvswitches=dict(type="list", elements="str", default=[]),
            architecture=dict(type="str"),
            fabric=dict(type="dict", default={}),
            reboot=dict(type="str", default="auto", choices=["auto", "always", "never"]),
            nvidia_smi_path=dict(type="path", default="/usr/bin/nvidia-smi"),
            record_path=dict(type="path", default="/etc/ansible/facts.d/gpuhost.fact"),
            release_operator_holds=dict(type="bool", default=False),
            sources_pending=dict(type="bool", default=False),
            pin_path=dict(type="path", default="/etc/apt/preferences.d/gpuhost-nvidia-driver.pref"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    request = {"style": p["package_style"], "flavor": p["flavor"], "kernel_modules": p["kernel_modules"],
               "branch": p["branch"], "version": p["version"] or "", "upgrade": p["upgrade"],
               "debian_packages": p["debian_packages"], "debian_kernel_packages": p["debian_kernel_packages"],
               "extra_packages": p["extra_packages"], "sources_pending": p["sources_pending"],
               "fabric_manager": p["fabric_manager"], "nvswitches": p["nvswitches"], "dkms": p["dkms"],
               "machine": p["architecture"], "fabric": p["fabric"],
               "kernel_flavour": p["kernel_flavour"], "cuda_repo_family": p["cuda_repo_family"]}
    gpus = gpu_summary(p["pci_devices"])
    try:
        if not p["query_host"]:
            module.exit_json(changed=False, gpus=gpus, **precheck(request, gpus))
        query = HostQuery(module)
        result = plan(request, gpus, query)
        files = query.preferences()
        result["operator_pins"] = operator_pins(files, p["pin_path"], result,
                                                owners=query.owners([path for path, _text in files]))
    except DriverChoiceError as exc:
        module.fail_json(msg="nvidia_driver: %s" % exc, gpus=gpus)
    installed = result["installed"]
    result["holds"] = hold_owners(installed, read_driver_record(module, p["record_path"]))
    result["verify_errors"] = verify_installed(result, installed) if result["action"] == "none" else []
    if p["gpu_facts"] is not None:
        result["reboot"] = reboot_decision(installed["upstream"], installed["kernel_modules"], p["gpu_facts"])
    result["disruption"] = disruption(result)
    refusals = [r for r in (operator_hold_error(result, result["holds"]["operator"]),
                            operator_pin_error(result, result["operator_pins"])) if r]
    if refusals and not p["release_operator_holds"]:
        module.fail_json(msg="nvidia_driver: %s" % ". Also: ".join(refusals), gpus=gpus, **result)
    if result.get("reboot", {}).get("required") and p["reboot"] == "never":
        module.warn("reboot required on this host: %s (nvidia_driver_reboot: never)" % result["reboot"]["reason"])
    module.exit_json(changed=False, gpus=gpus, **result)


if __name__ == "__main__":
    main()
