"""gpusim: the test's control tool for the simulated GPU host (never called by the product).

  gpusim init --gpus MODEL[,MODEL...] [--branches 570,580] [--bus 17,31,...] [--driver VER[:open|proprietary]]
              [--nvswitches N]    (an HGX board: N NVSwitch functions, 10de:22a3; H100/H200 boards have 4)
  gpusim init --gpus hgx-h100|hgx-h200|hgx-a100 ...   (the whole board: 8 SXM GPUs and their NVSwitches)
  gpusim show [--json] | gpusim get PATH | gpusim set PATH VALUE
  gpusim fault list
  gpusim fault no_driver [on|off]
  gpusim fault module_not_loaded [on|off]
  gpusim fault nvml_mismatch [on|off] [--version VER]
  gpusim fault missing_device_node NAME [on|off]
  gpusim fault zombie_process [on|off] [--gpu N] [--mib M] [--name NAME]
  gpusim fault throttle REASON [on|off] [--gpu N|all]
  gpusim fault xid CODE [--gpu N] [--pid P] [--name NAME] [--message TEXT]
  gpusim fault persistenced_stopped [on|off]
  gpusim fault dcgm_memory_error [mismatch|dbe|alloc] [on|off] [--gpu N|all]
                                    (DCGM's memory test fails on that GPU: DCGM_FR_MEMORY_MISMATCH 58 / CUDA_DBE 57,
                                     isolate, dcgmi exits 205; MEMORY_ALLOC 56, triage, exits 226; default mismatch)
  gpusim fault inforom_corrupt [on|off] [--gpu N|all]
                                    (DCGM's software test, level 1 too: DCGM_FR_CORRUPT_INFOROM 9, exits 226)
  gpusim process add --gpu N --mib M [--pid P | --spawn] [--name NAME] [--type C|G|C+G] [--gi G [--ci C]]
  gpusim process remove PID|--all
  gpusim process list
  gpusim driver install VERSION [--modules open|proprietary] [--package NAME]   (a package's postinst)
  gpusim driver remove                                                          (a package's postrm)
  gpusim boot                                                                   (what a reboot does)
  gpusim firmware secure-boot on|off|none    the firmware's Secure Boot (none: booted without EFI), now and at
                                             every boot: /sys/firmware/efi/efivars/SecureBoot-<guid>
  gpusim kmsg [--journal] [--all]     the simulated kernel log, as `dmesg` / `journalctl -k` print it
  gpusim load start [--gpu N|all] [--requests R] [--capacity C] [--mib M] [--name NAME]
                                    work on the GPUs (gpusim/load.py): R requests in flight in a batch of C
                                    (default 8 of 8), M MiB held; a record that never expires, until `load stop`
  gpusim load stop [--name NAME | --all]
  gpusim load show                  the valid load records (the serving stand-in writes its own)

The state file is $GPUSIM_STATE (default /var/lib/gpu-sim/state.json).
"""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid

from . import boot as bootmod
from .fabric import NOT_SET_UP as FABRIC_NOT_SET_UP
from . import catalogue
from . import load as loadmod
from . import smi
from . import state as st

DEFAULT_BUSES = ["17", "31", "4b", "65", "98", "b1", "ca", "e3"]

# Xid messages as the driver logs them (NVIDIA "Xid Errors" catalogue; public kernel logs), after
# `NVRM: Xid (PCI:0000:17:00): <code>, pid=<pid>, name=<name>, `.
XID_MESSAGES = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3e_20000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000010",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.",
    63: "Row Remapper: New row (0x0000000000012345) marked for remapping, reset gpu to activate.",
    74: "NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
         "(0x20800a4c 0x4).",
}
# Xids the driver logs with no process context
XID_NO_PROCESS = {63, 74, 79, 92, 119}


def _uuid():
    return "GPU-" + str(uuid.uuid4())


def _serial():
    return "1" + "".join(random.choice("0123456789") for _ in range(12))


