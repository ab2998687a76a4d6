"""The Xid policy (module_utils/gpu/xid_policy.py) on real kernel logs (tests/fixtures/xid/, README there names each
capture), and the error table's Xid rows against NVIDIA/NVSentinel's copy of NVIDIA's Xid catalogue, row by row.

The GPU facts (index, bus id, name) are written here from what each capture prints ("NVRM: GPU at PCI:..." lines
give the UUIDs); the log lines are the captures' own. Where a test needs a sequence no capture shows, it cuts a
capture into whole lines or puts two captures one after the other, and says so."""
import csv
import os

import pytest

from conftest import FIXTURES, read_fixture
from diagnosis import error_catalogue as catalogue
from gpu import xid_policy as xp
from layers import health

CSV = os.path.join(FIXTURES, "xid", "nvsentinel_xiderrorsmapping_6f8b0fcf.csv")
# The CSV's word for the catalogue's CONTACT_SUPPORT (the catalogue's rows 1-7 say CONTACT_SUPPORT where the CSV
# says this).
CSV_WORDS = {"UNEXPECTED_ERR_REPORT_ISSUE": "CONTACT_SUPPORT"}
# Where the table's action is not the CSV's, and why: the CSV names a workflow there, not an immediate action.
DIFFERENCES = {
    45: ("WORKFLOW_XID_45", "IGNORE: it follows another Xid ('caused by previous Xid 149'), whose row decides"),
    48: ("WORKFLOW_XID_48", "RESET_GPU: the workflow's first step; NVIDIA's Xid page: a reset or reboot clears it"),
    74: ("WORKFLOW_NVLINK_ERR", "RESET_GPU: a reset retrains the links"),
    154: ("Follow guidance as it aapplies to another Xid", "the action its message names (XID_RECOVERY_ACTIONS)"),
}
DIFFERENCES.update((code, ("WORKFLOW_NVLINK5_ERR", "RESET_GPU, as Xid 74")) for code in range(144, 151))


def _csv_rows():
    with open(CSV, encoding="utf-8", newline="") as handle:
        return dict((int(row[0]), row) for row in csv.reader(handle))


def test_the_table_agrees_with_nvidias_catalogue_row_by_row():
    rows = _csv_rows()
    for code, row in sorted(catalogue.XID_CATALOGUE.items()):
        assert code in rows, code
        theirs = CSV_WORDS.get(rows[code][2], rows[code][2])
        if code in DIFFERENCES:
            assert rows[code][2] == DIFFERENCES[code][0], code
            assert "WORKFLOW" in row.source or "aapplies" in row.source, code
        else:
            assert row.action == theirs, (code, row.action, theirs)
            assert row.source == catalogue.XID_SOURCE, code
        assert row.action in catalogue.XID_ACTIONS and row.action in xp.ACTIONS, code


def test_the_issues_examples_hold_and_the_old_buckets_are_gone():
    # Issue 41's list: 13, 31 restart the application; 43, 63, 92 nothing; 64, 95, 119 reset; 79 bare metal. The
    # sources say the same; where the old table differed (32, 43, 61, 63, 92, 109) the table follows the sources.
    want = {13: "RESTART_APP", 31: "RESTART_APP", 43: "IGNORE", 63: "IGNORE", 92: "IGNORE", 64: "RESET_GPU",
            95: "RESET_GPU", 119: "RESET_GPU", 79: "RESTART_BM", 32: "RESTART_APP", 61: "CONTACT_SUPPORT",
            109: "RESET_GPU"}
    for code, action in want.items():
        assert catalogue.XID_CATALOGUE[code].action == action, code
    assert set(catalogue.XID_ACTIONS) == set(catalogue.XID_SEVERITY) == {
        "IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT"}


# --- reading the lines ------------------------------------------------------------------------------------------

