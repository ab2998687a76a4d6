"""The simulator's outputs fed through the product's parsers (module_utils/gpu/nvsmi_*.py): the facts
the product would derive from the simulated host must be the state's facts."""

import os

import pytest

from simhelpers import CORPUS, make_state, run_smi, st

from gpu import nvsmi_parse  # (the product's parser: tests/conftest.py serves module_utils)
from gpu.nvsmi_csv import COMPUTE_APPS_FIELDS, GPU_QUERY_FIELDS_EXTENDED, parse_query_gpu_csv

NAMES = ["NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA H100 80GB HBM3"]


@pytest.fixture
def host(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "h100"),
               processes=[{"pid": 4242, "name": "python3", "gpu_index": 0, "used_mib": 1024, "type": "C"}])
    st.update(lambda s: s["gpus"][1].update(persistence_mode=True), str(p))
    return p


@pytest.mark.parametrize("argv,form", [([], "table"), (["-q"], "q"), (["-q", "-x"], "xml")])
def test_full_forms(host, argv, form):
    out, rc = run_smi(host, *argv)
    r = nvsmi_parse.parse_output(out)
    assert (r["form"], r["state"], r["driver_version"]) == (form, "ok", "580.95.05")
    gpus = r["gpus"]
    assert len(gpus) == 2
    if form != "table":                       # the table truncates long names, as the real one does
        assert [g["name"] for g in gpus] == NAMES
    assert [g["memory_total_mib"] for g in gpus] == [97887, 81559]
    assert [g["memory_used_mib"] for g in gpus] == [1028, 0]
    assert [g["persistence_mode"] for g in gpus] == [False, True]
    assert [p["pid"] for p in r["processes"]] == [4242]


def test_query_gpu_csv(host):
    fields = GPU_QUERY_FIELDS_EXTENDED
    out, rc = run_smi(host, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits")
    r = parse_query_gpu_csv(out, fields=list(fields))
    assert [g["name"] for g in r["gpus"]] == NAMES
    assert [g["memory_total_mib"] for g in r["gpus"]] == [97887, 81559]
    assert [g["persistence_mode"] for g in r["gpus"]] == [False, True]
    out, _ = run_smi(host, "--query-gpu=" + ",".join(fields), "--format=csv")
    r = nvsmi_parse.parse_output(out)
    assert r["form"] == "csv_query_gpu" and [g["compute_capability"] for g in r["gpus"]] == ["12.0", "9.0"]


def test_compute_apps_csv(host):
    fields = COMPUTE_APPS_FIELDS
    out, _ = run_smi(host, "--query-compute-apps=" + ",".join(fields), "--format=csv")
    r = nvsmi_parse.parse_output(out)
    assert r["form"] == "csv_compute_apps" and [(p["pid"], p["used_mib"]) for p in r["processes"]] == [(4242, 1024)]


def test_list_and_version(host):
    r = nvsmi_parse.parse_output(run_smi(host, "-L")[0])
    assert [g["name"] for g in r["gpus"]] == NAMES
    r = nvsmi_parse.parse_output(run_smi(host, "--version")[0])
    assert r["form"] == "version" and r["driver_version"] == "580.95.05"


def test_error_states(host):
    st.update(lambda s: s["driver"]["installed"].update(version="580.105.08"), str(host))
    assert nvsmi_parse.parse_output(run_smi(host)[0])["state"] == "version_mismatch"
    st.update(lambda s: s["driver"].update(loaded=None), str(host))
    assert nvsmi_parse.parse_output(run_smi(host)[0])["state"] == "driver_not_loaded"


# A GeForce card beside a datacenter one: what the product reads of the simulated RTX 4090 is what it reads of
# the real one (corpus nvidia_smi/022, -q -x of an RTX 4090 on 535.86.05).
RTX4090 = {"name": "NVIDIA GeForce RTX 4090", "product_brand": "GeForce", "datacenter": False,
           "architecture": "Ada Lovelace", "compute_capability": "8.9", "pci_device_id": "0x2684",
           "memory_total_mib": 24564, "memory_reserved_mib": 346}


@pytest.fixture
def geforce_host(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "rtx-4090"), driver="535.86.05", modules="proprietary")
    return p


def _facts(gpu, keys):
    return {k: gpu.get(k) for k in keys}


def test_rtx_4090_facts_as_the_real_capture(geforce_host):
    with open(os.path.join(CORPUS, "022_qx_535_RTX4090.xml"), encoding="utf-8") as fh:
        real = nvsmi_parse.facts_from_output(fh.read())["gpus"][0]
    assert _facts(real, RTX4090) == RTX4090        # the capture says what the expected facts are
    out, rc = run_smi(geforce_host, "-q", "-x")
    facts = nvsmi_parse.facts_from_output(out)
    assert rc == 0 and facts["state"] == "ok" and len(facts["gpus"]) == 2
    h100, rtx = facts["gpus"]
    assert _facts(rtx, RTX4090) == RTX4090
    assert h100["datacenter"] is True and h100["product_brand"] == "NVIDIA"
    # the same idle card: P8 at 26.84 W under its 450 W limit, 2 MiB used, fan at 0 %, MIG N/A (None)
    same = ("memory_used_mib", "power_draw_w", "power_limit_w", "fan_speed_pct", "performance_state", "mig_mode",
            "min_driver_branch", "open_kernel_modules_required", "pci_vendor_id", "clocks_event_reasons_active")
    assert set(same) <= set(rtx) and set(same) <= set(real)
    assert _facts(rtx, same) == _facts(real, same)
    assert rtx["min_driver_branch"] == 520 and rtx["fan_speed_pct"] == 0


def test_rtx_4090_query_gpu_csv(geforce_host):
    fields = GPU_QUERY_FIELDS_EXTENDED
    out, _ = run_smi(geforce_host, "--query-gpu=" + ",".join(fields), "--format=csv")
    facts = nvsmi_parse.facts_from_output(out)
    assert facts["form"] == "csv_query_gpu"
    rtx = facts["gpus"][1]
    assert _facts(rtx, ("name", "datacenter", "compute_capability", "memory_total_mib")) == \
        {"name": "NVIDIA GeForce RTX 4090", "datacenter": False, "compute_capability": "8.9",
         "memory_total_mib": 24564}
    out, _ = run_smi(geforce_host, "--query-gpu=name,memory.total", "--format=csv,noheader")
    assert out.split("\n")[1] == "NVIDIA GeForce RTX 4090, 24564 MiB"