def init_state(models, branches=None, buses=None, driver=None, nvswitches=0):
    s = st.default_state()
    if len(models) == 1 and models[0] in catalogue.BOARDS:
        board = catalogue.BOARDS[models[0]]
        models, nvswitches = list(board["gpus"]), nvswitches or board["nvswitches"]
    if nvswitches:
        generation = catalogue.nvswitch_generation(models)
        switch_buses = catalogue.NVSWITCH_GENERATIONS[generation]["buses"]
        if nvswitches < 0 or nvswitches > len(switch_buses):
            raise SystemExit("gpusim: --nvswitches takes 0..%d" % len(switch_buses))
        s["nvswitches"] = [{"pci_bus_id": "00000000:%s:00.0" % b.upper(), "generation": generation}
                           for b in switch_buses[:nvswitches]]
        s["fabric"] = dict(FABRIC_NOT_SET_UP)
    if branches:
        s["repo_branches"] = [str(b) for b in branches]
    buses = list(buses or DEFAULT_BUSES)
    if len(buses) < len(models):
        raise SystemExit("gpusim: --bus lists %d buses for %d GPUs" % (len(buses), len(models)))
    for i, key in enumerate(models):
        key = catalogue.resolve(key)
        s["gpus"].append(dict(st.DEFAULT_GPU, index=i, model=key, uuid=_uuid(), serial=_serial(),
                              pci_bus_id="00000000:%s:00.0" % buses[i].upper().zfill(2),
                              performance_state=None, power_draw_w=None, clocks_event_reasons=[]))
    if driver:
        ver, _, mods = driver.partition(":")
        inst = {"version": ver, "kernel_modules": mods or "open", "packages": []}
        s["driver"] = {"installed": inst, "loaded": {"version": ver, "kernel_modules": inst["kernel_modules"]}}
    return st.fill_defaults(s)


def _opt(args, name, default=None):
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            raise SystemExit("gpusim: %s needs a value" % name)
        val = args[i + 1]
        del args[i:i + 2]
        return val
    for a in list(args):
        if a.startswith(name + "="):
            args.remove(a)
            return a.split("=", 1)[1]
    return default


def _flag(args, name):
    if name in args:
        args.remove(name)
        return True
    return False


def _onoff(args):
    if args and args[0] in ("on", "off"):
        return args.pop(0) == "on"
    return True


