# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layer registry: every layer of a GPU serving host, declared once, in stack order (bottom up).

Everything that needs the list of layers reads it here: the stack check (layers/stack.py), drift
(drift.py), the error catalogue, the report renderers, gpu_stack_check's options, and the tests that hold
site.yml's roles and tags, drift.yml's repairs and gpu_validate's defaults to it. A layer is:

    name        the key in every result (gpu_stack_check's `layers`, drift's `layers`, reports)
    title       what a person reads
    heading     the report table's column heading
    required    whether its failure fails a host by default (gpu_stack_check's required_layers)
    roles       the roles that install it, in site.yml's order; () where nothing installs it
    tags        site.yml's tags of those roles
    checks      the gpu_stack_check checks it owns, in the order they are reported; () where the stack
                check does not look at it (drift does)
    module      the check module under layers/ that implements those checks
    drift       whether drift.py compares it (drift.<name>_findings), and with the roles below repairs it
    repair      the roles drift.yml runs to repair it
    catalogue   the error catalogue's layer names that land on it (a pasted error's layer)
    engine_titles  the title where the host's engine is containerd
    owns        what the layer owns on the host (Owns below): its packages, systemd units, config files and
                the disk and users they need. Every layer that owns something gets the generic check
                `<name>_basics` (layers/generic.py) first among its checks, so that a fault nobody named
                (a package dpkg left half-configured, a unit that fails for a user that is gone, a full disk)
                lands on the layer with its own cause and remedy before the layer's specific checks name the
                symptom.
