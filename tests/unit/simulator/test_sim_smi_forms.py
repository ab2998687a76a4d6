"""nvidia-smi output forms compared structurally with the real captures of the same form."""
import re
import xml.etree.ElementTree as ET

import pytest

from simhelpers import corpus, edit, make_state, run_smi
from gpusim import ctl, pci, state as st


def _h100_like_018(path):
    """The state of the machine of 018 (H100, 590.48.01, idle, persistence on)."""
    make_state(path, models=("h100",), driver="590.48.01")

    def fn(s):
        g = s["gpus"][0]
        g.update(uuid="GPU-00000000-0000-0000-0000-000000000000", pci_bus_id="00000000:00:09.0",
                 temperature_c=41, power_draw_w=69, persistence_mode=True, performance_state="P0")
    edit(path, fn)


def test_table_reproduces_018_byte_for_byte(tmp_path):
    p = tmp_path / "s.json"
    _h100_like_018(p)
    out, rc = run_smi(p)
    real = corpus("018_table")
    assert rc == 0
    assert out.split("\n")[1:] == real.split("\n")[1:]          # all but the timestamp line
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}       $", out.split("\n")[0])


def test_table_reproduces_001_570_layout(tmp_path):
    """570: `|---` under the header and a line of 89 spaces between the GPU and process tables."""
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "h100"), driver="570.133.20")

    def fn(s):
        for g, bus, t, w in zip(s["gpus"], ("AB", "BA"), (33, 26), (73, 70)):
            g.update(pci_bus_id="00000000:%s:00.0" % bus, temperature_c=t, power_draw_w=w, performance_state="P0")
    edit(p, fn)
    out, _ = run_smi(p)
    assert out.split("\n")[1:] == corpus("001_table").split("\n")[1:]


def _pipes(line):
    return [i for i, c in enumerate(line) if c in "|+"]


def test_table_box_columns_equal_018(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "l4", "h200"))
    out, _ = run_smi(p)
    real = corpus("018_table").split("\n")
    mine = out.split("\n")
    # header box lines
    for i in range(1, 8):
        assert _pipes(mine[i]) == _pipes(real[i]), mine[i]
    gpu_rows = [l for l in mine if re.match(r"^\|\s+\d+\s+NVIDIA", l)]
    assert len(gpu_rows) == 3
    for line in mine[8:8 + 12]:
        assert len(line) == 91
        assert [i for i, c in enumerate(line) if c == "|"] == [0, 42, 67, 90] or set(line) <= set("+-")
    assert "NVIDIA RTX PRO 6000 Blac...    Off |" in gpu_rows[0]       # truncation as the real tool does
    assert "|   1  NVIDIA L4                      Off |" in gpu_rows[1]
    assert "97887MiB" in out and "23034MiB" in out and "143771MiB" in out
    assert "|                                         |                        |                  N/A |" in out  # L4: no MIG


def test_table_process_rows_align_with_011(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse",), processes=[
        {"pid": 20037, "name": "ffmpeg", "gpu_index": 0, "used_mib": 538, "type": "C"},
        {"pid": 20038, "name": "ffmpeg", "gpu_index": 0, "used_mib": 681, "type": "C"}])
    out, _ = run_smi(p)
    real = [l for l in corpus("011_table").split("\n") if "ffmpeg" in l]
    mine = [l for l in out.split("\n") if "ffmpeg" in l]
    assert mine == real
    assert "|   80538MiB" not in out and "1223MiB /  97887MiB" in out   # 4 MiB overhead + 538 + 681


def test_list_form_like_027(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "rtx-pro-6000-bse"))
    out, rc = run_smi(p, "-L")
    pat = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]{36})\)$")
    assert pat.match(corpus("027_L").strip())
    lines = out.strip().split("\n")
    assert [pat.match(l).group(1, 2) for l in lines] == [("0", "NVIDIA H100 80GB HBM3"),
                                                        ("1", "NVIDIA RTX PRO 6000 Blackwell Server Edition")]


def _xml_paths(root):
    out = set()

    def walk(e, prefix):
        for c in e:
            q = prefix + "/" + c.tag
            out.add(q)
            walk(c, q)
    for g in root.findall("gpu"):
        walk(g, "gpu")
    return out


