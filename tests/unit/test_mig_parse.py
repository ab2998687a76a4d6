"""MIG: the nvidia-smi mig parsers, MIG lines of -L, MIG mode, and the layout decisions.

Inputs are real outputs: tests/fixtures/mig/ (sources in its README.md) and the corpus copies in
tests/fixtures/nvidia_smi/ (069/070 A30 -lgip/-lgi, 003/019/039/043 MIG mode, 068 -L). Expected
values were read off the files by eye.
"""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpu import mig_parse as m
from gpu import nvsmi_parse as n
from conftest import FIXTURES

MIG = os.path.join(FIXTURES, "mig")
SMI = os.path.join(FIXTURES, "nvidia_smi")

A100_40_LGIP = "lgip_450.80.02_A100-SXM4-40GB_all-free_nvidia-guide.txt"
A100_40_LGIPP = "lgipp_A100-SXM4-40GB_nvidia-guide.txt"
A100_PCIE_LGIP = "lgip_510.47.03_A100-PCIE-40GB_none-free.txt"
A100_PCIE_LGI = "lgi_510.47.03_A100-PCIE-40GB_1g-1g-2g-3g.txt"
H100_LGIP = "lgip_H100-80GB-HBM3_all-free.txt"
H100_LGIPP = "lgipp_H100-80GB-HBM3.txt"
A30_LGIP = "069_mig-lgip_A30-profiles_all-allocated-0-free.txt"
A30_LGI = "070_mig-lgi_A30_4x1g.6gb.txt"


def load(name):
    folder = SMI if name[:3].isdigit() else MIG
    with open(os.path.join(folder, name), "rb") as handle:
        return handle.read()


def text(name):
    return load(name).decode("utf-8")


def column(rows, *keys):
    if len(keys) == 1:
        return [row[keys[0]] for row in rows]
    return [tuple(row[k] for k in keys) for row in rows]


def test_every_fixture_is_read_by_a_test():
    with open(__file__, encoding="utf-8") as handle:
        source = handle.read()
    unread = [f for f in os.listdir(MIG) if f != "README.md" and f not in source]
    assert unread == []


# --- -lgip -------------------------------------------------------------------------------------

def test_lgip_a100_40gb_nvidia_guide_all_free():
    rows = m.parse_lgip(load(A100_40_LGIP))
    assert column(rows, "name") == ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert column(rows, "profile_id") == [19, 20, 15, 14, 9, 5, 0]
    assert column(rows, "instances_total") == [7, 1, 4, 3, 2, 1, 1]
    assert column(rows, "instances_free") == column(rows, "instances_total")
    assert column(rows, "memory_gib") == [4.75, 4.75, 9.62, 9.62, 19.50, 19.50, 39.25]
    assert column(rows, "slices") == [1, 1, 1, 2, 3, 4, 7]
    assert column(rows, "variant") == ["", "+me", "", "", "", "", ""]
    assert set(column(rows, "gpu")) == {0} and set(column(rows, "p2p")) == {False}
    first, media, full = rows[0], rows[1], rows[-1]
    assert column([first], "sm", "dec", "enc", "ce", "jpeg", "ofa") == [(14, 0, 0, 1, 0, 0)]
    assert column([media], "sm", "dec", "enc", "ce", "jpeg", "ofa") == [(14, 1, 0, 1, 1, 1)]
    assert column([full], "sm", "dec", "enc", "ce", "jpeg", "ofa") == [(98, 5, 0, 7, 1, 1)]


