# -*- coding: utf-8 -*-
"""A run's own state on the host: the converged fingerprint, the run lock, atomic writes with a backup."""
