# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU facts and the parsers of what NVIDIA's tools print: nvidia-smi in every form, lspci, MIG listings
and layouts, NVLink topology, GPU architectures and memory."""
