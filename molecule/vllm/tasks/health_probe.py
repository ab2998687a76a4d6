#!/usr/bin/env python3
"""Test code: poll a serving instance's /health until a stop file appears, and write how long it did not answer.

  health_probe.py URL OUT STOP_FILE [INTERVAL_S]

OUT (JSON): {"url", "samples", "outages": [[start, end] unix seconds], "longest_outage_s", "total_outage_s"}; an
outage still open when the stop file appears ends there.
"""
import json
import os
import sys
import time
import urllib.request


def main(argv):
    url, out, stop = argv[0], argv[1], argv[2]
    interval = float(argv[3]) if len(argv) > 3 else 0.5
    outages, down_since, samples = [], None, 0
    deadline = time.time() + 3600
    while not os.path.exists(stop) and time.time() < deadline:
        now = time.time()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                up = response.status == 200
        except Exception:  # pylint: disable=broad-except  # refused, reset, timed out: not answering
            up = False
        samples += 1
        if not up and down_since is None:
            down_since = now
        elif up and down_since is not None:
            outages.append([down_since, now])
            down_since = None
        time.sleep(interval)
    if down_since is not None:
        outages.append([down_since, time.time()])
    lengths = [end - start for start, end in outages]
    with open(out, "w") as handle:
        json.dump({"url": url, "samples": samples, "outages": outages,
                   "longest_outage_s": round(max(lengths), 1) if lengths else 0.0,
                   "total_outage_s": round(sum(lengths), 1)}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
