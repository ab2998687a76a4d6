# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The container engines and the toolkit's files: docker's daemon.json, containerd's and k3s' configs, the CDI
spec, /dev/char links, which path --gpus takes, the CUDA an image needs."""