def test_xid_lines_in_every_form_the_captures_show():
    # dmesg -T, pid='<unknown>' name=<unknown>, the 79 line (akash-network/support#209)
    fallen = xp.xid_events(read_fixture("xid", "dmesg-T_535.161.07"))
    assert [(e["code"], e["bus"], e["pid"], e["name"]) for e in fallen] == [(79, "0000:a1:00", None, None)]
    assert fallen[0]["message"] == "GPU has fallen off the bus."
    assert fallen[0]["key"] == "NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off " \
                               "the bus."
    # pid= and name= (akash-network/support#244)
    named = xp.xid_events(read_fixture("xid", "dmesg-T_535.183.01"))
    assert [(e["code"], e["bus"], e["pid"], e["name"]) for e in named] == [
        (43, "0000:00:05", 1045242, "pt_main_thread"), (43, "0000:00:05", 1084984, "pt_main_thread"),
        (31, "0000:00:07", 2512125, "python3.10"), (94, "0000:00:08", None, None)]
    # no PCI: prefix, syslog with the kernel's own timestamp (a 2012 forum post)
    old = xp.xid_events(read_fixture("xid", "syslog_xid13-no-pci"))
    assert [(e["code"], e["bus"], e["pid"]) for e in old] == [(13, "0000:03:00", None)]
    assert old[0]["key"].startswith("NVRM: Xid (0000:03:00): 13, 0003")
    # journal lines without a host name, name=VLLM::Worker (NVIDIA forum 364958)
    vllm = xp.xid_events(read_fixture("xid", "journal_595.58.03"))
    assert [e["code"] for e in vllm] == [120, 154, 62, 154, 45]
    assert (vllm[-1]["pid"], vllm[-1]["name"]) == (12542, "VLLM::Worker")
    # a Markdown quote of dmesg --ctime (leptonai/gpud#46)
    assert [e["code"] for e in xp.xid_events(read_fixture("xid", "dmesg-ctime"))] == [13, 13, 13, 109]


def test_the_health_layer_reads_the_same_events():
    text = read_fixture("xid", "syslog_kernel-ts")
    assert [(e["code"], e["pci"]) for e in health.parse_xids(text)] == [(48, "0000:07:00"), (64, "0000:07:00")]


@pytest.mark.parametrize("address", ["00000000:17:00.0", "0000:17:00", "PCI:0000:17:00", "0000:17:00.0"])
def test_bus_ids_of_facts_and_of_xid_lines_meet(address):
    assert xp.bus_key(address) == "0000:17:00"


def test_the_pci_domain_counts():
    assert xp.bus_key("00000019:01:00.0") != xp.bus_key("00000018:01:00.0")


# --- deciding ---------------------------------------------------------------------------------------------------

def gpu(index, bus, name="NVIDIA H100 80GB HBM3", **more):
    return dict({"index": index, "pci_bus_id": bus, "name": name, "uuid": "GPU-%d" % index}, **more)


def plans_by_index(decision):
    return dict((p["index"], p) for p in decision["gpus"])


def test_a_fallen_gpu_is_out_of_service_and_the_host_restarts_only_when_allowed():
    text = read_fixture("xid", "dmesg-T_535.161.07")
    gpus = [gpu(0, "00000000:21:00.0"), gpu(1, "00000000:A1:00.0")]
    held = xp.decide(text, gpus, None, "boot-1", {1: ["vllm-b"]}, allow_reboot=False)
    plan = plans_by_index(held)[1]
    assert plan["action"] == "RESTART_BM" and plan["out_of_service"] and not plan["reboot"] and not held["reboot"]
    assert "an operator restarts it" in plan["say"] and list(plans_by_index(held)) == [1]
    # Not done: the next run says it again, and restarts the host once the operator allows it.
    again = xp.decide(text, gpus, held["cursor"], "boot-1", {1: ["vllm-b"]}, allow_reboot=True)
    assert again["reboot"] and plans_by_index(again)[1]["reboot"]
    # After the restart (a new boot id) this boot's log has no Xid: nothing.
    assert xp.decide("", gpus, again["cursor"], "boot-2")["gpus"] == []


