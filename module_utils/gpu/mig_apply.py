# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""MIG: bring a host's GPUs to a declared layout (the nvidia_mig module and the boot script share it).

Pure stdlib (python >= 3.9), no Ansible imports. Every nvidia-smi call goes through `run(argv) ->
(rc, stdout, stderr)`, a HostIO's run (host/runner.py), so the same code runs from the module
(ModuleHostIO), from the boot unit's script (SubprocessHostIO, `main()` below) and in tests (a simulated
or recorded nvidia-smi).

    normalise_layout(layout)            {gpu index: [profile names] | "disabled"}; LayoutError when malformed
    apply(layout, run, check_mode, allow_disruption, reset, clients)   read, validate, refuse, change; a result dict
    main(argv, run=None)                the boot script: apply the layout file, print what was done

The order, per run (nothing changes until every declared GPU passed the checks that can be made):
1. `nvidia-smi -q -x`: each GPU's MIG mode (current, pending) and its processes.
2. Every declared GPU must exist and support MIG. On GPUs whose MIG mode is on, the layout is validated
   against the GPU's own -lgip/-lgipp (mig_parse.validate_layout: a profile the GPU does not offer is
   named with the list of those it offers) and the instances to keep/destroy/create are decided
   (mig_parse.layout_diff).
3. A GPU that would change while a process runs on it is refused unless allow_disruption.
4. Changes: MIG mode on (`nvidia-smi -i N -mig 1`); where the mode stays pending (Ampere, which needs a
   reset; a client holding the GPU), `nvidia-smi -r -i N` when `reset`, else a refusal saying to reset or
   reboot. -lgip cannot be read before MIG mode is on ("No MIG-enabled devices found."): a GPU whose mode
   this run turned on is validated right after, and a layout it cannot hold turns MIG mode off again
   before the refusal. Then the nvidia-smi mig commands of mig_parse.mig_commands, and a final -lgi that
   must show the declared layout. `disabled`: the GPU's instances destroyed, MIG mode off.
   Around a MIG mode change, the active `clients` (systemd units of driver clients that keep every GPU open:
   DCGM's host engine, its exporter, NVSM) are stopped and started again afterwards, whatever happened, as
   NVIDIA's mig-parted does (deployments/systemd/hooks.sh, pre-apply-mode / apply-exit): with them running the
   mode stays pending and the reset fails. The boot script passes none: its unit runs before them.

GPUs the layout does not name are never touched. An empty list means MIG mode on and no instance.
"""
import json
import sys

from ansible.module_utils.gpu import mig_parse
from ansible.module_utils.gpu.nvsmi_common import ParseError
from ansible.module_utils.gpu.nvsmi_xml import parse_xml
from ansible.module_utils.host.runner import SubprocessHostIO

DISABLED = "disabled"
LAYER = "MIG layer (nvidia_mig)"
# Seconds each nvidia-smi call of the boot script may run (a GPU reset takes a while).
BOOT_TIMEOUT = 300
# The driver clients stopped around a MIG mode change, in stop order (mig-parted's driver and k8s services that
# hold GPUs: the exporter before the host engine it reads); started again in the reverse order.
CLIENTS = ("dcgm-exporter.service", "nvsm.service", "nvidia-dcgm.service")


class MigError(Exception):
    """A refusal or a failure: `msg` names the layer, the GPU and the fix; `changed` says whether this run
    had already changed something when it stopped."""

    def __init__(self, msg, changed=False, details=None):
        Exception.__init__(self, msg)
        self.msg = msg
        self.changed = changed
        self.details = details or {}


class LayoutError(MigError):
    pass


# ---------------------------------------------------------------------------------------------
# the declared layout


def normalise_layout(layout):
    """{'0': ['3g.40gb', '3g.40gb'], '1': 'disabled'} -> {0: ['3g.40gb', '3g.40gb'], 1: 'disabled'}.

    Keys are nvidia-smi GPU indexes (int or digit strings); values a list of profile names (one per GPU
    instance, `MIG 3g.40gb` and upper case accepted) or `disabled`. None / {} -> {}."""
    if not layout:
        return {}
    if not isinstance(layout, dict):
        raise LayoutError("%s: nvidia_mig_layout must be a mapping of GPU index to a list of MIG profile names "
                          "or 'disabled', not %r" % (LAYER, layout))
    out = {}
    for key, value in layout.items():
        text = str(key).strip()
        if not text.isdigit():
            raise LayoutError("%s: nvidia_mig_layout key %r is not a GPU index (0, 1, ... as nvidia-smi -L "
                              "numbers the GPUs)" % (LAYER, key))
        if isinstance(value, str) and value.strip().lower() == DISABLED:
            out[int(text)] = DISABLED
            continue
        if value is None or isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise LayoutError("%s: nvidia_mig_layout[%s] must be a list of MIG profile names (like "
                              "[3g.40gb, 3g.40gb]) or 'disabled', not %r" % (LAYER, text, value))
        try:
            out[int(text)] = [mig_parse.profile_name(name) for name in value]
        except ParseError as exc:
            raise LayoutError("%s: nvidia_mig_layout[%s]: %s" % (LAYER, text, exc))
    return out


# ---------------------------------------------------------------------------------------------
# reading the live state


def _call(run, argv, what, ok=(0,)):
    rc, out, err = run(argv)
    if rc not in ok:
        raise MigError("%s: `%s` failed (exit %s) while %s: %s"
                       % (LAYER, " ".join(argv), rc, what, (out + err).strip() or "no output"))
    return rc, out


def read_gpus(run):
    """{index: {index, name, uuid, pci_bus_id, mig_mode, mig_mode_pending, status, processes}} from
    `nvidia-smi -q -x`; processes are the GPU's (pid, name, gpu_instance_id, compute_instance_id)."""
    _rc, out = _call(run, ["nvidia-smi", "-q", "-x"], "reading the GPUs")
    try:
        facts = parse_xml(out)
    except ParseError as exc:
        raise MigError("%s: cannot read `nvidia-smi -q -x`: %s" % (LAYER, exc))
    gpus = {}
    for gpu in facts["gpus"]:
        gpus[gpu["index"]] = {
            "index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"], "pci_bus_id": gpu["pci_bus_id"],
            "mig_mode": gpu["mig_mode"], "mig_mode_pending": gpu["mig_mode_pending"],
            "status": mig_parse.mig_mode_status(gpu["mig_mode"], gpu["mig_mode_pending"]),
            "processes": [{"pid": p["pid"], "name": p["name"], "gpu_instance_id": p["gpu_instance_id"],
                           "compute_instance_id": p["compute_instance_id"]}
                          for p in facts["processes"] if p["gpu_index"] == gpu["index"]],
        }
    return gpus


