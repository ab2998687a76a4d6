# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `container`: a fresh container sees the GPUs (--gpus, CDI where the engine resolves it), CUDA runs
in one, which path --gpus took, and every running serving container still has its GPUs."""
import json

from ansible.module_utils.diagnosis import error_catalogue as catalogue
from ansible.module_utils.containers import gpus_path as gpus_path_mod
from ansible.module_utils.gpu.gpu_refs import gpu_named
from ansible.module_utils.gpu.nvsmi_common import ParseError
from ansible.module_utils.gpu.nvsmi_list import parse_list
from ansible.module_utils.layers.base import (
    DEFAULT_CDI_SPEC, DEFAULT_CHECK_IMAGE, DEFAULT_CUDA_PROBE_COMMAND, ENGINE_WORDS, REMEDY_INSTALL_TOOLKIT,
    TIMEOUT_RC, _cmd, _lines, _out, evidence, guarded, result)
from ansible.module_utils.layers.engine import parse_docker_info
from ansible.module_utils.layers.runtime_config import REMEDY_DEV_CHAR

SERVING_LABEL = "gpuhost.layer=vllm"


def inspected_containers(inspected):
    """The containers of a `docker inspect` capture (its JSON list), [] when the command failed or printed no list."""
    if not inspected or inspected.get("rc") != 0:
        return []
    try:
        containers = json.loads(inspected.get("stdout") or "[]")
    except ValueError:
        return []
    return [c for c in containers if isinstance(c, dict)] if isinstance(containers, list) else []


_LOST_DEVICES = next(e for e in catalogue.ENTRIES if e["kind"] == "daemon_reload_lost_devices")


def check_serving_gpus(listing, execs, dev_char_check=None):
    """`nvidia-smi -L` inside every running serving container (docker exec, read-only) lists GPUs. A container
    whose NVML says "Unknown Error" lost its device access (a systemd reload without /dev/char links)."""
    command = "docker ps --filter label=%s --filter status=running; docker exec NAME nvidia-smi -L" % SERVING_LABEL
    if listing is None:
        return result("serving_gpus", "container", "skipped", "docker is not running (docker layer)",
                      ev=evidence(command))
    if listing.get("rc") != 0:
        return result("serving_gpus", "container", "warn", "could not list the serving containers: %s"
                      % " ".join(_lines(_out(listing))[:1]), remedy="read the evidence",
                      ev=evidence(_cmd(listing), _lines(_out(listing))[:3], listing.get("rc")))
    if not execs:
        return result("serving_gpus", "container", "ok", "no serving container running (label %s)" % SERVING_LABEL,
                      ev=evidence(_cmd(listing)))
    lost, broken, fine, lines = [], [], [], []
    for name in sorted(execs):
        cap = execs[name]
        out_lines = _lines(_out(cap))
        seen = _container_uuids(cap.get("stdout")) if cap.get("rc") == 0 else []
        if seen:
            fine.append(name)
            lines.append("%s: %d GPU(s)" % (name, len(seen)))
            continue
        said = [l.strip() for l in out_lines if catalogue.matches(_LOST_DEVICES, l)]
        line = said[0] if said else (out_lines[-1].strip() if out_lines else "exit %s" % cap.get("rc"))
        (lost if said else broken).append((name, line))
        lines.append("%s: %s" % (name, line))
    data = {"ok": fine, "lost": [n for n, _l in lost], "failed": [n for n, _l in broken]}
    ev = evidence(command, lines)
    if lost:
        names = ", ".join(n for n, _l in lost)
        links_absent = bool(dev_char_check and dev_char_check.get("data", {}).get("missing"))
        cause = ("systemd reload without /dev/char links" if links_absent or dev_char_check is None else
                 "a systemd reload, or another cgroup update, took its devices; the /dev/char links are there now")
        data["cause"] = cause
        return result("serving_gpus", "container", "fail",
                      "container %s lost its GPU devices (%s): nvidia-smi inside says %s" % (names, cause, lost[0][1]),
                      remedy="recreate %s (`docker restart %s`, or site.yml --tags vllm); create the links so that the "
                             "next reload does not take them again: %s" % (names, lost[0][0], REMEDY_DEV_CHAR),
                      ev=ev, data=data)
    if broken:
        return result("serving_gpus", "container", "fail", "nvidia-smi fails inside serving container %s: %s"
                      % (", ".join(n for n, _l in broken), broken[0][1]),
                      remedy="read the evidence; `docker logs %s`" % broken[0][0], ev=ev, data=data)
    return result("serving_gpus", "container", "ok", "every serving container lists its GPUs (%s)" % ", ".join(fine),
                  ev=ev, data=data)


def check_gpus_path(info_cap, cdi_hook_path, runtime_hook_path, env_cap=None, gpus_cap=None, cdi_spec_check=None):
    """Which way `--gpus` reached the GPUs: docker's legacy hook or CDI (module_utils/gpus_path). Docker 29.2+
    tries CDI first where nvidia-cdi-hook is installed, so a stale spec then breaks --gpus too, and a spec
    that does not resolve sends it back to the hook. env_cap: `docker run --gpus all --entrypoint env`
    (the process environment, where the path shows); gpus_cap: the --gpus container check's run."""
    command = ("docker info; command -v %s %s; docker run --rm --gpus all --entrypoint env IMAGE"
               % (gpus_path_mod.CDI_HOOK, gpus_path_mod.RUNTIME_HOOK))
    info, _error = parse_docker_info(info_cap)
    if info is None:
        return result("gpus_path", "container", "skipped", "docker is not running (docker layer)", ev=evidence(command))
    env = _lines(env_cap.get("stdout")) if env_cap and env_cap.get("rc") == 0 else None
    failed_text = _out(gpus_cap) if gpus_cap and gpus_cap.get("rc") not in (0, None) else None
    hooks = dict(cdi_hook_on_path=bool(cdi_hook_path), runtime_hook_on_path=bool(runtime_hook_path))
    found = gpus_path_mod.gpus_path(info, env=env, error_text=failed_text, **hooks)
    predicted = gpus_path_mod.predict(info, **hooks)
    visible = gpus_path_mod.visible_devices(env)
    lines = ["docker %s, CDI spec dirs: %s" % (info.get("ServerVersion"), ", ".join(info.get("CDISpecDirs") or [])
                                               or "none (CDI off)"),
             "%s: %s" % (gpus_path_mod.CDI_HOOK, cdi_hook_path or "not on PATH"),
             "%s: %s" % (gpus_path_mod.RUNTIME_HOOK, runtime_hook_path or "not on PATH")]
    if env is not None:
        lines.append("in the container: %s=%s" % (gpus_path_mod.VISIBLE, visible if visible is not None else "(unset)"))
    elif failed_text:
        lines += _lines(failed_text)[-2:]
    data = {"path": found["path"], "reason": found["reason"], "predicted": predicted["path"],
            "engine_version": info.get("ServerVersion"), "cdi_hook": cdi_hook_path, "runtime_hook": runtime_hook_path,
            "visible_devices": visible}
    ev = evidence(_cmd(env_cap) if env is not None else command, lines)
    line = gpus_path_mod.report_line(found)
    if env is not None and found["path"] == "legacy" and predicted["path"] == "cdi":
        return result("gpus_path", "container", "warn", "docker %s fell back from CDI to the hook for --gpus: %s"
                      % (info.get("ServerVersion"), found["reason"]),
                      remedy="make the spec resolve: `nvidia-ctk cdi list` must list nvidia.com/gpu=all (role nvidia_cdi, "
                             "site.yml --tags cdi); `journalctl -u docker` says why the injection failed",
                      ev=ev, data=data)
    if found["path"] == "cdi" and cdi_spec_check and cdi_spec_check.get("status") == "fail":
        return result("gpus_path", "container", "warn", "--gpus goes through CDI, so the CDI spec's fault breaks --gpus "
                      "containers too (%s)" % cdi_spec_check.get("summary"), remedy=cdi_spec_check.get("remedy"),
                      ev=ev, data=data)
    if found["path"] == "unknown" and (failed_text or (gpus_cap is None and predicted["path"] == "unknown")):
        return result("gpus_path", "container", "warn", line,
                      remedy="install the NVIDIA Container Toolkit (site.yml --tags toolkit) and restart docker: "
                             "dockerd looks for %s and %s on its PATH when it starts"
                             % (gpus_path_mod.CDI_HOOK, gpus_path_mod.RUNTIME_HOOK), ev=ev, data=data)
    return result("gpus_path", "container", "ok", line, ev=ev, data=data)


