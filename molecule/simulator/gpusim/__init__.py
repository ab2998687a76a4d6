"""gpusim: the simulated GPU host used by gpuhost's molecule scenarios (test code only).

Stdlib only, Python 3.9+. Every tool (nvidia-smi, lspci, ubuntu-drivers, nvidia-persistenced,
nvidia-ctk, the container hook) reads and writes one JSON state file; see state.py and DESIGN.md.
"""

__version__ = "1.0"