_LISTINGS = (("lgip", mig_parse.parse_lgip), ("lgipp", mig_parse.parse_lgipp),
             ("lgi", mig_parse.parse_lgi), ("lci", mig_parse.parse_lci))


def read_mig(run, index):
    """One MIG-enabled GPU's -lgip, -lgipp, -lgi and -lci rows ("No ... instances found" is exit 6, no rows)."""
    found = {}
    for form, parser in _LISTINGS:
        argv = ["nvidia-smi", "mig", "-i", str(index), "-" + form]
        rc, out = _call(run, argv, "reading GPU %d's MIG state" % index, ok=(0, 6))
        if rc == 6 and mig_parse.detect_mig_form(out) != "none_found":
            raise MigError("%s: `%s` says: %s" % (LAYER, " ".join(argv), out.strip()))
        try:
            rows = parser(out) if (rc == 0 or form in ("lgi", "lci")) else []
        except ParseError as exc:
            raise MigError("%s: cannot read `%s`: %s" % (LAYER, " ".join(argv), exc))
        found[form] = mig_parse.for_gpu(rows, index)
    return found


def instance_names(lgi_rows):
    """The GPU instances' profile names in placement order: what the layout is compared with."""
    return [gi["name"] for gi in sorted(lgi_rows, key=lambda gi: (gi["placement_start"], gi["instance_id"]))]


def describe(status, names):
    if status in ("disabled", "not_supported"):
        return "MIG %s" % status.replace("_", " ")
    return "MIG %s: %s" % (status.replace("_", " "), ", ".join(names) if names else "no instances")


# ---------------------------------------------------------------------------------------------
# deciding


def _label(gpu):
    return "GPU %d (%s)" % (gpu["index"], gpu["name"] or gpu["uuid"] or "?")