def _first_in_scope(cap, scope):
    """(kind, decisive line) of the first entry of the error table's `scope` that a line of the output
    matches, in the table's order; None when none does."""
    lines = _lines(_out(cap))
    for kind, entry in catalogue.in_scope(scope):
        for line in lines:
            if catalogue.matches(entry, line):
                return kind, line.strip()
    return None


def classify_container(cap):
    """Why a `docker run ... nvidia-smi -L` failed: (kind, decisive line)."""
    found = _first_in_scope(cap, "container")
    if found:
        return found
    lines = _lines(_out(cap))
    return "other", (lines[-1].strip() if lines else "exit status %s, no output" % cap.get("rc"))


def _container_uuids(stdout):
    try:
        return [g["uuid"] for g in parse_list(stdout)["gpus"] if g.get("uuid")]
    except ParseError:
        return []


def check_container(cap, host_uuids, image, mode="gpus", name=None, engine="docker"):
    """A --rm container started with --gpus all (or --device nvidia.com/gpu=all; on containerd, `ctr run`
    through the nvidia runtime) lists the host's GPUs."""
    words = ENGINE_WORDS[engine]
    name = name or ("container_gpus" if mode == "gpus" else "container_cdi")
    flag = words["gpus"] if mode == "gpus" else "--device nvidia.com/gpu=all"
    if cap is None:
        return result(name, "container", "skipped", "not run", ev=evidence("%s %s %s nvidia-smi -L"
                                                                           % (words["run"], flag, image)))
    seen = _container_uuids(cap.get("stdout")) if cap.get("rc") == 0 else []
    data = {"image": image, "mode": mode, "uuids": seen, "host_uuids": list(host_uuids or [])}
    if cap.get("rc") == 0 and seen:
        lines = _lines(cap.get("stdout"))
        missing = [u for u in host_uuids or [] if u not in seen]
        ev = evidence(_cmd(cap), lines, cap.get("rc"))
        if missing:
            return result(name, "container", "fail", "a %s container sees %d of the host's %d GPUs (missing %s)"
                          % (flag, len(host_uuids) - len(missing), len(host_uuids), ", ".join(missing)),
                          remedy="regenerate the CDI spec and re-run `nvidia-ctk runtime configure "
                                 "--runtime=%s`, %s" % (engine, words["restart"]), ev=ev, data=data)
        return result(name, "container", "ok", "a %s container lists %d GPU(s)" % (flag, len(seen)),
                      ev=ev, data=data)
    kind, line = classify_container(cap) if cap.get("rc") != 0 else ("no_gpus", "nvidia-smi -L listed no GPU")
    if cap.get("rc") == TIMEOUT_RC:
        kind, line = "timeout", "%s timed out" % words["run"].rsplit(" ", 1)[0]
    ev = evidence(_cmd(cap), [line] + [l for l in _lines(_out(cap)) if l.strip() != line][:5], cap.get("rc"))
    data["cause"] = kind
    configure_again = "re-run `nvidia-ctk runtime configure --runtime=%s`, %s" % (engine, words["restart"])
    table = {
        "image_absent": ("warn", "the check image %s is not on the host (the check does not pull)" % image,
                         "load it (%s, gpu_validate_check_image_archive) or pull it, "
                         "or set check_image to an image that is present" % words["load"]),
        "runtime_unknown": ("fail", "%s does not know the nvidia runtime" % engine, words["configure"]),
        "no_gpu_driver": ("fail", "%s cannot start GPU containers (no nvidia-container-runtime-hook)" % engine,
                          REMEDY_INSTALL_TOOLKIT + ", then " + words["restart"]),
        "cdi_unresolvable": ("fail", "docker cannot resolve the CDI device nvidia.com/gpu=all",
                             "regenerate the spec: `nvidia-ctk cdi generate --output=%s`" % DEFAULT_CDI_SPEC),
        "driver": ("fail", "the toolkit cannot use the driver", "fix the driver layer first (nvidia-smi on the host)"),
        "no_nvidia_smi": ("fail", "the image %s has no usable nvidia-smi: the toolkit injects the host's only "
                                  "with the utility capability (NVIDIA_DRIVER_CAPABILITIES), and it needs glibc "
                                  "in the image" % image,
                          "use an image that keeps NVIDIA_DRIVER_CAPABILITIES with utility (e.g. %s) or run with "
                          "`-e NVIDIA_DRIVER_CAPABILITIES=compute,utility`" % DEFAULT_CHECK_IMAGE),
        "mount": ("fail", "the container could not mount the driver files",
                  "regenerate the CDI spec for the loaded driver and " + configure_again),
        "timeout": ("fail", "the container did not finish", "a hung GPU: read `dmesg | grep -i xid`"),
        "no_gpus": ("fail", "the container lists no GPU", configure_again + ", regenerate the CDI spec"),
        "other": ("fail", "the container failed", "read the evidence; if the driver was just updated, "
                  + configure_again),
    }
    status, summary, remedy = table[kind]
    if mode == "cdi" and kind == "mount":
        summary = "the CDI container could not mount what the spec names (stale spec?)"
    return result(name, "container", status, "%s: %s" % (flag, summary), remedy=remedy, ev=ev, data=data)


