# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layered diagnosis of a GPU serving host: capture() runs what the host has (read-only), evaluate() runs
every layer's checks, in the registry's order, and names the first failing required layer.

Pure stdlib, no Ansible imports but module_utils. The module gpu_stack_check captures through an injected
`io` object (host/runner.py HostIO); each layer's checks live in its own module (layers/<module>.py, the
registry names it), each a pure function of the captures, unit-tested on real outputs.
"""
import json
import os
import posixpath
import shlex
import stat as stat_mod

from ansible.module_utils.containers.cdi_spec import CDI_DIRS
from ansible.module_utils.containers.containerd_config import runtime_binaries
from ansible.module_utils.containers.cuda_requirement import judge_images
from ansible.module_utils.containers.daemon_json import DaemonJsonError, parse as parse_daemon_json
from ansible.module_utils.containers.dev_char import wanted_links as dev_char_links
from ansible.module_utils.diagnosis import drift
from ansible.module_utils.gpu.gpu_facts import build_facts, capture as capture_gpu
from ansible.module_utils.driver.driver_reload import STATE_PATH as DRIVER_UPGRADE_PATH
from ansible.module_utils.driver.secure_boot import boot_facts, capture as capture_boot
from ansible.module_utils.gpu.compute_mode import DEFAULT as COMPUTE_DEFAULT
from ansible.module_utils.gpu.dcgm_diag import diag_argv
from ansible.module_utils.gpu.dcgm_install import SERVICE as DCGM_SERVICE
from ansible.module_utils.host import dpkg, systemd
from ansible.module_utils.layers import registry
from ansible.module_utils.layers.base import (
    DEFAULT_CDI_SPEC, DEFAULT_CHECK_IMAGE, DEFAULT_CONTAINERD_NAMESPACE, DEFAULT_CUDA_PROBE_COMMAND,
    DEFAULT_CUDA_PROBE_IMAGE, DEFAULT_DOCKER_CONFIG, DEFAULT_PROC_VERSION, DEFAULT_RUNTIME_BINARY,
    DEFAULT_TOOLKIT_PACKAGES, Context, _lines, _out, summarise)
from ansible.module_utils.layers.container import SERVING_LABEL, check_run_argv
from ansible.module_utils.layers.engine import (cdi_enabled, choose_engine, normalize_image_ref, parse_ctr_version,
                                                parse_docker_info)
from ansible.module_utils.driver.fabric_manager import FABRIC_MANAGER_SERVICE, IMEX_SERVICE
from ansible.module_utils.layers.generic import DOCKER_ROOT_DEFAULT
from ansible.module_utils.gpu.xid_policy import BOOT_ID_PATH, STATE_PATH as XID_STATE_PATH
from ansible.module_utils.diagnosis.error_catalogue import XID
from ansible.module_utils.layers.health import BENIGN_CLOCK_REASONS
from ansible.module_utils.layers.runtime_config import _char_numbers
# Every check module the registry names (Ansible ships a module's module_utils by their static imports),
# looked up by name below.
from ansible.module_utils.layers import (  # noqa: F401  # pylint: disable=unused-import
    cdi, container, dcgm, driver, engine, fabric, generic, hardware, health, persistence, runtime_config, serving,
    toolkit)


def _implementations():
    """{check name: its function} for every check the registry lists, from the layer's check module."""
    found = {}
    for layer in registry.REGISTRY:
        if layer.checks:
            module = globals()[layer.module]
            for name in layer.checks:
                found[name] = module.CHECKS[name]
    return found


IMPLEMENTATIONS = _implementations()


