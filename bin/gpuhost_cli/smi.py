"""gpuhost smi [--json] FILE|-  -- what a pasted nvidia-smi output says, whichever form and whatever part of it.

Every nvidia-smi form of drivers 346 to 610 is told from the content and read: -q -x XML, -q text,
--query-gpu / --query-compute-apps CSV, the default table, -L, --version, dmon, pmon, and the error texts
(couldn't communicate with the driver, NVML driver/library version mismatch, Failed to initialize NVML, ...)
as their state. An excerpt - a `grep -A`, a `head`, one GPU section of eight, a table cut by the terminal,
an XML block without its document, a CSV after a shell prompt - is read as far as it goes: "partial" says
so and a warning names what is missing.

Outputs that another gpuhost command reads are answered with that command's reading, and the first line
(`command` in --json) names it: `nvidia-smi topo -m` / `topo -p2p` (gpuhost topo), a Fabric excerpt of -q
(gpuhost fabric), `nvidia-smi mig -lgip/-lgipp/-lgi/-lci` (gpuhost mig), `mokutil --sb-state`,
`mokutil --test-key` and /sys/kernel/security/lockdown (gpuhost secure-boot), `nvidia-smi -r` (which GPUs were
reset, which not and why, with gpuhost explain's fix for a refusal), `dcgmi diag -j` of DCGM 4 (each GPU's tests,
the failed ones with DCGM's warning and error id, the skipped ones as not proven). A -q or -q -x with Fabric
blocks (or a paste of an output and a Fabric excerpt) gets its facts and gpuhost fabric's reading. Any other
text that holds a known GPU-stack error gets gpuhost explain's findings.

Exit 0 when the input was read (whatever state it shows), 2 when it cannot be (no reader knows it,
binary input, bad usage), with one line on stderr.
"""
import json
import re
import sys

from ansible.module_utils.diagnosis.explain import ExplainError, explain, render_text as explain_text
from ansible.module_utils.driver import secure_boot as sb
from ansible.module_utils.gpu import dcgm_diag, gpu_topology, nvsmi_parse, nvsmi_reset
from ansible.module_utils.gpu.nvsmi_common import ParseError, clean_text
from ansible.module_utils.gpu.nvsmi_error import classify_error, parse_error
from gpuhost_cli import fabric as fabric_cli, mig as mig_cli, secure_boot as secure_boot_cli, topo as topo_cli
from gpuhost_cli.cli_io import UsageError, read_input

USAGE = "usage: gpuhost smi [--json] FILE|-"


def _parse_args(argv):
    as_json, path = False, None
    for arg in argv:
        if arg == "--json":
            as_json = True
        elif arg in ("-h", "--help"):
            raise UsageError(None)
        elif arg.startswith("-") and arg != "-":
            raise UsageError("unknown option %s" % arg)
        elif path is None:
            path = arg
        else:
            raise UsageError("only one FILE")
    if path is None:
        raise UsageError("FILE or - is required")
    return as_json, path


def cli_facts(facts):
    """The JSON object `gpuhost smi --json` prints for nvidia-smi's own forms (normalised facts, CLI field
    names); answer() adds `command`, and `fabric` where the output has Fabric blocks."""
    return {
        "command": "smi",
        "partial": bool(facts.get("partial")),
        "state": facts["state"],
        "message": facts["message"],
        "form": facts["form"],
        "schema": facts["schema"],
        "driver_version": facts["driver_version"],
        # Highest CUDA the driver supports, as nvidia-smi prints it; not an installed toolkit.
        "cuda_version": facts["cuda_driver_version"],
        "nvml_version": facts["nvml_version"],
        "attached_gpus": facts["attached_gpus"],
        "samples": facts["samples"],
        "gpu_count": len(facts["gpus"]),
        "gpus": facts["gpus"],
        "processes": facts["processes"],
        "warnings": facts["warnings"],
    }


def _fmt(value, unit=""):
    return "-" if value is None else "%s%s" % (value, unit)


def _onoff(value):
    return {True: "on", False: "off"}.get(value, "n/a")


