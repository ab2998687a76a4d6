# -*- coding: utf-8 -*-
"""The driver layer's decisions: which driver package from which source (Ubuntu's archive, Debian's, NVIDIA's
CUDA repository), signed modules under Secure Boot, repository keys, nvidia-persistenced's unit, the fabric
manager's package."""
