"""MIG in the simulator (gpusim/mig.py, smi.py, hook.py, cdi.py), checked against real captures: the outputs
of the simulated `nvidia-smi` are compared with tests/fixtures/mig/ and the corpus (nvidia_smi/002, 003, 028,
068), or with texts quoted verbatim in docs/research/mig.md, and parsed with the product's parsers
(module_utils/gpu/mig_parse.py, nvsmi_list.py, nvsmi_q.py, nvsmi_table.py, nvsmi_xml.py)."""
import json
import os
import re
import sys

import pytest

from simhelpers import ROOT, corpus, edit, make_state, run_smi, st

from gpu import mig_parse, nvsmi_list, nvsmi_q, nvsmi_table, nvsmi_xml  # noqa: E402  (tests/conftest.py serves module_utils)

from gpusim import boot as bootmod  # noqa: E402
from gpusim import cdi as cdimod  # noqa: E402
from gpusim import hook as hookmod  # noqa: E402

MIGFX = os.path.join(ROOT, "tests", "fixtures", "mig")


def fixture(name):
    with open(os.path.join(MIGFX, name), encoding="utf-8", newline="") as fh:
        return fh.read()


def host(tmp_path, *models, mig=True):
    p = tmp_path / "s.json"
    make_state(p, models=models)
    if mig:
        out, rc = run_smi(p, "-mig", "1")
        assert rc == 0, out
    return p


# ----- research/mig.md §2, verbatim (H100 80GB HBM3, file index id 8225626544) --------------------------------
H100_CGI_7x19_C = """Successfully created GPU instance ID 13 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID 13 using profile MIG 1g.10gb (ID  0)
Successfully created GPU instance ID 11 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID 11 using profile MIG 1g.10gb (ID  0)
Successfully created GPU instance ID 12 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID 12 using profile MIG 1g.10gb (ID  0)
Successfully created GPU instance ID  7 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID  7 using profile MIG 1g.10gb (ID  0)
Successfully created GPU instance ID  8 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID  8 using profile MIG 1g.10gb (ID  0)
Successfully created GPU instance ID  9 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID  9 using profile MIG 1g.10gb (ID  0)
Successfully created GPU instance ID 10 on GPU  0 using profile MIG 1g.10gb (ID 19)
Successfully created compute instance ID  0 on GPU  0 GPU instance ID 10 using profile MIG 1g.10gb (ID  0)
"""
H100_DCI = "".join("Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID %2d\n" % i
                   for i in range(7, 14))
H100_DGI = "".join("Successfully destroyed GPU instance ID %2d from GPU  0\n" % i for i in range(7, 14))
# research §2, NVIDIA MIG User Guide "Instance Geometry" Example 2 (A100-40GB: 1g.5gb, 2g.10gb)
GUIDE_19_19_14_9 = """Successfully created GPU instance ID 13 on GPU  0 using profile MIG 1g.5gb (ID 19)
Successfully created GPU instance ID 11 on GPU  0 using profile MIG 1g.5gb (ID 19)
Successfully created GPU instance ID  3 on GPU  0 using profile MIG 2g.10gb (ID 14)
Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources
Failed to create GPU instances: Insufficient Resources
"""
# research §1, A100 80GB (SXM4) -lgip rows (third-party doc, two excerpts of one file; no 1g.20gb row there)
A100_80GB_ROWS = """|   0  MIG 1g.10gb       19     7/7        9.50       No     14     0     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.50       No     14     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.20gb       14     3/3        19.50      No     28     1     0   |
|                                                             2     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.40gb        9     2/2        39.25      No     42     2     0   |
|                                                             3     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.40gb        5     1/1        39.25      No     56     2     0   |
|                                                             4     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.80gb        0     1/1        79.00      No     98     5     0   |
|                                                             7     1     1   |
+-----------------------------------------------------------------------------+
"""


# ----- profiles ---------------------------------------------------------------------------------------------
def test_lgip_fresh_h100_is_the_real_capture_byte_for_byte(tmp_path):
    p = host(tmp_path, "h100")
    out, rc = run_smi(p, "mig", "-lgip")
    assert rc == 0
    assert out == fixture("lgip_H100-80GB-HBM3_all-free.txt")
    assert mig_parse.parse_lgip(out) == mig_parse.parse_lgip(fixture("lgip_H100-80GB-HBM3_all-free.txt"))


def test_lgip_four_h100_is_the_stackhpc_capture(tmp_path):
    p = host(tmp_path, "h100", "h100", "h100", "h100")
    out, _rc = run_smi(p, "mig", "-lgip")
    assert out == fixture("lgip_4xH100-80GB-HBM3_all-free_stackhpc.txt")


