# -*- coding: utf-8 -*-
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
"""
from collections import namedtuple

Layer = namedtuple("Layer", "name title heading required roles tags checks module drift repair catalogue engine_titles")


def _layer(name, title, heading=None, required=True, roles=(), tags=(), checks=(), module=None, drift=False,
           repair=(), catalogue=(), engine_titles=None):
    return Layer(name, title, heading or name, required, tuple(roles), tuple(tags), tuple(checks), module or name,
                 drift, tuple(repair), tuple(catalogue), dict(engine_titles or {}))


REGISTRY = (
    _layer("hardware", "hardware (each GPU on the bus)", checks=("hardware",), catalogue=("hardware",)),
    _layer("driver", "driver", roles=("nvidia_driver",), tags=("driver",),
           checks=("pci", "kernel_module", "module_signature", "next_boot", "device_nodes", "nvml"),
           drift=True, repair=("nvidia_driver",), catalogue=("driver",)),
    # The fabric manager comes with the driver (same branch, same version): the driver role installs it.
    _layer("fabric", "NVSwitch fabric", roles=("nvidia_driver",), tags=("driver",), checks=("fabric",),
           drift=True, repair=("nvidia_driver",), catalogue=("fabric",)),
    # MIG partitions are checked with persistence mode: both are per-GPU state the driver does not keep.
    _layer("persistence", "persistence mode", roles=("nvidia_persistence", "nvidia_mig"),
           tags=("persistence", "mig"), checks=("persistence", "mig_layout"), drift=True,
           repair=("nvidia_persistence", "nvidia_mig"), catalogue=("persistence",)),
    _layer("docker", "docker engine", roles=("docker",), tags=("docker",), checks=("docker",), module="engine",
           drift=True, repair=("docker",), catalogue=("docker",),
           engine_titles={"containerd": "containerd engine"}),
    _layer("toolkit", "toolkit packages", roles=("nvidia_container_toolkit",), tags=("toolkit",),
           checks=("toolkit",), drift=True, repair=("nvidia_container_toolkit",), catalogue=("toolkit",)),
    _layer("runtime_config", "toolkit configuration", heading="runtime config", roles=("nvidia_container_toolkit",), tags=("toolkit",),
           checks=("runtime", "dev_char"), drift=True, repair=("nvidia_container_toolkit",),
           catalogue=("runtime_config",), engine_titles={"containerd": "toolkit configuration (containerd)"}),
    _layer("cdi", "CDI spec", heading="CDI", roles=("nvidia_cdi",), tags=("cdi",), checks=("cdi_spec", "cdi_list"), drift=True,
           repair=("nvidia_cdi",), catalogue=("cdi",)),
    # A fresh GPU container: what every layer below it makes work together (the toolkit role keeps its image).
    _layer("container", "image/container", roles=("nvidia_container_toolkit",), tags=("toolkit",),
           checks=("container_gpus", "gpus_path", "container_cdi", "container_cuda", "serving_gpus"), drift=True,
           repair=("nvidia_container_toolkit", "nvidia_cdi"), catalogue=("image", "container")),
    # The serving containers: drift compares them with the record (running, healthy); the stack check's
    # serving_gpus (in the container layer) looks inside the running ones.
    _layer("serving", "vLLM serving", required=False, roles=("vllm",), tags=("vllm",), drift=True,
           repair=("vllm",), catalogue=("vllm_config", "vllm_memory")),
    _layer("health", "GPU health", required=False, checks=("zombies", "throttle", "xid")),
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
