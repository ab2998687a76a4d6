"""nvidia-smi, rendered from the state file.

Every form is rendered from a real capture used as a template (corpus nvidia_smi/):
  default table     018 (590.48.01, H100) and 001 (570.133.20: `|---` separator, blank line of spaces)
  -L                027
  -q                003 (590.48.01) -> templates/q_gpu.txt (MIG device blocks dropped)
  -q -x             043 (590.44.01, schema v13, RTX PRO 6000 Blackwell) -> templates/qx_v13_gpu.xml
  --query-gpu       004 header names/units, 024 nounits
  --query-compute-apps 005
  --version         580.x form (`NVIDIA-SMI version  : ...`, `CUDA Version        : ...`); 610+ form 026
  errors            029/030 (NVML mismatch, exit 18), 032 (no driver communication, exit 9)
Other real texts (public captures, quoted in comments where used): `Field "x" is not a valid field to query.`
(exit 2), -pm messages, -mig messages (MIG user guide: `Disabled MIG Mode for GPU 00000000:36:00.0`, `All done.`),
`No devices were found` (exit 6), `Invalid combination of input arguments.`

Exit codes follow nvidia-smi(1) RETURN VALUE: 0 ok, 2 invalid argument, 3 not supported, 4 no permission, 6 not found,
9 driver not loaded, 15 GPU lost, 18 (NVML_ERROR_LIB_RM_VERSION_MISMATCH) driver/library mismatch.
"""
import os
import string
import sys
import time

from . import catalogue
from . import dmon as _dmon
from . import fabric as _fabric
from . import load as _load
from . import mig as _mig
from . import reload as _reload
from . import state as st
from . import topo as _topo


