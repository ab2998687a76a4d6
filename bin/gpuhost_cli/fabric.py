"""gpuhost fabric: is the NVLink fabric of a host up, and what does the host need for it.

  gpuhost fabric [--json] [--lspci FILE] [--gpus FILE] FILE|-

Reads a saved `nvidia-smi -q` (whole, one GPU's, or a `grep -A` of its Fabric blocks) or `nvidia-smi -q -x`.
Each GPU's Fabric State and Status (and Health, from about 570) decide: not_applicable (State N/A: no
NVSwitch fabric), ready (Completed, Success), not_ready (Not Started / In Progress: the fabric is not set up,
so every CUDA program fails with 802 while nvidia-smi looks healthy), failed (Completed with another Status),
unhealthy (Health Summary Unhealthy) or unknown (no Fabric block: drivers before about 550).

What the host needs (need): fabric_manager (NVSwitches on the PCI bus: HGX A100/H100/H200, 10de:1af1 and
10de:22a3 in --lspci, a saved `lspci -nn`; or GPUs reporting an NVSwitch fabric), fabric_manager+nvlsm (HGX
B200/B300/B100: NVLink 5, whose NVSwitches are no PCI function; the fabric manager with NVLSM), imex (a GB200/GB300
NVL compute tray, or Fabric blocks naming a clique: CliqueId and ClusterUUID set; the IMEX service, no fabric
manager) or none; with the service to run and the packages at the driver's version. The GPUs' names come from the
`-q` itself, or from --gpus (a saved `nvidia-smi -L` or any nvidia-smi output naming them).

Exit 0 for ready and not_applicable, 1 for the others, 2 when the input cannot be read (one line on
stderr, or {"error": ...} with --json).
"""
import sys

from ansible.module_utils.driver import fabric_manager
from ansible.module_utils.gpu import gpu_topology
from ansible.module_utils.gpu.host_parse import driver_branch, parse_lspci
from gpuhost_cli.cli_io import read_input, run_subcommand
from ansible.module_utils.gpu.nvsmi_common import ParseError, clean_text
from ansible.module_utils.gpu.nvsmi_parse import detect_form, facts_from_output

# Where a GB200/GB300 tray's fabric is set up: the rack's NVLink switch trays, not this host.
_TRAY_FIX = ("this host runs no fabric manager (a GB200/GB300 compute tray): its fabric is set up from the rack's "
             "NVLink switch trays; check those, then the IMEX service (nvidia-imex-ctl -q says READY)")


def _named_gpus(text):
    """(GPUs with their names, driver version) of an nvidia-smi output, ([], None) where it names none."""
    try:
        facts = facts_from_output(text, partial=True)
    except ParseError:
        return [], None
    return [g for g in facts.get("gpus") or [] if g.get("name")], facts.get("driver_version")


def packages(need, version):
    """{style: [apt specs at the driver's version] or the refusal} for a need, where the driver version is known."""
    branch = driver_branch(version)
    if need == "none" or not branch:
        return None
    out = {}
    for style, title in (("nvidia", "NVIDIA's CUDA repository"), ("ubuntu", "Ubuntu's archive"),
                         ("debian", "Debian's archive")):
        specs, refusal = fabric_manager.install_specs(need, style, version)
        out[title] = refusal or specs
    return out


def report(data, lspci=None, gpus=None):
    """The JSON object `gpuhost fabric --json` prints."""
    text = clean_text(data)
    is_xml = detect_form(text) == "xml"
    fabrics = gpu_topology.parse_fabric_xml(text) if is_xml else gpu_topology.parse_fabric(text)
    verdict = gpu_topology.fabric_verdict(fabrics)
    named, version = _named_gpus(text)
    if gpus:
        more, more_version = _named_gpus(clean_text(gpus))
        named, version = named or more, version or more_version
    need = fabric_manager.fabric_need(parse_lspci(lspci) if lspci else [], named, fabrics)
    fix = _TRAY_FIX if need["imex"] and verdict["state"] == "not_ready" else verdict["fix"]
    if need["nvlsm"] and verdict["state"] == "not_ready":
        fix = "%s; %s" % (fix, fabric_manager.NVLINK5_PREREQUISITES)
    return {"gpus": fabrics, "verdict": verdict["state"], "message": verdict["message"], "fix": fix,
            "need": need["need"], "needs_fabric_manager": need["needed"], "reason": need["reason"],
            "services": need["services"], "driver_version": version, "packages": packages(need["need"], version)}


def render_text(out):
    lines = ["%s  State %s  Status %s%s" % (f["pci_bus_id"] or "GPU %d" % i, f["state"] or "-", f["status"] or "-",
                                            "  Health %s" % f["health_summary"] if f["health_summary"] else "")
             for i, f in enumerate(out["gpus"])]
    lines.append("fabric: %s: %s" % (out["verdict"], out["message"]))
    lines.append("needs: %s (%s)" % (out["need"], out["reason"]))
    lines.append("fabric manager needed: %s" % ("yes" if out["needs_fabric_manager"] else "no"))
    if out["services"]:
        lines.append("service: %s" % ", ".join(out["services"]))
    for source, specs in sorted((out.get("packages") or {}).items()):
        lines.append("packages (%s): %s" % (source, ", ".join(specs) if isinstance(specs, list) else specs))
    if out["fix"]:
        lines.append("fix: %s" % out["fix"])
    return "\n".join(lines) + "\n"


def _arguments(parser):
    parser.add_argument("--lspci", help="a file with `lspci -nn` of the same host")
    parser.add_argument("--gpus", help="a file with `nvidia-smi -L` (or another nvidia-smi output) naming the GPUs")
    parser.add_argument("file", help="a file with `nvidia-smi -q` or `-q -x`, or - for stdin")


def _produce(args):
    out = report(read_input(args.file), read_input(args.lspci) if args.lspci else None,
                 read_input(args.gpus) if args.gpus else None)
    return out, render_text(out), 0 if out["verdict"] in ("ready", "not_applicable") else 1


def main(argv):
    return run_subcommand("fabric", __doc__, argv, _arguments, _produce, errors=(ParseError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