def test_application_xids_restart_only_that_gpus_containers():
    text = read_fixture("xid", "dmesg-T_535.183.01")
    gpus = [gpu(0, "00000000:00:05.0"), gpu(1, "00000000:00:07.0"), gpu(2, "00000000:00:08.0")]
    serving = {0: ["vllm-a"], 1: ["vllm-b"], 2: ["vllm-c"]}
    plans = plans_by_index(xp.decide(text, gpus, None, "boot-1", serving))
    assert plans[0]["action"] == "IGNORE" and plans[0]["steps"] == []          # Xid 43: the GPU is healthy
    assert plans[1]["action"] == "RESTART_APP" and plans[1]["steps"] == ["restart vllm-b"]
    assert plans[2]["action"] == "RESTART_APP" and plans[2]["steps"] == ["restart vllm-c"]   # Xid 94, contained
    # The Xid 31 names pid 2512125; when that pid is another tenant's process on the GPU, gpuhost's container stays.
    theirs = {1: [{"pid": 2512125, "name": "python3.10", "container": None}]}
    plan = plans_by_index(xp.decide(text, gpus, None, "boot-1", serving, theirs))[1]
    assert plan["action"] == "IGNORE" and plan["steps"] == [] and "pid 2512125 (python3.10)" in plan["say"]


def test_a_reset_stops_only_that_gpus_containers_and_falls_back_to_the_host():
    text = read_fixture("xid", "dmesg_xid31-62-45")              # 31, then 62 (PMU halt) and its 45s
    gpus = [gpu(0, "00000000:0A:00.0"), gpu(1, "00000000:0B:00.0")]
    serving = {0: ["vllm-a"], 1: ["vllm-b"]}
    procs = {0: [{"pid": 7, "name": "python3", "container": "vllm-a"},
                 {"pid": 8, "name": "/usr/bin/nv-hostengine", "container": None}]}
    decision = xp.decide(text, gpus, None, "boot-1", serving, procs, allow_reboot=True)
    plan = plans_by_index(decision)[0]
    assert plan["action"] == "RESET_GPU" and sorted(set(x["code"] for x in plan["xids"])) == [31, 45, 62]
    assert plan["steps"] == ["stop vllm-a", "stop nv-hostengine", "nvidia-smi -r -i 0",
                             "verify GPU 0 (nvidia-smi -i 0)", "start nv-hostengine", "start vllm-a"]
    assert plan["on_failure"] == "RESTART_BM" and plan["done"] and not plan["blocked"]
    assert list(plans_by_index(decision)) == [0]                 # GPU 1 is left alone
    held = plans_by_index(xp.decide(text, gpus, None, "boot-1", serving, procs))[0]
    assert held["on_failure"] == "out_of_service" and "host restarts are not allowed" in held["say"]


def test_a_reset_is_refused_for_another_tenant_mig_and_ampere_hgx_without_fabric_manager():
    text = read_fixture("xid", "dmesg_xid31-62-45")
    tenant = {0: [{"pid": 4242, "name": "python3", "container": None}]}
    one = [gpu(0, "00000000:0A:00.0")]
    plan = plans_by_index(xp.decide(text, one, None, "boot-1", {0: ["vllm-a"]}, tenant))[0]
    assert [b["kind"] for b in plan["blocked"]] == ["tenant"] and plan["steps"] == [] and not plan["done"]
    assert "pid 4242 (python3), not a gpuhost serving container" in plan["say"]
    # ... and the GPU's Xids stay pending until the tenant is gone.
    cursor = xp.decide(text, one, None, "boot-1", {0: ["vllm-a"]}, tenant)["cursor"]
    assert cursor["gpus"] == {}
    assert plans_by_index(xp.decide(text, one, cursor, "boot-1", {0: ["vllm-a"]}))[0]["steps"][0] == "stop vllm-a"

    mig = [gpu(0, "00000000:0A:00.0", mig_mode=True)]
    plan = plans_by_index(xp.decide(text, mig, None, "boot-1", {0: ["vllm-a"]}))[0]
    assert [b["kind"] for b in plan["blocked"]] == ["mig"] and "site.yml --tags mig" in plan["say"]

    a100 = [gpu(0, "00000000:0A:00.0", name="NVIDIA A100-SXM4-80GB")]
    plan = plans_by_index(xp.decide(text, a100, None, "boot-1", {}, fabric_manager_needed=True,
                                    fabric_manager_running=False))[0]
    assert [b["kind"] for b in plan["blocked"]] == ["fabric_manager"]
    assert "systemctl start nvidia-fabricmanager" in plan["say"]
    # With it running, or on Hopper, or on a board without NVSwitches: no refusal.
    for gpus, needed, running in ((a100, True, True), ([gpu(0, "00000000:0A:00.0")], True, False), (a100, False, None)):
        plan = plans_by_index(xp.decide(text, gpus, None, "boot-1", {}, fabric_manager_needed=needed,
                                        fabric_manager_running=running))[0]
        assert plan["blocked"] == [] and plan["steps"][0] == "nvidia-smi -r -i 0"