def test_xml_v13_element_paths_equal_043(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "h100"), processes=[
        {"pid": 116860, "name": "/usr/bin/python3", "gpu_index": 0, "used_mib": 65710, "type": "C"}])
    out, rc = run_smi(p, "-q", "-x")
    assert rc == 0
    assert out.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n')
    mine, real = ET.fromstring(out), ET.fromstring(corpus("043_qx"))
    assert _xml_paths(mine) == _xml_paths(real)
    assert [c.tag for c in mine][:4] == [c.tag for c in real][:4]
    assert mine.findtext("driver_version") == "580.95.05" and mine.findtext("cuda_version") == "13.0"
    assert mine.findtext("attached_gpus") == "2"
    g0, g1 = mine.findall("gpu")
    assert g0.findtext("product_name") == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert g0.get("id") == g0.findtext("pci/pci_bus_id") == "00000000:17:00.0"
    assert g0.findtext("pci/pci_device_id") == "2BB510DE" and g0.findtext("pci/pci_sub_system_id") == "204E10DE"
    assert g0.findtext("fb_memory_usage/total") == "97887 MiB"
    assert g0.findtext("fb_memory_usage/used") == "65714 MiB"
    assert g0.findtext("persistence_mode") == "Disabled" and g0.findtext("compute_mode") == "Default"
    assert g0.findtext("mig_mode/current_mig") == "Disabled"
    assert g0.findtext("processes/process_info/pid") == "116860"
    assert g0.findtext("processes/process_info/used_memory") == "65710 MiB"
    assert g0.findtext("clocks_event_reasons/clocks_event_reason_gpu_idle") == "Not Active"
    assert g1.findtext("clocks_event_reasons/clocks_event_reason_gpu_idle") == "Active"   # no process: idle
    assert g1.findtext("processes/process_info") is None
    assert g1.findtext("gpu_power_readings/current_power_limit") == "700.00 W"
    for g in (g0, g1):   # same element order as the real capture
        assert [c.tag for c in g] == [c.tag for c in real.find("gpu")]


# 022 (-q -x of an RTX 4090, 535.86.05) element by element: every value the catalogue's "rtx-4090" decides
# (the simulator renders the v13 document of newer drivers; these elements are in both).
RTX4090_022 = ["product_name", "product_brand", "product_architecture", "persistence_mode", "addressing_mode",
               "mig_mode/current_mig", "mig_mode/pending_mig", "vbios_version", "board_part_number",
               "gpu_part_number", "pci/pci_bus", "pci/pci_device_id", "pci/pci_sub_system_id",
               "pci/pci_gpu_link_info/pcie_gen/max_device_link_gen", "fan_speed", "performance_state",
               "clocks_event_reasons/clocks_event_reason_gpu_idle", "fb_memory_usage/total",
               "fb_memory_usage/reserved", "fb_memory_usage/used", "bar1_memory_usage/total", "compute_mode",
               "ecc_mode/current_ecc", "ecc_mode/pending_ecc", "ecc_errors/volatile/dram_correctable",
               "retired_pages/double_bit_retirement/retired_count", "temperature/gpu_temp",
               "temperature/gpu_temp_tlimit",
               "gpu_power_readings/current_power_limit", "gpu_power_readings/default_power_limit",
               "gpu_power_readings/min_power_limit", "gpu_power_readings/max_power_limit",
               "clocks/graphics_clock", "clocks/sm_clock", "clocks/mem_clock", "clocks/video_clock",
               "max_clocks/graphics_clock", "max_clocks/sm_clock", "max_clocks/mem_clock", "max_clocks/video_clock"]