def test_lgip_a100_pcie_510_none_free_keeps_totals():
    rows = m.parse_lgip(load(A100_PCIE_LGIP))
    assert column(rows, "name") == ["1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert column(rows, "instances_free") == [0, 0, 0, 0, 0, 0]
    assert column(rows, "instances_total") == [7, 1, 3, 2, 1, 1]
    assert column(rows, "memory_gib") == [4.75, 4.75, 9.75, 19.62, 19.62, 39.50]  # 9.62 / 19.50 at 450.80.02


def test_lgip_h100():
    rows = m.parse_lgip(load(H100_LGIP))
    assert column(rows, "name", "profile_id", "instances_total") == [
        ("1g.10gb", 19, 7), ("1g.10gb+me", 20, 1), ("1g.20gb", 15, 4), ("2g.20gb", 14, 3),
        ("3g.40gb", 9, 2), ("4g.40gb", 5, 1), ("7g.80gb", 0, 1)]
    assert column(rows, "memory_gib") == [9.75, 9.75, 19.62, 19.62, 39.50, 39.50, 79.25]
    assert column([rows[-1]], "sm", "dec", "enc", "ce", "jpeg", "ofa") == [(132, 7, 0, 8, 7, 1)]


def test_lgip_four_gpus_in_one_table():
    rows = m.parse_lgip(load("lgip_4xH100-80GB-HBM3_all-free_stackhpc.txt"))
    assert column(rows, "gpu") == [0] * 7 + [1] * 7 + [2] * 7 + [3] * 7
    single = m.parse_lgip(load(H100_LGIP))
    for gpu in range(4):
        assert [dict(r, gpu=0) for r in m.for_gpu(rows, gpu)] == single


def test_lgip_h200_excerpt_without_header_on_gpu_6():
    rows = m.parse_lgip(load("lgip_H200_gpu6_excerpt-no-header_mig-parted-120.txt"))
    assert set(column(rows, "gpu")) == {6}
    assert column(rows, "name") == ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb"]
    assert column(rows, "memory_gib") == [16.00, 16.00, 32.25, 32.25, 69.50, 69.50]
    assert column([rows[-1]], "ce", "jpeg", "ofa") == [(4, 4, 0)]
    assert m.for_gpu(rows, 0) == []


def test_lgip_81_column_frame_rtx_pro_6000():
    rows = m.parse_lgip(load("lgip_RTX-PRO-6000-Blackwell-SE_81col_excerpt-3-profiles.txt"))
    assert column(rows, "name", "profile_id", "instances_total", "variant") == [
        ("1g.24gb", 14, 4, ""), ("1g.24gb+me", 21, 1, "+me"), ("1g.24gb+gfx", 47, 4, "+gfx")]
    assert set(column(rows, "memory_gib")) == {23.12} and set(column(rows, "sm")) == {46}
    assert column(rows, "dec", "enc") == [(1, 1)] * 3
    assert column(rows, "ofa") == [0, 1, 0]


def test_lgip_a30_corpus_capture():
    rows = m.parse_lgip(load(A30_LGIP))
    assert column(rows, "name", "profile_id", "instances_free", "instances_total", "memory_gib") == [
        ("1g.6gb", 14, 0, 4, 5.81), ("1g.6gb+me", 21, 0, 1, 5.81), ("2g.12gb", 5, 0, 2, 11.69),
        ("4g.24gb", 0, 0, 1, 23.50)]


def test_lgip_row_cut_inside_is_truncated():
    # The issue excerpt the RTX PRO file comes from stops inside this line (bigstack-oss/cubecos#312).
    cut = text("lgip_RTX-PRO-6000-Blackwell-SE_81col_excerpt-3-profiles.txt") + \
        "|   0  MIG 1g.24gb+me.all  65     1/1        23.12      No     46     4\n"
    with pytest.raises(m.TruncatedInput) as info:
        m.parse_lgip(cut)
    assert "line 15" in str(info.value)


def test_lgip_paste_damage_crlf_ansi_and_collapsed_spaces():
    clean = m.parse_lgip(load(A100_40_LGIP))
    raw = text(A100_40_LGIP)
    assert m.parse_lgip(raw.replace("\n", "\r\n").encode()) == clean
    assert m.parse_lgip("\x1b[1m" + raw + "\x1b[0m") == clean
    # NVIDIA's guide in Markdown copies collapses every run of spaces (docs/research/mig.md, item 1).
    assert m.parse_lgip("\n".join(" ".join(line.split()) for line in raw.split("\n"))) == clean


def test_lgip_refuses_other_listings_and_text():
    with pytest.raises(m.ParseError, match="mig -lgi`"):
        m.parse_lgip(load(A100_PCIE_LGI))
    with pytest.raises(m.ParseError, match="-lgip"):
        m.parse_lgip("hello\n")
    with pytest.raises(m.ParseError):
        m.parse_lgip(b"")


# --- -lgipp ------------------------------------------------------------------------------------

def test_lgipp_a100_guide_and_h100():
    rows = m.parse_lgipp(load(A100_40_LGIPP))
    assert column(rows, "profile_id", "starts", "size") == [
        (19, [0, 1, 2, 3, 4, 5, 6], 1), (20, [0, 1, 2, 3, 4, 5, 6], 1), (15, [0, 2, 4, 6], 2),
        (14, [0, 2, 4], 2), (9, [0, 4], 4), (5, [0], 4), (0, [0], 8)]
    assert m.parse_lgipp(load(H100_LGIPP)) == rows


def test_lgipp_a30_has_four_slots():
    rows = m.parse_lgipp(load("lgipp_A30_Summer-Lo.txt"))
    assert column(rows, "profile_id", "starts", "size") == [
        (14, [0, 1, 2, 3], 1), (21, [0, 1, 2, 3], 1), (5, [0, 2], 2), (0, [0], 4)]


def test_lgipp_refuses_a_profile_table():
    with pytest.raises(m.ParseError, match="mig -lgip`"):
        m.parse_lgipp(load(H100_LGIP))
    with pytest.raises(m.ParseError, match="no `nvidia-smi mig -lgipp` lines"):
        m.parse_lgipp(load("lci_510.47.03_A100-PCIE-40GB_none-found.txt"))


# --- -lgi --------------------------------------------------------------------------------------

GI = ("name", "profile_id", "instance_id", "placement_start", "placement_size")


def test_lgi_54_column_frame_of_450():
    rows = m.parse_lgi(load("lgi_450.80.02_A100-SXM4-40GB_2x3g.20gb_54col.txt"))
    assert column(rows, *GI) == [("3g.20gb", 9, 1, 4, 4), ("3g.20gb", 9, 2, 0, 4)]


def test_lgi_seven_1g_5gb_cloud_native_docs():
    rows = m.parse_lgi(load("lgi_A100-SXM4-40GB_7x1g.5gb_54col_cloud-native-docs.txt"))
    assert column(rows, *GI) == [("1g.5gb", 19, 7 + i, i, 1) for i in range(7)]


def test_lgi_mixed_510():
    rows = m.parse_lgi(load(A100_PCIE_LGI))
    assert column(rows, *GI) == [("1g.5gb", 19, 11, 0, 1), ("1g.5gb", 19, 12, 1, 1),
                                 ("2g.10gb", 14, 6, 2, 2), ("3g.20gb", 9, 1, 4, 4)]


def test_lgi_h100_and_a30():
    assert column(m.parse_lgi(load("lgi_H100-80GB-HBM3_7x1g.10gb.txt")), *GI) == [
        ("1g.10gb", 19, 7 + i, i, 1) for i in range(7)]
    assert column(m.parse_lgi(load(A30_LGI)), *GI) == [("1g.6gb", 14, 3 + i, i, 1) for i in range(4)]


def test_lgi_refuses_compute_instances():
    with pytest.raises(m.ParseError, match="mig -lci`"):
        m.parse_lgi(load("lci_H100-80GB-HBM3_7x1g.10gb.txt"))


# --- -lci --------------------------------------------------------------------------------------

CI = ("gpu_instance_id", "name", "profile_id", "instance_id", "placement_start", "placement_size")


def test_lci_h100_one_ci_per_gi():
    rows = m.parse_lci(load("lci_H100-80GB-HBM3_7x1g.10gb.txt"))
    assert column(rows, *CI) == [(7 + i, "1g.10gb", 0, 0, 0, 1) for i in range(7)]


def test_lci_510_two_gis_with_cis():
    rows = m.parse_lci(load("lci_510.47.03_A100-PCIE-40GB_2x1g.5gb.txt"))
    assert column(rows, *CI) == [(11, "1g.5gb", 0, 0, 0, 1), (12, "1g.5gb", 0, 0, 0, 1)]


def test_lci_partial_cis_and_no_closing_rule():
    rows = m.parse_lci(load("lci_510.47.03_A100-PCIE-40GB_1c-partial-ci_no-closing-border.txt"))
    assert column(rows, "gpu_instance_id", "name") == [
        (11, "1g.5gb"), (12, "1g.5gb"), (6, "1c.2g.10gb"), (1, "1c.3g.20gb")]
    assert m.split_profile_name(rows[3]["name"]) == {
        "compute_slices": 1, "slices": 3, "memory_gb": 20, "variant": "", "gi_name": "3g.20gb"}


def test_lci_none_found_is_empty():
    name = "lci_510.47.03_A100-PCIE-40GB_none-found.txt"
    assert m.detect_mig_form(load(name)) == "none_found"
    assert m.parse_lci(load(name)) == []


def test_detect_mig_form():
    assert [m.detect_mig_form(load(f)) for f in (H100_LGIP, H100_LGIPP, A30_LGI, "lci_H100-80GB-HBM3_7x1g.10gb.txt")] \
        == ["lgip", "lgipp", "lgi", "lci"]
    assert m.detect_mig_form(load("lgip_H200_gpu6_excerpt-no-header_mig-parted-120.txt")) is None
    assert m.detect_mig_form("GPU 0: NVIDIA H100 (UUID: GPU-1)\n") is None


# --- nvidia-smi -L (nvsmi_list.parse_list) -----------------------------------------------------

def _migs(name):
    facts = n.facts_from_output(load(name))
    assert facts["form"] == "list"
    return facts["gpus"]


def test_list_new_form_510():
    (gpu,) = _migs("L_510.47.03_A100-PCIE-40GB_1x1g.5gb.txt")
    assert gpu["name"] == "NVIDIA A100-PCIE-40GB" and gpu["mig_mode"] is True
    assert column(gpu["mig_devices"], "index", "profile", "uuid", "gpu_instance_id") == [
        (0, "1g.5gb", "MIG-b6cd45f2-9655-5269-9b96-65446729d5dc", None)]


def test_list_new_form_530():
    (gpu,) = _migs("L_530.30.02_A100-80GB-PCIe_2x3g.40gb.txt")
    assert gpu["uuid"] == "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39"
    assert column(gpu["mig_devices"], "index", "profile", "uuid") == [
        (0, "3g.40gb", "MIG-0929581a-2be6-5dec-bf34-0954c6c529a6"),
        (1, "3g.40gb", "MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23")]


def test_list_old_form_carries_gi_and_ci():
    (gpu,) = _migs("L_A100-SXM4-40GB_old-form-gi-ci_3g-2g-1g_cloud-native-docs.txt")
    assert gpu["name"] == "A100-SXM4-40GB"
    assert column(gpu["mig_devices"], "index", "profile", "gpu_instance_id", "compute_instance_id") == [
        (0, "3g.20gb", 2, 0), (1, "2g.10gb", 3, 0), (2, "1g.5gb", 9, 0)]
    assert gpu["mig_devices"][2]["uuid"] == "MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/9/0"


def test_list_crlf_seven_devices():
    (gpu,) = _migs("L_H100-80GB-HBM3_7x1g.10gb_crlf_cloud-native-docs.txt")
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert column(gpu["mig_devices"], "index") == list(range(7))
    assert set(column(gpu["mig_devices"], "profile")) == {"1g.10gb"}
    assert gpu["mig_devices"][6]["uuid"] == "MIG-981c86e9-3607-57d7-9426-295347e4b925"


def test_list_corpus_new_form_has_no_instance_ids():
    (gpu,) = _migs("068_L_535.216.01_A100-SXM4-80GB_MIG-7x1g.10gb.txt")
    assert set(column(gpu["mig_devices"], "gpu_instance_id")) == {None}


# --- MIG mode (nvsmi_parse: -q, -q -x, table) --------------------------------------------------

@pytest.mark.parametrize("name, current, pending, status", [
    ("003_q_590.48.01_H100-MIG_load.txt", True, True, "enabled"),
    ("019_qx_A100-SXM4-MIG.xml", True, True, "enabled"),
    ("039_qx_535.54.03_4xA100-SXM4-80GB_MIG.xml", True, True, "enabled"),
    ("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml", None, None, "not_supported"),
    ("001_table_570.133.20_2xH100_no-processes.txt", False, None, "disabled"),  # the table shows no pending mode
])
def test_mig_mode_current_and_pending(name, current, pending, status):
    gpu = n.facts_from_output(load(name))["gpus"][0]
    assert (gpu["mig_mode"], gpu["mig_mode_pending"]) == (current, pending)
    assert m.mig_mode_status(gpu["mig_mode"], gpu["mig_mode_pending"]) == status


def test_mig_mode_pending_differs_from_current():
    # No real capture with a pending change was found; these flip one element of real files.
    xml = text("019_qx_A100-SXM4-MIG.xml").replace("<pending_mig>Enabled</pending_mig>",
                                                     "<pending_mig>Disabled</pending_mig>")
    gpu = n.facts_from_output(xml)["gpus"][0]
    assert m.mig_mode_status(gpu["mig_mode"], gpu["mig_mode_pending"]) == "disable_pending"
    q = text("003_q_590.48.01_H100-MIG_load.txt")
    head, tail = q.split("        Current                                        : Enabled", 1)
    gpu = n.facts_from_output(head + "        Current                                        : Disabled" + tail)["gpus"][0]
    assert (gpu["mig_mode"], gpu["mig_mode_pending"]) == (False, True)
    assert m.mig_mode_status(False, True) == "enable_pending"


def test_mig_devices_of_q_x_unchanged():
    gpu = n.facts_from_output(load("019_qx_A100-SXM4-MIG.xml"))["gpus"][0]
    assert column(gpu["mig_devices"], "index", "gpu_instance_id", "compute_instance_id", "multiprocessor_count") == [
        (0, 1, 0, 42), (1, 2, 0, 42)]


# --- profile names -----------------------------------------------------------------------------

def test_profile_names():
    assert [m.profile_name(x) for x in ("MIG 3g.20gb", "mig-3g.20gb", " 3G.20GB ", "nvidia.com/mig-1g.5gb")] == [
        "3g.20gb", "3g.20gb", "3g.20gb", "1g.5gb"]
    assert m.split_profile_name("1g.24gb+me.all")["variant"] == "+me.all"
    for bad in ("big", "3g", "", None, 7):
        with pytest.raises(m.ParseError):
            m.profile_name(bad)


# --- validate_layout ---------------------------------------------------------------------------

def a100():
    return m.parse_lgip(load(A100_40_LGIP)), m.parse_lgipp(load(A100_40_LGIPP))


def test_a100_two_3g_20gb_fit():
    profiles, placements = a100()
    assert m.validate_layout(["3g.20gb", "3g.20gb"], profiles) == []
    assert m.validate_layout(["3g.20gb", "3g.20gb"], profiles, placements) == []


def test_a100_eight_1g_5gb_refused_naming_the_limit_of_seven():
    profiles, placements = a100()
    (problem,) = m.validate_layout(["1g.5gb"] * 8, profiles, placements)
    assert "8 x 1g.5gb" in problem and "at most 7" in problem and "profile ID 19" in problem


def test_unknown_profile_refused_listing_what_the_gpu_offers():
    profiles, _ = a100()
    (problem,) = m.validate_layout(["3g.20gb", "3g.40gb"], profiles)
    assert "GPU 0 does not offer MIG profile 3g.40gb" in problem
    assert problem.endswith("1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb")


def test_a100_510_offers_no_1g_10gb():
    (problem,) = m.validate_layout(["1g.10gb"], m.parse_lgip(load(A100_PCIE_LGIP)))
    assert "does not offer MIG profile 1g.10gb" in problem


def test_totals_count_not_free_instances():
    # the declared layout is the whole GPU: a GPU whose instances are all in use still offers them
    assert m.validate_layout(["3g.20gb", "3g.20gb"], m.parse_lgip(load(A100_PCIE_LGIP))) == []


@pytest.mark.parametrize("layout", [
    ["4g.20gb", "3g.20gb"],
    ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"],
    ["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"],
    ["1g.10gb"] * 4,
    ["3g.20gb", "1g.10gb", "1g.10gb"],
    ["1g.5gb+me", "1g.5gb", "3g.20gb"],
    ["7g.40gb"],
    [],
])
def test_a100_layouts_that_fit_their_placements(layout):
    profiles, placements = a100()
    assert m.validate_layout(layout, profiles, placements) == []


def test_slices_pass_but_placements_refuse():
    # 3 + 3 + 1 = 7 compute slices, but two 3g GIs take all 8 memory slots ({0,4}:4)
    profiles, placements = a100()
    assert m.validate_layout(["3g.20gb", "3g.20gb", "1g.5gb"], profiles) == []
    (problem,) = m.validate_layout(["3g.20gb", "3g.20gb", "1g.5gb"], profiles, placements)
    assert "they need 9 memory slots and it has 8" in problem and "3g.20gb at {0,4}:4" in problem


def test_placement_conflict_within_the_slot_count():
    # 4g.20gb only starts at 0 ({0}:4); 2g.10gb at 0, 2 or 4: 4g + 2g + 2g = 8 memory slots, but
    # the second 2g would have to start at 6 (and 4 + 2 + 2 = 8 compute slices of 7)
    profiles, placements = a100()
    slices, placement = m.validate_layout(["4g.20gb", "2g.10gb", "2g.10gb"], profiles, placements)
    assert "has 7 compute slices" in slices and "need 8" in slices
    assert "no non-overlapping placement exists" in placement


def test_compute_slices_without_placements():
    profiles, _ = a100()
    (problem,) = m.validate_layout(["7g.40gb", "1g.5gb"], profiles)
    assert "GPU 0 has 7 compute slices, and 7g.40gb, 1g.5gb need 8" in problem
    assert "at most 1" in m.validate_layout(["4g.20gb", "4g.20gb"], profiles)[0]


def test_h100_mixed_layout_and_a30():
    h100 = m.parse_lgip(load(H100_LGIP)), m.parse_lgipp(load(H100_LGIPP))
    assert m.validate_layout(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], *h100) == []
    assert m.validate_layout(["1g.20gb"] * 4, *h100) == []
    a30 = m.parse_lgip(load(A30_LGIP)), m.parse_lgipp(load("lgipp_A30_Summer-Lo.txt"))
    assert m.validate_layout(["2g.12gb", "1g.6gb", "1g.6gb"], *a30) == []
    assert "at most 4" in m.validate_layout(["1g.6gb"] * 5, *a30)[0]
    slices, slots = m.validate_layout(["4g.24gb", "1g.6gb"], *a30)
    assert "has 4 compute slices, and 4g.24gb, 1g.6gb need 5" in slices
    assert "need 5 memory slots and it has 4" in slots