def test_xid_154_takes_the_action_its_message_names():
    text = read_fixture("xid", "journal_595.58.03")             # 120 + 154, then 62 + 154 + 45 (vLLM worker)
    plan = plans_by_index(xp.decide(text, [gpu(0, "00000000:01:00.0")], None, "boot-1", {0: ["vllm"]}))[0]
    assert plan["action"] == "RESET_GPU"
    assert [x["action"] for x in plan["xids"] if x["code"] == 154] == ["RESET_GPU", "RESET_GPU"]
    assert "recovery action 0x1" in [x for x in plan["xids"] if x["code"] == 154][0]["words"]


def test_ecc_dbe_and_page_retirement_failure_reset_that_gpu_only():
    text = read_fixture("xid", "syslog_kernel-ts")               # Xid 48 + 64 on 07:00; 0a:00 failed to init
    gpus = [gpu(0, "00000000:07:00.0"), gpu(1, "00000000:0A:00.0")]
    plans = plans_by_index(xp.decide(text, gpus, None, "boot-1", {0: ["a"], 1: ["b"]}))
    assert list(plans) == [0] and plans[0]["action"] == "RESET_GPU"


def test_preemptive_cleanup_alone_is_reported_on_each_gpu():
    text = read_fixture("xid", "journal_590.48.01")              # Xid 45 "caused by previous Xid 149/145", 4 GPUs
    gpus = [gpu(i, "00000000:%s:00.0" % b) for i, b in enumerate(("97", "BA", "DC", "ED"))]
    decision = xp.decide(text, gpus, None, "boot-1", dict((i, ["vllm"]) for i in range(4)))
    assert sorted(p["index"] for p in decision["gpus"]) == [0, 1, 2, 3]
    assert set(p["action"] for p in decision["gpus"]) == {"IGNORE"}
    assert all(p["steps"] == [] and p["done"] for p in decision["gpus"])
    assert decision["cursor"]["gpus"]["0000:dc:00"]["count"] == 2


def test_an_old_driver_line_maps_to_its_gpu():
    text = read_fixture("xid", "syslog_xid13-no-pci")
    plan = plans_by_index(xp.decide(text, [gpu(0, "0000:03:00.0", name="GeForce 8500 GT")], None, "b", {0: ["x"]}))[0]
    assert plan["action"] == "RESTART_APP" and plan["steps"] == ["restart x"]


def test_the_worst_xid_decides_and_a_gpu_nobody_knows_is_reported():
    text = read_fixture("xid", "dmesg-ctime")                    # 13 x3 (RESTART_APP), then 109 (RESET_GPU)
    decision = xp.decide(text, [gpu(0, "00000000:17:00.0")], None, "boot-1")
    assert decision["gpus"] == [] and [e["code"] for e in decision["unmapped"]] == [13, 13, 13, 109]
    plan = plans_by_index(xp.decide(text, [gpu(5, "00000000:CB:00.0")], None, "boot-1", {"5": ["v"]}))[5]
    assert plan["action"] == "RESET_GPU" and plan["containers"] == ["v"]   # JSON's string keys work too


# --- the cursor -------------------------------------------------------------------------------------------------

