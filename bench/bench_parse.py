#!/usr/bin/env python3
"""Parse cost of GPU facts against the nvidia-smi call they come from.

- an 8-GPU `nvidia-smi -q -x` document, built from the real RTX PRO 6000 capture (fixture 043)
  by repeating its <gpu> element 8 times with distinct bus ids, UUIDs and minor numbers;
- the module's pure pipeline end to end (build_facts on captured XML + lspci + proc version).

Prints median milliseconds and the share of a 300 ms nvidia-smi call (target < 5 %).
It reports; it never fails. Run: python bench/bench_parse.py [repeats]
"""
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bin"))
from gpuhost_cli.module_utils_path import install  # noqa: E402

install(os.path.join(ROOT, "module_utils"))

from gpu import gpu_facts  # noqa: E402
from gpu import nvsmi_parse  # noqa: E402
from gpu import nvsmi_xml  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "fixtures", "nvidia_smi", "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml")
SMI_CALL_MS = 300.0
TARGET_SHARE = 0.05
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def eight_gpu_xml(text):
    start = text.index("<gpu id=")
    end = text.index("</gpu>") + len("</gpu>")
    gpu = text[start:end]
    copies = []
    for n, bus in enumerate(BUSES):
        bus_id = "00000000:%s:00.0" % bus.upper()
        copy = gpu.replace("00000000:61:00.0", bus_id)
        copy = copy.replace("GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "GPU-12345678-aaaa-bbbb-cccc-%012d" % n)
        copy = re.sub(r"<minor_number>\d+</minor_number>", "<minor_number>%d</minor_number>" % n, copy)
        copy = copy.replace("<pci_bus>61</pci_bus>", "<pci_bus>%s</pci_bus>" % bus.upper())
        copies.append(copy)
    head = text[:start].replace("<attached_gpus>1</attached_gpus>", "<attached_gpus>8</attached_gpus>")
    return head + "\n\t".join(copies) + text[end:]


LSPCI = "".join("0000:%s:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell "
                "Server Edition] [10de:2bb5] (rev a1)\n" % bus for bus in BUSES)
PROC = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.44.01  Release Build  "
        "(dvs-builder@U22-I3-AE18-09-1)  Thu Dec  4 00:12:29 UTC 2025\nGCC version:  gcc version 12.3.0\n")


def captures_for(xml):
    return {"nvidia_smi_path": "/usr/bin/nvidia-smi", "nvidia_smi_requested": None,
            "smi": [{"kind": "xml", "argv": [], "rc": 0, "stdout": xml, "stderr": "", "fields": None}],
            "lspci": {"kind": "lspci", "argv": [], "rc": 0, "stdout": LSPCI, "stderr": "", "fields": None},
            "sysfs_pci": None, "proc_version": PROC, "proc_version_path": "/proc/driver/nvidia/version"}


def median_ms(func, repeats):
    func()  # warm caches and regex compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def report(label, ms):
    share = ms / SMI_CALL_MS
    verdict = "within" if share < TARGET_SHARE else "OVER"
    print("%-44s median %7.2f ms  = %5.2f %% of a %d ms nvidia-smi call (%s the %d %% target)"
          % (label, ms, share * 100, SMI_CALL_MS, verdict, TARGET_SHARE * 100))


def main(argv):
    repeats = int(argv[0]) if argv else 30
    try:
        with open(FIXTURE, encoding="utf-8") as handle:
            xml = eight_gpu_xml(handle.read())
        facts = nvsmi_parse.facts_from_output(xml)
        if len(facts["gpus"]) != 8 or len({g["uuid"] for g in facts["gpus"]}) != 8:
            print("warning: the 8-GPU document did not parse into 8 distinct GPUs")
        print("8-GPU -q -x document: %d KiB, %d repeats" % (len(xml) // 1024, repeats))
        report("parse_xml (8 GPUs)", median_ms(lambda: nvsmi_xml.parse_xml(xml), repeats))
        report("facts_from_output (detect+parse+normalise)", median_ms(lambda: nvsmi_parse.facts_from_output(xml), repeats))
        caps = captures_for(xml)
        report("module pipeline build_facts (xml+lspci+proc)",
               median_ms(lambda: gpu_facts.build_facts(caps, pid_exists=lambda pid: True), repeats))
    except Exception as exc:  # a benchmark reports; it never fails a build
        print("benchmark could not run: %s: %s" % (type(exc).__name__, exc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