def test_rtx_pro_6000_four_slices():
    profiles = m.parse_lgip(load("lgip_RTX-PRO-6000-Blackwell-SE_81col_excerpt-3-profiles.txt"))
    assert m.validate_layout(["1g.24gb"] * 4, profiles) == []
    assert m.validate_layout(["1g.24gb", "1g.24gb+gfx", "1g.24gb+gfx", "1g.24gb+me"], profiles) == []
    assert "at most 4" in m.validate_layout(["1g.24gb"] * 5, profiles)[0]
    assert "has 4 compute slices" in m.validate_layout(["1g.24gb"] * 3 + ["1g.24gb+gfx"] * 2, profiles)[0]


def test_validate_wants_one_gpu_and_names():
    rows = m.parse_lgip(load("lgip_4xH100-80GB-HBM3_all-free_stackhpc.txt"))
    with pytest.raises(ValueError, match="GPUs 0, 1, 2, 3"):
        m.validate_layout(["1g.10gb"], rows)
    assert m.validate_layout(["MIG 7g.80gb"], m.for_gpu(rows, 3)) == []
    with pytest.raises(m.ParseError):
        m.validate_layout("3g.20gb", m.for_gpu(rows, 3))


# --- layout_diff -------------------------------------------------------------------------------

def ids(rows):
    return [row["instance_id"] for row in rows]