def text_summary(out):
    lines = ["state: %s%s" % (out["state"], " (%s)" % out["message"] if out["message"] else "")]
    form = out["form"] + (" " + out["schema"] if out["schema"] else "") + (" (partial)" if out["partial"] else "")
    lines.append("form: %s" % form)
    lines.append("driver: %s   CUDA (max supported by the driver): %s"
                 % (_fmt(out["driver_version"]), _fmt(out["cuda_version"])))
    for gpu in out["gpus"]:
        arch = " ".join(x for x in (gpu["architecture"], gpu["compute_capability"] and
                                    "cc " + gpu["compute_capability"]) if x)
        lines.append("GPU %s  %s  %s  %s" % (_fmt(gpu["index"]), _fmt(gpu["name"]),
                                             _fmt(gpu["pci_bus_id"]), arch or "-"))
        lines.append("       memory %s/%s MiB  persistence %s  util %s  power %s/%s W  temp %s"
                     % (_fmt(gpu["memory_used_mib"]), _fmt(gpu["memory_total_mib"]),
                        _onoff(gpu["persistence_mode"]), _fmt(gpu["utilization_gpu"], "%"),
                        _fmt(gpu["power_draw_w"]), _fmt(gpu["power_limit_w"]),
                        _fmt(gpu["temperature_c"], " C")))
        if gpu["clocks_event_reasons_active"]:
            lines.append("       clocks event reasons: %s" % ", ".join(gpu["clocks_event_reasons_active"]))
        for mig in gpu["mig_devices"]:
            lines.append("       MIG %s  GI %s CI %s  %s  %s/%s MiB"
                         % (_fmt(mig["index"]), _fmt(mig["gpu_instance_id"]), _fmt(mig["compute_instance_id"]),
                            _fmt(mig["profile"]), _fmt(mig["memory_used_mib"]), _fmt(mig["memory_total_mib"])))
    if out["processes"]:
        lines.append("processes:")
        for proc in out["processes"]:
            where = "GPU %s" % proc["gpu_index"] if proc["gpu_index"] is not None else _fmt(proc["pci_bus_id"])
            lines.append("  pid %s  %s  %s  %s MiB  %s" % (_fmt(proc["pid"]), where, _fmt(proc["type"]),
                                                            _fmt(proc["used_mib"]), _fmt(proc["name"])))
    for warning in out["warnings"]:
        lines.append("warning: %s" % warning)
    for finding in out.get("also") or ():
        lines.append("the paste also says: [%s] %s - line %s: %s" % (finding["layer"], finding["kind"],
                                                                      finding["line"], finding["quote"]))
    text = "\n".join(lines) + "\n"
    if out.get("fabric"):
        text += "fabric (as `gpuhost fabric` reads it):\n" + _indent(fabric_cli.render_text(out["fabric"]))
    return text


def _indent(text):
    return "".join("  " + line + "\n" for line in text.splitlines())


# ---------------------------------------------------------------------------------------------
# one door: which reader answers a pasted text

# What each other reader is named by, in the reply's first line.
READ_AS = {
    "topo": "`nvidia-smi topo -m` (or `topo -p2p`)",
    "fabric": "the Fabric blocks of `nvidia-smi -q`",
    "mig": "`nvidia-smi mig` listings",
    "secure-boot": "a Secure Boot output (mokutil, /sys/kernel/security/lockdown)",
    "reset": "`nvidia-smi -r` (a GPU reset)",
    "dcgm-diag": "`dcgmi diag -j` (DCGM's GPU diagnostic)",
    "explain": "a text with known GPU-stack errors (no nvidia-smi output)",
}
# Readings of smi's own, no other gpuhost command's.
OWN_READINGS = ("reset", "dcgm-diag")
_LOCKDOWN_FILE = re.compile(r"^\s*(?:\[?(?:none|integrity|confidentiality)\]?[ \t]*){2,3}\s*$")


def _delegated(command, reading, render):
    return {"command": command, "read_as": READ_AS[command], "reading": reading}, render


def _topo(text):
    try:
        topo = gpu_topology.parse_topo_matrix(text)
    except ParseError:
        return None
    out = topo_cli.report(topo)
    return _delegated("topo", out, topo_cli.render_text(out))


def _mig(text):
    try:
        found = mig_cli.read_listings([text])
    except (mig_cli.mig_parse.ParseError, ValueError):
        return None
    reports = [mig_cli.report(found, gpu) for gpu in mig_cli.gpus_listed(found) or [0]]
    reading = {"listings": sorted(found), "gpus": reports}
    return _delegated("mig", reading, "".join(mig_cli.render_text(r) for r in reports))


def _secure_boot(text):
    sb_state = sb.parse_sb_state(text)["line"] is not None
    test_key = sb.parse_test_key(text)["line"] is not None
    lockdown = bool(_LOCKDOWN_FILE.match(text)) and sb.parse_lockdown(text) is not None
    if not (sb_state or test_key or lockdown):
        return None
    out = secure_boot_cli.report_texts(sb_state=text if sb_state else None, test_key=text if test_key else None,
                                       lockdown=text if lockdown else None)
    return _delegated("secure-boot", out, secure_boot_cli.render_text(out))


def _reset(text):
    reading = nvsmi_reset.parse_reset(text)
    if not (reading["reset"] or reading["not_reset"]):
        return None
    found = _findings(text) or {"findings": []}
    reading["findings"] = found["findings"]
    lines = ["GPU %s: reset" % bus for bus in reading["reset"]]
    lines += ["GPU %s: not reset (%s)" % (gpu["bus"], gpu["reason"]) for gpu in reading["not_reset"]]
    return _delegated("reset", reading, "\n".join(lines) + "\n" + (explain_text(found) if found["findings"] else ""))


