"""gpuhost explain: paste any error from a GPU host and get the broken layer, what it means and the fix.

  gpuhost explain [--json] FILE|-

Reads any text - one line or a whole log: a `docker run --gpus` failure, an nvidia-smi complaint,
kernel-log Xid lines, a CUDA error number, a vLLM start, a fabric manager journal - with terminal
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
import argparse
import json
import sys

from gpuhost_cli.cli_io import Parser, UsageError, fail, read_input
from explain import ExplainError, explain, render_text


def main(argv):
    as_json = "--json" in argv
    parser = Parser(prog="gpuhost explain", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("file", help="a file with the text, or - for stdin")
    try:
        args = parser.parse_args(argv)
        result = explain(read_input(args.file))
    except (UsageError, ExplainError) as exc:
        return _fail(as_json, str(exc))
    except (OSError, IOError) as exc:
        return _fail(as_json, "cannot read %s: %s" % (argv[-1] if argv else "?", exc.strerror or exc))
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(result))
    return 0 if result["findings"] else 1


def _fail(as_json, message):
    return fail("explain", as_json, message)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
