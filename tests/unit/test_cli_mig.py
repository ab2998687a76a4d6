"""`gpuhost mig` through the real entry point, on the real nvidia-smi mig listings in tests/fixtures/mig/
(sources in its README.md): the H100 session (-lgip, -lgipp, -lgi and -lci of 7 x 1g.10gb) and the MIG
User Guide's A100-SXM4-40GB tables. Expected values were read off the files."""
import json
import os
import subprocess
import sys

from conftest import ROOT, fixture_path

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")
H100 = [fixture_path("mig", name) for name in ("lgip_H100-80GB-HBM3_all-free", "lgipp_H100-80GB-HBM3",
                                               "lgi_H100-80GB-HBM3", "lci_H100-80GB-HBM3")]
A100 = [fixture_path("mig", "lgip_450.80.02_A100-SXM4-40GB"), fixture_path("mig", "lgipp_A100-SXM4-40GB")]


def gpuhost(*args):
    return subprocess.run([sys.executable, GPUHOST, "mig"] + list(args), capture_output=True, text=True, timeout=60)


def test_a_layout_that_replaces_seven_small_instances():
    proc = gpuhost("--json", "--layout", "3g.40gb,3g.40gb", *H100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert [i["id"] for i in out["instances"]] == [7, 8, 9, 10, 11, 12, 13]
    change = out["layout"]["change"]
    assert change["keep"] == [] and change["destroy"] == [7, 8, 9, 10, 11, 12, 13]
    assert change["commands"][0] == "nvidia-smi mig -i 0 -dci -ci 0 -gi 7"
    assert change["commands"][-2:] == ["nvidia-smi mig -i 0 -dgi -gi 7,8,9,10,11,12,13",
                                       "nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb -C"]


def test_a_layout_that_keeps_what_leaves_room():
    proc = gpuhost("--layout", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", *H100)
    assert proc.returncode == 0
    assert "keep GIs 7,8; destroy GIs 9,10,11,12,13; create 3g.40gb,2g.20gb" in proc.stdout


def test_layouts_that_do_not_fit_exit_1_and_say_why():
    total = gpuhost("--layout", "4g.40gb,4g.40gb", H100[0])
    assert total.returncode == 1 and "allows at most 1" in total.stdout
    # the MIG User Guide's example: 3g + 3g + 1g is 7 compute slices but 9 memory slots on an A100
    slots = gpuhost("--layout", "3g.20gb,3g.20gb,1g.5gb", *A100)
    assert slots.returncode == 1 and "need 9 memory slots and it has 8" in slots.stdout


def test_inputs_it_cannot_use():
    listing = gpuhost("--json", fixture_path("mig", "L_H100"))
    assert listing.returncode == 2 and "not an `nvidia-smi mig" in json.loads(listing.stdout)["error"]
    no_profiles = gpuhost("--layout", "3g.40gb", H100[2])
    assert no_profiles.returncode == 2 and "needs the GPU's `nvidia-smi mig -lgip`" in no_profiles.stderr