def evaluate(captures, options=None):
    """Captures (see capture()) -> the diagnosis. Pure apart from the pid_exists callable in captures."""
    opts = dict(DEFAULT_OPTIONS, **(options or {}))
    facts = captures.get("facts") or build_facts(captures["gpu"], pid_exists=captures.get("pid_exists"))
    ctx = Context(captures, opts, facts, IMPLEMENTATIONS)
    checks = [ctx.check(name) for layer in registry.REGISTRY for name in layer.checks]
    docker_version = ctx.check("docker")["data"].get("version")
    gpus_path = ctx.check("gpus_path")
    out = summarise(checks, opts["required_layers"], registry.titles(ctx.engine))
    out.update({
        "container_engine": ctx.engine,
        "engine_version": docker_version,
        "hardware": ctx.check("hardware")["data"].get("gpus", []),
        "driver_version": facts.get("driver_version_kernel") or facts.get("driver_version_userspace"),
        "gpu_count": facts.get("gpu_count"), "gpu_state": facts.get("state"),
        "gpus": [{"index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid")}
                 for g in facts.get("gpus") or []],
        "docker_version": docker_version if ctx.engine == "docker" else None,
        "toolkit_version": ctx.check("toolkit")["data"].get("nvidia_ctk_version"),
        "cdi_devices": ctx.check("cdi_list")["data"].get("devices", []),
        "gpus_path": dict((k, gpus_path["data"].get(k)) for k in ("path", "reason", "predicted"))
        if gpus_path["status"] != "skipped" else None,
        "xids": ctx.check("xid")["data"].get("xids", []),
        "images": judge_images(_image_envs(captures), facts),
    })
    if opts["compare_record"]:
        out["drift"] = _drift(captures, opts, out)
    return out


DEFAULT_OPTIONS = {
    "required_layers": registry.DEFAULT_REQUIRED_LAYERS,
    "check_image": DEFAULT_CHECK_IMAGE,
    "cuda_probe_image": DEFAULT_CUDA_PROBE_IMAGE,
    "cuda_probe_command": DEFAULT_CUDA_PROBE_COMMAND,
    "container_check": True,
    "cdi_container_check": "auto",
    "gpus_path_container": True,
    "kernel_log_command": ["dmesg"],
    "kernel_log_command_text": "dmesg",
    "cdi_spec_path": DEFAULT_CDI_SPEC,
    "toolkit_packages": DEFAULT_TOOLKIT_PACKAGES,
    "docker_config": DEFAULT_DOCKER_CONFIG,
    "benign_clock_reasons": BENIGN_CLOCK_REASONS,
    "nvidia_smi_path": None,
    "proc_version_path": DEFAULT_PROC_VERSION,
    "container_engine": "auto",
    "containerd_namespace": DEFAULT_CONTAINERD_NAMESPACE,
    "mig_layout": None,
    # A host declared for training (gpuhost_training): a container must get seed 000's limits (container_limits).
    "training": False,
    # DCGM: gpuhost_dcgm asked for it (its absence fails the dcgm layer), and the level of the diagnostic the health
    # layer runs where it is installed (0: none).
    "dcgm_expected": False,
    "dcgm_diag_level": 1,
    # Compare the host with gpuhost's record too (drift.yml): the result's `drift`.
    "compare_record": False,
    "allow_reboot": False,
    # gpuhost's record: the serving containers it deployed (layer serving).
    "record_path": "/etc/ansible/facts.d/gpuhost.fact",
    # What drift did about the Xids so far (its cursor) and the GPUs it took out of service (xid_policy).
    "xid_state_path": XID_STATE_PATH,
}