def test_an_old_xid_never_triggers_twice_and_a_new_boot_resets_the_cursor():
    text = read_fixture("xid", "dmesg-T_535.183.01")
    gpus = [gpu(0, "00000000:00:05.0"), gpu(1, "00000000:00:07.0"), gpu(2, "00000000:00:08.0")]
    first = xp.decide(text, gpus, None, "boot-1", {1: ["vllm-b"]})
    assert xp.decide(text, gpus, first["cursor"], "boot-1", {1: ["vllm-b"]})["gpus"] == []
    again = xp.decide(text, gpus, first["cursor"], "boot-2", {1: ["vllm-b"]})
    assert [p["index"] for p in again["gpus"]] == [0, 1, 2]


def test_only_the_lines_after_the_cursor_count():
    # The same capture read twice: first cut after its 5th line (the GPU 00:05's two Xid 43), then whole.
    text = read_fixture("xid", "dmesg-T_535.183.01")
    lines = text.splitlines(True)
    gpus = [gpu(0, "00000000:00:05.0"), gpu(1, "00000000:00:07.0"), gpu(2, "00000000:00:08.0")]
    early = xp.decide("".join(lines[:5]), gpus, None, "boot-1", {1: ["vllm-b"]})
    assert [p["index"] for p in early["gpus"]] == [0]
    later = xp.decide(text, gpus, early["cursor"], "boot-1", {1: ["vllm-b"]})
    assert [p["index"] for p in later["gpus"]] == [1, 2]
    # dmesg's ring buffer dropped the oldest lines meanwhile (the capture without its first 4 lines): the second
    # Xid 43 is still found by its text, so it does not trigger again.
    dropped = xp.decide("".join(lines[4:]), gpus, early["cursor"], "boot-1", {1: ["vllm-b"]})
    assert [p["index"] for p in dropped["gpus"]] == [1, 2]


def test_the_same_text_twice_is_told_apart_by_its_count():
    # The forum capture prints "GPU recovery action changed ... (GPU Reset Required)" twice on the same GPU: a
    # cursor after the first (the capture's first two lines) still sees the second as new.
    text = read_fixture("xid", "journal_595.58.03")
    lines = text.splitlines(True)
    one = [gpu(0, "00000000:01:00.0")]
    early = xp.decide("".join(lines[:2]), one, None, "boot-1", {0: ["vllm"]})
    assert early["cursor"]["gpus"]["0000:01:00"]["count"] == 2
    later = plans_by_index(xp.decide(text, one, early["cursor"], "boot-1", {0: ["vllm"]}))[0]
    assert [x["code"] for x in later["xids"]] == [62, 154, 45]


def test_a_journal_read_and_a_dmesg_read_share_the_key():
    # The syslog capture carries both the journal's prefix and dmesg's [seconds]: the key is neither.
    events = xp.xid_events(read_fixture("xid", "syslog_kernel-ts"))
    assert all(e["key"].startswith("NVRM: Xid (PCI:0000:07:00): ") for e in events)
    assert events[0]["line"].startswith("Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid")


def test_two_captures_in_one_log_each_gpu_its_own_cursor():
    # Two real captures put one after the other (no capture shows a fallen GPU beside an application fault):
    # GPU 0's Xid 31/62/45 from chia-gigahorse#301, then GPU 1's Xid 79 from akash-network/support#209.
    text = read_fixture("xid", "dmesg_xid31-62-45") + read_fixture("xid", "dmesg-T_535.161.07")
    gpus = [gpu(0, "00000000:0A:00.0"), gpu(1, "00000000:A1:00.0")]
    decision = xp.decide(text, gpus, None, "boot-1", {0: ["vllm-a"], 1: ["vllm-b"]})
    plans = plans_by_index(decision)
    assert plans[0]["action"] == "RESET_GPU" and plans[0]["done"]
    assert plans[1]["action"] == "RESTART_BM" and not plans[1]["done"]
    assert list(decision["cursor"]["gpus"]) == ["0000:0a:00"]    # GPU 1 stays pending
    assert [p["index"] for p in xp.decide(text, gpus, decision["cursor"], "boot-1")["gpus"]] == [1]