def escape(text):
    """XML character data (xml.sax.saxutils.escape, whose import pulls in urllib and http: a third of this
    program's start-up, paid by every nvidia-smi call)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

RC_OK, RC_INVALID, RC_NOPERM, RC_NOTFOUND, RC_NODRIVER, RC_LOST, RC_MISMATCH = 0, 2, 4, 6, 9, 15, 18
RC_NOTSUPPORTED = 3

MSG_NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                 "Make sure that the latest NVIDIA driver is installed and running.")
MSG_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
MSG_NO_DEVICES = "No devices were found"
MSG_INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."

# clocks event reasons: (state name, XML suffix, -q label, bit). Bits from nvml.h
# (nvmlClocksEventReason*: GpuIdle 0x1, ApplicationsClocksSetting 0x2, SwPowerCap 0x4, HwSlowdown 0x8,
# SyncBoost 0x10, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80,
# DisplayClockSetting 0x100); supported mask 0x1FF as in 004.
REASONS = [
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clocks_setting", 0x100),
]
REASON_NAMES = [r for r, _ in REASONS]
# How far a clocks event takes the graphics/SM clocks down under load (the simulator's factors; the direction is
# real: a GPU at its power cap in fixture nvidia_smi_dmon/ ran at 39-65 % of its maximum clock, and NVIDIA's
# documentation of HW Slowdown says it cuts the clocks by a factor of two or more).
CLOCK_FACTOR = {"sw_power_cap": 0.6, "sw_thermal_slowdown": 0.7, "hw_slowdown": 0.5,
                "hw_thermal_slowdown": 0.5, "hw_power_brake_slowdown": 0.5}


def _read_template(name):
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as fh:
        return string.Template(fh.read())


def _timestamp(now=None):
    t = time.localtime(now)
    return "%s %s %2d %s" % (time.strftime("%a", t), time.strftime("%b", t), t.tm_mday,
                             time.strftime("%H:%M:%S %Y", t))


def _branch(version):
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0


def nvml_version(version):
    """NVML library version = first two components (580.95.05 -> 580.95), as `--version` and 029/030 show."""
    return ".".join(str(version).split(".")[:2])


def _pci_parts(bus_id):
    # "00000000:17:00.0" -> domain "0000", bus "17", device "00", function "0"
    dom, bus, devfn = bus_id.split(":")
    dev, fn = devfn.split(".")
    return dom[-4:], bus, dev, fn


class Smi:
    """The renderer; `state` is a loaded state dict."""

    def __init__(self, state, now=None, euid=None, load=None):
        self.state = state
        self.now = time.time() if now is None else now
        self.load = load or {}    # gpusim/load.py by_gpu(): what serving engines run on each GPU now
        self.euid = os.geteuid() if euid is None else euid
        self.loaded = state["driver"].get("loaded") or {}
        self.version = self.loaded.get("version", "")
        self.branch = _branch(self.version)
        self.cuda = catalogue.cuda_version(self.version)
        self.in_container = bool(state.get("container"))

    # ----- which GPUs the driver drives -------------------------------------------------------
    def driven_gpus(self):
        """GPUs the loaded kernel module manages: Blackwell (needs_open_modules) is refused by the
        proprietary module, and a branch older than the model's first branch does not know it."""
        mods = self.loaded.get("kernel_modules", "open")
        out = []
        for gpu in self.state["gpus"]:
            m = catalogue.get(gpu["model"])
            if m["needs_open_modules"] and mods != "open":
                continue
            if self.branch and self.branch < m["min_branch"]:
                continue
            out.append(gpu)
        return out

    def processes_on(self, gpu):
        """Processes holding a context on this GPU. An entry made by `gpusim process add` ("holder")
        goes away when its pid is gone (the driver frees a dead process's context); any other entry —
        a zombie — stays listed whatever its pid."""
        return [p for p in self.state["processes"] if p.get("gpu_index") == gpu["index"] and
                (not p.get("holder") or pid_alive(p["pid"]))]

    # ----- per-GPU values ---------------------------------------------------------------------
    def view(self, gpu, display_index):
        m = catalogue.get(gpu["model"])
        procs = self.processes_on(gpu)
        used = int(m.get("memory_overhead_mib", 0)) + int(gpu.get("memory_used_mib") or 0) + \
            sum(int(p.get("used_mib") or 0) for p in procs)
        total = int(m["memory_total_mib"])
        reserved = int(m.get("memory_reserved_mib", 0))
        if gpu.get("mig_mode") and gpu.get("mig_instances"):
            # MIG: the GPU's use is its GPU instances' (002: 11125 MiB for GIs of 11091 + 17 + 9 + 9 MiB)
            used = int(gpu.get("memory_used_mib") or 0) + sum(
                d["used"] for d in self.mig_views(gpu, procs) if d["first_of_gi"])
        work = self.load.get(gpu["uuid"]) or {}
        if not gpu.get("mig_mode"):
            used += int(work.get("memory_mib") or 0)   # a running engine holds its budget (gpusim/load.py)
        used = min(used, total - reserved)
        free = total - reserved - used
        util = int(gpu.get("utilization_gpu") or 0)
        util_memory = int(gpu.get("utilization_memory") or 0)
        filled = _load.fill(work)
        if filled is not None:
            # NVML's utilization: the share of the sample period in which a kernel ran; a serving engine's
            # decode loop always has one running (gpusim/load.py).
            util = max(util, 100)
            util_memory = max(util_memory, _load.memory_activity(filled))
        busy = bool(procs) or util > 0
        idle_w = float(m.get("power_idle_w", 50.0))
        limit_w = float(gpu.get("power_limit_w") or m["power_limit_w"])
        reasons = set(gpu.get("clocks_event_reasons") or [])
        draw = gpu.get("power_draw_w")
        if draw is None:
            if filled is not None:
                draw = _load.power_draw(idle_w, limit_w, filled)
            else:
                draw = idle_w + (float(m["power_limit_w"]) - idle_w) * util / 100.0 * 0.8
            if busy and "sw_power_cap" in reasons:
                # held at its cap: fixture nvidia_smi_dmon/query-gpu_throttle-reasons-active_* (299-300 W of 300 W)
                draw = limit_w
        temp = int(gpu.get("temperature_c") if gpu.get("temperature_c") is not None else 34)
        if filled is not None:
            temp = _load.temperature(temp, float(draw), idle_w, limit_w, work.get("busy_since"), self.now)
        if not busy:
            reasons.add("gpu_idle")
        if reasons & {"hw_thermal_slowdown", "hw_power_brake_slowdown"}:
            reasons.add("hw_slowdown")
        pstate = gpu.get("performance_state") or ("P0" if busy else m.get("pstate_idle", "P8"))
        if busy:
            pstate = "P0" if pstate == m.get("pstate_idle", "P8") else pstate
        clocks = m["clocks_max"] if pstate in ("P0", "P1", "P2") else m["clocks_idle"]
        slow = min([CLOCK_FACTOR[r] for r in reasons if r in CLOCK_FACTOR] or [1.0])
        if slow < 1.0:
            # A clocks event lowers the graphics/SM clocks (the fixture's GPUs at their power cap ran 1192-2017 of
            # 3090 MHz); never below the idle clocks.
            floor = m["clocks_idle"]
            clocks = (max(floor[0], int(clocks[0] * slow)), max(floor[1], int(clocks[1] * slow)),
                      clocks[2], clocks[3])
        dom, bus, dev, _fn = _pci_parts(gpu["pci_bus_id"])
        open_mods = self.loaded.get("kernel_modules", "open") == "open"
        return {
            "gpu": gpu, "model": m, "index": display_index, "procs": [] if self.in_container else procs,
            "name": m["name"], "brand": m.get("brand", "NVIDIA"), "architecture": m["architecture"],
            "uuid": gpu["uuid"], "serial": gpu.get("serial") or "0000000000000",
            "pci_bus_id": gpu["pci_bus_id"], "pci_domain": dom, "pci_bus": bus, "pci_device": dev,
            "pci_device_id": "%04X10DE" % m["pci_device_id"],
            "pci_sub_system_id": "%04X%04X" % (m["pci_subsystem_id"], m.get("pci_subsystem_vendor", 0x10DE)),
            "pci_class": m.get("pci_class", "0302"),
            "persistence": bool(gpu.get("persistence_mode")),
            "compute_mode": gpu.get("compute_mode") or "Default",
            "mig_capable": bool(m.get("mig_capable")), "mig": bool(gpu.get("mig_mode")),
            "mig_pending": _mig.pending(gpu), "mig_devices": self.mig_views(gpu, procs),
            "ecc": bool(m.get("ecc_default", True)),
            "total": total, "reserved": reserved, "used": used, "free": free,
            "bar1_total": int(m.get("bar1_total_mib", 131072)),
            "util_gpu": util, "util_memory": util_memory, "temp": temp,
            "memory_temp": bool(m.get("memory_temp")),
            "temp_tlimit": int(m.get("temp_tlimit_c", 50)),
            "power_draw": float(draw), "power_limit": limit_w,
            "power_default": float(m["power_limit_w"]), "power_min": float(m.get("power_min_w", 100.0)),
            "power_max": float(m.get("power_max_w", m["power_limit_w"])),
            "fan": (gpu.get("fan_speed") or 0) if m.get("fan") else None,   # a fan at rest: 0 % (022)
            "pstate": pstate, "clocks": clocks, "max_clocks": m["clocks_max"],
            "reasons": reasons, "compute_cap": m["compute_capability"],
            "vbios": m.get("vbios", "N/A"), "minor": gpu["index"],
            "addressing_mode": "HMM" if open_mods else "None",
            "pcie_gen_max": m.get("pcie_gen_max", 5),
        }

    def mig_views(self, gpu, procs):
        """One dict per MIG device (gpusim/mig.py): memory is the GI's (shared by its CIs: 010), used = the GI's
        idle use (002/010: 9 MiB for one memory slot, 17 for two) + its processes."""
        out = []
        m = catalogue.get(gpu["model"])
        seen = set()
        for d in _mig.devices(gpu):
            gi, prof = d["gi"], d["profile"]
            gi_procs = _mig.procs_on_gi(procs, gi["id"])
            used = _mig.gi_overhead(gpu, prof) + sum(int(p.get("used_mib") or 0) for p in gi_procs)
            slices = _mig.SLICES_BY_CI_PROFILE.get(d["ci"]["profile_id"], prof["slices"])
            out.append(dict(d, used=min(used, prof["mib"]), total=prof["mib"], first_of_gi=gi["id"] not in seen,
                            bar1=_mig.bar1_total(gpu, prof, int(m.get("bar1_total_mib", 131072))),
                            sm=prof["sm"] * slices // prof["slices"]))
            seen.add(gi["id"])
        return out

    # ----- default table ----------------------------------------------------------------------
    def table(self, views):
        new_layout = self.branch >= 580     # 580/590/595 captures: `+---` under the header, empty line
        sep_gpu = "+-----------------------------------------+------------------------+----------------------+"
        lines = [_timestamp(self.now) + "       ",
                 "+-----------------------------------------------------------------------------------------+",
                 "| NVIDIA-SMI %s Driver Version: %s CUDA Version: %s|" % (
                     self.version.ljust(22), self.version.ljust(14), self.cuda.ljust(9)),
                 sep_gpu if new_layout else
                 "|-----------------------------------------+------------------------+----------------------+",
                 "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
                 "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
                 "|                                         |                        |               MIG M. |",
                 "|=========================================+========================+======================|"]
        for v in views:
            name = v["name"] if len(v["name"]) <= 27 else v["name"][:24] + "..."
            pm = "On" if v["persistence"] else "Off"
            if v["mig"]:
                ecc = "On"
            else:
                ecc = "0" if v["ecc"] else "Off"
            lines.append("|%4d  %-31s%-3s |   %s %3s | %20s |" % (v["index"], name, pm, v["pci_bus_id"], "Off", ecc))
            fan = "N/A" if v["fan"] is None else "%d%%" % int(v["fan"])
            util = "N/A" if v["mig"] else "%d%%" % v["util_gpu"]
            lines.append("| %3s%5dC%6s%15dW / %4dW |%8dMiB / %6dMiB | %7s %12s |" % (
                fan, v["temp"], v["pstate"], int(round(v["power_draw"])), int(round(v["power_limit"])),
                v["used"], v["total"], util, _compute_mode_short(v["compute_mode"])))
            mig = ("Enabled" if v["mig"] else "Disabled") if v["mig_capable"] else "N/A"
            lines.append("|                                         |                        | %20s |" % mig)
            lines.append(sep_gpu)
        lines.append("" if new_layout else " " * 89)
        migs = [(v["index"], d) for v in views for d in v["mig_devices"]]
        if migs:   # 002 / 010: the MIG devices box after the GPUs
            lines += ["+-----------------------------------------------------------------------------------------+",
                      "| MIG devices:                                                                            |",
                      "+------------------+----------------------------------+-----------+-----------------------+",
                      "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
                      "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
                      "|                  |                                  |        ECC|                       |",
                      "|==================+==================================+===========+=======================|"]
            for idx, d in migs:
                p = d["profile"]
                lines.append("|%3d%5d%4d%4d  |%16dMiB / %5dMiB    | %2d%7s |%3d%4d%5d%5d%5d |" % (
                    idx, d["gi"]["id"], d["ci"]["id"], d["index"], d["used"], d["total"], d["sm"], "0",
                    p["ce"], p["enc"], p["dec"], p["ofa"], p["jpeg"]))
                lines.append("|                  |%16dMiB / %5dMiB    |           |                       |" % (
                    0, d["bar1"]))
                lines.append("+------------------+----------------------------------+-----------+-----------------------+")
            lines.append("" if new_layout else " " * 89)
        lines += ["+-----------------------------------------------------------------------------------------+",
                  "| Processes:                                                                              |",
                  "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
                  "|        ID   ID                                                               Usage      |",
                  "|=========================================================================================|"]
        procs = [(v["index"], p) for v in views for p in sorted(v["procs"], key=lambda p: p["pid"])]
        if not procs:
            lines.append("|  No running processes found                                                             |")
        for idx, p in procs:
            name = p.get("name") or ""
            if len(name) > 38:
                name = "..." + name[-35:]
            if p.get("gi_id") is not None:   # 002: the GI / CI ids of a process on a MIG device
                lines.append("|%5d%5d%5d%17d%7s   %-38s%5dMiB |" % (
                    idx, int(p["gi_id"]), int(p.get("ci_id") or 0), int(p["pid"]), p.get("type") or "C", name,
                    int(p.get("used_mib") or 0)))
                continue
            lines.append("|%5d   N/A  N/A%16d%7s   %-38s%5dMiB |" % (
                idx, int(p["pid"]), p.get("type") or "C", name, int(p.get("used_mib") or 0)))
        lines.append("+-----------------------------------------------------------------------------------------+")
        return "\n".join(lines) + "\n"

    # ----- -L ---------------------------------------------------------------------------------
    def list_gpus(self, views):
        out = []
        for v in views:
            out.append("GPU %d: %s (UUID: %s)\n" % (v["index"], v["name"], v["uuid"]))
            for d in v["mig_devices"]:   # 028 / 068: `  MIG 1g.10gb     Device  0: (UUID: MIG-...)`
                out.append("  MIG %-11s Device %2d: (UUID: %s)\n" % (d["name"], d["index"], d["uuid"]))
        return "".join(out)

    # ----- -q ---------------------------------------------------------------------------------
    def _subst(self, v, xml=False):
        m = v["model"]
        esc = escape if xml else (lambda t: t)
        on = lambda flag: "Enabled" if flag else "Disabled"  # noqa: E731
        act = lambda r: "Active" if r in v["reasons"] else "Not Active"  # noqa: E731
        d = {
            "pci_bus_id": v["pci_bus_id"], "name": esc(v["name"]), "brand": v["brand"],
            "architecture": v["architecture"], "display_attached": "No",
            "persistence_mode": on(v["persistence"]), "addressing_mode": v["addressing_mode"],
            "mig_current": on(v["mig"]) if v["mig_capable"] else "N/A",
            "mig_pending": on(v["mig_pending"]) if v["mig_capable"] else "N/A",
            "serial": v["serial"], "uuid": v["uuid"],
            "pdi": "0x%016x" % (int(v["uuid"].replace("GPU-", "").replace("-", "")[:16] or "0", 16)
                                if all(c in "0123456789abcdefABCDEF-" for c in v["uuid"][4:]) else 0),
            "minor_number": str(v["minor"]), "vbios": v["vbios"],
            "board_id": "0x%x" % int(v["pci_bus"], 16) if v["pci_bus"] else "0x0",
            "board_part_number": m.get("board_part_number", "N/A"),
            "gpu_part_number": m.get("gpu_part_number", "N/A"),
            "module_id": "1", "virtualization_mode": "None",
            "bbx_timestamp": "N/A", "bbx_duration": "N/A",
            "gsp_firmware_version": self.version,
            "pci_bus": v["pci_bus"].upper(), "pci_device": v["pci_device"].upper(), "pci_domain": v["pci_domain"],
            "pci_base_class": str(int(v["pci_class"][:2], 16)), "pci_sub_class": str(int(v["pci_class"][2:], 16)),
            "pci_device_id": v["pci_device_id"], "pci_sub_system_id": v["pci_sub_system_id"],
            "q_pci_bus": "0x" + v["pci_bus"].upper(), "q_pci_device": "0x" + v["pci_device"].upper(),
            "q_pci_domain": "0x" + v["pci_domain"].upper(),
            "q_pci_base_class": "0x%x" % int(v["pci_class"][:2], 16),
            "q_pci_sub_class": "0x%x" % int(v["pci_class"][2:], 16),
            "q_pci_device_id": "0x" + v["pci_device_id"], "q_pci_sub_system_id": "0x" + v["pci_sub_system_id"],
            "pcie_gen_max": str(v["pcie_gen_max"]),
            "pcie_gen_current": str(v["pcie_gen_max"] if v["pstate"] == "P0" else 1),
            "replays": "0", "tx_util": "0 KB/s", "rx_util": "0 KB/s",
            "fan_speed": "N/A" if v["fan"] is None else "%d %%" % int(v["fan"]),
            "performance_state": v["pstate"],
            "fb_total": "%d MiB" % v["total"], "fb_reserved": "%d MiB" % v["reserved"],
            "fb_used": "%d MiB" % v["used"], "fb_free": "%d MiB" % v["free"],
            "bar1_total": "%d MiB" % v["bar1_total"], "bar1_used": "%d MiB" % min(v["used"] + 1, v["bar1_total"]),
            "bar1_free": "%d MiB" % (v["bar1_total"] - min(v["used"] + 1, v["bar1_total"])),
            "compute_mode": v["compute_mode"],
            "util_gpu": "N/A" if v["mig"] else "%d %%" % v["util_gpu"],
            "util_memory": "N/A" if v["mig"] else "%d %%" % v["util_memory"],
            "util_other": "N/A" if v["mig"] else "0 %",
            "ecc_mode": on(v["ecc"]),
            "gpu_temp": "%d C" % v["temp"], "gpu_temp_tlimit": "%d C" % max(v["temp_tlimit"] - v["temp"] + 34, 0),
            "mem_temp": "%d C" % (v["temp"] + 4) if v["memory_temp"] else "N/A",
            "mem_power_draw": "N/A",
            "power_draw_avg": "%.2f W" % v["power_draw"], "power_draw": "%.2f W" % v["power_draw"],
            "power_limit": "%.2f W" % v["power_limit"], "power_default_limit": "%.2f W" % v["power_default"],
            "power_min_limit": "%.2f W" % v["power_min"], "power_max_limit": "%.2f W" % v["power_max"],
            "clk_graphics": "%d MHz" % v["clocks"][0], "clk_sm": "%d MHz" % v["clocks"][1],
            "clk_mem": "%d MHz" % v["clocks"][2], "clk_video": "%d MHz" % v["clocks"][3],
            "max_graphics": "%d MHz" % v["max_clocks"][0], "max_sm": "%d MHz" % v["max_clocks"][1],
            "max_mem": "%d MHz" % v["max_clocks"][2], "max_video": "%d MHz" % v["max_clocks"][3],
            "fabric_state": "N/A", "fabric_status": "N/A", "fabric_clique": "N/A", "fabric_cluster": "N/A",
        }
        fabric = _fabric.fabric_of(self.state)
        if fabric is not None:
            # An NVSwitch board (corpus 055/059/060): In Progress / N/A until the fabric manager set it up;
            # then Completed / Success in clique 0 of the all-zero cluster of a single node.
            done = fabric.get("state") == _fabric.SET_UP["state"]
            d.update(fabric_state=fabric["state"], fabric_status=fabric["status"],
                     fabric_clique="0" if done else "N/A",
                     fabric_cluster="00000000-0000-0000-0000-000000000000" if done else "N/A")
        for r in REASON_NAMES:
            d["cer_" + r] = act(r)
        for c in ("sw_power_cap", "sync_boost", "sw_therm_slowdown", "hw_therm_slowdown", "hw_power_brake"):
            d["cerc_" + c] = "0 us"
        return d

    def _q_processes(self, v):
        if not v["procs"]:
            return ["    Processes                                          : None"]
        out = ["    Processes"]
        for p in sorted(v["procs"], key=lambda p: p["pid"]):
            gi = "N/A" if p.get("gi_id") is None else str(int(p["gi_id"]))
            ci = "N/A" if p.get("gi_id") is None else str(int(p.get("ci_id") or 0))
            out += ["        GPU instance ID                   : %s" % gi,
                    "        Compute instance ID               : %s" % ci,
                    "        Process ID                        : %d" % int(p["pid"]),
                    "            Type                          : %s" % (p.get("type") or "C"),
                    "            Name                          : %s" % (p.get("name") or ""),
                    "            Used GPU Memory               : %d MiB" % int(p.get("used_mib") or 0)]
        return out

    def _q_mig_devices(self, v):
        out = []
        kv = lambda ind, k, val: "%s%-*s: %s" % (" " * ind, 55 - ind, k, val)  # noqa: E731
        for d in v["mig_devices"]:
            p = d["profile"]
            out += ["    MIG Device", kv(8, "Index", d["index"]), kv(8, "GPU Instance ID", d["gi"]["id"]),
                    kv(8, "Compute Instance ID", d["ci"]["id"]), "        Device Attributes", "            Shared",
                    kv(16, "Multiprocessor count", d["sm"]), kv(16, "Copy Engine count", p["ce"]),
                    kv(16, "Encoder count", p["enc"]), kv(16, "Decoder count", p["dec"]),
                    kv(16, "OFA count", p["ofa"]), kv(16, "JPG count", p["jpeg"]),
                    "        ECC Errors", "            Volatile", kv(16, "SRAM Uncorrectable", 0),
                    "        Shared FB Memory Usage", kv(12, "Total", "%d MiB" % d["total"]),
                    kv(12, "Reserved", "0 MiB"), kv(12, "Used", "%d MiB" % d["used"]),
                    kv(12, "Free", "%d MiB" % (d["total"] - d["used"])),
                    "        Shared BAR1 Memory", kv(12, "Total", "%d MiB" % d["bar1"]), kv(12, "Used", "0 MiB"),
                    kv(12, "Free", "%d MiB" % d["bar1"])]
        return out

    def q_gpu_lines(self, v):
        body = _read_template("q_gpu.txt").substitute(self._subst(v)).rstrip("\n").split("\n")
        if v["mig_devices"]:   # 003: the MIG Device blocks after MIG Mode / Pending
            at = next(i for i, line in enumerate(body) if line.startswith("        Pending")) + 1
            body[at:at] = self._q_mig_devices(v)
        return body + self._q_processes(v) + ["    Capabilities", "        EGM" + " " * 44 + ": disabled"]

    def query(self, views, displays=None):
        head = ["", "==============NVSMI LOG==============", "",
                "%-55s: %s" % ("Timestamp", _timestamp(self.now)),
                "%-55s: %s" % ("Driver Version", self.version),
                "%-55s: %s" % ("CUDA Version", self.cuda), "",
                "%-55s: %d" % ("Attached GPUs", len(self.driven_gpus()))]
        out = list(head)
        for i, v in enumerate(views):
            if i:
                out.append("")
            lines = self.q_gpu_lines(v)
            if displays:
                lines = _select_sections(lines, displays)
            out += lines
        return "\n".join(out) + "\n"

    # ----- -q -x ------------------------------------------------------------------------------
    def xml(self, views):
        tmpl = _read_template("qx_v13_gpu.xml")
        parts = ['<?xml version="1.0" ?>',
                 '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
                 "<nvidia_smi_log>",
                 "\t<timestamp>%s</timestamp>" % _timestamp(self.now),
                 "\t<driver_version>%s</driver_version>" % self.version,
                 "\t<cuda_version>%s</cuda_version>" % self.cuda,
                 "\t<attached_gpus>%d</attached_gpus>" % len(self.driven_gpus())]
        for v in views:
            d = self._subst(v, xml=True)
            d["supported_clocks"] = self._xml_supported_clocks(v)
            d["processes"] = self._xml_processes(v)
            text = tmpl.substitute(d).rstrip("\n")
            if v["mig_devices"]:   # 019 / 039: <mig_devices><mig_device>...
                text = text.replace("\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>", self._xml_mig_devices(v), 1)
            parts.append(text)
        parts += ["", "</nvidia_smi_log>"]
        return "\n".join(parts) + "\n"

    def _xml_supported_clocks(self, v):
        mx, idle = v["max_clocks"], v["model"]["clocks_idle"]
        out = ["\t\t<supported_clocks>"]
        for mem in (mx[2], idle[2]):
            out.append("\t\t\t<supported_mem_clock>")
            out.append("\t\t\t\t<value>%d MHz</value>" % mem)
            top = mx[0] if mem == mx[2] else min(mx[0], idle[0] + 705)
            f = top
            while f >= idle[0]:
                out.append("\t\t\t\t<supported_graphics_clock>%d MHz</supported_graphics_clock>" % f)
                f -= 15 if f - 15 >= idle[0] or f == idle[0] else f - idle[0]
                if f == top:
                    break
            out.append("\t\t\t</supported_mem_clock>")
        out.append("\t\t</supported_clocks>")
        return "\n".join(out)

    def _xml_mig_devices(self, v):
        out = ["\t\t<mig_devices>"]
        for d in v["mig_devices"]:
            p = d["profile"]
            t = "\t\t\t"
            out += [t + "<mig_device>", t + "\t<index>%d</index>" % d["index"],
                    t + "\t<gpu_instance_id>%d</gpu_instance_id>" % d["gi"]["id"],
                    t + "\t<compute_instance_id>%d</compute_instance_id>" % d["ci"]["id"],
                    t + "\t<device_attributes>", t + "\t\t<shared>",
                    t + "\t\t\t<multiprocessor_count>%d</multiprocessor_count>" % d["sm"],
                    t + "\t\t\t<copy_engine_count>%d</copy_engine_count>" % p["ce"],
                    t + "\t\t\t<encoder_count>%d</encoder_count>" % p["enc"],
                    t + "\t\t\t<decoder_count>%d</decoder_count>" % p["dec"],
                    t + "\t\t\t<ofa_count>%d</ofa_count>" % p["ofa"],
                    t + "\t\t\t<jpg_count>%d</jpg_count>" % p["jpeg"],
                    t + "\t\t</shared>", t + "\t</device_attributes>",
                    t + "\t<ecc_error_count>", t + "\t\t<volatile_count>",
                    t + "\t\t\t<sram_uncorrectable>0</sram_uncorrectable>",
                    t + "\t\t</volatile_count>", t + "\t</ecc_error_count>",
                    t + "\t<fb_memory_usage>", t + "\t\t<total>%d MiB</total>" % d["total"],
                    t + "\t\t<reserved>0 MiB</reserved>", t + "\t\t<used>%d MiB</used>" % d["used"],
                    t + "\t\t<free>%d MiB</free>" % (d["total"] - d["used"]), t + "\t</fb_memory_usage>",
                    t + "\t<bar1_memory_usage>", t + "\t\t<total>%d MiB</total>" % d["bar1"],
                    t + "\t\t<used>0 MiB</used>", t + "\t\t<free>%d MiB</free>" % d["bar1"],
                    t + "\t</bar1_memory_usage>", t + "</mig_device>"]
        out.append("\t\t</mig_devices>")
        return "\n".join(out)

    def _xml_processes(self, v):
        if not v["procs"]:
            return "\t\t<processes>\n\t\t</processes>"
        out = ["\t\t<processes>"]
        for p in sorted(v["procs"], key=lambda p: p["pid"]):
            out += ["\t\t\t<process_info>",
                    "\t\t\t\t<gpu_instance_id>%s</gpu_instance_id>" % (
                        "N/A" if p.get("gi_id") is None else int(p["gi_id"])),
                    "\t\t\t\t<compute_instance_id>%s</compute_instance_id>" % (
                        "N/A" if p.get("gi_id") is None else int(p.get("ci_id") or 0)),
                    "\t\t\t\t<pid>%d</pid>" % int(p["pid"]),
                    "\t\t\t\t<type>%s</type>" % escape(p.get("type") or "C"),
                    "\t\t\t\t<process_name>%s</process_name>" % escape(p.get("name") or ""),
                    "\t\t\t\t<used_memory>%d MiB</used_memory>" % int(p.get("used_mib") or 0),
                    "\t\t\t</process_info>"]
        out.append("\t\t</processes>")
        return "\n".join(out)

    # ----- --query-gpu ------------------------------------------------------------------------
    def gpu_field(self, v, field, count):
        """(value, unit) for one --query-gpu field; None if the field is unknown."""
        f = field.strip()
        key = GPU_ALIASES.get(f, f)
        if key.startswith("clocks_throttle_reasons."):
            key = "clocks_event_reasons." + key.split(".", 1)[1]
        en = lambda b: "Enabled" if b else "Disabled"  # noqa: E731
        simple = {
            "timestamp": lambda: (time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(self.now)) +
                                  ".%03d" % int((self.now % 1) * 1000), None),
            "driver_version": lambda: (self.version, None),
            "count": lambda: (str(count), None),
            "name": lambda: (v["name"], None),
            "serial": lambda: (v["serial"], None),
            "uuid": lambda: (v["uuid"], None),
            "pci.bus_id": lambda: (v["pci_bus_id"], None),
            "pci.domain": lambda: ("0x" + v["pci_domain"], None),
            "pci.bus": lambda: ("0x" + v["pci_bus"].upper(), None),
            "pci.device": lambda: ("0x" + v["pci_device"].upper(), None),
            "pci.baseClass": lambda: ("0x%x" % int(v["pci_class"][:2], 16), None),
            "pci.subClass": lambda: ("0x%x" % int(v["pci_class"][2:], 16), None),
            "pci.device_id": lambda: ("0x" + v["pci_device_id"], None),
            "pci.sub_device_id": lambda: ("0x" + v["pci_sub_system_id"], None),
            "pcie.link.gen.current": lambda: (str(v["pcie_gen_max"] if v["pstate"] == "P0" else 1), None),
            "pcie.link.gen.gpucurrent": lambda: (str(v["pcie_gen_max"] if v["pstate"] == "P0" else 1), None),
            "pcie.link.gen.max": lambda: (str(v["pcie_gen_max"]), None),
            "pcie.link.gen.gpumax": lambda: (str(v["pcie_gen_max"]), None),
            "pcie.link.gen.hostmax": lambda: ("[N/A]", None),
            "pcie.link.width.current": lambda: ("16", None),
            "pcie.link.width.max": lambda: ("16", None),
            "index": lambda: (str(v["index"]), None),
            "display_mode": lambda: ("[Requested functionality has been deprecated]", None),
            "display_attached": lambda: ("No", None),
            "display_active": lambda: ("Disabled", None),
            "persistence_mode": lambda: (en(v["persistence"]), None),
            "addressing_mode": lambda: (v["addressing_mode"], None),
            "accounting.mode": lambda: ("Disabled", None),
            "accounting.buffer_size": lambda: ("4000", None),
            "driver_model.current": lambda: ("[N/A]", None),
            "driver_model.pending": lambda: ("[N/A]", None),
            "vbios_version": lambda: (v["vbios"], None),
            "fan.speed": lambda: (("[N/A]", "%") if v["fan"] is None else (str(int(v["fan"])), "%")),
            "pstate": lambda: (v["pstate"], None),
            "clocks_event_reasons.supported": lambda: ("0x00000000000001FF", None),
            "clocks_event_reasons.active": lambda: ("0x%016X" % sum(b for r, b in REASONS if r in v["reasons"]), None),
            "memory.total": lambda: (str(v["total"]), "MiB"),
            "memory.reserved": lambda: (str(v["reserved"]), "MiB"),
            "memory.used": lambda: (str(v["used"]), "MiB"),
            "memory.free": lambda: (str(v["free"]), "MiB"),
            "compute_mode": lambda: (v["compute_mode"], None),
            "compute_cap": lambda: (v["compute_cap"], None),
            "utilization.gpu": lambda: (("[N/A]", "%") if v["mig"] else (str(v["util_gpu"]), "%")),
            "utilization.memory": lambda: (("[N/A]", "%") if v["mig"] else (str(v["util_memory"]), "%")),
            "utilization.encoder": lambda: ("0", "%"),
            "utilization.decoder": lambda: ("0", "%"),
            "ecc.mode.current": lambda: (en(v["ecc"]), None),
            "ecc.mode.pending": lambda: (en(v["ecc"]), None),
            "temperature.gpu": lambda: (str(v["temp"]), None),
            "temperature.gpu.tlimit": lambda: (str(max(v["temp_tlimit"] - v["temp"] + 34, 0)), None),
            "temperature.memory": lambda: (str(v["temp"] + 4) if v["memory_temp"] else "N/A", None),
            "power.management": lambda: ("[Requested functionality has been deprecated]", None),
            "power.draw": lambda: ("%.2f" % v["power_draw"], "W"),
            "power.draw.average": lambda: ("%.2f" % v["power_draw"], "W"),
            "power.draw.instant": lambda: ("%.2f" % v["power_draw"], "W"),
            "power.limit": lambda: ("%.2f" % v["power_limit"], "W"),
            "enforced.power.limit": lambda: ("%.2f" % v["power_limit"], "W"),
            "power.default_limit": lambda: ("%.2f" % v["power_default"], "W"),
            "power.min_limit": lambda: ("%.2f" % v["power_min"], "W"),
            "power.max_limit": lambda: ("%.2f" % v["power_max"], "W"),
            "clocks.current.graphics": lambda: (str(v["clocks"][0]), "MHz"),
            "clocks.current.sm": lambda: (str(v["clocks"][1]), "MHz"),
            "clocks.current.memory": lambda: (str(v["clocks"][2]), "MHz"),
            "clocks.current.video": lambda: (str(v["clocks"][3]), "MHz"),
            "clocks.max.graphics": lambda: (str(v["max_clocks"][0]), "MHz"),
            "clocks.max.sm": lambda: (str(v["max_clocks"][1]), "MHz"),
            "clocks.max.memory": lambda: (str(v["max_clocks"][2]), "MHz"),
            "mig.mode.current": lambda: ((en(v["mig"]) if v["mig_capable"] else "[N/A]"), None),
            "mig.mode.pending": lambda: ((en(v.get("mig_pending", v["mig"])) if v["mig_capable"] else "[N/A]"),
                                         None),
            "gsp.mode.current": lambda: ("Enabled", None),
            "gsp.mode.default": lambda: ("Enabled", None),
        }
        if key in simple:
            return simple[key]()
        if key.startswith("clocks_event_reasons."):
            r = key.split(".", 1)[1]
            if r in REASON_NAMES:
                return ("Active" if r in v["reasons"] else "Not Active"), None
        if key.startswith("clocks_event_reasons_counters."):
            if key.split(".", 1)[1] in ("sw_power_cap", "sync_boost", "sw_thermal_slowdown",
                                        "hw_thermal_slowdown", "hw_power_brake_slowdown"):
                return "0", "us"
        return None

    def query_gpu(self, views, fields, fmt):
        count = len(self.driven_gpus())
        for f in fields:
            if self.gpu_field(views[0], f, count) is None if views else _gpu_field_unknown(f):
                return invalid_field(f)
        rows = []
        header = []
        for f in fields:
            unit = None
            if views:
                unit = self.gpu_field(views[0], f, count)[1]
            else:
                unit = FIELD_UNITS.get(GPU_ALIASES.get(f, f))
            header.append(f + (" [%s]" % unit if unit else ""))
        for v in views:
            row = []
            for f in fields:
                val, unit = self.gpu_field(v, f, count)
                row.append(_with_unit(val, unit, fmt))
            rows.append(", ".join(row))
        return _csv(header, rows, fmt), RC_OK

    def query_apps(self, views, fields, fmt):
        cols = []
        for f in fields:
            key = APP_ALIASES.get(f.strip())
            if key is None:
                return invalid_field(f)
            cols.append((f.strip(), key))
        header = []
        for name, key in cols:
            shown = "used_gpu_memory" if key == "used_memory" else name
            header.append(shown + (" [MiB]" if key == "used_memory" else ""))
        rows = []
        for v in views:
            for p in sorted(v["procs"], key=lambda p: p["pid"]):
                row = []
                for _name, key in cols:
                    row.append({
                        "timestamp": lambda: time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(self.now)) +
                        ".%03d" % int((self.now % 1) * 1000),
                        "gpu_name": lambda: v["name"], "gpu_bus_id": lambda: v["pci_bus_id"],
                        "gpu_serial": lambda: v["serial"], "gpu_uuid": lambda: v["uuid"],
                        "pid": lambda: str(int(p["pid"])), "process_name": lambda: p.get("name") or "",
                        "used_memory": lambda: _with_unit(str(int(p.get("used_mib") or 0)), "MiB", fmt),
                    }[key]())
                rows.append(", ".join(row))
        return _csv(header, rows, fmt), RC_OK

    # ----- -pm --------------------------------------------------------------------------------
    def set_persistence(self, views, enable, path):
        out = []
        if self.euid != 0:
            v = views[0]
            out.append("Unable to set persistence mode for GPU %s: Insufficient Permissions" % v["pci_bus_id"])
            out.append("Terminating early due to previous errors.")
            return "\n".join(out) + "\n", RC_NOPERM
        word = "Enabled" if enable else "Disabled"
        legacy = "Legacy " if self.branch >= 580 else ""
        targets = {v["gpu"]["uuid"] for v in views}
        for v in views:
            if v["persistence"] == enable:
                out.append("Persistence mode is already %s for GPU %s." % (word, v["pci_bus_id"]))
            else:
                out.append("%s %spersistence mode for GPU %s." % (word, legacy, v["pci_bus_id"]))
        return _set_and_done(path, targets, "persistence_mode", enable, out)

    # ----- -mig --------------------------------------------------------------------------------
    def set_mig(self, views, enable, path):
        """`nvidia-smi [-i N] -mig 0|1`: the texts of NVIDIA's MIG user guide ("Enabled MIG Mode for GPU
        00000000:36:00.0", "All done."). The mode takes effect at once (bare metal, idle GPU); a GPU without
        MIG answers as -pm does for a refused GPU, with NVML's "Not Supported" (exit 3)."""
        if self.euid != 0:
            out = ["Unable to %s MIG Mode for GPU %s: Insufficient Permissions"
                   % ("enable" if enable else "disable", views[0]["pci_bus_id"]),
                   "Terminating early due to previous errors."]
            return "\n".join(out) + "\n", RC_NOPERM
        out = []
        for v in views:
            if not v["mig_capable"]:
                out.append("Unable to %s MIG Mode for GPU %s: Not Supported"
                           % ("enable" if enable else "disable", v["pci_bus_id"]))
                out.append("Terminating early due to previous errors.")
                return "\n".join(out) + "\n", RC_NOTSUPPORTED
        targets = {v["gpu"]["uuid"] for v in views}

        def apply(s):
            for g in s["gpus"]:
                if g["uuid"] in targets:
                    out.extend(_mig.set_mode(self, g, enable, s))
        st.update(apply, path)
        out.append("All done.")
        return "\n".join(out) + "\n", RC_OK

    def gpu_reset(self, views, path):
        """`nvidia-smi -r` (gpusim/mig.py)."""
        targets = {v["gpu"]["uuid"] for v in views}
        result = {}

        def apply(s):
            result["r"] = _mig.gpu_reset(self, [g for g in s["gpus"] if g["uuid"] in targets], s)
        st.update(apply, path)
        out, rc = result["r"]
        return "".join(line + "\n" for line in out), rc

    # ----- --version --------------------------------------------------------------------------
    def version_text(self):
        if self.branch >= 610:     # 026
            return ("NVIDIA-SMI version  : %s\nNVML version        : %s\n"
                    "DRIVER version      : Deprecated, see \"KMD version\" instead\n"
                    "CUDA version        : Deprecated, see \"CUDA UMD version\" instead\n"
                    "KMD version         : %s\nCUDA UMD version    : %s\n") % (
                        self.version, nvml_version(self.version), self.version, self.cuda)
        return ("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
                "CUDA Version        : %s\n") % (self.version, nvml_version(self.version), self.version, self.cuda)


