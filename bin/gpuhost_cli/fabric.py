"""gpuhost fabric: is the NVSwitch fabric of an HGX host up, and does the host need the fabric manager.

  gpuhost fabric [--json] [--lspci FILE] FILE|-

Reads a saved `nvidia-smi -q` (whole, one GPU's, or a `grep -A` of its Fabric blocks) or `nvidia-smi -q -x`.
Each GPU's Fabric State and Status (and Health, from about 570) decide: not_applicable (State N/A: no
NVSwitch, no fabric manager needed), ready (Completed, Success), not_ready (Not Started / In Progress:
the fabric manager has not set the fabric up, so every CUDA program fails with 802 while nvidia-smi
looks healthy), failed (Completed with another Status), unhealthy (Health Summary Unhealthy) or unknown
(no Fabric block: drivers before about 550).

With --lspci (a saved `lspci -nn`): NVSwitches on the PCI bus (10de:1af1 on HGX A100, 10de:22a3 on HGX
H100/H200) also say the host needs the fabric manager.

Exit 0 for ready and not_applicable, 1 for the others, 2 when the input cannot be read (one line on
stderr, or {"error": ...} with --json).
"""
import sys

from ansible.module_utils.driver import fabric_manager
from ansible.module_utils.gpu import gpu_topology
from ansible.module_utils.gpu.host_parse import parse_lspci
from gpuhost_cli.cli_io import read_input, run_subcommand
from ansible.module_utils.gpu.nvsmi_common import ParseError, clean_text
from ansible.module_utils.gpu.nvsmi_parse import detect_form


def report(data, lspci=None):
    """The JSON object `gpuhost fabric --json` prints."""
    text = clean_text(data)
    is_xml = detect_form(text) == "xml"
    fabrics = gpu_topology.parse_fabric_xml(text) if is_xml else gpu_topology.parse_fabric(text)
    verdict = gpu_topology.fabric_verdict(fabrics)
    needs = fabric_manager.needs_fabric_manager(parse_lspci(lspci) if lspci else [], fabrics)
    return {"gpus": fabrics, "verdict": verdict["state"], "message": verdict["message"], "fix": verdict["fix"],
            "needs_fabric_manager": needs["needed"], "reason": needs["reason"]}


def render_text(out):
    lines = ["%s  State %s  Status %s%s" % (f["pci_bus_id"] or "GPU %d" % i, f["state"] or "-", f["status"] or "-",
                                            "  Health %s" % f["health_summary"] if f["health_summary"] else "")
             for i, f in enumerate(out["gpus"])]
    lines.append("fabric: %s: %s" % (out["verdict"], out["message"]))
    lines.append("fabric manager needed: %s (%s)" % ("yes" if out["needs_fabric_manager"] else "no", out["reason"]))
    if out["fix"]:
        lines.append("fix: %s" % out["fix"])
    return "\n".join(lines) + "\n"


def _arguments(parser):
    parser.add_argument("--lspci", help="a file with `lspci -nn` of the same host")
    parser.add_argument("file", help="a file with `nvidia-smi -q` or `-q -x`, or - for stdin")


def _produce(args):
    out = report(read_input(args.file), read_input(args.lspci) if args.lspci else None)
    return out, render_text(out), 0 if out["verdict"] in ("ready", "not_applicable") else 1


def main(argv):
    return run_subcommand("fabric", __doc__, argv, _arguments, _produce, errors=(ParseError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
