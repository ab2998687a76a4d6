# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Layer `cdi`: the CDI spec present, parseable, fresh for the loaded driver, not shadowed, a version the
engine reads, and `nvidia-ctk cdi list` resolving the devices."""
import re

from ansible.module_utils.containers.cdi_spec import (
    CDI_DIRS, CdiSpecError, FEATURE_NO_ADDITIONAL_GIDS, engine_first_reading, engine_reads, parse_cdi_list,
    read_spec, shadowing, staleness, too_new_for, too_new_message)
from ansible.module_utils.layers.generic import basics
from ansible.module_utils.layers.base import DEFAULT_CDI_SPEC, _cmd, _grep, _lines, evidence, guarded, result

REFRESH_ENV_FILE = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"


def _gpu_device_count(devices):
    """Whole-GPU entries of a spec ('0', '1', ...; not 'all', UUIDs or MIG 'N:M')."""
    return len([d for d in devices if re.match(r"^\d+$", str(d))])


def check_cdi_spec(spec_texts, loaded_version, gpu_count=None, managed=DEFAULT_CDI_SPEC,
                   refresh_env_text=None, mig_refs=None):
    """The managed spec: present, a CDI spec, fresh for the loaded driver, not shadowed, all GPUs, and every live MIG
    device (mig_refs: 'GPU:device' of each, as `nvidia-ctk cdi generate` names them) once MIG layouts change.

    spec_texts: {path: text} for every spec file in the CDI directories (/etc/cdi, /var/run/cdi).
    """
    lines, summaries = [], {}
    for path in sorted(spec_texts):
        try:
            summaries[path] = read_spec(spec_texts[path])
            s = summaries[path]
            lines.append("%s: kind %s, %d device(s), driver %s" % (path, s["kind"], len(s["devices"]),
                                                                   ", ".join(s["driver_versions"]) or "unknown"))
        except CdiSpecError as exc:
            lines.append("%s: %s" % (path, exc))
    if loaded_version:
        lines.append("loaded driver: %s" % loaded_version)
    ev = evidence("ls %s; read each spec" % " ".join(d + "/" for d in CDI_DIRS), lines)
    regen = "`nvidia-ctk cdi generate --output=%s` (role nvidia_cdi: site.yml --tags cdi)" % managed
    data = {"path": managed, "specs": sorted(spec_texts), "devices": [], "driver_versions": [],
            "shadowed_by": []}
    if managed not in spec_texts:
        others = [p for p, s in summaries.items() if s.get("kind") == "nvidia.com/gpu"]
        extra = ""
        if others:
            extra = "; only %s%s" % (", ".join(others), " (wiped at reboot)"
                                     if any(p.startswith("/var/run/") or p.startswith("/run/") for p in others)
                                     else "")
        return result("cdi_spec", "cdi", "fail", "no CDI spec at %s%s" % (managed, extra),
                      remedy="generate it: " + regen, ev=ev, data=data)
    if managed not in summaries:
        return result("cdi_spec", "cdi", "fail", "%s is not a CDI spec" % managed,
                      remedy="regenerate it: " + regen, ev=ev, data=data)
    spec = summaries[managed]
    data.update(devices=spec["devices"], driver_versions=spec["driver_versions"])
    stale = staleness(spec, loaded_version)
    if stale:
        return result("cdi_spec", "cdi", "fail", "%s is stale: %s" % (managed, "; ".join(stale)),
                      remedy="regenerate it for the loaded driver: " + regen, ev=ev, data=data)
    shadows = shadowing(summaries, managed)
    data["shadowed_by"] = shadows
    if shadows:
        stale_shadows = [p for p in shadows if staleness(summaries[p], loaded_version)]
        return result("cdi_spec", "cdi", "fail",
                      "%s defines the same devices as %s and wins over it%s" % (
                          ", ".join(shadows), managed, " (and is stale)" if stale_shadows else ""),
                      remedy="remove %s and point nvidia-cdi-refresh at %s "
                             "(NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=%s in %s; role nvidia_cdi does both)"
                             % (" ".join(shadows), managed, managed, REFRESH_ENV_FILE),
                      ev=ev, data=data)
    count = _gpu_device_count(spec["devices"])
    if gpu_count and count < gpu_count:
        return result("cdi_spec", "cdi", "fail", "%s lists %d GPU(s), nvidia-smi lists %d"
                      % (managed, count, gpu_count), remedy="regenerate it: " + regen, ev=ev, data=data)
    missing = [ref for ref in mig_refs or [] if ref not in spec["devices"]]
    if missing:
        data["mig_missing"] = missing
        return result("cdi_spec", "cdi", "fail", "%s lists no device for MIG device %s (the MIG layout changed after "
                      "it was generated: nvidia.com/gpu=%s is unresolvable)" % (managed, ", ".join(missing), missing[0]),
                      remedy="regenerate it: " + regen, ev=ev, data=data)
    return result("cdi_spec", "cdi", "ok", "%s fresh for driver %s, %d GPU(s), not shadowed"
                  % (managed, ", ".join(spec["driver_versions"]) or loaded_version or "unknown", count),
                  ev=ev, data=data)


def check_cdi_spec_version(spec_texts, engine_versions, managed=DEFAULT_CDI_SPEC):
    """Every CDI spec's cdiVersion against what the installed engines read (cdi_spec.engine_reads).

    spec_texts: {path: text} as for check_cdi_spec; engine_versions: {engine: version} of the engines
    whose version is known ("docker": "26.1.5+dfsg1"). A spec above what an engine reads is a failure
    "spec version too new for <engine> <version>": the engine's CDI library refuses it (for nvidia
    specs with `json: unknown field "additionalGids"`), and its containers get no CDI device.
    """
    versions, lines = {}, []
    for path in sorted(spec_texts):
        try:
            versions[path] = read_spec(spec_texts[path])["cdi_version"]
        except CdiSpecError:
            continue
        lines.append("%s: cdiVersion %s" % (path, versions[path]))
    engines = dict((e, v) for e, v in (engine_versions or {}).items() if v)
    for engine in sorted(engines):
        reads = engine_reads(engine, engines[engine])
        lines.append("%s %s: reads CDI specs up to %s" % (engine, engines[engine], reads or "none (no CDI support)"))
    ev = evidence("read cdiVersion of each spec in %s; the engine's version" % " ".join(d + "/" for d in CDI_DIRS),
                  lines)
    data = {"spec_versions": versions, "engines": dict((e, {"version": v, "reads": engine_reads(e, v)})
                                                       for e, v in engines.items()), "too_new": []}
    if not versions:
        return result("cdi_spec_version", "cdi", "skipped", "no CDI spec to read (cdi_spec check)", ev=ev, data=data)
    if not any(engine_reads(e, v) for e, v in engines.items()):
        return result("cdi_spec_version", "cdi", "skipped", "no engine whose CDI spec versions are known (%s)"
                      % (", ".join("%s %s" % (e, v) for e, v in sorted(engines.items())) or "no engine version"),
                      ev=ev, data=data)
    order = sorted(versions, key=lambda p: (p != managed, p))
    found = [(path, hit) for path in order for hit in too_new_for(versions[path], engines)]
    data["too_new"] = [too_new_message(e, v, r, versions[path], path) for path, (e, v, r) in found]
    if found:
        path, (engine, version, _reads) = found[0]
        first = engine_first_reading(engine, versions[path])
        more = " (and %d more)" % (len(found) - 1) if len(found) > 1 else ""
        return result("cdi_spec_version", "cdi", "fail", data["too_new"][0] + more,
                      remedy="regenerate it for %s %s: `nvidia-ctk cdi generate --feature-flag %s --output=%s` "
                             "(role nvidia_cdi does with nvidia_cdi_engine_compat: auto; site.yml --tags cdi)%s"
                             % (engine, version, FEATURE_NO_ADDITIONAL_GIDS, path,
                                ", or upgrade %s to %s or later" % (engine, first) if first else ""),
                      ev=ev, data=data)
    return result("cdi_spec_version", "cdi", "ok", "%s cdiVersion %s, readable by %s"
                  % (order[0], versions[order[0]], ", ".join("%s %s" % (e, v) for e, v in sorted(engines.items())
                                                             if engine_reads(e, v))), ev=ev, data=data)


def spec_version_decides(cdi_spec, spec_version):
    """A spec that is fresh and not shadowed but too new for the engine fails the cdi_spec check with the
    version finding (one check, so the report keeps its checks); otherwise cdi_spec stands."""
    if cdi_spec["status"] != "ok" or spec_version["status"] != "fail":
        return cdi_spec
    return dict(cdi_spec, status="fail", summary=spec_version["summary"], remedy=spec_version["remedy"],
                evidence=spec_version["evidence"], data=dict(cdi_spec["data"], **spec_version["data"]))


def check_cdi_list(cap, ctk_path):
    """`nvidia-ctk cdi list` resolves nvidia.com/gpu devices (it reads /etc/cdi and /var/run/cdi)."""
    if not ctk_path:
        return result("cdi_list", "cdi", "skipped", "nvidia-ctk not found (toolkit layer)",
                      ev=evidence("nvidia-ctk cdi list", ["nvidia-ctk: not found"]))
    devices = parse_cdi_list(cap.get("stdout")) if cap and cap.get("rc") == 0 else []
    ev = evidence(_cmd(cap), (_lines(cap.get("stdout")) + _grep(cap.get("stderr"), r"found|error|level=")),
                  cap.get("rc"))
    data = {"devices": devices}
    if "nvidia.com/gpu=all" in devices:
        return result("cdi_list", "cdi", "ok", "nvidia-ctk cdi list: %d device name(s)" % len(devices),
                      ev=ev, data=data)
    return result("cdi_list", "cdi", "fail", "`nvidia-ctk cdi list` shows no nvidia.com/gpu=all device",
                  remedy="generate the spec: `nvidia-ctk cdi generate --output=%s`" % DEFAULT_CDI_SPEC,
                  ev=ev, data=data)


def _cdi_spec(ctx):
    facts = ctx.facts
    specs = ctx.get("cdi_specs") or {}
    mig_refs = ["%s:%s" % (g.get("index"), d.get("index")) for g in facts.get("gpus") or []
                if g.get("mig_mode") is True for d in g.get("mig_devices") or []]
    return spec_version_decides(
        guarded("cdi_spec", "cdi", check_cdi_spec, specs, facts.get("driver_version_kernel"), facts.get("gpu_count"),
                ctx.opts["cdi_spec_path"], mig_refs=mig_refs),
        guarded("cdi_spec_version", "cdi", check_cdi_spec_version, specs,
                {ctx.engine: ctx.check("docker")["data"].get("version")}, ctx.opts["cdi_spec_path"]))


def _cdi_list(ctx):
    return guarded("cdi_list", "cdi", check_cdi_list, ctx.get("cdi_list"), ctx.get("ctk_path"))


CHECKS = {"cdi_basics": basics("cdi"), "cdi_spec": _cdi_spec, "cdi_list": _cdi_list}
