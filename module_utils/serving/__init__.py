# -*- coding: utf-8 -*-
"""vLLM serving: the memory plan, vLLM's own overheads, its startup log, model headers, Kubernetes manifests."""
