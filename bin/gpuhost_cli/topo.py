"""gpuhost topo: how a host's GPUs are connected, and where tensor parallelism can go.

  gpuhost topo [--json] [--tp N] FILE|-

Reads a saved `nvidia-smi topo -m` (tabs or spaces, colour codes and all). Says which GPUs are joined by
NVLink (NV# cells: NV12 on HGX A100, NV18 on HGX H100/H200/B200) and which only over PCIe (PIX, PXB,
PHB, NODE, SYS), with each GPU's CPU and NUMA affinity. With --tp N: the disjoint groups of N GPUs that
are all NVLink-connected (where `--tensor-parallel-size N` instances can go), or, where there are none,
the slowest link a group of the first N GPUs would cross.

Exit 0 when read (and with --tp, a group of N NVLink-joined GPUs exists), 1 when --tp N finds no such
group, 2 when the input cannot be read (one line on stderr, or {"error": ...} with --json).
"""
import sys

from ansible.module_utils.gpu import gpu_topology
from gpuhost_cli.cli_io import UsageError, read_input, run_subcommand
from ansible.module_utils.gpu.nvsmi_common import ParseError


def report(topo, tp=None):
    """The JSON object `gpuhost topo --json` prints."""
    gpus = topo["gpus"]
    out = {"gpus": [{"name": g, "cpu_affinity": topo["cpu_affinity"].get(g),
                     "numa_affinity": topo["numa_affinity"].get(g),
                     "links": {o: topo["links"][g][o] for o in gpus if o != g}} for g in gpus],
           "all_nvlink": gpu_topology.check_tensor_parallel(topo, gpus)["all_nvlink"] if len(gpus) > 1 else False,
           "tp": None}
    if tp:
        groups = gpu_topology.nvlink_groups(topo, tp) if tp <= len(gpus) else []
        out["tp"] = {"size": tp, "nvlink_groups": groups,
                     "first_gpus": gpu_topology.check_tensor_parallel(topo, gpus[:tp]) if tp <= len(gpus) else None}
    return out


def render_text(out):
    lines = []
    for gpu in out["gpus"]:
        links = " ".join("%s:%s" % (name[3:], cell) for name, cell in gpu["links"].items())
        lines.append("%s  cpu %s  numa %s  links %s" % (gpu["name"], gpu["cpu_affinity"] or "-",
                                                      gpu["numa_affinity"] or "-", links or "-"))
    lines.append("every GPU pair on NVLink: %s" % ("yes" if out["all_nvlink"] else "no"))
    tp = out["tp"]
    if tp:
        if tp["nvlink_groups"]:
            lines.append("--tensor-parallel-size %d on NVLink: %s" % (
                tp["size"], "; ".join(",".join(g[3:] for g in group) for group in tp["nvlink_groups"])))
        elif tp["first_gpus"] is None:
            lines.append("--tensor-parallel-size %d: the host has only %d GPU(s)" % (tp["size"], len(out["gpus"])))
        else:
            lines.append("--tensor-parallel-size %d: no %d GPUs are all on NVLink; %s"
                         % (tp["size"], tp["size"], tp["first_gpus"]["message"]))
    return "\n".join(lines) + "\n"


def _arguments(parser):
    parser.add_argument("--tp", type=int, help="a tensor-parallel size to place")
    parser.add_argument("file", help="a file with `nvidia-smi topo -m`, or - for stdin")


def _produce(args):
    if args.tp is not None and args.tp < 1:
        raise UsageError("--tp must be 1 or more")
    out = report(gpu_topology.parse_topo_matrix(read_input(args.file)), args.tp)
    return out, render_text(out), 1 if out["tp"] and not out["tp"]["nvlink_groups"] and args.tp > 1 else 0


def main(argv):
    return run_subcommand("topo", __doc__, argv, _arguments, _produce, errors=(ParseError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
