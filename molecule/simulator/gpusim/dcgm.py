"""NVIDIA DCGM (Data Center GPU Manager) for the simulated host: `dcgmi discovery -l` and `dcgmi diag` (test code,
stdlib only). nv-hostengine is gpusim/hostengine.py; both share the state key `hostengine` (see there).

Sources (NVIDIA/DCGM at the 4.4.2 and 4.5.2 release commits f0ec215 / 0869351, 3.3.9 at b0ec3c6; captures cited in
DESIGN.md "DCGM"):
- dcgmi/Query.cpp DisplayDiscoveredDevices + dcgmi/DcgmiOutput.cpp DcgmiOutputColumns: `N GPUs found.` (4.4) /
  `N GPUs found (Active).` (4.5), the 8 + 70 column boxes, `0 NvSwitches found.`, `0 ConnectX found.`, `0 CPUs found.`
  (real 4.x outputs: NVIDIA/DCGM#229, KempnerInstitute/kempnerpulse#15).
- dcgmi/Command.cpp: no host engine -> `Error: unable to establish a connection to the specified host: localhost` and
  `Error: Unable to connect to host engine. Host engine connection invalid/disconnected.` (DCGM_ST_CONNECTION_NOT_VALID,
  -21: exit 235). dcgmi/Diag.cpp StartDiag::DoExecuteConnectionFailure: `dcgmi diag` then starts an EMBEDDED host
  engine and runs anyway (NVIDIA/DCGM#108: "the dcgmi CLI tool can execute an embedded hostengine").
- dcgmi/Diag.cpp: the table (DIAG_HEADER, DIAG_DATA stencil 25/46 columns, values cut at 45 characters per line), the
  -j document (jsoncpp's styled writer: tabs, `"key" : value`, keys sorted; real documents in tests/fixtures/dcgm_diag),
  GetFailureResult (an error on a GPU or in the software test: DCGM_ST_NVVS_ERROR -30, exit 226; an ISOLATE-severity
  error: DCGM_ST_NVVS_ISOLATE_ERROR -51, exit 205), RunDiagOnce's `Error: Unable to complete diagnostic for entities
  *,cpu:*. Return: (-30) : DCGM GPU Diagnostic returned an error` + nvvs' system error (NVIDIA/DCGM#254 shows it for a
  missing plugins/cudaNN directory).
- nvvs: NvidiaValidationSuite::FillTestVectors (level 1 software; 2 + memory, pcie; 3 + diagnostic, nvbandwidth,
  targeted_stress, targeted_power; 4 + memtest), BuildCommonGpusList (the MIG refusals), TestFramework (the plugin
  directory of the driver's CUDA major), Software.cpp (subtest prefixes, results applied to every GPU of the run,
  merged worst-first by DcgmNvvsResponseWrapper), diag-skus.yaml.in (which SKUs allow which test: is_allowed).
- dcgmlib/dcgm_errors.h / dcgm_errors.c: DCGM_FR_* ids, message formats, next steps, severities, categories.
"""
import json
import os
import pwd
import sys

from . import boot as bootmod
from . import catalogue
from . import mig as _mig
from . import state as st
from .smi import pid_alive

VERSION_FILE = "/usr/lib/gpu-sim/dcgm.version"      # the installed DCGM's version, written by its package
PLUGIN_BASE = "/usr/libexec/datacenter-gpu-manager-4/plugins"
DEFAULT_PORT = 5555
LOCAL_HOSTS = ("localhost", "127.0.0.1", "localhost:5555", "127.0.0.1:5555")

# dcgmReturn_t (dcgmlib/dcgm_structs.h) and dcgmlib/src/dcgm_errors.c errorString()
ST_OK = 0
ST_BADPARAM = -1
ST_GENERIC_ERROR = -3
ST_NO_DATA = -14
ST_CONNECTION_NOT_VALID = -21
ST_NVVS_ERROR = -30
ST_NVVS_ISOLATE_ERROR = -51
ST_NVVS_NO_AVAILABLE_TEST = -58
ERROR_STRINGS = {
    ST_GENERIC_ERROR: "Generic unspecified error",
    ST_NO_DATA: "No data is available",
    ST_CONNECTION_NOT_VALID: "Host engine connection invalid/disconnected",
    ST_NVVS_ERROR: "DCGM GPU Diagnostic returned an error",
    ST_NVVS_ISOLATE_ERROR: "The diagnostic returned an error that indicates the need to drain the GPU",
    ST_NVVS_NO_AVAILABLE_TEST: "Requested tests were not found among possible test choices.",
}


def exit_code(ret):
    """dcgmi's main returns the negative dcgmReturn_t: the shell sees its low byte (-30 -> 226)."""
    return ret & 0xFF


