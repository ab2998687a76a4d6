"""gpuhost smi [--json] FILE|-  -- facts from a saved nvidia-smi output.

The form (-q -x XML, -q text, --query-gpu / --query-compute-apps CSV, the default table, -L,
--version, or an error text) is detected from the content. Exit 0 when the input was read
(whatever state it shows), 2 when it cannot be (unsupported form, truncated input, bad usage),
with one line on stderr.
"""
import json
import sys

from ansible.module_utils.gpu import nvsmi_parse
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
    """The JSON object `gpuhost smi --json` prints (normalised facts, CLI field names)."""
    return {
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
    form = out["form"] + (" " + out["schema"] if out["schema"] else "")
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
    return "\n".join(lines) + "\n"


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
            facts = nvsmi_parse.facts_from_output(data)
        except nvsmi_parse.ParseError as exc:
            sys.stderr.write("gpuhost smi: %s\n" % _one_line(exc))
            return 2
        out = cli_facts(facts)
        if as_json:
            sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(text_summary(out))
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("gpuhost smi: interrupted\n")
        return 2
    except Exception as exc:  # never a traceback: a bug still ends in one line
        sys.stderr.write("gpuhost smi: internal error: %s: %s\n" % (type(exc).__name__, _one_line(exc)))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