def check_run_argv(docker):
    """`docker run` of a check container: removed after, never pulled (a missing image is reported; Docker 20.10+),
    no network."""
    return [docker, "run", "--rm", "--pull", "never", "--network", "none"]


def check_cuda_probe(cap, image, command=DEFAULT_CUDA_PROBE_COMMAND, skipped=None, engine="docker", gpus=None):
    """NVIDIA's vectorAdd sample in a --gpus all container (on containerd, `ctr run` through the nvidia
    runtime): CUDA initialises, allocates and runs a kernel. gpus: the flag where it is not all GPUs (one GPU just
    reset: `--gpus device=1`)."""
    words = dict(ENGINE_WORDS[engine], gpus=gpus) if gpus else ENGINE_WORDS[engine]
    cmd = "%s %s %s %s" % (words["run"], words["gpus"], image, " ".join(command))
    if cap is None:
        return result("container_cuda", "container", "skipped", skipped or "not run", ev=evidence(cmd))
    lines = _lines(_out(cap))
    if cap.get("rc") == 0 and any(l.strip() == "Test PASSED" for l in lines):
        return result("container_cuda", "container", "ok", "CUDA initialises in a %s container (vectorAdd: "
                      "Test PASSED)" % words["gpus"], ev=evidence(_cmd(cap), lines, cap.get("rc")),
                      data={"image": image})
    found = _first_in_scope(cap, "cuda")  # its errors go to stderr, its banner to stdout
    if found is None:
        container = classify_container(cap)
        if container[0] == "image_absent":
            return result("container_cuda", "container", "warn",
                          "the CUDA probe image %s is not on the host (the check does not pull): CUDA "
                          "initialisation in containers is not proven" % image,
                          remedy="pull it (site.yml does: gpu_validate_cuda_probe_image), load it "
                                 "(%s, gpu_validate_cuda_probe_image_archive), or set gpu_validate_cuda_probe_image: "
                                 "''" % words["load"],
                          ev=evidence(_cmd(cap), [container[1]], cap.get("rc")),
                          data={"image": image, "cause": "image_absent"})
        found = ("timeout", "%s timed out" % words["run"].rsplit(" ", 1)[0]) if cap.get("rc") == TIMEOUT_RC \
            else ("other", container[1])
    kind, line = found
    entry = next((e for k, e in catalogue.in_scope("cuda") if k == kind), None)
    summary = "CUDA fails in a %s container: %s" % (words["gpus"], entry["meaning"] if entry else line)
    remedy = entry["fix"] if entry else "read the evidence"
    ev = evidence(_cmd(cap), [line] + [l for l in lines if l.strip() != line][:5], cap.get("rc"))
    return result("container_cuda", "container", "fail", summary, remedy=remedy, ev=ev,
                  data={"image": image, "cause": kind, "line": line})