"""
from collections import namedtuple

Layer = namedtuple("Layer", "name title heading required roles tags checks module drift repair catalogue engine_titles "
                            "owns")
# What a layer owns (the generic check reads it; all parts optional):
#   packages  Packages: `names` (or the option naming them) must be installed, at one version where
#             `same_version`; `patterns` (fnmatch, less `exclude`) are the layer's too, checked only for a state
#             dpkg left half done
#   units     Unit: a systemd unit; `must_run`: masked is a failure even while it is not running; `when`: a
#             condition on the host (fabric_needed); `engine`: only where that engine serves; `user_option`: the
#             daemon's own option naming the user it drops to (besides the unit's User=)
#   configs   Config: a file (or the option naming it) that must parse as `kind` (json, daemon_json, toml,
#             cdi) when it is there
#   disks     Disk: free space where the layer writes: `path`, or `docker_root` (docker info's DockerRootDir,
#             else /var/lib/docker); below `fail_bytes` fails, below `warn_bytes` warns
#   failures  capture keys whose text (an engine's refusal, a container that would not start) names a cause the
#             layer owns ("no space left on device")
#   engine    the engine these belong to (the docker layer is containerd's engine layer on a Kubernetes node)
Owns = namedtuple("Owns", "packages units configs disks failures engine")
Packages = namedtuple("Packages", "names option patterns exclude same_version")
Unit = namedtuple("Unit", "name must_run when user_option")
Config = namedtuple("Config", "path option kind")
Disk = namedtuple("Disk", "path label fail_bytes warn_bytes")
GIB = 1024 ** 3
MIB = 1024 ** 2


def packages(names=(), option=None, patterns=(), exclude=(), same_version=False):
    return Packages(tuple(names), option, tuple(patterns), tuple(exclude), same_version)


def unit(name, must_run=False, when=None, user_option=None):
    return Unit(name, must_run, when, user_option)


def owns(packages=None, units=(), configs=(), disks=(), failures=(), engine=None):
    return Owns(packages, tuple(units), tuple(configs), tuple(disks), tuple(failures), engine)


# The toolkit's packages, one version for all four (NVIDIA's install guide pins them together).
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")


def _layer(name, title, heading=None, required=True, roles=(), tags=(), checks=(), module=None, drift=False,
           repair=(), catalogue=(), engine_titles=None, owns=None):
    checks = ((name + "_basics",) if owns else ()) + tuple(checks)
    return Layer(name, title, heading or name, required, tuple(roles), tuple(tags), checks, module or name,
                 drift, tuple(repair), tuple(catalogue), dict(engine_titles or {}), owns)


REGISTRY = (
    _layer("hardware", "hardware (each GPU on the bus)", checks=("hardware",), catalogue=("hardware",)),
    _layer("driver", "driver", roles=("nvidia_driver",), tags=("driver",),
           checks=("pci", "kernel_module", "module_signature", "next_boot", "driver_upgrade", "device_nodes", "nvml"),
           drift=True, repair=("nvidia_driver",), catalogue=("driver",),
           # Its package names follow the branch and the source (driver_packages): dpkg's state of every NVIDIA
           # driver package is checked, the container toolkit's and the fabric manager's left to their layers.
           owns=owns(packages=packages(patterns=(
               "nvidia-*", "libnvidia-*", "linux-modules-nvidia-*", "linux-objects-nvidia-*",
               "linux-signatures-nvidia-*", "firmware-nvidia-*", "libcuda*", "xserver-xorg-video-nvidia*"),
               exclude=TOOLKIT_PACKAGES + ("nvidia-container-*", "libnvidia-container*", "nvidia-fabricmanager*",
                                           "libnvidia-nscq*", "nvidia-imex*", "nvidia-docker*")))),
    # The fabric manager comes with the driver (same branch, same version): the driver role installs it.
    _layer("fabric", "NVSwitch fabric", roles=("nvidia_driver",), tags=("driver",), checks=("fabric",),
           drift=True, repair=("nvidia_driver",), catalogue=("fabric",),
           owns=owns(packages=packages(patterns=("nvidia-fabricmanager*", "libnvidia-nscq*", "nvidia-imex*", "nvlsm")),
                     units=(unit("nvidia-fabricmanager.service", must_run=True, when="fabric_needed"),))),
    # MIG partitions are checked with persistence mode: both are per-GPU state the driver does not keep.
    _layer("persistence", "persistence mode", roles=("nvidia_persistence", "nvidia_mig"),
           tags=("persistence", "mig"), checks=("persistence", "mig_layout"), drift=True,
           repair=("nvidia_persistence", "nvidia_mig"), catalogue=("persistence",),
           # Ubuntu's unit runs `nvidia-persistenced --user nvidia-persistenced`, Debian's `--user nvpd`.
           owns=owns(units=(unit("nvidia-persistenced.service", user_option="--user"),))),
    # DCGM (NVIDIA's Data Center GPU Manager, where gpuhost_dcgm asks for it): installed, held and its host engine
    # running; the health layer runs its diagnostic (dcgm_diag). Not required: a host without it still serves.
    _layer("dcgm", "DCGM", heading="DCGM", required=False, roles=("nvidia_dcgm",), tags=("dcgm",), checks=("dcgm",),
           catalogue=("dcgm",),
           owns=owns(packages=packages(patterns=("datacenter-gpu-manager*",)),
                     units=(unit("nvidia-dcgm.service", user_option="--service-account"),))),
    # container_limits: on a host declared for training, the limits a container gets (docker's default-ulimits).
    _layer("docker", "docker engine", roles=("docker",), tags=("docker",), checks=("docker", "container_limits"),
           module="engine", drift=True, repair=("docker",), catalogue=("docker",),
           engine_titles={"containerd": "containerd engine"},
           owns=owns(packages=packages(patterns=("docker-ce", "docker-ce-cli", "docker.io", "containerd.io",
                                                 "containerd", "runc", "moby-*")),
                     units=(unit("docker.service", must_run=True),),
                     configs=(Config(None, "docker_config", "daemon_json"),),
                     disks=(Disk("docker_root", "docker's data-root", 1 * GIB, 2 * GIB),
                            Disk("/var/lib/gpuhost", "gpuhost's state", 64 * MIB, 256 * MIB)),
                     failures=("docker_info", "dockerd_validate", "container_gpus", "container_cuda", "container_cdi",
                               "container_env", "container_limits"),
                     engine="docker")),
    _layer("toolkit", "toolkit packages", roles=("nvidia_container_toolkit",), tags=("toolkit",),
           checks=("toolkit",), drift=True, repair=("nvidia_container_toolkit",), catalogue=("toolkit",),
           owns=owns(packages=packages(option="toolkit_packages", same_version=True))),
    _layer("runtime_config", "toolkit configuration", heading="runtime config", roles=("nvidia_container_toolkit",), tags=("toolkit",),
           checks=("runtime", "dev_char"), drift=True, repair=("nvidia_container_toolkit",),
           catalogue=("runtime_config",), engine_titles={"containerd": "toolkit configuration (containerd)"},
           owns=owns(configs=(Config("/etc/nvidia-container-runtime/config.toml", None, "toml"),))),
    _layer("cdi", "CDI spec", heading="CDI", roles=("nvidia_cdi",), tags=("cdi",), checks=("cdi_spec", "cdi_list"), drift=True,
           repair=("nvidia_cdi",), catalogue=("cdi",), owns=owns(configs=(Config(None, "cdi_spec_path", "cdi"),))),
    # A fresh GPU container: what every layer below it makes work together (the toolkit role keeps its image).
    _layer("container", "image/container", roles=("nvidia_container_toolkit",), tags=("toolkit",),
           checks=("container_gpus", "gpus_path", "container_cdi", "container_cuda", "serving_gpus"), drift=True,
           repair=("nvidia_container_toolkit", "nvidia_cdi"), catalogue=("image", "container")),
    # The serving containers: every recorded or labelled one is running (serving_running); drift compares them
    # with the record (running, healthy); the stack check's serving_gpus (in the container layer) looks inside
    # the running ones. A container that lost its GPUs to a systemd reload keeps them after its restart only
    # with the /dev/char links the toolkit role makes: drift repairs the layer with both roles.
    _layer("serving", "vLLM serving", required=False, roles=("vllm",), tags=("vllm",), checks=("serving_running",), drift=True,
           repair=("nvidia_container_toolkit", "vllm"), catalogue=("vllm_config", "vllm_memory")),
    # Drift acts on the Xids since its cursor as NVIDIA's catalogue says (xid_policy): restart the GPU's serving
    # containers, reset the GPU, or mark it out of service (gpu_recovery); the other checks only report.
    _layer("health", "GPU health", required=False, checks=("zombies", "throttle", "xid", "compute_mode", "dcgm_diag"),
           drift=True,
           repair=("gpu_recovery",)),
)

# The role that checks the layers (site.yml's last layer role, diagnose.yml's only one) and its tag.
VALIDATE_ROLE, VALIDATE_TAG = "gpu_validate", "validate"
# The catalogue's bucket for an error no layer owns.
CATALOGUE_OTHER = "other"

BY_NAME = dict((layer.name, layer) for layer in REGISTRY)
# The layers gpu_stack_check reports (those it has checks for), in stack order.
STACK_LAYERS = tuple(layer.name for layer in REGISTRY if layer.checks)
DEFAULT_REQUIRED_LAYERS = tuple(layer.name for layer in REGISTRY if layer.checks and layer.required)
DRIFT_LAYERS = tuple(layer.name for layer in REGISTRY if layer.drift)
TITLES = dict((layer.name, layer.title) for layer in REGISTRY)
HEADINGS = dict((layer.name, layer.heading) for layer in REGISTRY)
CHECK_LAYER = dict((check, layer.name) for layer in REGISTRY for check in layer.checks)
CATALOGUE_LAYERS = dict((name, layer.name) for layer in REGISTRY for name in layer.catalogue)
# The catalogue's layer names bottom up, its `other` last: how `explain` ranks what it found.
CATALOGUE_ORDER = tuple(name for layer in REGISTRY for name in layer.catalogue) + (CATALOGUE_OTHER,)


def get(name):
    return BY_NAME[name]


def titles(engine=None):
    """Every layer's title, as the given engine's hosts read them."""
    return dict((layer.name, layer.engine_titles.get(engine, layer.title)) for layer in REGISTRY)


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return tuple(seen)


def site_roles():
    """(role, tag) in site.yml's order: every layer's roles bottom up, then the validator."""
    pairs = [(role, layer.tags[min(i, len(layer.tags) - 1)]) for layer in REGISTRY for i, role in enumerate(layer.roles)]
    return _unique(pairs) + ((VALIDATE_ROLE, VALIDATE_TAG),)


def site_tags():
    """site.yml's layer tags, in order (the fingerprint's full-run test reads the same)."""
    return tuple(tag for _role, tag in site_roles())


def repair_roles():
    """The roles drift.yml runs to repair a host, in order."""
    return _unique(role for layer in REGISTRY if layer.drift for role in layer.repair)


def catalogue_layer(name):
    """The registry layer a catalogue entry's layer name lands on (None for the catalogue's `other`)."""
    return CATALOGUE_LAYERS.get(name)