# --query-gpu aliases (nvidia-smi --help-query-gpu: `"name" or "gpu_name"`, `"uuid" or "gpu_uuid"`, ...)
GPU_ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "pci.sub_device_id": "pci.sub_device_id", "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm", "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video", "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory", "power.draw.instant": "power.draw.instant",
    "pstate": "pstate", "persistence_mode": "persistence_mode",
}
FIELD_UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB", "memory.reserved": "MiB",
               "utilization.gpu": "%", "utilization.memory": "%", "power.draw": "W", "power.limit": "W",
               "fan.speed": "%"}
# --query-compute-apps fields (nvidia-smi --help-query-compute-apps)
APP_ALIASES = {
    "timestamp": "timestamp", "gpu_name": "gpu_name", "gpu_bus_id": "gpu_bus_id", "gpu_serial": "gpu_serial",
    "gpu_uuid": "gpu_uuid", "pid": "pid", "process_name": "process_name", "name": "process_name",
    "used_memory": "used_memory", "used_gpu_memory": "used_memory",
}

# `-d` section names -> top-level -q sections (nvidia-smi(1): MEMORY, UTILIZATION, ECC, TEMPERATURE,
# POWER, CLOCK, COMPUTE, PIDS, PERFORMANCE, ...)
DISPLAY_SECTIONS = {
    "MEMORY": ["FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"],
    "UTILIZATION": ["Utilization"],
    "ECC": ["ECC Mode", "ECC Errors"],
    "TEMPERATURE": ["Temperature"],
    "POWER": ["GPU Power Readings", "GPU Memory Power Readings", "Module Power Readings"],
    "CLOCK": ["Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks",
              "Max Clocks", "Max Customer Boost Clocks", "Clock Policy"],
    "COMPUTE": ["Compute Mode"],
    "PIDS": ["Processes"],
    "PERFORMANCE": ["Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters",
                    "Sparse Operation Mode"],
}


