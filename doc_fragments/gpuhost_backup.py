# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The backup_dir option shared by the modules that replace a config file (one copy of its text)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  backup_dir:
    description:
      - Where backups go, under the file's own path (V(/var/backups/gpuhost/etc/docker/daemon.json.<UTC time>)),
        outside the directory the file's readers scan.
    type: path
    default: /var/backups/gpuhost
"""