def kernel_log_argv(value):
    """kernel_log_command as an argv list (a string is split like a shell would, without a shell)."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return shlex.split(str(value or "dmesg"))


def _run(io, argv):
    rc, out, err = io.run(argv)
    return {"argv": list(argv), "rc": rc, "stdout": out or "", "stderr": err or ""}


def _node(io, path):
    st = io.stat(path)
    if st is None:
        return None
    mode = st.st_mode
    if stat_mod.S_ISCHR(mode):
        kind = "char"
    elif stat_mod.S_ISBLK(mode):
        kind = "block"
    elif stat_mod.S_ISDIR(mode):
        kind = "directory"
    else:
        kind = "file"
    return {"kind": kind, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)}


def _spec_files(io):
    found = {}
    for directory in CDI_DIRS:
        for name in io.listdir(directory) or []:
            if name.endswith((".yaml", ".yml", ".json")):
                path = directory.rstrip("/") + "/" + name
                text = io.read(path)
                if text is not None:
                    found[path] = text
    return found


def capture(io, options=None):
    """Run what the host has (read-only) and return the raw captures for evaluate()."""
    opts = dict(DEFAULT_OPTIONS, **(options or {}))
    caps = {}
    gpu = capture_gpu(io, opts["nvidia_smi_path"], opts["proc_version_path"])
    caps["gpu"] = gpu
    caps["pid_exists"] = lambda pid: io.exists("/proc/%d" % int(pid))
    facts = build_facts(gpu, pid_exists=caps["pid_exists"])
    caps["facts"] = facts
    if any(g.get("compute_mode") not in (None, COMPUTE_DEFAULT) for g in facts.get("gpus") or []):
        # Whose are the processes on a GPU one process at a time may use: a serving container's, or another's.
        caps["gpu_process_cgroups"] = dict((p["pid"], io.read("/proc/%d/cgroup" % int(p["pid"])))
                                           for p in facts.get("processes") or [] if p.get("pid") is not None)
    nodes = {}
    for name in io.listdir("/dev") or []:
        if name.startswith("nvidia"):
            nodes["/dev/" + name] = _node(io, "/dev/" + name)
    for gpu_fact in facts.get("gpus") or []:
        if gpu_fact.get("minor_number") is not None:
            path = "/dev/nvidia%d" % gpu_fact["minor_number"]
            nodes.setdefault(path, _node(io, path))
    for path in ("/dev/nvidiactl", "/dev/nvidia-uvm"):
        nodes.setdefault(path, _node(io, path))
    caps["nodes"] = dict((p, n) for p, n in nodes.items() if n is not None)
    for name in io.listdir("/dev/nvidia-caps") or []:
        node = _node(io, "/dev/nvidia-caps/" + name)
        if node is not None:
            caps["nodes"]["/dev/nvidia-caps/" + name] = node
    readlink = getattr(io, "readlink", None)
    caps["dev_char_links"] = dict(
        (link, readlink(link) if readlink else None)
        for link in dev_char_links(_char_numbers(caps["nodes"])))
    caps["proc_devices"] = io.read("/proc/devices")
    if opts["mig_layout"] or any(g.get("mig_mode") is True for g in facts.get("gpus") or []):
        caps["mig_lgi"] = _run(io, [facts.get("nvidia_smi_path") or opts["nvidia_smi_path"] or "nvidia-smi", "mig",
                                    "-lgi"])
    caps["driver_upgrade"] = io.read(DRIVER_UPGRADE_PATH)
    caps["boot_caps"] = capture_boot(io)
    caps["boot"] = boot_facts(caps["boot_caps"])
    systemctl = io.which("systemctl")
    if systemctl:
        rc, out, _err = io.run([systemctl, "is-active", "nvidia-persistenced"])
        caps["persistenced_active"] = (out or "").strip() or None
        rc, out, _err = io.run([systemctl, "is-enabled", "nvidia-persistenced"])
        caps["persistenced_enabled"] = (out or "").strip() or None
        rc, out, _err = io.run([systemctl, "is-active", FABRIC_MANAGER_SERVICE])
        caps["fabricmanager_active"] = (out or "").strip() or None
        rc, out, _err = io.run([systemctl, "is-active", DCGM_SERVICE])
        caps["dcgm_active"] = (out or "").strip() or None
        dcgmi = io.which("dcgmi")
        if dcgmi and caps["dcgm_active"] == "active" and opts["dcgm_diag_level"]:
            caps["dcgm_diag"] = _run(io, diag_argv(dcgmi, opts["dcgm_diag_level"]))
        if ((facts.get("fabric") or {}).get("need")) == "imex":
            rc, out, _err = io.run([systemctl, "is-active", IMEX_SERVICE])
            caps["imex_active"] = (out or "").strip() or None
    docker = io.which("docker")
    ctr = io.which("ctr")
    caps["engine"] = choose_engine(opts["container_engine"], docker, ctr)
    if caps["engine"] == "containerd":
        return _capture_record_state(io, opts, _capture_containerd(io, opts, caps, ctr))
    caps["docker_path"] = docker
    if docker:
        caps["docker_info"] = _run(io, [docker, "info", "--format", "{{json .}}"])
    caps["daemon_json"] = io.read(opts["docker_config"])
    caps["record"] = io.read(opts["record_path"])
    dockerd = io.which("dockerd")
    if docker and dockerd and parse_docker_info(caps.get("docker_info"))[0] is None:
        # The daemon is down: ask the engine itself what it makes of its config (read-only, 23+).
        caps["dockerd_validate"] = _run(io, [dockerd, "--validate", "--config-file", opts["docker_config"]])
        caps["dockerd_version"] = " ".join(_lines(_out(_run(io, [dockerd, "--version"]))))
    _capture_toolkit(io, opts, caps)
    info, _error = parse_docker_info(caps.get("docker_info")) if docker else (None, None)
    if info and "nvidia" in (info.get("Runtimes") or {}):
        runtime = info["Runtimes"]["nvidia"]
        path = runtime.get("path") if isinstance(runtime, dict) else None
        if path:
            caps["runtime_bin_found"] = bool(io.exists(path) if path.startswith("/") else io.which(path))
    if info:
        # Read-only: `nvidia-smi -L` in each running serving container, as it is.
        caps["serving"] = _run(io, [docker, "ps", "--filter", "label=" + SERVING_LABEL, "--filter", "status=running",
                                    "--format", "{{.Names}}"])
        if caps["serving"]["rc"] == 0:
            caps["serving_exec"] = dict((name, _run(io, [docker, "exec", name, "nvidia-smi", "-L"]))
                                        for name in _lines(caps["serving"]["stdout"]) if name.strip())
        # Every serving container, running or not: the device requests of one that exits and restarts.
        every = _run(io, [docker, "ps", "-a", "--filter", "label=" + SERVING_LABEL, "--format", "{{.Names}}"])
        names = [n.strip() for n in _lines(every["stdout"])] if every["rc"] == 0 else []
        caps["serving_names"] = names
        if names:
            caps["serving_inspect"] = _run(io, [docker, "inspect"] + names)
    if info and opts["container_check"]:
        # Each check and serving image's environment (its NVIDIA_REQUIRE_*), judged against the driver in
        # evaluate(): an image the driver cannot run is named before the container checks fail on it.
        caps["image_env"] = dict(
            (name, _run(io, [docker, "image", "inspect", "--format", "{{json .Config.Env}}", name]))
            for name in _judged_images(opts, caps.get("serving_inspect")))
        base = check_run_argv(docker)
        caps["container_gpus"] = _run(io, base + ["--gpus", "all", opts["check_image"], "nvidia-smi", "-L"])
        if caps["container_gpus"].get("rc") == 0 and opts["gpus_path_container"]:
            # The process environment shows which path --gpus took (NVIDIA_VISIBLE_DEVICES: void for CDI).
            caps["container_env"] = _run(io, base + ["--gpus", "all", "--entrypoint", "env", opts["check_image"]])
        if opts["cuda_probe_image"] and caps["container_gpus"].get("rc") == 0:
            caps["container_cuda"] = _run(io, base + ["--gpus", "all", opts["cuda_probe_image"]]
                                          + list(opts["cuda_probe_command"]))
        if opts["training"]:
            # The limits any container gets (daemon.json's default-ulimits, else dockerd's own): no GPU needed,
            # and `cat` past the image's entrypoint, whose banner would mix with the table.
            caps["container_limits"] = _run(io, base + ["--entrypoint", "cat", opts["check_image"],
                                                        "/proc/self/limits"])
        try:
            config = parse_daemon_json(caps.get("daemon_json"))
        except DaemonJsonError:
            config = {}
        mode = opts["cdi_container_check"]
        if mode == "always" or (mode == "auto" and cdi_enabled(info, config)):
            caps["container_cdi"] = _run(io, base + ["--device", "nvidia.com/gpu=all", opts["check_image"],
                                                     "nvidia-smi", "-L"])
        else:
            caps["container_cdi_skipped"] = (
                "CDI check disabled (cdi_container_check: never)" if mode == "never" else
                "docker %s does not resolve CDI devices (needs 25+ with features.cdi)" % info.get("ServerVersion"))
    elif not opts["container_check"]:
        caps["container_cdi_skipped"] = "container check disabled (container_check)"
    else:
        caps["container_cdi_skipped"] = "docker is not running (docker layer)"
    _capture_kernel_log(io, opts, caps)
    _capture_xid_state(io, opts, caps)
    _capture_basics(io, opts, caps, info)
    return _capture_record_state(io, opts, caps)


def capture_xid(io, options=None):
    """What health.xid_plans decides from, and no more (nvidia_xid_recovery): the GPU facts, the kernel log, the
    boot id, drift's Xid state, the serving containers' inspect and the fabric manager's state."""
    opts = dict(DEFAULT_OPTIONS, **(options or {}))
    caps = {"gpu": capture_gpu(io, opts["nvidia_smi_path"], opts["proc_version_path"])}
    caps["pid_exists"] = lambda pid: io.exists("/proc/%d" % int(pid))
    caps["facts"] = build_facts(caps["gpu"], pid_exists=caps["pid_exists"])
    systemctl = io.which("systemctl")
    if systemctl:
        caps["fabricmanager_active"] = (io.run([systemctl, "is-active", FABRIC_MANAGER_SERVICE])[1] or "").strip() or None
    docker = caps["docker_path"] = io.which("docker")
    if docker:
        every = _run(io, [docker, "ps", "-a", "--filter", "label=" + SERVING_LABEL, "--format", "{{.Names}}"])
        names = [n.strip() for n in _lines(every["stdout"]) if n.strip()] if every["rc"] == 0 else []
        if names:
            caps["serving_inspect"] = _run(io, [docker, "inspect"] + names)
    _capture_kernel_log(io, opts, caps)
    _capture_xid_state(io, opts, caps)
    return caps


