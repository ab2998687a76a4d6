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
