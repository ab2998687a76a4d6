"""`nvidia-smi dmon` of the simulator (gpusim/dmon.py) against the real captures, load through the load records
(gpusim/load.py) and the clocks-event faults as -q, --query-gpu and dmon show them."""
import os
import re
import subprocess
import sys
import time

import pytest

from simhelpers import BIN, NOW, ROOT, corpus, edit, make_state, run_smi
from gpusim import boot, ctl, load, smi

DMON = os.path.join(ROOT, "tests", "fixtures", "nvidia_smi_dmon")
PUCM = "dmon-c1-s-pucm_595.91.07_4xRTX-PRO-6000-Max-Q_load_skynet2.txt"
DT = "dmon_select-pucvmet_options-DT_count-10_interrupted_idle.txt"
THROTTLE_CSV = "query-gpu_throttle-reasons-active_595.91.07_4xRTX-PRO-6000-Max-Q_load_skynet2.csv"


def dmon_fixture(name):
    with open(os.path.join(DMON, name), encoding="utf-8", newline="") as fh:
        return fh.read()


def _ctl(path, *args):
    os.environ["GPUSIM_STATE"] = str(path)
    try:
        return ctl.main(list(args))
    finally:
        del os.environ["GPUSIM_STATE"]


def _ends(line):
    """Where each whitespace-separated field ends: the column layout of a right-aligned line."""
    return [m.end() for m in re.finditer(r"\S+", line)]


def _table(text):
    """[{column: value}] of a dmon output (the names from the first `#` line)."""
    lines = text.splitlines()
    names = lines[0].lstrip("#").split()
    return [dict(zip(names, line.split())) for line in lines[2:]]


def _load(path, *argv):
    assert _ctl(path, "load", "start", *argv) == 0


# ------------------------------------------------------------------ the layout, byte for byte

@pytest.mark.parametrize("capture", ["017_dmon", "006_dmon"])
def test_default_header_and_units_are_the_590_captures(tmp_path, capture):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",), driver="590.48.01")
    out, rc = run_smi(p, "dmon", "-c", "5")
    real = corpus(capture).split("\n")
    mine = out.split("\n")
    assert rc == 0
    assert mine[:2] == real[:2]                       # `# gpu    pwr  gtemp ...  pclk ` with its last space
    assert len(mine) == len(real) == 8                # 2 headers, 5 samples, the final newline
    for row, real_row in zip(mine[2:7], real[2:7]):
        assert _ends(row) == _ends(real_row) and len(row) == len(real_row), row


