"""The simulator's outputs fed through the product's parsers (module_utils/gpu/nvsmi_*.py): the facts
the product would derive from the simulated host must be the state's facts."""

import pytest

from simhelpers import make_state, run_smi, st

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