# ----- DCGM's error catalogue (dcgmlib/dcgm_errors.h, dcgm_errors.c at 4.5.2) ------------------------------------
SEV_MONITOR, SEV_ISOLATE, SEV_TRIAGE, SEV_CONFIG = 1, 2, 4, 5
TRIAGE_RUN_FIELD_DIAG_MSG = "Run a field diagnostic on the GPU."
SYSTEM_TRIAGE_MSG = "Check DCGM and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
ERRORS = {
    # name: (error id, message format, next steps, severity, category)
    "PERSISTENCE_MODE": (29, "Persistence mode for GPU {gpu} is disabled.",
                         "Enable persistence mode by running \"nvidia-smi -i <gpuId> -pm 1 \" as root.", SEV_CONFIG, 8),
    "CORRUPT_INFOROM": (9, "A corrupt InfoROM has been detected in GPU {gpu}.",
                        "Flash the InfoROM to clear this corruption.", SEV_TRIAGE, 15),
    "MEMORY_ALLOC": (56, "Couldn't allocate at least {pct:.1f}% of GPU memory on GPU {gpu}", SYSTEM_TRIAGE_MSG,
                     SEV_TRIAGE, 8),
    "CUDA_DBE": (57, "CUDA APIs have indicated that a double-bit ECC error has occured on GPU {gpu}.",
                 TRIAGE_RUN_FIELD_DIAG_MSG, SEV_ISOLATE, 10),
    "MEMORY_MISMATCH": (58, "A memory mismatch was detected on GPU {gpu}, but no error was reported by CUDA or NVML.",
                        TRIAGE_RUN_FIELD_DIAG_MSG, SEV_ISOLATE, 10),
    "CLOCKS_EVENT_VIOLATION": (43, "Clocks event for GPU {gpu} because of clocks event starting {seconds:.1f} seconds "
                               "into the test. {detail}", SYSTEM_TRIAGE_MSG, SEV_MONITOR, 15),
}
# gpusim fault dcgm_memory_error KIND -> the memory test's error (nvvs/plugin_src/memory/memory.cpp)
MEMORY_FAULTS = {"mismatch": "MEMORY_MISMATCH", "dbe": "CUDA_DBE", "alloc": "MEMORY_ALLOC"}
# nvvs/src/DcgmRecorder.cpp CheckForClocksEvent: the non-benign reasons and their details (state names as smi.py's)
CLOCKS_EVENT_DETAILS = {
    "hw_slowdown": "clocks_event_reason_hw_slowdown: either the temperature is too high or there is a power supply "
                   "problem (the power brake assertion has been tripped).",
    "sw_thermal_slowdown": "clocks_event_reason_sw_thermal_slowdown: the GPU or its memory have reached unsafe "
                           "temperatures.",
    "hw_thermal_slowdown": "clocks_event_reason_hw_thermal_slowdown: the GPU or its memory have reached unsafe "
                           "temperatures.",
    "hw_power_brake_slowdown": "clocks_event_reason_hw_power_brake_slowdown: the power brake assertion has triggered. "
                               "Please check the power supply.",
}


def make_error(name, gpu, **fields):
    code, fmt, nxt, severity, category = ERRORS[name]
    msg = fmt.format(gpu=gpu, **fields)
    return {"gpu": gpu, "code": code, "msg": msg + (" " + nxt if nxt else ""), "severity": severity,
            "category": category}


# ----- tests, levels and SKUs ---------------------------------------------------------------------------------
DEPLOYMENT, HARDWARE, INTEGRATION, STRESS = "Deployment", "Hardware", "Integration", "Stress"
CATEGORIES = (DEPLOYMENT, HARDWARE, INTEGRATION, STRESS)
CATEGORY_OF = {"software": DEPLOYMENT, "memory": HARDWARE, "diagnostic": HARDWARE, "nvbandwidth": HARDWARE,
               "pcie": INTEGRATION, "targeted_stress": STRESS, "targeted_power": STRESS, "memtest": STRESS}
# NvidiaValidationSuite::FillTestVectors (hardware, integration, performance), run in that order. eud, cpu_eud,
# memory_bandwidth and pulse_test come from the proprietary packages (not simulated, so not listed); nccl_tests
# (4.5's cudaNN package) is not simulated.
LEVEL_TESTS = {1: ["software"],
               2: ["software", "memory", "pcie"],
               3: ["software", "memory", "diagnostic", "nvbandwidth", "pcie", "targeted_stress", "targeted_power"],
               4: ["software", "memory", "diagnostic", "nvbandwidth", "memtest", "pcie", "targeted_stress",
                   "targeted_power"]}