def test_select_pucm_is_the_595_capture(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse",) * 4, driver="590.48.01")
    out, _ = run_smi(p, "dmon", "-c", "1", "-s", "pucm")
    real = dmon_fixture(PUCM).split("\n")
    mine = out.split("\n")
    assert mine[:2] == real[:2]
    # the rows line up with the real ones column for column; a GDDR board has no memory temperature
    assert [_ends(r) for r in mine[2:6]] == [_ends(r) for r in real[2:6]]
    assert all(r["mtemp"] == "-" for r in _table(out))


def test_all_groups_with_date_and_time_are_the_dt_capture(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse",), driver="590.48.01")
    out, _ = run_smi(p, "dmon", "--select=pucvmet", "--options=DT", "--count=4")
    real = dmon_fixture(DT).split("\n")
    mine = out.split("\n")
    # the paste lost the last space every line of a real dmon ends with (006, 017, 595.91.07)
    assert [line.rstrip(" ") for line in mine[:2]] == real[:2]
    assert all(line.endswith(" ") for line in mine[:6])
    for row, real_row in zip(mine[2:5], real[2:5]):   # the 4th real row carries the terminal's ^C
        assert _ends(row) == _ends(real_row), row
    stamp = time.localtime(NOW)
    first = _table(out)[0]
    assert first["Date"] == time.strftime("%Y%m%d", stamp) and first["Time"] == time.strftime("%H:%M:%S", stamp)
    # an idle board without ECC, as the real one: no violation, sbecc/dbecc `-`
    edit(p, lambda s: s["gpus"][0].update(model="rtx-4090"))
    row = _table(run_smi(p, "dmon", "-s", "pucvmet", "-c", "1")[0])[0]
    assert (row["pviol"], row["tviol"], row["sbecc"], row["dbecc"], row["pci"]) == ("0", "0", "-", "-", "0")


def test_the_old_capture_names_the_same_v_e_t_columns(tmp_path):
    """037 (a 2016 driver, 5-wide columns) has the same v, e, t groups as the DT capture and the simulator."""
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    out, _ = run_smi(p, "dmon", "-s", "vet", "-c", "1")
    old = corpus("037_dmon").split("\n")
    names, units = old[0].lstrip("#").split(), old[1].lstrip("#").split()
    wanted = ["pviol", "tviol", "sbecc", "dbecc", "pci", "rxpci", "txpci"]
    assert [n for n in names if n in wanted] == wanted
    assert [u for n, u in zip(names, units) if n in wanted] == out.split("\n")[1].lstrip("#").split()[1:]
    assert out.split("\n")[0].lstrip("#").split()[1:] == wanted


def test_groups_print_in_pucvmet_order_whatever_order_select_names_them(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    assert run_smi(p, "dmon", "-s", "mp", "-c", "1")[0] == run_smi(p, "dmon", "-s", "pm", "-c", "1")[0]
    assert run_smi(p, "dmon", "-s", "mp", "-c", "1")[0].split("\n")[0].split()[1:] == \
        ["gpu", "pwr", "gtemp", "mtemp", "fb", "bar1", "ccpm"]


def test_mig_enabled_gpu_prints_dashes_for_utilization_as_006(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",), driver="590.48.01")
    assert run_smi(p, "-mig", "1")[1] == 0
    assert run_smi(p, "mig", "-cgi", "9", "-C")[1] == 0
    rows = _table(run_smi(p, "dmon", "-c", "1")[0])
    real = _table(corpus("006_dmon"))
    assert [rows[0][c] for c in ("sm", "mem", "enc", "dec", "jpg", "ofa")] == \
        [real[0][c] for c in ("sm", "mem", "enc", "dec", "jpg", "ofa")] == ["-"] * 6


# ------------------------------------------------------------------ options, sampling, errors

def test_count_and_delay_sample_on_the_simulated_clock(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "l4"))
    slept = []
    out, rc = smi.run(["dmon", "-c", "3", "-d", "2", "-o", "T"], state_path=str(p), now=NOW, sleep=slept.append)
    rows = _table(out)
    assert rc == 0 and slept == [2, 2] and len(rows) == 6
    assert [r["gpu"] for r in rows] == ["0", "1"] * 3
    assert [r["Time"] for r in rows[::2]] == [time.strftime("%H:%M:%S", time.localtime(NOW + d)) for d in (0, 2, 4)]


def test_id_selects_gpus(tmp_path):
    p = tmp_path / "s.json"
    s = make_state(p, models=("h100", "l4", "h200"))
    out, _ = run_smi(p, "dmon", "-c", "1", "-i", "2," + s["gpus"][0]["uuid"])
    assert sorted(r["gpu"] for r in _table(out)) == ["0", "2"]
    assert run_smi(p, "dmon", "-c", "1", "-i", "7") == (smi.MSG_NO_DEVICES + "\n", smi.RC_NOTFOUND)


@pytest.mark.parametrize("argv", [["-s", "x"], ["-s"], ["-c", "0"], ["-d", "soon"], ["-o", "X"], ["--frobnicate"]])
def test_bad_options_are_refused_as_nvidia_smi_refuses_any(tmp_path, argv):
    p = tmp_path / "s.json"
    make_state(p)
    assert run_smi(p, "dmon", *argv) == (smi.MSG_INVALID + "\n", smi.RC_INVALID)


def test_nvml_failures_come_first(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, loaded=False)
    assert run_smi(p, "dmon", "-c", "1") == (smi.MSG_NO_DRIVER + "\n", smi.RC_NODRIVER)


def test_the_executable(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    proc = subprocess.run([sys.executable, os.path.join(BIN, "nvidia-smi"), "dmon", "-c", "1"],
                          env=dict(os.environ, GPUSIM_STATE=str(p)), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.split("\n")[:2] == corpus("017_dmon").split("\n")[:2] and len(_table(proc.stdout)) == 1


# ------------------------------------------------------------------ load

def test_idle_then_load_then_idle(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "h100"), driver="590.48.01")
    idle = _table(run_smi(p, "dmon", "-s", "pucm", "-c", "1")[0])
    assert [(r["sm"], r["mem"], r["pwr"], r["pclk"]) for r in idle] == [("0", "0", "69", "345")] * 2
    _load(p, "--gpu", "0", "--requests", "32", "--capacity", "32", "--mib", "60000")
    # a minute into the load (the temperature climbs with a time constant)
    busy = _table(smi.run(["dmon", "-s", "pucm", "-c", "1"], state_path=str(p), now=time.time() + 60)[0])
    gpu0, gpu1 = busy
    assert gpu0["sm"] == "100" and int(gpu0["mem"]) >= 60 and int(gpu0["pwr"]) > 600
    assert int(gpu0["gtemp"]) > 60 and gpu0["pclk"] == "1980" and gpu0["mclk"] == "2619"
    assert int(gpu0["fb"]) == 60000 and int(gpu1["fb"]) == 0
    assert (gpu1["sm"], gpu1["pwr"]) == ("0", "69")              # the other GPU stays idle
    # the same readings in the other forms
    q, _ = run_smi(p, "--query-gpu=utilization.gpu,utilization.memory,memory.used,pstate", "--format=csv,noheader")
    assert q.split("\n")[0] == "100 %%, %s %%, 60000 MiB, P0" % gpu0["mem"]
    table, _ = run_smi(p)
    assert re.search(r"60000MiB /  81559MiB \|    100%      Default", table)
    _ctl(p, "load", "stop")
    assert _table(run_smi(p, "dmon", "-c", "1")[0])[0]["sm"] == "0"


def test_a_half_full_batch_shows_less_memory_activity_and_power(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    _load(p, "--requests", "4", "--capacity", "32")
    light = _table(run_smi(p, "dmon", "-c", "1")[0])[0]
    _load(p, "--requests", "32", "--capacity", "32")
    full = _table(run_smi(p, "dmon", "-c", "1")[0])[0]
    assert light["sm"] == full["sm"] == "100"
    assert int(light["mem"]) < int(full["mem"]) and int(light["pwr"]) < int(full["pwr"])


def test_records_expire_and_a_boot_clears_them(tmp_path):
    p = tmp_path / "s.json"
    s = make_state(p, models=("h100",))
    directory = load.load_dir(str(p))
    now = time.time()
    load.write_record(directory, "engine", {"gpus": [s["gpus"][0]["uuid"]], "in_flight": 3, "capacity": 8,
                                            "busy_since": now, "updated": now, "ttl_s": 10})
    at = lambda t: _table(smi.run(["dmon", "-c", "1"], state_path=str(p), now=t)[0])[0]["sm"]  # noqa: E731
    assert at(now + 5) == "100" and at(now + 11) == "0"            # its writer died without removing it
    _load(p, "--requests", "1")
    boot.boot(str(p), root=str(tmp_path / "root"))
    assert os.listdir(directory) == [] and at(time.time()) == "0"


# ------------------------------------------------------------------ clocks events (gpusim fault throttle)

def test_sw_power_cap_under_load_as_the_595_host(tmp_path):
    """The fixture's GPUs at their power cap: SW Power Cap active (0x...04), the draw at the limit, pclk low."""
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "rtx-pro-6000-bse"))
    _load(p, "--requests", "16")
    free = _table(run_smi(p, "dmon", "-s", "pucv", "-c", "1")[0])
    _ctl(p, "fault", "throttle", "sw_power_cap", "on", "--gpu", "0")
    capped, other = _table(run_smi(p, "dmon", "-s", "pucv", "-c", "1")[0])
    assert capped["pwr"] == "600" and capped["pviol"] == "100" and capped["tviol"] == "0"
    assert int(capped["pclk"]) < int(free[0]["pclk"]) == 3090
    assert other == free[1]
    real = dmon_fixture(THROTTLE_CSV).split("\n")[0].split(", ")[3]
    out, _ = run_smi(p, "--query-gpu=clocks_throttle_reasons.active,clocks_event_reasons.sw_power_cap",
                     "--format=csv,noheader,nounits")
    assert out.split("\n")[0] == "%s, Active" % real == "0x0000000000000004, Active"
    q, _ = run_smi(p, "-i", "0", "-q", "-d", "PERFORMANCE")
    assert "        SW Power Cap                                   : Active" in q
    clocks, _ = run_smi(p, "--query-gpu=clocks.gr,clocks.sm", "--format=csv,noheader,nounits")
    assert clocks.split("\n")[0] == "%s, %s" % (capped["pclk"], capped["pclk"])
    _ctl(p, "fault", "throttle", "sw_power_cap", "off", "--gpu", "0")
    assert _table(run_smi(p, "dmon", "-s", "pucv", "-c", "1")[0]) == free


@pytest.mark.parametrize("reason, pviol, tviol", [
    ("hw_thermal_slowdown", "0", "1"), ("sw_thermal_slowdown", "0", "1"), ("hw_slowdown", "0", "0"),
    ("hw_power_brake_slowdown", "100", "0")])
def test_each_reason_in_q_and_dmon(tmp_path, reason, pviol, tviol):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    _load(p)
    _ctl(p, "fault", "throttle", reason, "--gpu", "0")
    row = _table(run_smi(p, "dmon", "-s", "pucv", "-c", "1")[0])[0]
    assert (row["pviol"], row["tviol"]) == (pviol, tviol) and int(row["pclk"]) < 1980
    q, _ = run_smi(p, "-q", "-d", "PERFORMANCE")
    label = {"hw_thermal_slowdown": "            HW Thermal Slowdown        ",
             "sw_thermal_slowdown": "        SW Thermal Slowdown            ",
             "hw_slowdown": "        HW Slowdown                    ",
             "hw_power_brake_slowdown": "            HW Power Brake Slowdown    "}[reason]
    assert label + "                : Active" in q
    assert "        HW Slowdown                                    : %s" % (
        "Not Active" if reason == "sw_thermal_slowdown" else "Active") in q
    field = "clocks_throttle_reasons." + reason
    assert run_smi(p, "--query-gpu=" + field, "--format=csv,noheader")[0] == "Active\n"


def test_memory_temperature_only_on_hbm_boards(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "rtx-4090", "l4"))
    out, _ = run_smi(p, "--query-gpu=temperature.gpu,temperature.memory", "--format=csv,noheader")
    assert out == "34, 38\n34, N/A\n34, N/A\n"
    assert [r["mtemp"] for r in _table(run_smi(p, "dmon", "-c", "1")[0])] == ["38", "-", "-"]


def test_the_hook_binds_the_load_records_into_a_container(tmp_path, monkeypatch):
    """A serving engine in the container writes where the host's nvidia-smi reads (gpusim/load.py)."""
    from gpusim import hook
    calls = []
    monkeypatch.setenv("GPUSIM_LOAD_DIR", str(tmp_path / "host-load"))
    monkeypatch.setattr(hook.subprocess, "run", lambda argv, **kw: calls.append(argv))
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    hook.nsenter_bind_load(4242, str(rootfs))
    inside = rootfs / "var/lib/gpu-sim/load"
    assert inside.is_dir() and oct((tmp_path / "host-load").stat().st_mode & 0o7777) == "0o1777"
    assert calls == [["nsenter", "--target", "4242", "--mount", "mount", "--bind", str(tmp_path / "host-load"),
                      str(inside)]]