def _capture_xid_state(io, opts, caps):
    """What the Xid policy decides from (health.xid_decision): this boot's id, drift's state file, and, where the
    kernel log has Xids, whose the GPUs' processes are (their cgroups name a serving container's id)."""
    caps["boot_id"] = (io.read(BOOT_ID_PATH) or "").strip() or None
    caps["xid_state"] = io.read(opts["xid_state_path"])
    if "gpu_process_cgroups" not in caps and XID.search(_out(caps.get("kernel_log") or {})):
        caps["gpu_process_cgroups"] = dict((p["pid"], io.read("/proc/%d/cgroup" % int(p["pid"])))
                                           for p in caps["facts"].get("processes") or [] if p.get("pid") is not None)


def _capture_record_state(io, opts, caps):
    """With compare_record (drift): the record read (record_read: (record, error)), its driver packages' dpkg state
    and its serving containers' state."""
    if not opts["compare_record"]:
        return caps
    if "record" not in caps:
        caps["record"] = io.read(opts["record_path"])
    record, error = caps["record_read"] = drift.read_record(caps["record"], opts["record_path"])
    if error is None:
        caps["record_dpkg"] = drift.dpkg_state(io, drift.recorded_packages(record))
        caps["record_serving"] = drift.serving_state(io, io.which("docker"), drift.recorded_instances(record))
    return caps