def test_xml_rtx_4090_values_equal_022(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-4090",), driver="535.86.05", modules="proprietary")
    edit(p, lambda s: s["gpus"][0].update(pci_bus_id="00000000:84:00.0", temperature_c=40, persistence_mode=True))
    out, rc = run_smi(p, "-q", "-x")
    assert rc == 0
    mine, real = ET.fromstring(out).find("gpu"), ET.fromstring(corpus("022_qx")).find("gpu")
    assert mine.get("id") == real.get("id") == "00000000:84:00.0"
    assert {k: mine.findtext(k) for k in RTX4090_022} == {k: real.findtext(k) for k in RTX4090_022}
    # v13 names the draw instant_power_draw (043), v12 power_draw
    assert mine.findtext("gpu_power_readings/instant_power_draw") == real.findtext("gpu_power_readings/power_draw") \
        == "26.84 W"
    table, _ = run_smi(p)
    assert "|   0  NVIDIA GeForce RTX 4090        On  |   00000000:84:00.0 Off |                  Off |" in table
    assert "|  0%   40C    P8             27W /  450W |       2MiB /  24564MiB |      0%      Default |" in table
    # lspci as public `lspci -nnk` of 4090s prints it (a VGA controller; the subsystem of 022's Gigabyte board)
    text = pci.render(st.load(str(p)), ["-nnk", "-d", "10de:"])[0].split("\n")
    assert text[:2] == ["84:00.0 VGA compatible controller [0300]: NVIDIA Corporation AD102 [GeForce RTX 4090] "
                        "[10de:2684] (rev a1)", "\tSubsystem: Gigabyte Technology Co., Ltd Device [1458:40bf]"]


def _q_columns(text):
    """{key path: column of ' : '} for -q text."""
    cols, stack = {}, []
    for line in text.split("\n"):
        if not line.startswith("    "):
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key = line.split(" : ")[0].strip()
        del stack[depth - 1:]
        if " : " in line:
            cols["/".join(stack + [key])] = line.index(" : ")
        else:
            stack.append(key)
    return cols


def test_q_key_column_alignment_like_003(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",), driver="590.48.01", processes=[
        {"pid": 21180, "name": "/root/tools/memhog", "gpu_index": 0, "used_mib": 2296, "type": "C"}])
    out, rc = run_smi(p, "-q")
    real = corpus("003_q")
    assert out.split("\n")[:3] == real.split("\n")[:3]            # "", "====NVSMI LOG====", ""
    for a, b in zip(out.split("\n")[3:8], real.split("\n")[3:8]):
        assert (a.find(": "), a[:a.find(": ")].strip()) == (b.find(": "), b[:b.find(": ")].strip())
    assert out.split("\n")[3].index(": ") == 55
    mine, theirs = _q_columns(out), _q_columns(real)
    common = set(mine) & set(theirs)
    assert len(common) > 150
    assert {k: mine[k] for k in common} == {k: theirs[k] for k in common}
    assert "Processes/Process ID" in mine and mine["Processes/Process ID"] == theirs["Processes/Process ID"]
    assert "    Product Name                                       : NVIDIA H100 80GB HBM3" in out
    assert "        Used                                           : 2296 MiB" in out