def _select_sections(lines, displays):
    wanted = []
    for d in displays:
        wanted += DISPLAY_SECTIONS[d]
    out = [lines[0]]   # "GPU 0000..."
    keep = False
    for line in lines[1:]:
        if line.startswith("    ") and not line.startswith("     "):
            key = line[4:].split(" : ")[0].rstrip()
            keep = key in wanted
        if keep:
            out.append(line)
    return out


def pid_alive(pid):
    """Whether a process `pid` runs (one that may not be signalled runs too); no pid is no process."""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


def _compute_mode_short(mode):
    return {"Default": "Default", "Exclusive_Process": "E. Process", "Prohibited": "Prohibited",
            "Exclusive_Thread": "E. Thread"}.get(mode, mode)


def _with_unit(val, unit, fmt):
    if unit is None or fmt.get("nounits") or val.startswith("[") or val == "N/A":
        return val
    return "%s %s" % (val, unit)


def _csv(header, rows, fmt):
    lines = [] if fmt.get("noheader") else [", ".join(header)]
    return "".join(line + "\n" for line in lines + rows)


def _gpu_field_unknown(field):
    probe = Smi.__new__(Smi)
    fake = {"name": "", "serial": "", "uuid": "", "pci_bus_id": "00000000:00:00.0", "pci_domain": "0000",
            "pci_bus": "00", "pci_device": "00", "pci_class": "0302", "pci_device_id": "", "pci_sub_system_id": "",
            "pstate": "P8", "pcie_gen_max": 5, "index": 0, "persistence": False, "addressing_mode": "None",
            "vbios": "", "fan": None, "reasons": set(), "total": 0, "reserved": 0, "used": 0, "free": 0,
            "compute_mode": "Default", "compute_cap": "", "mig": False, "mig_capable": False, "util_gpu": 0,
            "util_memory": 0, "ecc": True, "temp": 0, "memory_temp": False, "temp_tlimit": 0, "architecture": "",
            "power_draw": 0.0, "power_limit": 0.0, "power_default": 0.0, "power_min": 0.0, "power_max": 0.0,
            "clocks": (0, 0, 0, 0), "max_clocks": (0, 0, 0, 0)}
    probe.version, probe.now = "", 0.0
    return probe.gpu_field(fake, field, 0) is None


