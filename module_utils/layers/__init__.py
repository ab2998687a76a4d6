# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layers of a GPU serving host: the registry (registry.py, the one list of layers) and one check module
per layer (hardware.py, driver.py, fabric.py, persistence.py, engine.py, toolkit.py, runtime_config.py,
cdi.py, container.py, health.py), each led by its generic `<layer>_basics` check (generic.py: the packages, units,
config files, disk and users the registry says the layer owns), run by stack.py. docs/ARCHITECTURE.md draws the map."""