def _dcgm_diag(text):
    if dcgm_diag.DCGM4_KEY not in text:
        return None
    try:
        parsed = dcgm_diag.parse(text)
    except dcgm_diag.DcgmDiagError:
        return None
    reading = dict(parsed, verdict=dcgm_diag.verdict(parsed))
    lines = ["DCGM %s, driver %s: %s" % (parsed["version"], parsed["driver_version"], reading["verdict"]["status"])]
    lines += ["GPU %s: %s (%s) %s" % (r["entity_id"], t["name"], t["category"], r["status"])
              for t in parsed["tests"] for r in t["results"] if r["status"] == "pass"]
    return _delegated("dcgm-diag", reading, "\n".join(lines + reading["verdict"]["messages"]) + "\n")


_FABRIC_BLOCK = re.compile(r"^[ \t]*Fabric[ \t]*$|<fabric>", re.M)


def _fabric_report(text):
    """gpuhost fabric's reading of the text's Fabric blocks, or None when it has none."""
    if not _FABRIC_BLOCK.search(text):
        return None
    try:
        out = fabric_cli.report(text)
    except ParseError:
        return None
    return out if out["gpus"] else None


def _findings(text):
    try:
        return explain(text)
    except ExplainError:
        return None


def _smi(facts, text):
    out = cli_facts(facts)
    out["fabric"] = _fabric_report(text)  # a -q, -q -x, or a paste with a Fabric excerpt next to the output
    if facts["form"] == "error":
        # The nvidia-smi error is often the symptom: what else the paste says (modprobe, the kernel log).
        found = _findings(text)
        out["also"] = [f for f in (found or {}).get("findings", [])
                       if not (facts["message"] or "").startswith(f["meaning"])]
    return out, text_summary(out)


def _error_with_versions(text, partial):
    """The nvidia-smi error text of a paste, with the driver and CUDA versions an earlier (cut) output in the
    same paste shows."""
    facts = nvsmi_parse.normalise(parse_error(text))
    if partial is not None:
        for key in ("driver_version", "cuda_driver_version"):
            if facts[key] is None and partial[key]:
                facts[key] = partial[key]
                facts["warnings"].append("%s from the nvidia-smi output cut short earlier in the paste" % key)
    return facts


def answer(data):
    """(the JSON object, its text) that `gpuhost smi` prints for a pasted text; ParseError when no reader
    knows it."""
    text = clean_text(data)
    try:
        return _smi(nvsmi_parse.facts_from_output(text), text)
    except ParseError as exc:
        refusal = exc
    for reader in (_topo, _mig, _secure_boot, _reset, _dcgm_diag):
        found = reader(text)
        if found is not None:
            return found
    error = classify_error(text) is not None
    try:
        partial = nvsmi_parse.facts_from_output(text, partial=True)
    except ParseError:
        partial = None
    fabric = _fabric_report(text)
    if partial is not None and (partial["gpus"] or partial["processes"] or not (error or fabric)):
        return _smi(partial, text)
    if error:
        return _smi(_error_with_versions(text, partial), text)
    if fabric is not None:
        return _delegated("fabric", fabric, fabric_cli.render_text(fabric))
    found = _findings(text)
    if found and found["findings"]:
        return _delegated("explain", found, explain_text(found))
    raise ParseError("%s (nor the output of another command gpuhost reads: topo, fabric, mig, "
                                 "mokutil; nor a known GPU-stack error)" % refusal)


def _one_line(text):
    return " ".join(str(text).split())[:300]


def main(argv):
    try:
        try:
            as_json, path = _parse_args(argv)
        except UsageError as exc:
            if exc.args[0] is None:
                sys.stdout.write(__doc__)
                return 0
            sys.stderr.write("gpuhost smi: %s (%s)\n" % (exc.args[0], USAGE))
            return 2
        try:
            data = read_input(path)
        except (IOError, OSError) as exc:
            sys.stderr.write("gpuhost smi: cannot read %s: %s\n" % (path, _one_line(exc.strerror or exc)))
            return 2
        try:
            out, text = answer(data)
        except ParseError as exc:
            sys.stderr.write("gpuhost smi: %s\n" % _one_line(exc))
            return 2
        if as_json:
            sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
        elif out["command"] == "smi":
            sys.stdout.write(text)
        elif out["command"] in OWN_READINGS:
            sys.stdout.write("read as %s\n%s" % (out["read_as"], text))
        else:
            sys.stdout.write("read as %s: the reading of `gpuhost %s`\n%s" % (out["read_as"], out["command"], text))
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("gpuhost smi: interrupted\n")
        return 2
    except Exception as exc:  # never a traceback: a bug still ends in one line
        sys.stderr.write("gpuhost smi: internal error: %s: %s\n" % (type(exc).__name__, _one_line(exc)))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