def invalid_field(field):
    # stdout, then an empty line, exit 2 (public capture: stdout 'Field "device_minor" is not a valid
    # field to query.\n\n', "command terminated with exit code 2")
    return 'Field "%s" is not a valid field to query.\n\n' % field.strip(), RC_INVALID


# ----- command line ------------------------------------------------------------------------------
class _Args:
    def __init__(self):
        self.query = False
        self.xml = False
        self.list = False
        self.version = False
        self.help = False
        self.ids = None
        self.displays = []
        self.query_gpu = None
        self.query_apps = None
        self.fmt = None
        self.pm = None
        self.mig = None
        self.reset = False


def parse_args(argv):
    a = _Args()
    i = 0

    def value(opt):
        nonlocal i
        arg = argv[i]
        if "=" in arg and arg.startswith("--"):
            return arg.split("=", 1)[1]
        i += 1
        if i >= len(argv):
            raise ValueError(opt)
        return argv[i]

    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if name in ("-q", "--query"):
            a.query = True
        elif name in ("-x", "--xml-format"):
            a.xml = True
        elif name in ("-L", "--list-gpus"):
            a.list = True
        elif name in ("--version",):
            a.version = True
        elif name in ("-h", "--help"):
            a.help = True
        elif name in ("-i", "--id"):
            a.ids = [s.strip() for s in value(name).split(",") if s.strip()]
        elif name in ("-d", "--display"):
            for d in value(name).split(","):
                d = d.strip().upper()
                if d not in DISPLAY_SECTIONS:
                    raise ValueError(name)
                a.displays.append(d)
        elif name == "--query-gpu":
            a.query_gpu = [f for f in value(name).split(",") if f.strip()]
        elif name == "--query-compute-apps":
            a.query_apps = [f for f in value(name).split(",") if f.strip()]
        elif name == "--format":
            opts = [o.strip() for o in value(name).split(",") if o.strip()]
            if "csv" not in opts or any(o not in ("csv", "noheader", "nounits") for o in opts):
                raise ValueError(name)
            a.fmt = {o: True for o in opts}
        elif name in ("-pm", "--persistence-mode"):
            a.pm = _switch(name, value(name))
        elif name in ("-r", "--gpu-reset"):
            a.reset = True
        elif name in ("-mig", "--multi-instance-gpu"):
            a.mig = _switch(name, value(name))
        elif arg.startswith("-i") and len(arg) > 2 and arg[2:].replace(",", "").isdigit():
            a.ids = arg[2:].split(",")
        else:
            raise ValueError(arg)
        i += 1
    if (a.query_gpu is not None or a.query_apps is not None) and a.fmt is None:
        raise ValueError("--format")
    if a.xml and not a.query:
        raise ValueError("-x")
    return a


