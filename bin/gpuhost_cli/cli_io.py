"""What every `gpuhost` subcommand reads its arguments and input with."""
import argparse
import json
import sys


class UsageError(Exception):
    """Bad arguments: one line on stderr (or JSON), exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse's own usage dump and exit are noise here: one line, exit 2, by the caller.
        raise UsageError(message)


def read_input(path):
    """The bytes of FILE or of standard input (`-`): bytes, so that CR-only progress bars and stray
    encodings do not shift line numbers before the parser decides."""
    if path == "-":
        return getattr(sys.stdin, "buffer", sys.stdin).read()
    with open(path, "rb") as handle:
        return handle.read()


def fail(command, as_json, message):
    """A subcommand's error: one line on stderr, or {"error": ...} on stdout with --json; exit status 2."""
    text = "gpuhost %s: %s" % (command, message)
    if as_json:
        sys.stdout.write(json.dumps({"error": text}) + "\n")
    else:
        sys.stderr.write(text + "\n")
    return 2


def run_subcommand(command, doc, argv, add_arguments, produce, errors=()):
    """A subcommand that reads FILE|-: argparse with --json and the command's own arguments, then
    produce(args) -> (result, text, exit status); prints the result as JSON or the text. Bad arguments,
    `errors` and unreadable files end in one line (fail()), exit status 2."""
    as_json = "--json" in argv
    parser = Parser(prog="gpuhost " + command, formatter_class=argparse.RawDescriptionHelpFormatter,
                    description=doc.split("\n\n", 1)[1])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
        result, text, status = produce(args)
    except (UsageError,) + tuple(errors) as exc:
        return fail(command, as_json, str(exc))
    except (OSError, IOError) as exc:
        return fail(command, as_json, "cannot read %s: %s" % (argv[-1] if argv else "?", exc.strerror or exc))
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n" if args.json else text)
    return status