def test_same_multiset_is_no_change():
    live = m.parse_lgi(load(A100_PCIE_LGI))
    diff = m.layout_diff(["3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb"], live)
    assert diff["changed"] is False and diff["destroy"] == [] and diff["create"] == []
    assert ids(diff["keep"]) == [11, 12, 6, 1]
    profiles, placements = a100()
    assert m.layout_diff(["3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb"], live, placements,
                         profiles=profiles)["changed"] is False


def test_only_what_differs_changes():
    live = m.parse_lgi(load(A100_PCIE_LGI))
    profiles, placements = a100()
    diff = m.layout_diff(["3g.20gb", "3g.20gb"], live, placements, profiles=profiles)
    assert ids(diff["keep"]) == [1] and ids(diff["destroy"]) == [11, 12, 6]
    assert diff["create"] == ["3g.20gb"] and diff["rebuild"] is False


def test_kept_instance_is_the_one_that_leaves_room():
    # 2 x 3g.20gb at 0:4 (GI 2) and 4:4 (GI 1); 4g.20gb can only start at 0 -> keep GI 1
    live = m.parse_lgi(load("lgi_450.80.02_A100-SXM4-40GB_2x3g.20gb_54col.txt"))
    profiles, placements = a100()
    diff = m.layout_diff(["4g.20gb", "3g.20gb"], live, placements, profiles=profiles)
    assert ids(diff["keep"]) == [1] and ids(diff["destroy"]) == [2] and diff["create"] == ["4g.20gb"]
    blind = m.layout_diff(["4g.20gb", "3g.20gb"], live)  # without placements: first by placement
    assert ids(blind["keep"]) == [2]