def _drift(captures, opts, diagnosis):
    """The drift against the record (gpuhost_drift's result), or {"error": ...} where the record is unreadable."""
    record, error = captures["record_read"]
    if error:
        return {"error": error}
    return drift.compare(record, diagnosis, captures.get("record_dpkg") or {}, captures.get("record_serving") or {},
                         opts["allow_reboot"])


def _judged_images(opts, serving_inspect):
    """The check image, the CUDA probe's and each serving container's image (as it was created), once each."""
    names = [opts["check_image"], opts["cuda_probe_image"]]
    try:
        containers = json.loads((serving_inspect or {}).get("stdout") or "[]")
    except ValueError:
        containers = []
    names += [(c.get("Config") or {}).get("Image") for c in containers if isinstance(c, dict)]
    return [name for i, name in enumerate(names) if name and name not in names[:i]]


def _image_envs(captures):
    """[(image, Config.Env)] of the judged images the host has (an absent one is the container checks' to name)."""
    found = []
    for name, run in (captures.get("image_env") or {}).items():
        if run.get("rc") == 0:
            try:
                env = json.loads(run.get("stdout") or "null")
            except ValueError:
                continue
            found.append((name, env if isinstance(env, list) else []))
    return found


def _capture_toolkit(io, opts, caps):
    """The toolkit's packages and tools, the CDI specs and what nvidia-ctk lists (every engine)."""
    dpkg_query = io.which("dpkg-query")
    if dpkg_query:
        caps["dpkg"] = _run(io, dpkg.query_argv(dpkg_query, opts["toolkit_packages"]))
    ctk = io.which("nvidia-ctk")
    caps["ctk_path"] = ctk
    caps["hook_path"] = io.which("nvidia-container-runtime-hook")
    caps["cdi_hook_path"] = io.which("nvidia-cdi-hook")
    if ctk:
        caps["ctk_version"] = _run(io, [ctk, "--version"])
        caps["cdi_list"] = _run(io, [ctk, "cdi", "list"])
    caps["cdi_specs"] = _spec_files(io)