def _problems_message(gpu, problems, mig):
    offered = ", ".join("%s (%d/%d)" % (p["name"], p["instances_free"], p["instances_total"]) for p in mig["lgip"])
    return ("%s: the declared layout does not fit %s: %s. %s offers: %s. Fix nvidia_mig_layout[%d]; nothing was "
            "changed on this GPU." % (LAYER, _label(gpu), "; ".join(problems), _label(gpu), offered, gpu["index"]))


def plan_gpu(gpu, want, mig=None):
    """What one GPU needs. mig: read_mig()'s rows when MIG mode is on. Raises MigError for a layout it
    cannot hold. Returns {gpu, want, before, enable, disable, reset, diff, commands, validated}."""
    status = gpu["status"]
    plan = {"gpu": gpu["index"], "want": want, "status": status, "enable": False, "disable": False,
            "diff": None, "commands": [], "validated": False,
            "before": instance_names(mig["lgi"]) if mig else []}
    if status == "not_supported":
        raise MigError("%s: %s does not support MIG (nvidia-smi shows MIG mode N/A); MIG runs on A100, A30, H100, "
                       "H200, B200 and RTX PRO 6000 Blackwell. Remove GPU %d from nvidia_mig_layout."
                       % (LAYER, _label(gpu), gpu["index"]))
    if want == DISABLED:
        if mig:
            plan["diff"] = mig_parse.layout_diff([], mig["lgi"], None, mig["lci"])
            plan["commands"] = mig_parse.mig_commands(gpu["index"], plan["diff"], mig["lci"])
        if gpu["mig_mode"] or gpu["mig_mode_pending"]:
            plan["disable"] = True
            plan["commands"].append(["nvidia-smi", "-i", str(gpu["index"]), "-mig", "0"])
        return plan
    if status in ("enabled", "disable_pending") and mig is not None:
        problems = mig_parse.validate_layout(want, mig["lgip"], mig["lgipp"] or None)
        if problems:
            raise LayoutError(_problems_message(gpu, problems, mig))
        plan["validated"] = True
        plan["diff"] = mig_parse.layout_diff(want, mig["lgi"], mig["lgipp"] or None, mig["lci"], mig["lgip"])
        plan["commands"] = mig_parse.mig_commands(gpu["index"], plan["diff"], mig["lci"])
    if status in ("disabled", "disable_pending", "enable_pending"):
        plan["enable"] = True
        plan["commands"].insert(0, ["nvidia-smi", "-i", str(gpu["index"]), "-mig", "1"])
    return plan


def needs_change(plan):
    return bool(plan["enable"] or plan["disable"] or (plan["diff"] and plan["diff"]["changed"]))


# ---------------------------------------------------------------------------------------------
# carrying out


def _mode_on(run, gpu, reset):
    """MIG mode on for one GPU (it was off or pending); a reset where it stays pending."""
    index = gpu["index"]
    if gpu["status"] != "enable_pending":
        _rc, out = _call(run, ["nvidia-smi", "-i", str(index), "-mig", "1"], "enabling MIG mode on GPU %d" % index)
    else:
        out = ""
    now = read_gpus(run)[index]
    if now["status"] == "enabled":
        return out
    if reset:
        rc, rout, rerr = run(["nvidia-smi", "-r", "-i", str(index)])
        now = read_gpus(run)[index]
        if rc == 0 and now["status"] == "enabled":
            return out + rout
        out = out + rout + rerr
    raise MigError("%s: MIG mode on %s is %s, waiting for a GPU reset: %s Stop what holds the GPU (on A100/A30 "
                   "nvidia-persistenced and monitoring agents count) and run `nvidia-smi -r -i %d`, or reboot: "
                   "the gpuhost-mig unit creates the layout at boot.%s"
                   % (LAYER, _label(gpu), now["status"].replace("_", " "), " ".join(out.split()), index,
                      "" if reset else " (nvidia_mig_reset is false: this run does not reset GPUs)"),
                   changed=True)