def mig_decides(cuda_probe, hardware):
    """CUDA busy or without a device in a whole-GPU container while GPUs have MIG mode on: MIG is the cause
    (such a container gets no MIG device), said with the GPUs and both ways out."""
    if cuda_probe["status"] != "fail" or cuda_probe["data"].get("cause") not in ("busy", "no_device"):
        return cuda_probe
    mig = [g for g in hardware["data"].get("gpus") or [] if g.get("mig_mode") is True]
    if not mig:
        return cuda_probe
    names = ", ".join("GPU %s" % g["index"] for g in mig)
    return dict(cuda_probe, summary="CUDA fails in a --gpus all container: %s %s MIG mode on and the container "
                                    "gets no MIG device (vectorAdd: %s)"
                                    % (names, "has" if len(mig) == 1 else "have", cuda_probe["data"].get("line")),
                remedy="give containers MIG devices (`--device nvidia.com/gpu=%s:0`, MIG layouts) or turn MIG off: "
                       "`nvidia-smi -i %s -mig 0` (a GPU in use keeps the change pending until it is idle and reset, "
                       "or a reboot)" % (mig[0]["index"], ",".join(str(g["index"]) for g in mig)),
                data=dict(cuda_probe["data"], mig_gpus=[g["index"] for g in mig]))