def _unused_pid():
    with open("/proc/sys/kernel/pid_max") as fh:
        pid_max = int(fh.read())
    while True:
        pid = random.randint(max(pid_max // 2, 300), pid_max - 1)
        if not smi.pid_alive(pid):
            return pid


def _gpu_indexes(s, spec):
    if spec in (None, "all"):
        return [g["index"] for g in s["gpus"]]
    idx = int(spec)
    if idx not in [g["index"] for g in s["gpus"]]:
        raise SystemExit("gpusim: no GPU %s" % spec)
    return [idx]


def xid_line(gpu, code, pid=None, name=None, message=None):
    bus = gpu["pci_bus_id"][4:].lower().rsplit(".", 1)[0]   # PCI:0000:17:00
    msg = message or XID_MESSAGES.get(code, "Unknown Error")
    if pid is None:
        who = "pid='<unknown>', name=<unknown>"
    else:
        who = "pid=%s, name=%s" % (pid if pid is not None else "'<unknown>'", name or "<unknown>")
    return "NVRM: Xid (PCI:%s): %d, %s, %s" % (bus, code, who, msg)


def fault(args, path):
    if not args:
        raise SystemExit("gpusim: fault needs a name (gpusim fault list)")
    name = args.pop(0)
    if name == "list":
        print("no_driver module_not_loaded nvml_mismatch missing_device_node zombie_process throttle xid "
              "persistenced_stopped dcgm_memory_error inforom_corrupt")
        return 0
    if name == "no_driver":
        on = _onoff(args)

        def fn(s):
            saved = s["faults"].get("_saved_driver")
            if on:
                if s["driver"].get("installed") or s["driver"].get("loaded"):
                    s["faults"]["_saved_driver"] = s["driver"]
                s["driver"] = {"installed": None, "loaded": None}
            elif saved:
                s["driver"] = saved
                s["faults"].pop("_saved_driver", None)
    elif name == "module_not_loaded":
        on = _onoff(args)

        def fn(s):
            s["faults"]["module_not_loaded"] = on
            inst = s["driver"].get("installed")
            if on:
                s["driver"]["loaded"] = None
            elif inst and not s["driver"].get("loaded"):
                s["driver"]["loaded"] = {"version": inst["version"], "kernel_modules": inst.get("kernel_modules")}
    elif name == "nvml_mismatch":
        on = _onoff(args)
        version = _opt(args, "--version")

        def fn(s):
            inst, loaded = s["driver"].get("installed"), s["driver"].get("loaded")
            if not inst or not loaded:
                raise SystemExit("gpusim: nvml_mismatch needs an installed and loaded driver")
            if on:
                if version:
                    inst["version"] = version
                else:
                    parts = loaded["version"].split(".")
                    parts[1] = str(int(parts[1]) + 10)
                    inst["version"] = ".".join(parts)
            else:
                inst["version"] = loaded["version"]
    elif name == "missing_device_node":
        if not args:
            raise SystemExit("gpusim: missing_device_node needs a node name (nvidia0, nvidiactl, nvidia-uvm, ...)")
        node = args.pop(0).replace("/dev/", "")
        on = _onoff(args)

        def fn(s):
            lst = s["faults"]["missing_device_nodes"]
            if on and node not in lst:
                lst.append(node)
            if not on and node in lst:
                lst.remove(node)
        st.update(fn, path)
        devpath = os.path.join("/dev", node)
        if on and os.path.lexists(devpath) and os.geteuid() == 0:
            os.unlink(devpath)
        elif not on and os.geteuid() == 0:
            s = st.load(path)
            for n, major, minor in bootmod.device_nodes(s):
                if n == node and not os.path.lexists(devpath):
                    bootmod._make_node(devpath, major, minor, True)
        return 0
    elif name == "zombie_process":
        on = _onoff(args)
        gpu = int(_opt(args, "--gpu", "0"))
        mib = int(_opt(args, "--mib", "2048"))
        pname = _opt(args, "--name", "python3")

        def fn(s):
            if on:
                s["processes"].append({"pid": _unused_pid(), "name": pname, "gpu_index": gpu, "used_mib": mib,
                                       "type": "C", "zombie": True})
            else:
                s["processes"] = [p for p in s["processes"] if not p.get("zombie")]
    elif name == "throttle":
        if not args:
            raise SystemExit("gpusim: throttle needs a reason: " + " ".join(smi.REASON_NAMES))
        reason = args.pop(0)
        if reason not in smi.REASON_NAMES:
            raise SystemExit("gpusim: unknown reason %r (%s)" % (reason, " ".join(smi.REASON_NAMES)))
        on = _onoff(args)
        which = _opt(args, "--gpu", "all")

        def fn(s):
            for i in _gpu_indexes(s, which):
                lst = s["gpus"][i].setdefault("clocks_event_reasons", [])
                if on and reason not in lst:
                    lst.append(reason)
                if not on and reason in lst:
                    lst.remove(reason)
    elif name == "xid":
        if not args:
            raise SystemExit("gpusim: xid needs a code")
        code = int(args.pop(0))
        which = _opt(args, "--gpu", "0")
        pid = _opt(args, "--pid")
        pname = _opt(args, "--name")
        message = _opt(args, "--message")
        lines = []

        def fn(s):
            for i in _gpu_indexes(s, which):
                g = s["gpus"][i]
                lines.append(xid_line(g, code, pid, pname, message))
                if code == 79:
                    lines.append("NVRM: GPU %s: GPU has fallen off the bus." % g["pci_bus_id"][4:].lower())
                    g["lost"] = True
            s["kernel_log"].extend(lines)
        st.update(fn, path)
        if st.load(path).get("kmsg"):
            bootmod.write_kmsg(lines)
        for line in lines:
            print(line)
        return 0
    elif name == "persistenced_stopped":
        on = _onoff(args)
        s0 = st.load(path)
        pid = (s0.get("persistenced") or {}).get("pid")
        if on and pid and smi.pid_alive(pid):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

        def fn(s):
            s["faults"]["persistenced_stopped"] = on
            if on:
                mine = (s.get("persistenced") or {}).get("enabled") or []
                for g in s["gpus"]:
                    if g["uuid"] in mine:
                        g["persistence_mode"] = False
                s["persistenced"] = {"pid": None, "persistence": False, "enabled": []}
    elif name == "dcgm_memory_error":
        from .dcgm import MEMORY_FAULTS   # pylint: disable=import-outside-toplevel
        kind = args.pop(0) if args and args[0] in MEMORY_FAULTS else "mismatch"
        on = _onoff(args)
        which = _opt(args, "--gpu", "0")

        def fn(s):
            faults = s["faults"].setdefault("dcgm_memory_error", {})
            for i in _gpu_indexes(s, which):
                if on:
                    faults[str(i)] = kind
                else:
                    faults.pop(str(i), None)
            if not faults:
                s["faults"].pop("dcgm_memory_error", None)
    elif name == "inforom_corrupt":
        on = _onoff(args)
        which = _opt(args, "--gpu", "0")

        def fn(s):
            lst = s["faults"].setdefault("inforom_corrupt", [])
            for i in _gpu_indexes(s, which):
                if on and i not in lst:
                    lst.append(i)
                if not on and i in lst:
                    lst.remove(i)
            if not lst:
                s["faults"].pop("inforom_corrupt", None)
    else:
        raise SystemExit("gpusim: unknown fault %r (gpusim fault list)" % name)
    if args:
        raise SystemExit("gpusim: unexpected arguments: %s" % " ".join(args))
    st.update(fn, path)
    return 0


def process(args, path):
    if not args:
        raise SystemExit("gpusim: process add|remove|list")
    sub = args.pop(0)
    if sub == "list":
        for p in st.load(path)["processes"]:
            print("%d gpu=%d %dMiB %s %s%s" % (p["pid"], p["gpu_index"], p["used_mib"], p.get("type", "C"),
                                             p.get("name"), " zombie" if p.get("zombie") else ""))
        return 0
    if sub == "add":
        gpu = int(_opt(args, "--gpu", "0"))
        mib = int(_opt(args, "--mib", "1024"))
        pname = _opt(args, "--name", "python3")
        ptype = _opt(args, "--type", "C")
        gi_id = _opt(args, "--gi")   # a process on a MIG device: its GPU / compute instance (gpusim/mig.py)
        ci_id = _opt(args, "--ci", "0")
        pid = _opt(args, "--pid")
        if _flag(args, "--spawn"):
            proc = subprocess.Popen(["sleep", "infinity"], start_new_session=True, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pid = proc.pid
        pid = int(pid) if pid is not None else os.getppid()

        def fn(s):
            if gpu not in [g["index"] for g in s["gpus"]]:
                raise SystemExit("gpusim: no GPU %d" % gpu)
            entry = {"pid": pid, "name": pname, "gpu_index": gpu, "used_mib": mib, "type": ptype, "holder": True}
            if gi_id is not None:
                g = [g for g in s["gpus"] if g["index"] == gpu][0]
                if not any(gi["id"] == int(gi_id) and any(c["id"] == int(ci_id) for c in gi.get("cis") or [])
                           for gi in g.get("mig_instances") or []):
                    raise SystemExit("gpusim: no MIG device GI %s CI %s on GPU %d" % (gi_id, ci_id, gpu))
                entry.update(gi_id=int(gi_id), ci_id=int(ci_id))
            s["processes"].append(entry)
        st.update(fn, path)
        print(pid)
        return 0
    if sub == "remove":
        everything = _flag(args, "--all")
        pids = {int(a) for a in args}

        def fn(s):
            s["processes"] = [p for p in s["processes"] if not (everything or p["pid"] in pids)]
        st.update(fn, path)
        return 0
    raise SystemExit("gpusim: process add|remove|list")


def driver(args, path):
    if not args:
        raise SystemExit("gpusim: driver install VERSION [--modules open|proprietary] [--package NAME] | remove")
    sub = args.pop(0)
    if sub == "install":
        mods = _opt(args, "--modules", "open")
        pkg = _opt(args, "--package")
        if not args:
            raise SystemExit("gpusim: driver install needs a version")
        ver = args.pop(0)

        def fn(s):
            s["driver"]["installed"] = {"version": ver, "kernel_modules": mods, "packages": [pkg] if pkg else []}
    elif sub == "remove":
        def fn(s):
            s["driver"]["installed"] = None
    else:
        raise SystemExit("gpusim: driver install|remove")
    st.update(fn, path)
    return 0


def _walk(obj, dotted):
    for part in dotted.split("."):
        if isinstance(obj, list):
            obj = obj[int(part)]
        else:
            obj = obj[part]
    return obj


def load(args, path):
    """`gpusim load`: write or remove a load record as a serving engine would (gpusim/load.py)."""
    directory = loadmod.load_dir(path)
    sub = args.pop(0) if args else "show"
    name = _opt(args, "--name", "gpusim")
    if sub == "start":
        which = _opt(args, "--gpu", "all")
        requests = int(_opt(args, "--requests", "8"))
        capacity = int(_opt(args, "--capacity", str(max(requests, 1))))
        mib = int(_opt(args, "--mib", "0"))
        s = st.load(path)
        uuids = [s["gpus"][i]["uuid"] for i in _gpu_indexes(s, which)]
        now = time.time()
        loadmod.write_record(directory, name, {
            "writer": "gpusim", "gpus": uuids, "in_flight": requests, "capacity": capacity,
            "busy_since": now if requests else None, "memory_mib": mib, "updated": now, "ttl_s": None})
        return 0
    if sub == "stop":
        if _flag(args, "--all"):
            loadmod.clear(directory)
        else:
            loadmod.remove_record(directory, name)
        return 0
    if sub == "show":
        for rec in loadmod.read_records(directory, time.time()):
            print("%s: %s in flight of %s on %s, %s MiB" % (rec["name"], rec.get("in_flight"), rec.get("capacity"),
                                                          ",".join(rec.get("gpus") or []), rec.get("memory_mib") or 0))
        return 0
    raise SystemExit("gpusim: load start|stop|show")


def kmsg(args, path):
    s = st.load(path)
    lines = list(s.get("kernel_log_previous") or []) if _flag(args, "--all") else []
    lines += s.get("kernel_log") or []
    journal = _flag(args, "--journal")
    host = socket.gethostname()
    t0 = time.time()
    for i, line in enumerate(lines):
        if journal:
            print("%s %s kernel: %s" % (time.strftime("%b %d %H:%M:%S", time.localtime(t0)), host, line))
        else:
            print("[%12.6f] %s" % (3.5 + i * 0.000731, line))
    return 0


def firmware(args, path):
    if len(args) != 2 or args[0] != "secure-boot" or args[1] not in ("on", "off", "none"):
        raise SystemExit("gpusim: firmware secure-boot on|off|none")
    value = {"on": True, "off": False, "none": None}[args[1]]

    def fn(s):
        s.setdefault("firmware", {})["secure_boot"] = value
    st.update(fn, path)
    bootmod.lay_down_firmware(st.load(path), os.environ.get("GPUSIM_ROOT") or "/")
    return 0


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    path = None
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(__doc__)
        return 0
    cmd = args.pop(0)
    if cmd == "init":
        models = _opt(args, "--gpus")
        if not models:
            raise SystemExit("gpusim: init needs --gpus MODEL[,MODEL...] (%s)" % ", ".join(sorted(catalogue.MODELS)))
        branches = _opt(args, "--branches")
        buses = _opt(args, "--bus")
        drv = _opt(args, "--driver")
        switches = _opt(args, "--nvswitches")
        s = init_state([m for m in models.split(",") if m],
                       branches=branches.split(",") if branches else None,
                       buses=buses.split(",") if buses else None, driver=drv,
                       nvswitches=int(switches) if switches else 0)
        st.save(s, path)
        return 0
    if cmd == "show":
        s = st.load(path)
        if _flag(args, "--json"):
            print(json.dumps(s, indent=2, sort_keys=True))
            return 0
        drv = s["driver"]
        print("state: %s (boot %s)" % (st.path_from_env(), (s.get("boot") or {}).get("count")))
        print("driver installed: %s" % (json.dumps(drv.get("installed")) if drv.get("installed") else "none"))
        print("driver loaded:    %s" % (json.dumps(drv.get("loaded")) if drv.get("loaded") else "none"))
        print("driver state:     %s" % st.driver_state(s))
        for g in s["gpus"]:
            print("gpu %d: %s %s %s persistence=%s reasons=%s%s" % (
                g["index"], g["model"], g["pci_bus_id"], g["uuid"], g.get("persistence_mode"),
                ",".join(g.get("clocks_event_reasons") or []) or "-", " LOST" if g.get("lost") else ""))
        for p in s["processes"]:
            print("process %d on gpu %d: %s %d MiB%s" % (p["pid"], p["gpu_index"], p.get("name"), p["used_mib"],
                                                       " (zombie)" if p.get("zombie") else ""))
        print("faults: %s" % json.dumps({k: v for k, v in s["faults"].items() if not k.startswith("_")},
                                        sort_keys=True))
        print("repo branches: %s" % ",".join(s.get("repo_branches") or []))
        if s.get("hostengine"):
            he = s["hostengine"]
            print("nv-hostengine: %s" % ("pid %s, %d GPU(s), service account %s" % (
                he.get("pid"), len(he.get("gpus") or []), he.get("service_account")) if he.get("pid") else "stopped"))
        return 0
    if cmd == "get":
        print(json.dumps(_walk(st.load(path), args[0])))
        return 0
    if cmd == "set":
        dotted, raw = args[0], args[1]
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw

        def fn(s):
            parts = dotted.split(".")
            parent = _walk(s, ".".join(parts[:-1])) if len(parts) > 1 else s
            if isinstance(parent, list):
                parent[int(parts[-1])] = value
            else:
                parent[parts[-1]] = value
        st.update(fn, path)
        return 0
    if cmd == "fault":
        return fault(args, path)
    if cmd == "process":
        return process(args, path)
    if cmd == "driver":
        return driver(args, path)
    if cmd == "boot":
        return bootmod.main(args)
    if cmd == "kmsg":
        return kmsg(args, path)
    if cmd == "load":
        return load(args, path)
    if cmd == "firmware":
        return firmware(args, path)
    raise SystemExit("gpusim: unknown command %r (gpusim --help)" % cmd)


if __name__ == "__main__":
    sys.exit(main())