def _mode_off(run, gpu, reset):
    index = gpu["index"]
    _rc, out = _call(run, ["nvidia-smi", "-i", str(index), "-mig", "0"], "disabling MIG mode on GPU %d" % index)
    now = read_gpus(run)[index]
    if now["status"] == "disabled":
        return out
    if reset:
        rc, rout, rerr = run(["nvidia-smi", "-r", "-i", str(index)])
        if rc == 0 and read_gpus(run)[index]["status"] == "disabled":
            return out + rout
        out = out + rout + rerr
    raise MigError("%s: MIG mode on %s is %s: %s Stop what holds the GPU and run `nvidia-smi -r -i %d`, or reboot."
                   % (LAYER, _label(gpu), now["status"].replace("_", " "), " ".join(out.split()), index),
                   changed=True)


def apply(layout, run, check_mode=False, allow_disruption=False, reset=True, clients=()):
    """Bring the declared GPUs to the layout. Returns {changed, gpus: [...], commands, before, after};
    raises MigError (msg names the layer, the GPU and the fix; .changed whether something had changed)."""
    wanted = normalise_layout(layout)
    result = {"changed": False, "gpus": [], "commands": [], "before": {}, "after": {}, "clients_stopped": []}
    if not wanted:
        return result
    gpus = read_gpus(run)
    missing = [index for index in sorted(wanted) if index not in gpus]
    if missing:
        raise MigError("%s: nvidia_mig_layout names GPU %s, but this host has GPU %s (nvidia-smi -L). Fix the "
                       "layout's keys." % (LAYER, ", ".join(map(str, missing)),
                                           ", ".join(map(str, sorted(gpus))) or "none"))
    plans, refusals = [], []
    for index in sorted(wanted):
        gpu = gpus[index]
        mig = read_mig(run, index) if gpu["mig_mode"] else None
        try:
            plan = plan_gpu(gpu, wanted[index], mig)
        except MigError as exc:
            refusals.append(exc.msg)
            continue
        result["before"][index] = describe(gpu["status"], plan["before"])
        if needs_change(plan) and gpu["processes"] and not allow_disruption:
            running = ", ".join(
                "%s (pid %s%s)" % (p["name"], p["pid"],
                                   "" if p["gpu_instance_id"] is None else ", GI %s" % p["gpu_instance_id"])
                for p in gpu["processes"])
            want = "MIG disabled" if plan["want"] == DISABLED else ", ".join(plan["want"]) or "no instances"
            refusals.append(
                "%s: %s would change (%s -> %s) but %d GPU process(es) run on it: %s. Stop them (the serving "
                "containers first), or set nvidia_mig_allow_disruption: true to change it anyway (their MIG "
                "devices go away)." % (LAYER, _label(gpu), describe(gpu["status"], plan["before"]), want,
                                       len(gpu["processes"]), running))
        plans.append((gpu, plan))
    if refusals:
        raise MigError(" | ".join(refusals))
    mode_change = any(plan["enable"] or plan["disable"] for _gpu, plan in plans)
    result["clients_stopped"] = [] if check_mode or not mode_change else stop_clients(run, clients)
    try:
        _carry_out_plans(run, plans, result, check_mode, reset)
    finally:
        start_clients(run, result["clients_stopped"])
    return result


def stop_clients(run, clients):
    """Stop the active units of `clients` in their order; the list of those stopped."""
    stopped = []
    for unit in clients or ():
        if (run(["systemctl", "is-active", unit])[1] or "").strip() != "active":
            continue
        rc, out, err = run(["systemctl", "stop", unit])
        if rc != 0:
            start_clients(run, stopped)
            raise MigError("%s: could not stop %s before the MIG mode change (it holds the GPUs): %s. Stop it and "
                           "run again." % (LAYER, unit, " ".join((err or out).split())))
        stopped.append(unit)
    return stopped


def start_clients(run, stopped):
    for unit in reversed(stopped or ()):
        run(["systemctl", "start", unit])


def _carry_out_plans(run, plans, result, check_mode, reset):
    for gpu, plan in plans:
        entry = {"gpu": gpu["index"], "uuid": gpu["uuid"], "name": gpu["name"], "want": plan["want"],
                 "mode_before": gpu["status"], "before": plan["before"], "changed": needs_change(plan),
                 "commands": [" ".join(c) for c in plan["commands"]], "validated": plan["validated"],
                 "output": ""}
        result["gpus"].append(entry)
        if not entry["changed"]:
            result["after"][gpu["index"]] = result["before"][gpu["index"]]
            continue
        result["changed"] = True
        if check_mode:
            result["commands"] += entry["commands"]
            want = plan["want"]
            result["after"][gpu["index"]] = ("MIG disabled" if want == DISABLED else
                                             describe("enabled", want))
            continue
        _carry_out(run, gpu, plan, entry, result, reset)