def test_rebuild_when_nothing_can_stay():
    # 4g.20gb needs slots 0-3, where both live 1g.5gb GIs sit
    live = m.parse_lgi(load(A100_PCIE_LGI))
    profiles, placements = a100()
    diff = m.layout_diff(["1g.5gb", "4g.20gb", "1g.5gb", "1g.5gb"], live, placements, profiles=profiles)
    assert diff["rebuild"] is True and diff["keep"] == []
    assert ids(diff["destroy"]) == [11, 12, 6, 1]
    assert diff["create"] == ["4g.20gb", "1g.5gb", "1g.5gb", "1g.5gb"]
    assert "1g.5gb at 0:1" in diff["reason"]


def test_keep_two_of_four_a30():
    live = m.parse_lgi(load(A30_LGI))
    a30 = m.parse_lgipp(load("lgipp_A30_Summer-Lo.txt"))
    diff = m.layout_diff(["2g.12gb", "1g.6gb", "1g.6gb"], live, a30, profiles=m.parse_lgip(load(A30_LGIP)))
    assert ids(diff["keep"]) == [3, 4] and ids(diff["destroy"]) == [5, 6] and diff["create"] == ["2g.12gb"]


def test_create_largest_first_and_destroy_all():
    live = m.parse_lgi(load("lgi_H100-80GB-HBM3_7x1g.10gb.txt"))
    diff = m.layout_diff(["1g.20gb", "3g.40gb", "2g.20gb"], live)
    assert diff["keep"] == [] and ids(diff["destroy"]) == list(range(7, 14))
    assert diff["create"] == ["3g.40gb", "2g.20gb", "1g.20gb"] and diff["rebuild"] is False
    assert m.layout_diff([], live)["destroy"] == live
    assert m.layout_diff(["1g.5gb", "3g.20gb"], [])["create"] == ["3g.20gb", "1g.5gb"]
    assert m.layout_diff([], []) == {"changed": False, "keep": [], "destroy": [], "create": [],
                                     "create_compute": [], "rebuild": False, "reason": None}