def test_lgipp_h100_is_the_real_capture(tmp_path):
    p = host(tmp_path, "h100")
    assert run_smi(p, "mig", "-i", "0", "-lgipp") == (fixture("lgipp_H100-80GB-HBM3.txt"), 0)


def test_lgipp_a100_follows_the_guide(tmp_path):
    p = host(tmp_path, "a100-80gb")
    out, _rc = run_smi(p, "mig", "-lgipp")
    assert mig_parse.parse_lgipp(out) == mig_parse.parse_lgipp(fixture("lgipp_A100-SXM4-40GB_nvidia-guide.txt"))


def test_lgip_a100_80gb_rows_are_the_real_rows(tmp_path):
    p = host(tmp_path, "a100-80gb")
    out, _rc = run_smi(p, "mig", "-lgip")
    rows = [r for r in mig_parse.parse_lgip(out) if r["profile_id"] != 15]
    assert rows == mig_parse.parse_lgip(A100_80GB_ROWS)
    # the lines themselves, too (the 1g.20gb block, absent from that capture, left out)
    lines = out.splitlines(True)[5:]
    at = next(i for i, line in enumerate(lines) if "1g.20gb" in line)
    assert "".join(lines[:at] + lines[at + 3:]) == A100_80GB_ROWS


def test_lgip_rtx_pro_6000_is_the_81_column_capture(tmp_path):
    p = host(tmp_path, "rtx-pro-6000-bse")
    assert run_smi(p, "mig", "-lgip")[0] == fixture("lgip_RTX-PRO-6000-Blackwell-SE_81col_excerpt-3-profiles.txt")


def test_lgip_h200_rows_are_mig_parted_120s(tmp_path):
    p = host(tmp_path, "h200")
    sim = mig_parse.parse_lgip(run_smi(p, "mig", "-lgip")[0])
    real = mig_parse.parse_lgip(fixture("lgip_H200_gpu6_excerpt-no-header_mig-parted-120.txt"))
    strip = lambda rows: [dict(r, gpu=None) for r in rows]  # noqa: E731  (GPU 6 there)
    assert strip(sim[:len(real)]) == strip(real)


# ----- instances ---------------------------------------------------------------------------------------------
def test_seven_1g_on_h100_as_the_real_session(tmp_path):
    p = host(tmp_path, "h100")
    assert run_smi(p, "mig", "-i", "0", "-cgi", "19,19,19,19,19,19,19", "-C") == (H100_CGI_7x19_C, 0)
    assert run_smi(p, "mig", "-i", "0", "-lgi")[0] == fixture("lgi_H100-80GB-HBM3_7x1g.10gb.txt")
    assert run_smi(p, "mig", "-i", "0", "-lci")[0] == fixture("lci_H100-80GB-HBM3_7x1g.10gb.txt")
    listed = nvsmi_list.parse_list(run_smi(p, "-L")[0])["gpus"][0]
    assert [d["profile"] for d in listed["mig_devices"]] == ["1g.10gb"] * 7
    # every free count is now 0 for the 1g.10gb profile, as a full GPU
    free = {r["profile_id"]: r["instances_free"] for r in mig_parse.parse_lgip(run_smi(p, "mig", "-lgip")[0])}
    assert free[19] == 0 and free[0] == 0
    assert run_smi(p, "mig", "-i", "0", "-dci") == (H100_DCI, 0)
    assert run_smi(p, "mig", "-i", "0", "-dgi") == (H100_DGI, 0)
    assert run_smi(p, "mig", "-lgi")[0] == "No GPU instances found: Not Found\n"


def test_guide_insufficient_resources_order(tmp_path):
    p = host(tmp_path, "a100-80gb")
    out, rc = run_smi(p, "mig", "-cgi", "19,19,14,9")
    # the guide's A100-40GB names are 1g.5gb / 2g.10gb; same ids and placements on the 80GB board
    assert out == GUIDE_19_19_14_9.replace("1g.5gb", "1g.10gb").replace("2g.10gb", "2g.20gb")
    assert rc != 0


