#!/usr/bin/env python3
"""Parse time of the largest corpus vLLM log (report only, no threshold).

  python bench/bench_vllm_log.py [--repeat N] [FILE]
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bin"))
from gpuhost_cli.module_utils_path import install  # noqa: E402

install(os.path.join(ROOT, "module_utils"))

from serving import vllm_log  # noqa: E402

LOGS = os.path.join(ROOT, "tests", "fixtures", "vllm_logs")


def largest_log():
    names = [n for n in os.listdir(LOGS) if n.endswith(".log")]
    return os.path.join(LOGS, max(names, key=lambda n: os.path.getsize(os.path.join(LOGS, n))))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("file", nargs="?", default=None)
    args = parser.parse_args(argv)
    path = args.file or largest_log()
    with open(path, "rb") as handle:
        data = handle.read()
    times = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        report = vllm_log.parse(data)
        times.append(time.perf_counter() - start)
    times.sort()
    lines = data.count(b"\n")
    print("file      %s" % os.path.basename(path))
    print("size      %d bytes, %d lines" % (len(data), lines))
    print("parse     min %.1f ms, median %.1f ms, max %.1f ms over %d runs"
          % (times[0] * 1e3, times[len(times) // 2] * 1e3, times[-1] * 1e3, len(times)))
    print("rate      %.0f lines/s (median)" % (lines / times[len(times) // 2]))
    print("result    started=%s last_stage=%s failure=%s"
          % (report["started"], report["last_stage"], (report["failure"] or {}).get("kind")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
