# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stack check's public names in one place: what the module gpu_stack_check and the tests import.

The layers themselves are declared once in layers/registry.py; each layer's checks live in its own module
under layers/ (hardware, driver, fabric, persistence, engine, toolkit, runtime_config, cdi, container,
health), each layer's generic `<layer>_basics` check in layers/generic.py; layers/stack.py captures what the
host says and runs them in the registry's order; docs/ARCHITECTURE.md draws the map. Nothing is defined here.
"""
# Every name here is imported to be imported from here.
# pylint: disable=unused-import
from ansible.module_utils.containers.cdi_spec import read_spec  # noqa: F401
from ansible.module_utils.gpu.gpu_facts import build_facts  # noqa: F401
from ansible.module_utils.layers.registry import DEFAULT_REQUIRED_LAYERS, STACK_LAYERS as LAYERS  # noqa: F401
from ansible.module_utils.layers.registry import TITLES as LAYER_TITLES  # noqa: F401
from ansible.module_utils.layers.base import (  # noqa: F401
    DEFAULT_CHECK_IMAGE, DEFAULT_CUDA_PROBE_COMMAND, DEFAULT_CUDA_PROBE_IMAGE, DEFAULT_TOOLKIT_PACKAGES,
    REMEDY_CONFIGURE, evidence, result, summarise)
from ansible.module_utils.layers.cdi import check_cdi_list, check_cdi_spec, check_cdi_spec_version  # noqa: F401
from ansible.module_utils.layers.container import (  # noqa: F401
    check_container, check_cuda_probe, classify_container, mig_decides, mig_whole_decides)
from ansible.module_utils.layers.driver import (  # noqa: F401
    check_device_nodes, check_kernel_module, check_module_signature, check_next_boot, check_nvml, check_pci,
    uvm_major)
from ansible.module_utils.layers.engine import (  # noqa: F401
    cdi_enabled, check_docker, choose_engine, normalize_image_ref, parse_ctr_version, parse_docker_info)
from ansible.module_utils.layers.fabric import check_fabric  # noqa: F401
from ansible.module_utils.layers.generic import check_basics, host_inputs  # noqa: F401
from ansible.module_utils.layers.hardware import check_hardware  # noqa: F401
from ansible.module_utils.layers.health import (  # noqa: F401
    XID_ACTIONS, XID_CATALOGUE, check_throttle, check_xid, check_zombies, parse_xids)
from ansible.module_utils.layers.persistence import check_mig_layout, check_persistence  # noqa: F401
from ansible.module_utils.layers.runtime_config import check_runtime  # noqa: F401
from ansible.module_utils.layers.stack import _run, capture, evaluate, kernel_log_argv  # noqa: F401
from ansible.module_utils.layers.toolkit import check_toolkit  # noqa: F401
