# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The options and note shared by the modules that write a run's reports directory (one copy of their text)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  dest:
    description:
      - Directory of this run's reports, created by this module. One that exists already (an earlier run,
        or another run started in the same second) is never written into; C(<dest>-2), C(<dest>-3)... is
        created instead.
    type: path
    required: true
  generated:
    description: When the run happened (printed in the summaries).
    type: str
notes:
  - In check mode it renders and returns the Markdown but writes nothing.
"""
