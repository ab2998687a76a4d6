"""NVIDIA's vectorAdd CUDA sample as it behaves in a container on the simulated driver (test code).

The real sample (NVIDIA/cuda-samples Samples/0_Introduction/vectorAdd) prints its banner on stdout,
then every CUDA error as `Failed to allocate device vector A (error code <cudaGetErrorString>)!` on
stderr and exits 1; on success it prints the four progress lines, `Test PASSED` and `Done`. The texts
are those of tests/fixtures/cuda_probe/ (real runs). What decides, as for real CUDA in a container:
libcuda injected by the toolkit (compute capability), the driver's CUDA against the image's, a GPU
device node, /dev/nvidia-uvm (without it CUDA cannot initialise: cudaErrorUnknown), MIG mode (whole
GPUs in MIG mode give the container no usable device: busy or unavailable), and compute modes: a Prohibited GPU,
or an Exclusive_Process GPU another process holds, takes no new context; the sample runs on the first GPU that
takes one and fails busy only when none does (tests/fixtures/compute_mode/: a 5th vectorAdd on four exclusive
GH200s).
"""
import json
import os
import sys

from gpusim import catalogue

STATE_IN_CONTAINER = "/var/lib/gpu-sim/state.json"
LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
BANNER = "[Vector addition of 50000 elements]"
SUCCESS = ("Copy input data from the host memory to the CUDA device",
           "CUDA kernel launch with 196 blocks of 256 threads",
           "Copy output data from the CUDA device to the host memory",
           "Test PASSED",
           "Done")
INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"
NO_DEVICE = "no CUDA-capable device is detected"
UNKNOWN = "unknown error"
# An NVSwitch board whose fabric the fabric manager has not set up: cudaErrorSystemNotReady (802).
NOT_READY = "system not yet initialized"
# A whole GPU in MIG mode without a MIG device for the container (fixture 010: A100, MIG M. On).
BUSY = "CUDA-capable device(s) is/are busy or unavailable"
# The CUDA of the sample image gpuhost probes with (nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-*).
DEFAULT_IMAGE_CUDA = "12.5.0"


def _version(text):
    return tuple(int(p) for p in str(text).split(".")[:2] if p.isdigit())


def cuda_error(root="/", env=None):
    """The cudaGetErrorString of the first failing call, or None when the sample passes."""
    env = os.environ if env is None else env
    if not os.path.exists(os.path.join(root, LIBCUDA.lstrip("/"))):
        return INSUFFICIENT
    try:
        with open(os.path.join(root, STATE_IN_CONTAINER.lstrip("/")), encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return INSUFFICIENT
    loaded = (state.get("driver") or {}).get("loaded") or {}
    if not loaded.get("version"):
        return INSUFFICIENT
    if _version(catalogue.cuda_version(loaded["version"])) < _version(env.get("CUDA_VERSION") or DEFAULT_IMAGE_CUDA):
        return INSUFFICIENT
    dev = os.path.join(root, "dev")
    names = os.listdir(dev) if os.path.isdir(dev) else []
    if not state.get("gpus") or not any(n[len("nvidia"):].isdigit() for n in names if n.startswith("nvidia")):
        return NO_DEVICE
    if "nvidia-uvm" not in names or "nvidiactl" not in names:
        return UNKNOWN
    if state.get("nvswitches") and (state.get("fabric") or {}).get("state") != "Completed":
        return NOT_READY
    if all(_takes_no_context(g, state) for g in state["gpus"]):
        return BUSY
    return None


def _takes_no_context(gpu, state):
    if gpu.get("mig_mode"):
        # no MIG device to run on (a MIG device: gpusim/mig.py)
        return not any(gi.get("cis") for gi in gpu.get("mig_instances") or [])
    mode = gpu.get("compute_mode") or "Default"
    if mode == "Prohibited":
        return True
    return mode == "Exclusive_Process" and any(
        p.get("gpu_index") == gpu["index"] and not p.get("zombie") for p in state.get("processes") or [])


def vector_add_main(root="/", stdout=None, stderr=None, env=None):
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    stdout.write(BANNER + "\n")
    stdout.flush()
    error = cuda_error(root, env)
    if error:
        stderr.write("Failed to allocate device vector A (error code %s)!\n" % error)
        return 1
    stdout.write("\n".join(SUCCESS) + "\n")
    return 0