def _requested_gpus(container, gpus):
    """The GPU facts a container's `docker inspect` device requests give it whole: `--gpus all` (Count -1, or
    "all") every GPU, a GPU index or UUID that GPU; a MIG device (`GPU:device`, `MIG-<uuid>`) no GPU whole."""
    out = []
    for req in (container.get("HostConfig") or {}).get("DeviceRequests") or []:
        if "gpu" not in [c for group in req.get("Capabilities") or [] for c in group or []]:
            continue
        ids = [str(i).strip() for i in req.get("DeviceIDs") or []]
        if req.get("Count") == -1 or "all" in ids:
            out.extend(gpus)
            continue
        for ref in ids:
            gpu = gpu_named(ref, gpus, whole=True)
            if gpu is not None:
                out.append(gpu)
    return out


def _container_name(container):
    return (container.get("Name") or "").lstrip("/") or container.get("Id")


def serving_by_gpu(containers, gpus):
    """{GPU index: [names]} of the inspected serving containers on each GPU: given it whole (`--gpus all`, an index
    or UUID) or one of its MIG devices."""
    out = {}
    for container in containers or []:
        found = [g["index"] for g in _requested_gpus(container, gpus)]
        for req in (container.get("HostConfig") or {}).get("DeviceRequests") or []:
            for ref in req.get("DeviceIDs") or []:
                gpu = gpu_named(str(ref).strip(), gpus) if str(ref).strip() != "all" else None
                if gpu is not None:
                    found.append(gpu["index"])
        for index in sorted(set(found)):
            out.setdefault(index, []).append(_container_name(container))
    return out


