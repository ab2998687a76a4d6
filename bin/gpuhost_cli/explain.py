"""gpuhost explain: paste any error from a GPU host and get the broken layer, what it means and the fix.

  gpuhost explain [--json] FILE|-

Reads any text - one line or a whole log: a `docker run --gpus` failure, an nvidia-smi complaint,
kernel-log Xid lines, a CUDA error number, a vLLM start, a fabric manager journal, an `nvidia-smi -q`
whose Fabric blocks show an NVSwitch fabric not set up (the verdict `gpuhost fabric` gives) - with terminal
colours, CRLF, container and engine prefixes and timestamps as they come. Answers with findings,
most decisive first (the lowest broken layer): layer, kind, the decisive line, what it means, the
fix, and the gpuhost run that repairs or checks it.

Example:
  $ docker run --rm --gpus all nvidia/cuda:12.8.0-base-ubuntu24.04 nvidia-smi 2>&1 | gpuhost explain -
  1. [image] cuda_driver_too_old - line 1
     ... nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8 ...
     means:   the image needs a newer CUDA than the host's driver supports ...

Exit 0 with findings, 1 when the text holds no known GPU-stack error (it says so), 2 when the
input cannot be read or is not text (one line on stderr, or {"error": ...} with --json).
"""
import sys

from gpuhost_cli.cli_io import read_input, run_subcommand
from ansible.module_utils.diagnosis.explain import ExplainError, explain, render_text


def _arguments(parser):
    parser.add_argument("file", help="a file with the text, or - for stdin")


def _produce(args):
    result = explain(read_input(args.file))
    return result, render_text(result), 0 if result["findings"] else 1


def main(argv):
    return run_subcommand("explain", __doc__, argv, _arguments, _produce, errors=(ExplainError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