def _set_and_done(path, uuids, key, value, out):
    """Sets `key` of the GPUs `uuids` in the state and ends the messages as nvidia-smi does ("All done.")."""
    def apply(s):
        for g in s["gpus"]:
            if g["uuid"] in uuids:
                g[key] = value
    st.update(apply, path)
    out.append("All done.")
    return "\n".join(out) + "\n", RC_OK


def _switch(name, text):
    """The value of a 0/DISABLED, 1/ENABLED option (-pm, -mig)."""
    v = text.strip().upper()
    if v in ("1", "ENABLED"):
        return True
    if v in ("0", "DISABLED"):
        return False
    raise ValueError(name)


USAGE = """NVIDIA System Management Interface -- v{version}

NVSMI provides monitoring information for Tesla and select Quadro devices.
The data is presented in either a plain text or an XML format, via stdout or a file.
NVSMI also provides several management operations for changing the device state.

Note that the functionality of NVSMI is exposed through the NVML C-based
library. See the NVIDIA developer website for more information about NVML.
Python wrappers to NVML are also available.  The output of NVSMI is
not guaranteed to be backwards compatible; NVML and the bindings are backwards
compatible.

http://developer.nvidia.com/nvidia-management-library-nvml/
http://pypi.python.org/pypi/nvidia-ml-py/
Supported products:
- Full Support
    - All Tesla products, starting with the Kepler architecture
    - All Quadro products, starting with the Kepler architecture
    - All GRID products, starting with the Kepler architecture
    - GeForce Titan products, starting with the Kepler architecture
- Limited Support
    - All Geforce products, starting with the Kepler architecture
nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.

  LIST OPTIONS:

    -L,   --list-gpus           Display a list of GPUs connected to the system.

  SUMMARY OPTIONS:

    <no arguments>              Show a summary of GPUs connected to the system.

    [plus any of]

    -i,   --id=                 Target a specific GPU.

  QUERY OPTIONS:

    -q,   --query               Display GPU or Unit info.

    [plus any of]

    -i,   --id=                 Target a specific GPU or Unit.
    -x,   --xml-format          Produce XML output.
    -d,   --display=            Display only selected information: MEMORY,
                                    UTILIZATION, ECC, TEMPERATURE, POWER, CLOCK,
                                    COMPUTE, PIDS, PERFORMANCE

  SELECTIVE QUERY OPTIONS:

    --query-gpu                 Information about GPU.
    --query-compute-apps        List of currently active compute processes.
    --format=                   Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical values

  DEVICE MODIFICATION OPTIONS:

    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    -mig  --multi-instance-gpu= Enable or disable Multi Instance GPU: 0/DISABLED, 1/ENABLED
                                Requires root.
"""