def test_compute_instances_missing_or_partial():
    live = m.parse_lgi(load(A100_PCIE_LGI))
    layout = ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    some = m.parse_lci(load("lci_510.47.03_A100-PCIE-40GB_2x1g.5gb.txt"))
    diff = m.layout_diff(layout, live, compute_instances=some)
    assert diff["changed"] is True and diff["destroy"] == [] and diff["create"] == []
    assert diff["create_compute"] == [6, 1]
    partial = m.parse_lci(load("lci_510.47.03_A100-PCIE-40GB_1c-partial-ci_no-closing-border.txt"))
    diff = m.layout_diff(layout, live, compute_instances=partial)
    assert ids(diff["keep"]) == [11, 12] and ids(diff["destroy"]) == [6, 1]
    assert diff["create"] == ["3g.20gb", "2g.10gb"] and diff["create_compute"] == []


def test_h100_seven_with_their_cis_is_no_change():
    live = m.parse_lgi(load("lgi_H100-80GB-HBM3_7x1g.10gb.txt"))
    cis = m.parse_lci(load("lci_H100-80GB-HBM3_7x1g.10gb.txt"))
    diff = m.layout_diff(["1g.10gb"] * 7, live, m.parse_lgipp(load(H100_LGIPP)), cis,
                         profiles=m.parse_lgip(load(H100_LGIP)))
    assert diff["changed"] is False and len(diff["keep"]) == 7


