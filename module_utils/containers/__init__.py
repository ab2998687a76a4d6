# -*- coding: utf-8 -*-
"""The container engines and the toolkit's files: docker's daemon.json, containerd's and k3s' configs, the CDI
spec, /dev/char links, which path --gpus takes, the CUDA an image needs."""