def _capture_containerd(io, opts, caps, ctr):
    """containerd's side: the server version, the merged config, and `ctr run --rm` through the nvidia
    runtime's binary (what a RuntimeClass nvidia pod runs), in its own network namespace, pulling nothing."""
    caps["ctr_path"] = ctr
    if ctr:
        caps["ctr_version"] = _run(io, [ctr, "version"])
    containerd = io.which("containerd")
    if containerd:
        caps["containerd_config_dump"] = _run(io, [containerd, "config", "dump"])
    _capture_toolkit(io, opts, caps)
    dump = caps.get("containerd_config_dump") or {}
    binaries = runtime_binaries(dump.get("stdout")) if dump.get("rc") == 0 else {}
    binary = binaries.get("nvidia") or DEFAULT_RUNTIME_BINARY
    if "nvidia" in binaries:
        caps["runtime_bin_found"] = bool(io.exists(binary) if binary.startswith("/") else io.which(binary))
    answering = ctr and parse_ctr_version(_out(caps.get("ctr_version")))["server"]
    if answering and opts["container_check"]:
        base = [ctr, "-n", opts["containerd_namespace"], "run", "--rm", "--runc-binary", binary,
                "--env", "NVIDIA_VISIBLE_DEVICES=all"]
        caps["container_gpus"] = _run(io, base + [normalize_image_ref(opts["check_image"]),
                                                  "gpuhost-stack-check-%d" % os.getpid(), "nvidia-smi", "-L"])
        if opts["cuda_probe_image"] and caps["container_gpus"].get("rc") == 0:
            caps["container_cuda"] = _run(io, base + [normalize_image_ref(opts["cuda_probe_image"]),
                                                      "gpuhost-stack-probe-%d" % os.getpid()]
                                          + list(opts["cuda_probe_command"]))
    # ctr resolves CDI names only from containerd 2.0 (`ctr run --device`); pods get them through the
    # CRI (enable_cdi) and the device plugin, which this check does not stand in for.
    caps["container_cdi_skipped"] = "no CDI container through ctr (containerd's CDI is the CRI's, for pods)"
    _capture_kernel_log(io, opts, caps)
    _capture_xid_state(io, opts, caps)
    _capture_basics(io, opts, caps, None)
    return caps