def test_mig_mode_status_table():
    assert m.mig_mode_status(True, True) == "enabled"
    assert m.mig_mode_status(False, None) == "disabled"
    assert m.mig_mode_status(True, False) == "disable_pending"
    assert m.mig_mode_status(False, True) == "enable_pending"
    assert m.mig_mode_status(None, None) == "not_supported"


# --- any input: a list or the declared error ---------------------------------------------------

MIG_TEXTS = [text(f) for f in sorted(os.listdir(MIG)) if f.endswith(".txt")] + [text(A30_LGIP), text(A30_LGI)]
MIG_PARSERS = (m.parse_lgip, m.parse_lgipp, m.parse_lgi, m.parse_lci, m.detect_mig_form)
MIG_WORDS = st.sampled_from(["|", "+----+", "|====|", "   0  ", "MIG ", "1g.5gb", "3g.20gb+me", "1c.2g.10gb",
                             " 19 ", " 7/7 ", " 4.75 ", " No ", " 0:1 ", " 4:4 ", "\n", "GPU  0 Profile ID 19 ",
                             "Placements: ", "{0,1,2}:1", "Placement : {0}:8", "No compute instances found",
                             "| GPU instance profiles: |", "| GPU instances: |", "| Compute instances: |"])


def _list_or_parse_error(text_):
    for parse in MIG_PARSERS:
        try:
            result = parse(text_)
        except m.ParseError:
            continue
        assert result is None or isinstance(result, (list, str))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MIG_WORDS, max_size=60).map("".join))