def gpu_processes(facts, cgroups, containers):
    """{GPU index: [{pid, name, container, serving}]}: each GPU's compute processes, a serving container's named by
    the container whose id is in the process's cgroup (cgroups: {pid: /proc/PID/cgroup text})."""
    ids = dict((c.get("Id"), _container_name(c)) for c in containers or [] if c.get("Id"))
    # A container's own first process (docker inspect's State.Pid) is its even where the cgroup is not readable.
    pids = dict(((c.get("State") or {}).get("Pid"), _container_name(c)) for c in containers or []
                if (c.get("State") or {}).get("Pid"))
    out = {}
    for proc in facts.get("processes") or []:
        if proc.get("gpu_index") is None:
            continue
        text = (cgroups or {}).get(proc.get("pid")) or ""
        owner = pids.get(proc.get("pid")) or next((name for cid, name in ids.items() if cid in text), None)
        cgroup = text.strip().splitlines()[-1] if text.strip() else None
        out.setdefault(int(proc["gpu_index"]), []).append(
            {"pid": proc.get("pid"), "name": proc.get("name"), "container": owner, "serving": owner is not None,
             "cgroup": cgroup})
    return out


def mig_whole_decides(serving_check, execs, facts, inspected=None):
    """A serving container given a MIG-enabled GPU whole: CUDA there finds no device, so vLLM cannot start or serve
    (it exits and docker restarts it). Seen in a running container's `nvidia-smi -L` (the GPU, no MIG device under
    it) or in any serving container's device requests (`docker inspect`: a GPU index or UUID, or all). Decides the
    serving check: the cause of a container that fails or restarts there."""
    gpus = [g for g in facts.get("gpus") or [] if g.get("index") is not None]
    mig = dict((g.get("uuid"), g) for g in gpus if g.get("mig_mode") is True and g.get("uuid"))
    if not mig or serving_check.get("status") == "skipped":
        return serving_check
    whole = []
    for name in sorted(execs or {}):
        cap = execs[name]
        if cap.get("rc") != 0:
            continue
        try:
            listed = parse_list(cap.get("stdout") or "")
        except ParseError:
            continue
        for gpu in listed["gpus"]:
            if gpu.get("uuid") in mig and not gpu.get("mig_devices"):
                whole.append((name, mig[gpu["uuid"]].get("index")))
    for container in inspected_containers(inspected):
        name = (container.get("Name") or "").lstrip("/")
        for gpu in _requested_gpus(container, gpus):
            if gpu.get("uuid") in mig and (name, gpu.get("index")) not in whole:
                whole.append((name, gpu.get("index")))
    if not whole:
        return serving_check
    whole.sort(key=lambda item: (item[0], item[1]))
    name, index = whole[0]
    data = dict(serving_check.get("data") or {}, mig_whole=[{"container": n, "gpu": i} for n, i in whole])
    names = sorted(set(n for n, _i in whole))
    summary = ("serving container %s is given GPU %s whole, but MIG is enabled there: CUDA in it sees no device (a "
               "MIG-enabled GPU offers only its MIG devices)" % (", ".join(names), index))
    broken = set((serving_check.get("data") or {}).get("lost") or []) | set((serving_check.get("data") or {}).get("failed") or [])
    if serving_check.get("status") == "fail" and not broken <= set(names):
        # another container's own failure stays the finding; the MIG one is added to it
        return dict(serving_check, summary="%s; also %s" % (serving_check.get("summary"), summary), data=data)
    return dict(serving_check, status="fail",
                summary=summary,
                remedy="give the instance a MIG device (vllm_instances gpus: '%s:0' or its MIG-<uuid>, `nvidia-smi -L`) "
                       "or turn MIG off on GPU %s (nvidia_mig_layout: {'%s': disabled})" % (index, index, index),
                data=data)


def _host_uuids(facts):
    return [g.get("uuid") for g in facts.get("gpus") or [] if g.get("uuid")]


