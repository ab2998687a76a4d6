"""gpuhost vllm-log: what a vLLM startup log says.

  gpuhost vllm-log [--json] [--check] FILE|-

Reports the stages reached, their numbers, and for a failed start the stage and
the kind of failure.  Exit 0 with the report (1 with --check when the log shows
no completed start); 2 when the file cannot be read, with one line on stderr.
"""
import json
import sys

from gpuhost_cli.cli_io import Parser, UsageError, read_input
from ansible.module_utils.serving.vllm_log import parse, render_text


def main(argv):
    parser = Parser(prog="gpuhost vllm-log", description="report on a vLLM startup log")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when the start did not complete")
    parser.add_argument("file", help="log file, or - for stdin")
    try:
        args = parser.parse_args(argv)
        data = read_input(args.file)
    except UsageError as exc:
        sys.stderr.write("gpuhost vllm-log: %s\n" % exc)
        return 2
    except (OSError, IOError) as exc:
        sys.stderr.write("gpuhost vllm-log: cannot read %s: %s\n" % (argv[-1] if argv else "?", exc.strerror or exc))
        return 2
    report = parse(data)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return 1 if args.check and not report["started"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
