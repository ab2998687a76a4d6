# -*- coding: utf-8 -*-
"""GPU facts and the parsers of what NVIDIA's tools print: nvidia-smi in every form, lspci, MIG listings
and layouts, NVLink topology, GPU architectures and memory."""