def _container_gpus(ctx):
    image, engine, words = ctx.opts["check_image"], ctx.engine, ctx.words
    gpus_cmd = evidence("%s %s %s nvidia-smi -L" % (words["run"], words["gpus"], image))
    if not ctx.opts["container_check"]:
        return result("container_gpus", "container", "skipped", "container check disabled (container_check)",
                      ev=gpus_cmd)
    if ctx.check("docker")["status"] != "ok":
        return result("container_gpus", "container", "skipped", "%s is not running (%s layer)"
                      % (engine, "docker" if engine == "docker" else "engine"), ev=gpus_cmd)
    return guarded("container_gpus", "container", check_container, ctx.get("container_gpus"), _host_uuids(ctx.facts),
                   image, "gpus", engine=engine)


def _container_cdi(ctx):
    image = ctx.opts["check_image"]
    if ctx.get("container_cdi") is not None:
        return guarded("container_cdi", "container", check_container, ctx.get("container_cdi"),
                       _host_uuids(ctx.facts), image, "cdi")
    return result("container_cdi", "container", "skipped", ctx.get("container_cdi_skipped") or "not run",
                  ev=evidence("%s --device nvidia.com/gpu=all %s nvidia-smi -L" % (ctx.words["run"], image)))


def _container_cuda(ctx):
    words, probe_image = ctx.words, ctx.opts["cuda_probe_image"]
    probe_cmd = "%s %s %s" % (words["run"], words["gpus"], probe_image or "<cuda_probe_image>")
    if not probe_image:
        cuda_probe = result("container_cuda", "container", "skipped", "CUDA probe disabled (cuda_probe_image: '')",
                            ev=evidence(probe_cmd))
    elif ctx.check("container_gpus")["status"] != "ok":
        cuda_probe = result("container_cuda", "container", "skipped", "the %s container check did not pass"
                            % words["gpus"], ev=evidence("%s %s" % (probe_cmd, " ".join(ctx.opts["cuda_probe_command"]))))
    else:
        cuda_probe = guarded("container_cuda", "container", check_cuda_probe, ctx.get("container_cuda"),
                             probe_image, ctx.opts["cuda_probe_command"], engine=ctx.engine)
    return mig_decides(cuda_probe, ctx.check("hardware"))


def _gpus_path(ctx):
    engine, docker_check = ctx.engine, ctx.check("docker")
    if engine == "docker" and docker_check["status"] == "ok":
        return guarded("gpus_path", "container", check_gpus_path, ctx.get("docker_info"), ctx.get("cdi_hook_path"),
                       ctx.get("hook_path"), ctx.get("container_env"), ctx.get("container_gpus"), ctx.check("cdi_spec"))
    return result("gpus_path", "container", "skipped", "%s is not running" % engine
                  if docker_check["status"] != "ok" else "`ctr run` goes through the nvidia runtime, "
                  "not docker's --gpus", ev=evidence("docker info; docker run --rm --gpus all "
                                                     "--entrypoint env IMAGE"))


def _serving_gpus(ctx):
    engine, docker_check = ctx.engine, ctx.check("docker")
    if engine == "docker" and docker_check["status"] == "ok":
        serving = guarded("serving_gpus", "container", check_serving_gpus, ctx.get("serving"),
                          ctx.get("serving_exec") or {}, ctx.check("dev_char"))
        return mig_whole_decides(serving, ctx.get("serving_exec") or {}, ctx.facts, ctx.get("serving_inspect"))
    return result("serving_gpus", "container", "skipped", "%s is not running" % engine
                  if docker_check["status"] != "ok" else "serving containers run on docker",
                  ev=evidence("docker exec NAME nvidia-smi -L"))


CHECKS = {"container_gpus": _container_gpus, "gpus_path": _gpus_path, "container_cdi": _container_cdi,
          "container_cuda": _container_cuda, "serving_gpus": _serving_gpus}