SUITES = {"quick": 1, "short": 1, "medium": 2, "long": 3, "xlong": 4}
# nvvs/diag-skus.yaml.in (identical for these ids at 4.4.2 and 4.5.2): the tests each simulated model's SKU allows.
# Tests whose is_allowed defaults to False (memory, pcie, diagnostic, targeted_*, nvbandwidth) are skipped on any
# other SKU (the RTX 4090, 2684, is not in the file); memtest's default is True.
SKU_ALLOWED = {
    0x2330: {"memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "nvbandwidth"},   # H100 80GB HBM3
    0x2335: {"memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "nvbandwidth"},   # H200
    0x2BB5: {"memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "nvbandwidth"},   # PG153 SKU 210
    0x20B2: {"memory", "pcie", "diagnostic", "targeted_stress", "targeted_power"},                  # A100-SXM4-80GB
    0x27B8: {"memory", "pcie", "diagnostic", "targeted_stress", "targeted_power"},                  # Nvidia L4
}
GATED = {"memory", "pcie", "diagnostic", "targeted_stress", "targeted_power", "nvbandwidth"}
CLOCKS_CHECKED = {"diagnostic", "targeted_stress", "targeted_power"}
# Software.cpp: the subtests, in the order they run, and the name each error is prefixed with
SW_SUBTESTS = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks",
               "Persistence Mode", "Environmental Variables", "Page Retirement/Row Remap", "Graphics Processes",
               "Inforom", "Fabric Manager"]
RANK = {"notrun": 0, "skip": 1, "pass": 2, "warn": 3, "fail": 4}


def allowed(gpu, test):
    if test not in GATED:
        return True
    return test in SKU_ALLOWED.get(int(catalogue.get(gpu["model"])["pci_device_id"]), set())


def sku_id(gpu):
    return "%04x" % int(catalogue.get(gpu["model"])["pci_device_id"])


def installed_version(root="/", path=None):
    try:
        with open(path or os.path.join(root, VERSION_FILE.lstrip("/"))) as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def major(version):
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 4


def minor_tuple(version):
    out = []
    for part in str(version).split(".")[:2]:
        out.append(int(part) if part.isdigit() else 0)
    return tuple(out)


# ----- the host engine's view of the GPUs ---------------------------------------------------------------------
def hostengine(state):
    """The running nv-hostengine's record, or None."""
    he = state.get("hostengine") or {}
    return he if pid_alive(he.get("pid")) else None


def nvml_gpus(state):
    """What NVML enumerates now (as nvidia-smi: the driven GPUs, in order); none without a usable driver."""
    if st.driver_state(state) != "ok":
        return []
    return [g for g in state["gpus"] if bootmod.driven(state, g) and not g.get("lost")]


def holds(state, gpu):
    """Whether a running nv-hostengine has this GPU open (it opened the GPUs NVML gave it when it started)."""
    he = hostengine(state)
    return bool(he and gpu.get("uuid") in (he.get("gpus") or []))


def managed_gpus(state, he):
    """(dcgm gpu id, gpu) of the GPUs the engine manages: the standalone one's from its start, an embedded one's now."""
    if he is None:
        gpus = nvml_gpus(state)
    else:
        uuids = he.get("gpus") or []
        gpus = [g for g in state["gpus"] if g["uuid"] in uuids]
    return list(enumerate(gpus))


# ----- output helpers -----------------------------------------------------------------------------------------
def _quote(s):
    return json.dumps(s, ensure_ascii=True)


def jsoncpp(value):
    """Json::Value::toStyledString(): jsoncpp's BuiltStyledStreamWriter with a tab indentation and comments 'All'
    (every array multi-line), keys in std::map order, then a newline."""
    out = []
    st_ = {"indent": "", "indented": True}

    def write_indent():
        out.append("\n" + st_["indent"])

    def with_indent(text):
        if not st_["indented"]:
            write_indent()
        out.append(text)
        st_["indented"] = False

    def write(v):
        if isinstance(v, dict):
            if not v:
                out.append("{}")
                return
            with_indent("{")
            st_["indent"] += "\t"
            keys = sorted(v)
            for i, k in enumerate(keys):
                with_indent(_quote(k))
                out.append(" : ")
                write(v[k])
                if i + 1 < len(keys):
                    out.append(",")
            st_["indent"] = st_["indent"][:-1]
            with_indent("}")
        elif isinstance(v, list):
            if not v:
                out.append("[]")
                return
            with_indent("[")
            st_["indent"] += "\t"
            for i, item in enumerate(v):
                if not st_["indented"]:
                    write_indent()
                st_["indented"] = True
                write(item)
                st_["indented"] = False
                if i + 1 < len(v):
                    out.append(",")
            st_["indent"] = st_["indent"][:-1]
            with_indent("]")
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        elif v is None:
            out.append("null")
        elif isinstance(v, int):
            out.append(str(v))
        else:
            out.append(_quote(str(v)))

    write(value)
    return "".join(out) + "\n"


def columns_table(widths, labels, rows, separate=True):
    """dcgmi/DcgmiOutput.cpp DcgmiOutputColumns::str(): rows are lists of cells, each a list of lines."""
    hline = "+" + "+".join("-" * w for w in widths) + "+\n"

    def row(cells):
        return "| " + " | ".join(c.ljust(w - 2) for c, w in zip(cells, widths)) + " |\n"
    text = hline + row(labels) + hline
    for n, cells in enumerate(rows):
        if n and separate:
            text += hline
        depth = max(len(c) for c in cells)
        for i in range(depth):
            text += row([c[i] if i < len(c) else "" for c in cells])
    return text + hline


# ----- dcgmi discovery ----------------------------------------------------------------------------------------
def discovery_list(state, version, he):
    gpus = managed_gpus(state, he)
    rows = [[[str(i)], ["Name: %s" % catalogue.get(g["model"])["name"], "PCI Bus ID: %s" % g["pci_bus_id"],
                        "Device UUID: %s" % g["uuid"]]] for i, g in gpus]
    n = len(gpus)
    if minor_tuple(version) >= (4, 5):
        head = "%d GPU%s found (Active).\n" % (n, "" if n == 1 else "s")
    else:
        head = "%d GPU%s found.\n" % (n, "" if n == 1 else "s")
    text = head + columns_table([8, 70], ["GPU ID", "Device Information"], rows)
    # NvSwitches: the simulated NVSwitches have no NSCQ/driver interface for DCGM (the NvSwitch module is not
    # simulated): 0 found, as a host whose hostengine lists none.
    text += "0 NvSwitches found.\n" + columns_table([11], ["Switch ID"], [], separate=False)
    if major(version) >= 4:
        text += "0 ConnectX found.\n" + columns_table([10], ["ConnectX"], [], separate=False)
        text += "0 CPUs found.\n" + columns_table([8, 70], ["CPU ID", "Device Information"], [])
    return text


# ----- dcgmi diag: running the tests --------------------------------------------------------------------------
class DiagError(Exception):
    """The run could not complete: (dcgmReturn_t, system error lines)."""

    def __init__(self, ret, system_errors):
        Exception.__init__(self, system_errors)
        self.ret = ret
        self.system_errors = system_errors


def _mig_refusal(state, gpus, selected):
    """NvidiaValidationSuite::BuildCommonGpusList with Gpu::IsMigModeDiagCompatible: the message, or None."""
    any_instances = any(g.get("mig_instances") for _i, g in gpus)
    num = len(selected) or len(gpus)
    enabled_any = disabled_any = False
    for idx, g in gpus:
        enabled = bool(g.get("mig_mode"))
        gis = (g.get("mig_instances") or []) if enabled else []
        if any_instances and gis:
            prof = _mig.model_mig(g)
            max_slices = prof["compute"] if prof else 7
            for gi in gis:
                p = _mig.profile_by_id(g, gi["profile_id"])
                if not p or p["slices"] != max_slices or any(
                        _mig.SLICES_BY_CI_PROFILE.get(ci["profile_id"]) != max_slices for ci in gi.get("cis") or []):
                    return ("GPU %d's MIG configuration is incompatible with the diagnostic because it prevents access "
                            "to the entire GPU." % idx)
        disabled_any = disabled_any or not enabled
        enabled_any = enabled_any or enabled
        if enabled_any and num > 1:
            return ("Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG mode enabled, yet GPU %d "
                    "is MIG enabled and the diagnostic is attempting to run on %d GPUs." % (idx, num))
        if selected and idx not in selected:
            continue
        cis = sum(len(gi.get("cis") or []) for gi in gis)
        if enabled and cis == 0:
            return ("Cannot run diagnostic: MIG is enabled, but no compute instances are configured. CUDA needs to "
                    "execute on a compute instance if MIG is enabled.")
    if disabled_any and enabled_any:
        return ("Cannot run diagnostic: CUDA does not support enumerating GPUs when one more GPUs has MIG mode enabled "
                "and one or more GPUs has MIG mode disabled.")
    return None


def _memory_info(gpu):
    """memory.cpp: `Allocated <bytes> bytes (<pct>%)`, what cuMemAlloc took (free memory, less 1 %)."""
    m = catalogue.get(gpu["model"])
    total = int(m["memory_total_mib"]) * 1048576
    used = int(m.get("memory_overhead_mib", 0)) + int(gpu.get("memory_used_mib") or 0)
    free = max(0, int(m["memory_total_mib"]) - int(m.get("memory_reserved_mib", 0)) - used) * 1048576
    size = (free // 100) * 99
    return "Allocated %d bytes (%.1f%%)" % (size, size * 100.0 / total)


def run_tests(state, tests, gpus, faults):
    """-> the response: [{"name", "category", "result", "results": [(id, result)], "errors": [...], "info": [...]}]."""
    response = []
    ids = [i for i, _g in gpus]
    for name in tests:
        t = {"name": name, "category": CATEGORY_OF[name], "results": [], "errors": [], "info": []}
        if name == "software":
            worst = "pass"
            t["subtests"] = {}
            for sub in SW_SUBTESTS:
                sub_result = "pass"
                for idx, g in gpus:
                    err = None
                    if sub == "Persistence Mode" and not g.get("persistence_mode"):
                        err, res = make_error("PERSISTENCE_MODE", idx), "warn"
                    elif sub == "Inforom" and g["index"] in (faults.get("inforom_corrupt") or []):
                        err, res = make_error("CORRUPT_INFOROM", idx), "fail"
                    if err:
                        # Software::addError prefixes the subtest (DCGM 4); DCGM 3 kept one result per subtest
                        err.update(sub=sub, raw=err["msg"], msg="%s: %s" % (sub, err["msg"]))
                        t["errors"].append(err)
                        if RANK[res] > RANK[sub_result]:
                            sub_result = res
                t["subtests"][sub] = sub_result
                if RANK[sub_result] > RANK[worst]:
                    worst = sub_result
            # each subtest's SetResult applies to every GPU of the run; the wrapper keeps each GPU's worst
            t["results"] = [(i, worst) for i in ids]
        else:
            gpu_allowed = {idx: allowed(g, name) for idx, g in gpus}
            if not all(gpu_allowed.values()):
                # the plugin's is_allowed is read for the set's SKU: SetResult(SKIP) for every GPU, no reason given
                t["results"] = [(i, "skip") for i in ids]
            else:
                for idx, g in gpus:
                    res = "pass"
                    kind = (faults.get("dcgm_memory_error") or {}).get(str(g["index"]))
                    if name == "memory" and kind:
                        fields = {"pct": 75.0} if kind == "alloc" else {}
                        t["errors"].append(make_error(MEMORY_FAULTS[kind], idx, **fields))
                        res = "fail"
                    elif name in CLOCKS_CHECKED:
                        reasons = [r for r in g.get("clocks_event_reasons") or [] if r in CLOCKS_EVENT_DETAILS]
                        if reasons:
                            t["errors"].append(make_error("CLOCKS_EVENT_VIOLATION", idx, seconds=0.0,
                                                          detail=CLOCKS_EVENT_DETAILS[reasons[0]]))
                            res = "fail"
                    if name == "memory" and res == "pass":
                        t["info"].append({"gpu": idx, "msg": _memory_info(g)})
                    t["results"].append((idx, res))
        results = [r for _i, r in t["results"]]
        t["result"] = max(results, key=lambda r: RANK[r]) if results else "notrun"
        response.append(t)
    return response


def failure_result(response):
    """Diag::GetFailureResult: ISOLATE first, then any error of a GPU or of the software test."""
    ret = ST_OK
    for t in response:
        for e in t["errors"]:
            if e["severity"] == SEV_ISOLATE:
                return ST_NVVS_ISOLATE_ERROR
            ret = ST_NVVS_ERROR
    if not response:
        return ST_NO_DATA
    return ret


# ----- dcgmi diag: rendering ----------------------------------------------------------------------------------
DIAG_HEADER = ("+---------------------------+------------------------------------------------+\n"
               "| Diagnostic                | Result                                         |\n"
               "+===========================+================================================+\n")
DIAG_INFO = "|-----  Metadata  ----------+------------------------------------------------|\n"
DIAG_FOOTER = "+---------------------------+------------------------------------------------+\n"
DIAG_CATEGORY_LINE = {
    DEPLOYMENT: "|-----  Deployment  --------+------------------------------------------------|\n",
    HARDWARE: "+-----  Hardware  ----------+------------------------------------------------+\n",
    INTEGRATION: "+-----  Integration  -------+------------------------------------------------+\n",
    STRESS: "+-----  Stress  ------------+------------------------------------------------+\n",
}
SHOWN = {"pass": "Pass", "skip": "Skip", "warn": "Fail", "fail": "Fail", "notrun": "Not Run"}


def _cell(value, width):
    """CommandOutputController::ReplaceTag: padded to the tag's width, or cut with '...'."""
    value = str(value)
    if len(value) > width:
        return value[:width - 3] + "..."
    return value.ljust(width)


def _data(name, info):
    return "| %s | %s |\n" % (_cell(name, 25), _cell(info, 46))


def _wrapped(name, msg):
    msg = msg.strip()
    lines = []
    for pos in range(0, len(msg), 45):
        lines.append(_data(name if pos == 0 else "", msg[pos:pos + 45]))
    return "".join(lines)


def render_text(response, version, driver, gpus, verbose=False):
    out = ["Successfully ran diagnostic for group.\n", DIAG_HEADER, DIAG_INFO, _data("DCGM Version", version)]
    if driver:
        out.append(_data("Driver Version Detected", driver))
    if gpus:
        out.append(_data("GPU Device IDs Detected", ", ".join(sku_id(g) for _i, g in gpus)))
    for category in CATEGORIES:
        tests = [t for t in response if t["category"] == category]
        if not tests:
            continue
        out.append(DIAG_CATEGORY_LINE[category])
        for t in tests:
            out.append(_data(t["name"], "Warn" if t["result"] == "warn" else SHOWN[t["result"]]))
            for idx, res in t["results"]:
                out.append(_data("", "GPU%d: %s" % (idx, SHOWN[res])))
                for e in t["errors"]:
                    if e["gpu"] == idx:
                        out.append(_wrapped("Warning: GPU%d" % idx, e["msg"]))
                if verbose:
                    for info in t["info"]:
                        if info["gpu"] == idx:
                            out.append(_wrapped("Info: GPU%d" % idx, info["msg"]))
    out.append(DIAG_FOOTER)
    return "".join(out)


def _warning(e):
    return {"error_category": e["category"], "error_id": e["code"], "error_severity": e["severity"],
            "warning": e["msg"]}


def render_json(response, version, driver, gpus):
    """Diag::HelperJsonBuildOutput (4.4/4.5): the document of tests/fixtures/dcgm_diag."""
    categories = []
    for category in [c for c in _run_order(response)]:
        tests = []
        for t in [t for t in response if t["category"] == category]:
            entry = {"name": t["name"], "results": []}
            for idx, res in t["results"]:
                if res == "notrun":
                    continue
                r = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": idx, "status": SHOWN[res]}
                warnings = [_warning(e) for e in t["errors"] if e["gpu"] == idx]
                if warnings:
                    r["warnings"] = warnings
                info = [i["msg"] for i in t["info"] if i["gpu"] == idx]
                if info:
                    r["info"] = info
                entry["results"].append(r)
            if not entry["results"]:
                del entry["results"]
            summary = {"status": SHOWN[t["result"]]}
            if minor_tuple(version) >= (4, 5) and t["errors"]:
                summary["warnings"] = [_warning(e) for e in t["errors"]]   # 4.5: the summary repeats every warning
            entry["test_summary"] = summary
            tests.append(entry)
        categories.append({"category": category, "tests": tests})
    doc = {"DCGM Diagnostic": {"test_categories": categories},
           "metadata": {"version": version}}
    if driver:
        doc["metadata"]["Driver Version Detected"] = driver
    if gpus:
        doc["entity_groups"] = [{"entities": [{"device_id": sku_id(g), "entity_id": idx, "serial_num": g.get("serial")}
                                              for idx, g in gpus],
                                 "entity_group": "GPU", "entity_group_id": 1}]
    return jsoncpp(doc)


def _run_order(response):
    seen = []
    for t in response:
        if t["category"] not in seen:
            seen.append(t["category"])
    return seen


# DCGM 3.3.9 (NVIDIA/DCGM b0ec3c6 dcgmi/Diag.cpp): level 1 as one row per software subtest, the other tests per GPU
DCGM3_LEVEL_ONE = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
                   "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
DCGM3_SUBTEST = dict(zip(DCGM3_LEVEL_ONE, ["Denylist", "NVML Library", "CUDA Main Library",
                                           "Permissions and OS-related Blocks", "Persistence Mode",
                                           "Environmental Variables", "Page Retirement/Row Remap",
                                           "Graphics Processes", "Inforom"]))
DCGM3_NAMES = {"memory": "GPU Memory", "diagnostic": "Diagnostic", "pcie": "PCIe", "targeted_stress": "Targeted Stress",
               "targeted_power": "Targeted Power", "memtest": "Memtest"}
SHOWN3 = {"pass": "Pass", "skip": "Skip", "warn": "Fail", "fail": "Fail", "notrun": "Fail"}


def _per_gpu_row(name, t, gpu_ids, verbose):
    """Diag::HelperDisplayGpuResults (3.3.9): `Pass - All`, or the GPUs per outcome, then warnings and info."""
    by = {"pass": [], "fail": [], "warn": [], "skip": []}
    for idx, res in t["results"]:
        by.setdefault(res, []).append(idx)
    n = len(gpu_ids)
    out = []
    show = False
    for kind, word in (("pass", "Pass"), ("skip", "Skip"), ("fail", "Fail"), ("warn", "Warn")):
        if len(by[kind]) == n:
            out.append(_data(name, "%s - All" % word))
            show = kind != "pass"
            break
    else:
        first = True
        for kind, word in (("pass", "Pass"), ("fail", "Fail"), ("warn", "Warn"), ("skip", "Skip")):
            if by[kind]:
                out.append(_data(name if first else "", "%s - GPU%s: %s   " % (
                    word, "" if len(by[kind]) == 1 else "s", ", ".join(str(i) for i in by[kind]))))
                first = False
                show = show or kind != "pass"
    if show or verbose:
        for e in t["errors"]:
            out.append(_wrapped("Warning", e["msg"]))
    if verbose:
        for i in t["info"]:
            out.append(_wrapped("Info", i["msg"]))
    return "".join(out)


def render_text_dcgm3(response, version, driver, gpus, verbose=False):
    out = ["Successfully ran diagnostic for group.\n", DIAG_HEADER, DIAG_INFO, _data("DCGM Version", version),
           _data("Driver Version Detected", driver or ""),
           _data("GPU Device IDs Detected", ",".join(sku_id(g) for _i, g in gpus)),
           DIAG_CATEGORY_LINE[DEPLOYMENT]]
    software = next((t for t in response if t["name"] == "software"), None)
    if software:
        for row in DCGM3_LEVEL_ONE:
            sub = DCGM3_SUBTEST[row]
            out.append(_data(row, SHOWN3[software["subtests"].get(sub, "pass")]))
            for e in software["errors"]:
                if e.get("sub") == sub:
                    out.append(_wrapped("Error", e["raw"]))
    ids = [i for i, _g in gpus]
    per_gpu = [t for t in response if t["name"] != "software"]
    if per_gpu:
        for category in (INTEGRATION, HARDWARE):
            out.append(DIAG_CATEGORY_LINE[category])
            for t in per_gpu:
                if t["category"] != category:
                    continue
                if t["name"] == "diagnostic" and all(r == "skip" for _i, r in t["results"]):
                    continue    # "Don't show the hardware diagnostic if it skipped"
                out.append(_per_gpu_row(DCGM3_NAMES[t["name"]], t, ids, verbose))
        stress = [t for t in per_gpu if t["category"] == STRESS]
        out.append(DIAG_CATEGORY_LINE[STRESS])
        for t in stress:
            out.append(_per_gpu_row(DCGM3_NAMES[t["name"]], t, ids, verbose))
    out.append(DIAG_FOOTER)
    return "".join(out)


def render_json_dcgm3(response, version, driver, gpus):
    """Diag::HelperJsonBuildOutput (3.3.9): the document of testing/python3/dcgm_diag_schema.json at 3.3.x."""
    categories = []
    software = next((t for t in response if t["name"] == "software"), None)
    if software:
        tests = []
        for row in DCGM3_LEVEL_ONE:
            sub = DCGM3_SUBTEST[row]
            entry = {"status": SHOWN3[software["subtests"].get(sub, "pass")]}
            errs = [e for e in software["errors"] if e.get("sub") == sub]
            if errs:
                entry["gpu_id"] = errs[-1]["gpu"]
                # HelperJsonAddBasicTests writes the message under "warnings" (NVVS_WARNINGS) at 3.3.9
                entry["warnings"] = [{"error_category": e["category"], "error_id": e["code"],
                                      "error_severity": e["severity"], "warnings": e["raw"]} for e in errs]
            tests.append({"name": row, "results": [entry]})
        categories.append({"category": DEPLOYMENT, "tests": tests})
    for category in (INTEGRATION, HARDWARE, STRESS):
        tests = []
        for t in [t for t in response if t["name"] != "software" and t["category"] == category]:
            results = []
            for idx, res in t["results"]:
                r = {"gpu_id": str(idx), "status": SHOWN3[res]}
                warnings = [{"error_category": e["category"], "error_id": e["code"],
                             "error_severity": e["severity"], "warning": e["msg"]}
                            for e in t["errors"] if e["gpu"] == idx]
                if warnings:
                    r["warnings"] = warnings
                info = [i["msg"] for i in t["info"] if i["gpu"] == idx]
                if info:
                    r["info"] = info[0]
                results.append(r)
            tests.append({"name": DCGM3_NAMES[t["name"]], "results": results})
        if tests:
            categories.append({"category": category, "tests": tests})
    doc = {"DCGM GPU Diagnostic": {"test_categories": categories}, "Driver Version Detected": driver or "",
           "GPU Device IDs": [sku_id(g) for _i, g in gpus],
           "GPU Device Serials": {str(idx): g.get("serial") for idx, g in gpus}, "version": version}
    return jsoncpp(doc)


def failure_text(ret, entities, system_errors):
    """Diag::RunDiagOnce when the run could not complete."""
    text = "Error: Unable to complete diagnostic for entities %s. Return: (%d) : %s\n" % (
        entities, ret, ERROR_STRINGS.get(ret, "Unknown error"))
    return text + "\n".join(system_errors)


# ----- dcgmi ---------------------------------------------------------------------------------------------------
USAGE_ERROR = "An error occurred trying to parse the command line."


class ParseError(Exception):
    pass


def _opt(args, i, name):
    if i + 1 >= len(args):
        raise ParseError("Missing a value for this argument! for arg %s" % name)
    return args[i + 1]


def parse_diag(args):
    o = {"run": "1", "json": False, "verbose": False, "entities": "*,cpu:*", "host": None, "iterations": 1}
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        if name in ("-r", "--run", "-i", "--entity-id", "--gpuList", "--host", "--iterations", "-p", "--parameters",
                    "-c", "--configfile", "-t", "--timeout", "-d", "--debugLevel", "--debugLogFile", "--statspath"):
            if not eq:
                val = _opt(args, i, name.lstrip("-"))
                i += 1
            if name in ("-r", "--run"):
                o["run"] = val
            elif name in ("-i", "--entity-id", "--gpuList"):
                o["entities"] = val
            elif name == "--host":
                o["host"] = val
            elif name == "--iterations":
                o["iterations"] = int(val)
        elif a in ("-j", "--json"):
            o["json"] = True
        elif a in ("-v", "--verbose"):
            o["verbose"] = True
        elif a in ("--statsonfail", "--fail-early", "--enable-heartbeat"):
            pass
        else:
            raise ParseError("Couldn't find match for argument for arg %s" % a)
        i += 1
    return o


def levels_and_tests(run):
    """dcgm_diag_common_populate_run_diag + NvidiaValidationSuite: -r N | suite names | test names."""
    if len(run) <= 1:
        if run not in ("1", "2", "3", "4"):
            raise ParseError("Invalid value '%s' specified for -r." % run)
        return LEVEL_TESTS[int(run)], []
    names = [n.strip() for n in run.split(",") if n.strip()]
    tests, unknown = [], []
    for n in names:
        low = n.lower()
        if low in SUITES:
            extra = LEVEL_TESTS[SUITES[low]]
        elif low in CATEGORY_OF:
            extra = ["software", low] if low != "software" else ["software"]
        else:
            unknown.append(n)
            continue
        for t in extra:
            if t not in tests:
                tests.append(t)
    order = LEVEL_TESTS[4]
    return sorted(tests, key=order.index), unknown


def diag(state, argv, version, root="/", euid=None):
    """-> (stdout, stderr, exit code)."""
    try:
        o = parse_diag(argv)
        tests, unknown = levels_and_tests(o["run"])
    except ParseError as exc:
        return "", "Error: %s.\n%s\n" % (exc, USAGE_ERROR), exit_code(-2)
    out = []
    he = hostengine(state)
    host = o["host"]
    if host is not None and host not in LOCAL_HOSTS:
        he = None
    if he is None and host is not None:
        # Command::Connect with the address given: its line, then StartDiag starts an embedded host engine anyway
        out.append("Error: unable to establish a connection to the specified host: %s\n" % host)
    all_gpus = managed_gpus(state, he)
    selected = []
    if o["entities"] not in ("*", "*,cpu:*", "gpu:*"):
        for tok in o["entities"].split(","):
            tok = tok.strip().replace("gpu:", "")
            if tok.isdigit():
                selected.append(int(tok))
    gpus = [(i, g) for i, g in all_gpus if not selected or i in selected]
    driver = (state["driver"].get("loaded") or {}).get("version") if gpus else None
    try:
        account = (he or {}).get("service_account")
        if account:
            try:
                pwd.getpwnam(account)
            except KeyError:
                # DcgmDiagManager::PerformNVVSExecute: no credentials for the service account
                raise DiagError(ST_GENERIC_ERROR, ["Error when executing the diagnostic: %s\nNvvs stderr: \n\n"
                                                   % ERROR_STRINGS[ST_GENERIC_ERROR]])
        if major(version) >= 4:
            loaded = (state["driver"].get("loaded") or {}).get("version")
            if loaded and all_gpus:
                cuda = int(catalogue.cuda_version(loaded).split(".")[0])
                plugin_dir = "%s/cuda%d/" % (PLUGIN_BASE, cuda)
                if not os.path.isdir(os.path.join(root, plugin_dir.lstrip("/"))):
                    raise DiagError(ST_NVVS_ERROR, ["Error: Cannot load plugins. Unable to change to the plugin dir "
                                                    "'%s': 'No such file or directory'" % plugin_dir])
        if not gpus:
            raise DiagError(ST_NVVS_ERROR, ["Error: No available testing entities."])
        if unknown:
            # nvvs' NvvsException NVVS_ST_TEST_NOT_FOUND: the diag module records no system error for it
            raise DiagError(ST_NVVS_NO_AVAILABLE_TEST, [])
        refusal = _mig_refusal(state, all_gpus, [i for i, _g in gpus] if selected else [])
        if refusal:
            raise DiagError(ST_NVVS_ERROR, [refusal])
    except DiagError as exc:
        text = failure_text(exc.ret, o["entities"], exc.system_errors)
        if o["json"]:
            body = {"runtime_error": text, "version": version}
            key = "DCGM Diagnostic" if major(version) >= 4 else "DCGM GPU Diagnostic"
            out.append(jsoncpp({key: body}) + "\n")
        else:
            out.append(text + "\n")
        return "".join(out), "", exit_code(exc.ret)
    if major(version) < 4:
        tests = [t for t in tests if t != "nvbandwidth"]      # no nvbandwidth plugin before DCGM 4
    response = run_tests(state, tests, gpus, state.get("faults") or {})
    if o["json"]:
        render = render_json if major(version) >= 4 else render_json_dcgm3
        out.append(render(response, version, driver, gpus))
    else:
        render = render_text if major(version) >= 4 else render_text_dcgm3
        out.append(render(response, version, driver, gpus, o["verbose"]))
    return "".join(out), "", exit_code(failure_result(response))


def discovery(state, argv, version):
    host = None
    listing = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-l", "--list"):
            listing = True
        elif a == "--host":
            if i + 1 >= len(argv):
                return "", "Error: Missing a value for this argument! for arg host.\n%s\n" % USAGE_ERROR, exit_code(-2)
            host = argv[i + 1]
            i += 1
        elif a.startswith("--host="):
            host = a.split("=", 1)[1]
        else:
            return "", "Error: Couldn't find match for argument for arg %s.\n%s\n" % (a, USAGE_ERROR), exit_code(-2)
        i += 1
    he = hostengine(state)
    name = host or "localhost"
    if he is None or name not in LOCAL_HOSTS:
        return ("Error: unable to establish a connection to the specified host: %s\n"
                "Error: Unable to connect to host engine. %s.\n" % (name, ERROR_STRINGS[ST_CONNECTION_NOT_VALID]),
                "", exit_code(ST_CONNECTION_NOT_VALID))
    if not listing:
        return "", "", 0
    return discovery_list(state, version, he), "", 0


def run(argv, state_path=None, root="/", version=None, euid=None):
    """dcgmi ARGV -> (stdout, stderr, exit code)."""
    argv = list(argv)
    version = version or installed_version(root) or "4.5.2"
    if not argv:
        return "", "Error: Couldn't find match for argument.\n%s\n" % USAGE_ERROR, exit_code(-2)
    if argv[0] == "--version":
        return "\ndcgmi  version: %s\n\n" % version, "", 0
    state = st.load(state_path)
    if argv[0] == "discovery":
        return discovery(state, argv[1:], version)
    if argv[0] == "diag":
        return diag(state, argv[1:], version, root=root, euid=euid)
    return "ERROR: Invalid subsystem.\n\n", "", exit_code(ST_BADPARAM)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    root = os.environ.get("GPUSIM_ROOT") or "/"
    out, err, rc = run(argv, root=root)
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