def _capture_kernel_log(io, opts, caps):
    """The kernel log since boot (dmesg, else the journal where dmesg is restricted)."""
    argv = kernel_log_argv(opts["kernel_log_command"])
    exe = argv[0] if argv[0].startswith("/") else io.which(argv[0])
    if exe:
        caps["kernel_log"] = _run(io, [exe] + argv[1:])
    else:
        caps["kernel_log"] = {"argv": argv, "rc": 127, "stdout": "", "stderr": "%s: not found" % argv[0]}
    journalctl = io.which("journalctl")
    if caps["kernel_log"]["rc"] != 0 and os.path.basename(argv[0]) == "dmesg" and journalctl:
        # kernel.dmesg_restrict=1: "dmesg: read kernel buffer failed: Operation not permitted". The
        # journal keeps the kernel's messages of this boot too.
        journal = _run(io, [journalctl, "-k", "-b", "--no-pager", "-q"])
        if journal["rc"] == 0:
            journal["fallback_from"] = " ".join(_lines(_out(caps["kernel_log"]))[:1])
            caps["kernel_log"] = journal


def _free_space(io, statvfs, path):
    """Free bytes and inodes of the file system `path` is (or would be) on: its nearest existing directory."""
    probe = path
    while probe not in ("", "/") and not io.exists(probe):
        probe = posixpath.dirname(probe)
    try:
        st = statvfs(probe or "/")
    except (IOError, OSError):
        return None
    return {"path": path, "measured": probe or "/", "free": st.f_bavail * st.f_frsize,
            "total": st.f_blocks * st.f_frsize, "free_inodes": st.f_favail, "inodes": st.f_files}


def _capture_basics(io, opts, caps, info):
    """What the layers' generic checks read (layers/generic.py), read-only: the registry's units (`systemctl show`,
    `systemctl cat`, and the journal of a failed one), the users they run as (`getent passwd`), the free space
    where the layers write (statvfs through io), the config files they own."""
    owned = [layer.owns for layer in registry.REGISTRY if layer.owns]
    systemctl = io.which("systemctl")
    if systemctl:
        caps["units_show"] = _run(io, systemd.show_argv(systemctl, [u.name for own in owned for u in own.units]))
        shown = systemd.parse_show(caps["units_show"]["stdout"]) if caps["units_show"]["rc"] == 0 else {}
        caps["units_cat"] = {}
        for name, show in sorted(shown.items()):
            if systemd.unit_state(show) not in (None, "not-found", "masked"):
                cat = _run(io, systemd.cat_argv(systemctl, name))
                if cat["rc"] == 0:
                    caps["units_cat"][name] = cat["stdout"]
        journalctl = io.which("journalctl")
        caps["units_journal"] = dict(
            (name, _run(io, systemd.journal_argv(journalctl, name))) for name, show in sorted(shown.items())
            if journalctl and systemd.unit_state(show) in ("failed", "restarting"))
    definitions = caps.get("units_cat") or {}
    users = sorted(set(user for own in owned for u in own.units
                       for user, _where in systemd.unit_users(definitions.get(u.name), u.user_option)))
    getent = io.which("getent")
    caps["users"] = dict((user, _run(io, [getent, "passwd", user]) if getent else None) for user in users)
    if users and not getent:
        caps["passwd"] = io.read("/etc/passwd")
    caps["docker_root"] = (info or {}).get("DockerRootDir") or DOCKER_ROOT_DEFAULT
    caps["engine_state"] = {"running": info is not None,
                            "version": (info or {}).get("ServerVersion") or caps.get("dockerd_version")}
    statvfs = getattr(io, "statvfs", None)
    if statvfs is not None:
        paths = [caps["docker_root"] if d.path == "docker_root" else d.path for own in owned for d in own.disks]
        caps["disks"] = dict((path, _free_space(io, statvfs, path)) for path in paths)
    caps["configs"] = dict((c.path, io.read(c.path)) for own in owned for c in own.configs if c.path)