def select(smi, views_all, ids):
    """Resolve -i (index, UUID or PCI bus id; comma list). None if one does not match."""
    if not ids:
        return views_all
    chosen = []
    for ident in ids:
        match = None
        for v in views_all:
            bus = v["pci_bus_id"].lower()
            low = ident.lower()
            if (ident.isdigit() and int(ident) == v["index"]) or ident == v["uuid"] or \
                    low == bus or (len(low) < len(bus) and bus.endswith(low) and ":" in low):
                match = v
        if match is None:
            return None
        if match not in chosen:
            chosen.append(match)
    return chosen


def run(argv, state_path=None, now=None, euid=None, sleep=None, write=None):
    """-> (stdout text, exit code). Everything nvidia-smi prints goes to stdout, as the real one does.

    `dmon` runs until its count is done: it prints through `write` as it goes when one is given (main), and takes
    its time from `now` (a fixed clock that advances only by what `sleep` was asked: unit tests never sleep)."""
    if list(argv[:1]) == ["dmon"]:
        try:
            dmon_args = _dmon.parse_args(list(argv[1:]))
        except ValueError:
            return MSG_INVALID + "\n", RC_INVALID
        return _run_dmon(dmon_args, state_path, now, euid, sleep, write)
    mig_cmd = list(argv[:1]) == ["mig"]
    mig_argv = list(argv[1:])
    if mig_cmd:
        try:
            _mig.parse_mig_args(list(argv[1:]))
        except ValueError:
            return MSG_INVALID + "\n", RC_INVALID
        argv = []
    topo_matrix = list(argv[:1]) == ["topo"]
    if topo_matrix and list(argv[1:]) not in (["-m"], ["--matrix"]):
        return MSG_INVALID + "\n", RC_INVALID
    try:
        args = parse_args([] if topo_matrix else argv)
    except ValueError:
        return MSG_INVALID + "\n", RC_INVALID
    smi, failure = _open(state_path, now, euid)
    if failure:
        return failure
    if args.help:
        return USAGE.format(version=smi.version), RC_OK
    if args.version:
        return smi.version_text(), RC_OK
    gpus = smi.driven_gpus()
    failure = _no_gpus(gpus)
    if failure:
        return failure
    if topo_matrix:
        return _topo.render(smi.state, gpus), RC_OK
    views_all = [smi.view(g, i) for i, g in enumerate(gpus)]
    if mig_cmd:
        return _mig.run_mig(smi, views_all, list(mig_argv), state_path, st)
    views = select(smi, views_all, args.ids)
    if views is None:
        return MSG_NO_DEVICES + "\n", RC_NOTFOUND
    if args.pm is not None:
        return smi.set_persistence(views, args.pm, state_path)
    if args.mig is not None:
        return smi.set_mig(views, args.mig, state_path)
    if args.reset:
        return smi.gpu_reset(views, state_path)
    if args.query_gpu is not None:
        return smi.query_gpu(views, args.query_gpu, args.fmt)
    if args.query_apps is not None:
        return smi.query_apps(views, args.query_apps, args.fmt)
    if args.list:
        return smi.list_gpus(views), RC_OK
    if args.query:
        if args.xml:
            return smi.xml(views), RC_OK
        return smi.query(views, args.displays), RC_OK
    if args.displays:
        return MSG_INVALID + "\n", RC_INVALID
    return smi.table(views), RC_OK