def test_layout_of_002_gives_002s_ids_and_table(tmp_path):
    p = host(tmp_path, "h100")
    run_smi(p, "mig", "-cgi", "9,14,19,19", "-C")
    sim = nvsmi_table.parse_table(run_smi(p)[0])["gpus"][0]
    real = nvsmi_table.parse_table(corpus("002_"))["gpus"][0]
    key = lambda d: (d["index"], d["gpu_instance_id"], d["compute_instance_id"], d["multiprocessor_count"],  # noqa
                     d["memory_total_mib"])
    assert [key(d) for d in sim["mig_devices"]] == [key(d) for d in real["mig_devices"]]
    assert sim["mig_mode"] is True
    # an idle 2g / 1g GI uses what 002's idle ones use (17 / 9 MiB)
    assert [d["memory_used_mib"] for d in sim["mig_devices"]][1:] == [d["memory_used_mib"]
                                                                      for d in real["mig_devices"]][1:]
    # the table's MIG box lines have 002's layout (same columns)
    lines = run_smi(p)[0].splitlines()
    real_lines = corpus("002_").splitlines()
    i, j = lines.index(next(x for x in lines if "MIG devices:" in x)), real_lines.index(
        next(x for x in real_lines if "MIG devices:" in x))
    assert lines[i - 1:i + 6] == real_lines[j - 1:j + 6]
    assert lines[i + 9:i + 18] == real_lines[j + 9:j + 18]     # 2g and 1g rows: same values as 002


def test_q_and_xml_mig_devices_parse_as_the_table(tmp_path):
    p = host(tmp_path, "h100")
    run_smi(p, "mig", "-cgi", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "-C")   # 002 / 003's layout
    table = nvsmi_table.parse_table(run_smi(p)[0])["gpus"][0]["mig_devices"]
    q = nvsmi_q.parse_q(run_smi(p, "-q")[0])["gpus"][0]
    x = nvsmi_xml.parse_xml(run_smi(p, "-q", "-x")[0])["gpus"][0]
    for facts in (q, x):
        assert facts["mig_mode"] is True and facts["mig_mode_pending"] is True
        assert [(d["gpu_instance_id"], d["memory_total_mib"], d["multiprocessor_count"])
                for d in facts["mig_devices"]] == [(d["gpu_instance_id"], d["memory_total_mib"],
                                                   d["multiprocessor_count"]) for d in table]
    # 003's MIG Device block for the 3g.40gb (GI 2): same lines but Used / Free
    sim = run_smi(p, "-q")[0].splitlines()
    real = corpus("003_").splitlines()
    s0, r0 = sim.index("    MIG Device"), real.index("    MIG Device")
    diff = [k for k in range(24) if sim[s0 + k] != real[r0 + k]]
    assert all("Used" in real[r0 + k] or "Free" in real[r0 + k] for k in diff)


def test_list_lines_have_068s_layout(tmp_path):
    p = host(tmp_path, "a100-80gb")
    run_smi(p, "mig", "-cgi", ",".join(["19"] * 7), "-C")
    sim = run_smi(p, "-L")[0].splitlines()[1:]
    real = corpus("068_").splitlines()[2:]
    uuid = re.compile(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}")
    assert [uuid.sub("U", x) for x in sim] == [uuid.sub("U", x) for x in real]
    assert len({uuid.search(x).group(0) for x in sim}) == 7


def test_no_mig_enabled_devices(tmp_path):
    p = host(tmp_path, "h100", mig=False)
    assert run_smi(p, "mig", "-lgi") == ("No MIG-enabled devices found.\n", 6)


def test_dgi_with_a_compute_instance_is_in_use(tmp_path):
    p = host(tmp_path, "h100")
    run_smi(p, "mig", "-cgi", "14", "-C")
    gi = mig_parse.parse_lgi(run_smi(p, "mig", "-lgi")[0])[0]["instance_id"]
    out, rc = run_smi(p, "mig", "-i", "0", "-dgi", "-gi", str(gi))
    # research §2 (file index id 45955158495: GI 5 there)
    real = ("Unable to destroy GPU instance ID  5 from GPU  0: In use by another client\n"
            "Failed to destroy GPU instances: In use by another client\n")
    assert out == real.replace("ID  5", "ID %2d" % gi)
    assert rc != 0


# ----- mode, processes, reset, boot -------------------------------------------------------------------------
def test_mig_enable_with_a_process_is_pending_as_the_guide(tmp_path):
    p = host(tmp_path, "h100", mig=False)
    edit(p, lambda s: s["processes"].append({"pid": 1, "name": "python3", "gpu_index": 0, "used_mib": 10}))
    out, rc = run_smi(p, "-i", "0", "-mig", "1")
    bus = st.load(str(p))["gpus"][0]["pci_bus_id"]
    guide = ("Warning: MIG mode is in pending enable state for GPU 00000000:07:00.0:In use by another client\n"
             "00000000:07:00.0 is currently being used by one or more other processes (e.g. CUDA application or a "
             "monitoring application such as another instance of nvidia-smi). Please first kill all processes using "
             "the device and retry the command or reboot the system to make MIG mode effective.\nAll done.\n")
    assert (out, rc) == (guide.replace("00000000:07:00.0", bus), 0)
    x = nvsmi_xml.parse_xml(run_smi(p, "-q", "-x")[0])["gpus"][0]
    assert (x["mig_mode"], x["mig_mode_pending"]) == (False, True)


