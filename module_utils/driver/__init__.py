# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver layer's decisions: which driver package from which source (Ubuntu's archive, Debian's, NVIDIA's
CUDA repository), signed modules under Secure Boot, repository keys, nvidia-persistenced's unit, the fabric
manager's package."""