def _open(state_path, now, euid):
    """(Smi, None) for a usable driver, else (None, (text, exit code)) of NVML's failure."""
    state = st.load(state_path)
    if state.get("container") and _reload.nvml_lost():
        return None, (_reload.MSG_LOST + "\n", _reload.RC_LOST)
    drv = st.driver_state(state)
    if drv in ("no_driver", "not_loaded"):
        return None, (MSG_NO_DRIVER + "\n", RC_NODRIVER)
    if drv == "mismatch":
        inst = state["driver"]["installed"]["version"]
        return None, (MSG_MISMATCH + "\nNVML library version: %s\n" % nvml_version(inst), RC_MISMATCH)
    now = time.time() if now is None else now
    return Smi(state, now=now, euid=euid, load=_load.read(state_path, now)), None


def _no_gpus(gpus):
    lost = [g for g in gpus if g.get("lost")]
    if lost:
        return "".join("Unable to determine the device handle for GPU %s: GPU is lost.  "
                       "Reboot the system to recover this GPU\n" % g["pci_bus_id"][4:] for g in lost), RC_LOST
    if not gpus:
        return MSG_NO_DEVICES + "\n", RC_NOTFOUND
    return None


def _run_dmon(args, state_path, now, euid, sleep, write):
    """nvidia-smi dmon (gpusim/dmon.py): NVML's failures as every form prints them, then the samples, each read
    afresh from the state and the load records."""
    smi, failure = _open(state_path, now, euid)
    if failure:
        return failure
    failure = _no_gpus(smi.driven_gpus())
    if failure:
        return failure
    if select(smi, [smi.view(g, i) for i, g in enumerate(smi.driven_gpus())], args.ids) is None:
        return MSG_NO_DEVICES + "\n", RC_NOTFOUND
    slept = [0.0]
    if now is None:
        clock, sleep = time.time, sleep or time.sleep
    else:
        real_sleep = sleep or (lambda s: None)

        def sleep(seconds):
            slept[0] += seconds
            real_sleep(seconds)

        def clock():
            return now + slept[0]
    out = []

    def sample(at):
        smi_now, bad = _open(state_path, at, euid)
        if bad:
            return None
        gpus = smi_now.driven_gpus()
        if _no_gpus(gpus):
            return None
        return select(smi_now, [smi_now.view(g, i) for i, g in enumerate(gpus)], args.ids)
    rc = _dmon.run(args, sample, write or out.append, clock, sleep)
    return "".join(out), rc


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if list(argv[:1]) == ["dmon"]:   # dmon prints as it samples

        def write(text):
            sys.stdout.write(text)
            sys.stdout.flush()
        text, rc = run(argv, write=write)
        sys.stdout.write(text)
        sys.stdout.flush()
        return rc
    text, rc = run(argv)
    sys.stdout.write(text)
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
