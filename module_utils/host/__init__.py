# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What any Debian/Ubuntu host says about itself, for every layer and role: dpkg's package states (dpkg.py: the
one dpkg-query format and its one parser), systemd's units, their journal and the users they run as (systemd.py).
The parsers are pure functions over captured text;
runner.py (HostIO) is the one way a module, or the MIG boot script outside Ansible, runs the commands that print it."""