def test_ampere_keeps_mode_across_boot_hopper_does_not_and_no_instances_survive(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("a100-80gb", "h100"))
    run_smi(p, "-mig", "1")
    run_smi(p, "mig", "-cgi", "9", "-C")
    s = bootmod.apply_state and st.load(str(p))
    bootmod.apply_state(s)
    st.save(s, str(p))
    q = nvsmi_q.parse_q(run_smi(p, "-q")[0])["gpus"]
    assert [g["mig_mode"] for g in q] == [True, False]
    assert run_smi(p, "mig", "-lgi")[0] == "No GPU instances found: Not Found\n"


def test_ampere_pending_until_reset_or_boot(tmp_path):
    p = host(tmp_path, "a100-80gb", mig=False)
    edit(p, lambda s: s["gpus"][0].update(persistence_mode=True))   # gpu-operator#118: persistenced holds it
    out, _rc = run_smi(p, "-mig", "1")
    assert "pending enable state" in out
    assert nvsmi_q.parse_q(run_smi(p, "-q")[0])["gpus"][0]["mig_mode"] is False
    out, rc = run_smi(p, "--gpu-reset")
    bus = st.load(str(p))["gpus"][0]["pci_bus_id"]
    assert rc == 255 and "  GPU %s: In use by another client" % bus in out
    edit(p, lambda s: s["gpus"][0].update(persistence_mode=False))
    assert run_smi(p, "--gpu-reset") == ("GPU %s was successfully reset.\nAll done.\n" % bus, 0)
    assert nvsmi_q.parse_q(run_smi(p, "-q")[0])["gpus"][0]["mig_mode"] is True


def test_process_on_a_mig_device_shows_gi_ci_as_002(tmp_path):
    p = host(tmp_path, "h100")
    run_smi(p, "mig", "-cgi", "9", "-C")
    edit(p, lambda s: s["processes"].append({"pid": 1, "name": "./gpu_burn", "gpu_index": 0, "used_mib": 7484,
                                             "gi_id": 2, "ci_id": 0, "type": "C"}))
    line = [x for x in run_smi(p)[0].splitlines() if "gpu_burn" in x][0]
    real = [x for x in corpus("002_").splitlines() if "gpu_burn" in x][0]
    assert line.replace("    1      C", "21198      C") == real
    out, rc = run_smi(p, "mig", "-dci")
    assert rc != 0 and "In use by another client" in out


# ----- containers: the hook and CDI -------------------------------------------------------------------------
def _two_slices(tmp_path):
    p = host(tmp_path, "h100")
    run_smi(p, "mig", "-cgi", "9,9", "-C")
    return p, st.load(str(p))


@pytest.mark.parametrize("pick", ["uuid", "index"])
def test_hook_hands_one_mig_device(tmp_path, pick):
    p, s = _two_slices(tmp_path)
    host_list = nvsmi_list.parse_list(run_smi(p, "-L")[0])["gpus"][0]["mig_devices"]
    want = host_list[1]["uuid"]
    dev = want if pick == "uuid" else "0:1"
    gpus, migs = hookmod.select_devices(s, [dev])
    copy_ = tmp_path / "c.json"
    with open(copy_, "w") as fh:
        json.dump(hookmod.container_state(s, gpus, migs), fh)
    inside = nvsmi_list.parse_list(run_smi(copy_, "-L")[0])["gpus"]
    assert len(inside) == 1 and [d["uuid"] for d in inside[0]["mig_devices"]] == [want]
    assert inside[0]["mig_devices"][0]["index"] == 0
    # the GPU given whole: no MIG device reachable
    gpus, migs = hookmod.select_devices(s, ["0"])
    with open(copy_, "w") as fh:
        json.dump(hookmod.container_state(s, gpus, migs), fh)
    assert nvsmi_list.parse_list(run_smi(copy_, "-L")[0])["gpus"][0]["mig_devices"] == []


def test_hook_unknown_mig_device(tmp_path):
    _p, s = _two_slices(tmp_path)
    with pytest.raises(hookmod.HookError):
        hookmod.select_devices(s, ["0:5"])