def _carry_out(run, gpu, plan, entry, result, reset):
    index = gpu["index"]
    ran = []
    if plan["want"] == DISABLED:
        for argv in plan["commands"]:
            if argv[-2:] == ["-mig", "0"]:
                entry["output"] += _mode_off(run, gpu, reset)
            else:
                entry["output"] += _call(run, argv, "destroying GPU %d's MIG instances" % index)[1]
            ran.append(" ".join(argv))
        result["commands"] += ran
        entry["commands"] = ran
        result["after"][index] = "MIG disabled"
        return
    mig = None
    if plan["enable"]:
        entry["output"] += _mode_on(run, gpu, reset)
        ran.append("nvidia-smi -i %d -mig 1" % index)
        mig = read_mig(run, index)
        problems = mig_parse.validate_layout(plan["want"], mig["lgip"], mig["lgipp"] or None)
        if problems:
            # -lgip was unreadable before; leave the GPU as it was found.
            run(["nvidia-smi", "-i", str(index), "-mig", "0"])
            raise LayoutError(_problems_message(gpu, problems, mig).replace(
                "nothing was changed on this GPU", "MIG mode, turned on to read them, was turned off again"))
        entry["validated"] = True
        plan["diff"] = mig_parse.layout_diff(plan["want"], mig["lgi"], mig["lgipp"] or None, mig["lci"], mig["lgip"])
        commands = mig_parse.mig_commands(index, plan["diff"], mig["lci"])
    else:
        commands = plan["commands"]
    for argv in commands:
        try:
            entry["output"] += _call(run, argv, "changing GPU %d's MIG instances" % index)[1]
        except MigError as exc:
            exc.changed = True
            exc.msg += (" The GPU is left part-way (ran: %s); run again, or `gpuhost mig` on its listings to see "
                        "why." % ("; ".join(ran) or "nothing"))
            exc.args = (exc.msg,)
            raise
        ran.append(" ".join(argv))
    entry["commands"] = ran
    result["commands"] += ran
    after = instance_names(read_mig(run, index)["lgi"])
    if sorted(after) != sorted(plan["want"]):
        raise MigError("%s: after the change GPU %d holds %s, not the declared %s (nvidia-smi mig -lgi)."
                       % (LAYER, index, ", ".join(after) or "no instance", ", ".join(plan["want"])), changed=True)
    result["after"][index] = describe("enabled", after)


def diff_text(result):
    """{before, after} for Ansible's --diff: one line per declared GPU."""
    def lines(side):
        return "".join("GPU %s: %s\n" % (index, text) for index, text in sorted(result[side].items()))
    return {"before": lines("before"), "after": lines("after")}


# ---------------------------------------------------------------------------------------------
# the boot script


def main(argv, run=None, out=None):
    """gpuhost-mig-apply LAYOUT_FILE: apply the layout file the nvidia_mig role wrote ({"layout": {...},
    "allow_disruption": false, "reset": true}). Exit 0 when the GPUs hold it, 1 when refused or failed,
    2 for an unreadable file."""
    out = out or sys.stdout
    if len(argv) != 1:
        out.write("usage: gpuhost-mig-apply LAYOUT_FILE\n")
        return 2
    try:
        with open(argv[0]) as handle:
            config = json.load(handle)
        layout = config["layout"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out.write("gpuhost-mig-apply: cannot read %s: %s\n" % (argv[0], exc))
        return 2
    try:
        result = apply(layout, run or SubprocessHostIO(timeout=BOOT_TIMEOUT).run,
                       allow_disruption=bool(config.get("allow_disruption")),
                       reset=bool(config.get("reset", True)))
    except MigError as exc:
        out.write("gpuhost-mig-apply: %s\n" % exc.msg)
        return 1
    for entry in result["gpus"]:
        out.write("GPU %d: %s -> %s%s\n" % (entry["gpu"], result["before"][entry["gpu"]],
                                            result["after"][entry["gpu"]], "" if entry["changed"] else " (unchanged)"))
        for command in entry["commands"]:
            out.write("  $ %s\n" % command)
    return 0