def test_q_display_performance_block_like_003(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    edit(p, lambda s: s["gpus"][0].update(clocks_event_reasons=["sw_power_cap"], performance_state="P0"))
    out, rc = run_smi(p, "-q", "-d", "PERFORMANCE")
    real = corpus("003_q").split("\n")
    start = real.index("    Clocks Event Reasons")
    end = real.index("    Sparse Operation Mode                              : Disabled")
    labels = [l.split(" : ")[0] for l in real[start - 1:end + 1]]
    body = out.split("\n")
    i = body.index("    Clocks Event Reasons")
    assert [l.split(" : ")[0] for l in body[i - 1:i - 1 + len(labels)]] == labels
    assert "        SW Power Cap                                   : Active" in body
    assert "        Idle                                           : Active" in body
    assert "FB Memory Usage" not in out


# 004's header for the fields this simulator supports (units exactly as the real tool appends them)
CSV_FIELDS = ["driver_version", "name", "serial", "uuid", "pci.bus_id", "pci.domain", "pci.bus", "pci.device",
              "pci.device_id", "pci.sub_device_id", "pcie.link.gen.max", "index", "persistence_mode", "fan.speed",
              "pstate", "clocks_event_reasons.supported", "clocks_event_reasons.active",
              "clocks_event_reasons.gpu_idle", "clocks_event_reasons.sw_power_cap",
              "clocks_event_reasons.hw_slowdown", "clocks_event_reasons.hw_thermal_slowdown",
              "clocks_event_reasons.hw_power_brake_slowdown", "clocks_event_reasons.sw_thermal_slowdown",
              "memory.total", "memory.reserved", "memory.used", "memory.free", "compute_mode", "compute_cap",
              "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
              "enforced.power.limit", "power.default_limit", "power.min_limit", "power.max_limit",
              "clocks.current.graphics", "clocks.max.sm", "mig.mode.current", "mig.mode.pending"]


def test_query_gpu_header_equals_004(tmp_path):
    real = [h.strip() for h in corpus("004_query-gpu").split("\n")[0].split(",")]
    by_field = {h.split(" [")[0]: h for h in real}
    p = tmp_path / "s.json"
    make_state(p, models=("h100",))
    out, rc = run_smi(p, "--query-gpu=" + ",".join(CSV_FIELDS), "--format=csv")
    assert rc == 0
    header = out.split("\n")[0].split(", ")
    assert header == [by_field[f] for f in CSV_FIELDS]
    row = out.split("\n")[1].split(", ")
    vals = dict(zip(CSV_FIELDS, row))
    assert vals["name"] == "NVIDIA H100 80GB HBM3" and vals["pci.device_id"] == "0x233010DE"
    assert vals["pci.sub_device_id"] == "0x16C110DE" and vals["memory.total"] == "81559 MiB"
    assert vals["power.limit"] == "700.00 W" and vals["compute_cap"] == "9.0" and vals["pci.domain"] == "0x0000"
    assert vals["clocks_event_reasons.supported"] == "0x00000000000001FF"
    assert vals["clocks_event_reasons.active"] == "0x0000000000000001"     # idle
    assert vals["mig.mode.current"] == "Disabled" and vals["fan.speed"] == "[N/A]"


def test_query_gpu_noheader_nounits_and_aliases(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("rtx-pro-6000-bse", "l4"))
    out, rc = run_smi(p, "--query-gpu=index,gpu_name,memory.total,memory.used,power.draw,mig.mode.current,"
                         "clocks_throttle_reasons.active", "--format=csv,noheader,nounits")
    assert out == ("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 4, 30.00, Disabled, 0x0000000000000001\n"
                   "1, NVIDIA L4, 23034, 0, 16.00, [N/A], 0x0000000000000001\n")
    out, _ = run_smi(p, "--query-gpu=clocks_throttle_reasons.active,gpu_name", "--format=csv")
    assert out.split("\n")[0] == "clocks_throttle_reasons.active, gpu_name"


def test_query_compute_apps_header_equals_005(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100",), processes=[
        {"pid": 21180, "name": "/root/tools/memhog", "gpu_index": 0, "used_mib": 2296, "type": "C"}])
    fields = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_memory"
    out, rc = run_smi(p, "--query-compute-apps=" + fields, "--format=csv")
    real = corpus("005_query-compute-apps").split("\n")
    assert out.split("\n")[0] == real[0]
    row = out.split("\n")[1].split(", ")
    assert re.match(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}$", row[0])
    assert row[1:] == ["NVIDIA H100 80GB HBM3", "00000000:17:00.0", row[3], row[4], "21180",
                       "/root/tools/memhog", "2296 MiB"]
    out, _ = run_smi(p, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert out == "21180, 2296\n"


def test_query_compute_apps_none_prints_header_only(tmp_path):
    p = tmp_path / "s.json"
    make_state(p)
    assert run_smi(p, "--query-compute-apps=pid,process_name,used_memory", "--format=csv") == \
        ("pid, process_name, used_gpu_memory [MiB]\n", 0)
    assert run_smi(p, "--query-compute-apps=pid", "--format=csv,noheader") == ("", 0)


@pytest.mark.parametrize("opt", ["--query-gpu", "--query-compute-apps"])
def test_unknown_field_is_the_real_error(tmp_path, opt):
    p = tmp_path / "s.json"
    make_state(p)
    assert run_smi(p, opt + "=pid,xyz" if "apps" in opt else opt + "=name,xyz", "--format=csv") == \
        ('Field "xyz" is not a valid field to query.\n\n', 2)


def test_i_selects_by_index_uuid_and_bus(tmp_path):
    p = tmp_path / "s.json"
    s = make_state(p, models=("h100", "l4"))
    q = ["--query-gpu=index,name", "--format=csv,noheader"]
    assert run_smi(p, "-i", "1", *q) == ("1, NVIDIA L4\n", 0)
    assert run_smi(p, "--id=" + s["gpus"][0]["uuid"], *q) == ("0, NVIDIA H100 80GB HBM3\n", 0)
    assert run_smi(p, "-i", "00000000:31:00.0", *q) == ("1, NVIDIA L4\n", 0)
    assert run_smi(p, "-i", "5", *q) == ("No devices were found\n", 6)
    assert run_smi(p, "-i", "5") == ("No devices were found\n", 6)


def test_version_form(tmp_path):
    p = tmp_path / "s.json"
    make_state(p)
    assert run_smi(p, "--version") == ("NVIDIA-SMI version  : 580.95.05\nNVML version        : 580.95\n"
                                       "DRIVER version      : 580.95.05\nCUDA Version        : 13.0\n", 0)
    make_state(p, driver="610.57.04")
    out, _ = run_smi(p, "--version")
    assert out == corpus("026_version").rstrip("\n") + "\n"


def test_container_copy_lists_no_processes(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, container=True, processes=[{"pid": 1, "name": "x", "gpu_index": 0, "used_mib": 1000}])
    out, _ = run_smi(p)
    assert "No running processes found" in out and "1004MiB /  97887MiB" in out