def test_mig_shaped_text(text_):
    _list_or_parse_error(text_)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(MIG_TEXTS))), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_sliced_real_files(which, start, end):
    data = MIG_TEXTS[which]
    a, b = sorted((int(start * len(data)), int(end * len(data))))
    _list_or_parse_error(data[a:b])


# --- mig_commands ------------------------------------------------------------------------------

def test_commands_destroy_the_cis_then_the_gis_then_create_largest_first():
    # the H100 session: 7 x 1g.10gb GIs 7-13, each with CI 0; declared 2 x 3g.40gb
    live = m.parse_lgi(load("lgi_H100-80GB-HBM3_7x1g.10gb.txt"))
    cis = m.parse_lci(load("lci_H100-80GB-HBM3_7x1g.10gb.txt"))
    diff = m.layout_diff(["3g.40gb", "3g.40gb"], live, compute_instances=cis)
    commands = m.mig_commands(0, diff, cis)
    assert commands[:2] == [["nvidia-smi", "mig", "-i", "0", "-dci", "-ci", "0", "-gi", "7"],
                            ["nvidia-smi", "mig", "-i", "0", "-dci", "-ci", "0", "-gi", "8"]]
    assert len(commands) == 9
    assert commands[7] == ["nvidia-smi", "mig", "-i", "0", "-dgi", "-gi", "7,8,9,10,11,12,13"]
    assert commands[8] == ["nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,3g.40gb", "-C"]


def test_commands_keep_what_stays_and_give_a_kept_gi_its_missing_ci():
    # A100-PCIE GIs 11, 12 (1g.5gb, CI 0 each), 6 (2g.10gb) and 1 (3g.20gb) without CIs
    live = m.parse_lgi(load(A100_PCIE_LGI))
    cis = m.parse_lci(load("lci_510.47.03_A100-PCIE-40GB_2x1g.5gb.txt"))
    diff = m.layout_diff(["3g.20gb", "1g.5gb", "1g.5gb"], live, compute_instances=cis)
    assert m.mig_commands(1, diff, cis) == [["nvidia-smi", "mig", "-i", "1", "-dgi", "-gi", "6"],
                                            ["nvidia-smi", "mig", "-i", "1", "-gi", "1", "-cci"]]
    unchanged = m.layout_diff(["3g.20gb", "1g.5gb", "1g.5gb", "2g.10gb"], live)
    assert m.mig_commands(0, unchanged) == []