def test_cdi_spec_names_mig_devices_as_the_toolkit(tmp_path):
    p, s = _two_slices(tmp_path)
    spec = cdimod.build_spec(s, "1.18.0", driver_root=str(tmp_path), dev_root=str(tmp_path))
    names = [d["name"] for d in spec["devices"]]
    uuids = [d["uuid"] for d in nvsmi_list.parse_list(run_smi(p, "-L")[0])["gpus"][0]["mig_devices"]]
    assert names == ["0", s["gpus"][0]["uuid"], "0:0", uuids[0], "0:1", uuids[1], "all"]
    nodes = [n["path"] for n in spec["devices"][2]["containerEdits"]["deviceNodes"]]
    assert nodes[0] == "/dev/nvidia0" and all(n.startswith("/dev/nvidia-caps/nvidia-cap") for n in nodes[1:])


def test_cdi_container_sees_only_the_mig_device_whose_cap_nodes_it_got(tmp_path, monkeypatch):
    p, s = _two_slices(tmp_path)
    spec = cdimod.build_spec(s, "1.18.0", driver_root=str(tmp_path), dev_root=str(tmp_path))
    want = [d for d in spec["devices"] if d["name"] == "0:1"][0]
    caps = tmp_path / "container-dev-nvidia-caps"
    caps.mkdir()
    for node in want["containerEdits"]["deviceNodes"][1:]:   # what CDI puts in the container
        (caps / os.path.basename(node["path"])).write_text("")
    monkeypatch.setenv("GPUSIM_CAPS_DIR", str(caps))
    listed = nvsmi_list.parse_list(run_smi(p, "-L")[0])["gpus"][0]["mig_devices"]
    assert [(d["index"], d["uuid"]) for d in listed] == [
        (0, [d for d in spec["devices"] if d["containerEdits"] == want["containerEdits"]][1]["name"])]


def test_cci_partial_compute_instance_as_the_510_capture(tmp_path):
    p = host(tmp_path, "a100-80gb")
    run_smi(p, "mig", "-cgi", "9")
    gi = mig_parse.parse_lgi(run_smi(p, "mig", "-lgi")[0])[0]["instance_id"]
    out, rc = run_smi(p, "mig", "-gi", str(gi), "-cci", "0")
    # research §2 (510.47.03): `-gi 11 -cci 0` on a 1g GI; here CI profile 0 in a 3g GI (1 slice)
    assert (out, rc) == ("Successfully created compute instance ID  0 on GPU  0 GPU instance ID %2d using profile "
                         "MIG 1c.3g.40gb (ID  0)\n" % gi, 0)
    sim = run_smi(p, "mig", "-lci")[0].splitlines()
    real = fixture("lci_510.47.03_A100-PCIE-40GB_1c-partial-ci_no-closing-border.txt").splitlines()
    row = [x for x in real if "1c.3g.20gb" in x][0].replace("1c.3g.20gb", "1c.3g.40gb")
    assert sim[:6] == real[:6] and sim[6] == row.replace("     1       MIG", "%6d       MIG" % gi)


def test_standin_in_a_container_given_one_mig_device_sees_that_slice(tmp_path):
    """The vLLM stand-in reads the container's nvidia-smi as CUDA sees the devices: one 3g.40gb slice of the
    H100 (40448 MiB, the size of 003's 3g.40gb), not the whole card; given the MIG-enabled GPU whole, none."""
    sys.path.insert(0, os.path.join(ROOT, "molecule", "vllm_standin"))
    import server as standin
    p, s = _two_slices(tmp_path)
    copy_ = tmp_path / "c.json"

    class Inside(standin.Host):
        def _smi(self, args):
            out, rc = run_smi(copy_, *args)
            return out if rc == 0 else None

    for given, want in (("0:1", 1), ("0", 0)):
        gpus, migs = hookmod.select_devices(s, [given])
        with open(copy_, "w") as fh:
            json.dump(hookmod.container_state(s, gpus, migs), fh)
        devices = Inside(env={}).gpus() or []
        assert len(devices) == want, devices
    gpus, migs = hookmod.select_devices(s, ["0:1"])
    with open(copy_, "w") as fh:
        json.dump(hookmod.container_state(s, gpus, migs), fh)
    (device,) = Inside(env={}).gpus()
    assert device["name"] == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert device["total_mib"] == 40448 and device["reserved_mib"] == 0
    assert device["free_mib"] == device["total_mib"] - device["used_mib"]
