"""An HGX board in the simulator: NVSwitches on the PCI bus, the fabric in nvidia-smi, the fabric manager
daemon with the real texts (shared/corpus/host 001/004/006, nvidia_smi 055/059/060), CUDA's 802."""
import io
import os
import re

from driver import fabric_manager
from gpu import gpu_topology
from simhelpers import corpus, host, make_state, run_smi
from gpusim import boot, ctl, fabric, pci, state as st

HGX = ["h100"] * 8
FABRIC = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "fabric")


def fields(lines):
    """Key/value of -q lines whatever the driver's column width (570 pads to 34, the simulated 590 to 47)."""
    return [re.sub(r"\s+:\s+", " : ", l.strip()) for l in lines]


def hgx(tmp_path, driver="580.95.05"):
    path = tmp_path / "state.json"
    s = ctl.init_state(HGX, branches=["580"], driver=driver + ":proprietary", nvswitches=4)
    st.save(s, str(path))
    return path


def test_nvswitches_on_the_bus_as_real_lspci_shows_them(tmp_path):
    s = st.load(str(hgx(tmp_path)))
    out, _err, rc = pci.render(s, ["-nn"])
    assert rc == 0
    assert "bd:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)" in out.splitlines()
    assert len(fabric_manager.nvswitches(out)) == 4
    only = pci.render(s, ["-d", "10de:22a3", "-nn", "-D"])[0].splitlines()
    assert [l.split()[0] for l in only] == ["0000:bd:00.0", "0000:be:00.0", "0000:bf:00.0", "0000:c0:00.0"]


def test_every_lspci_form_prints_the_switches(tmp_path):
    """-n, -D, -d filters, -k and -mm, as pciutils prints a bare-metal HGX H100's switches (research Q5: `lspci
    -vvnn` `Subsystem: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:1796]`); nvidia-smi lists only the GPUs."""
    s = st.load(str(hgx(tmp_path)))
    assert "bd:00.0 0680: 10de:22a3 (rev a1)" in pci.render(s, ["-n"])[0].splitlines()
    assert "0000:c0:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)" in \
        pci.render(s, ["-D"])[0].splitlines()
    nvidia = pci.render(s, ["-d", "10de:"])[0].splitlines()
    assert len(nvidia) == 12 and sum("NVSwitch" in l for l in nvidia) == 4
    assert len(pci.render(s, ["-d", "::0680"])[0].splitlines()) == 4
    assert len(pci.render(s, ["-d", "10de::0302"])[0].splitlines()) == 8
    k = pci.render(s, ["-nnk", "-s", "bd:00.0"])[0].splitlines()
    assert k == ["bd:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)",
                 "\tSubsystem: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:1796]"]
    assert pci.render(s, ["-nk", "-s", "bd:00.0"])[0].splitlines()[1] == "\tSubsystem: 10de:1796"
    assert pci.render(s, ["-k", "-s", "bd:00.0"])[0].splitlines()[1] == \
        "\tSubsystem: NVIDIA Corporation GH100 [H100 NVSwitch]"
    assert pci.render(s, ["-mm", "-s", "bd:00.0"])[0] == ('bd:00.0 "Bridge" "NVIDIA Corporation" "GH100 [H100 NVSwitch]"'
                                                         ' -ra1 -p00 "NVIDIA Corporation" "GH100 [H100 NVSwitch]"\n')
    listed, rc = run_smi(tmp_path / "state.json", "-L")
    assert rc == 0 and len(listed.splitlines()) == 8 and "NVSwitch" not in listed


def test_no_switches_keeps_the_fabric_not_applicable(tmp_path):
    plain = tmp_path / "plain.json"
    make_state(plain, models=["h100"])
    assert "nvswitches" not in st.load(str(plain)) or not st.load(str(plain))["nvswitches"]
    xml, _rc = run_smi(plain, "-q", "-x")
    assert "<fabric>\n\t\t\t<state>N/A</state>\n\t\t\t<status>N/A</status>\n\t\t\t<cliqueId>N/A</cliqueId>\n" \
        "\t\t\t<clusterUuid>N/A</clusterUuid>" in xml
    assert not [l for l in pci.render(st.load(str(plain)), ["-nn"])[0].splitlines() if "NVSwitch" in l]


def test_fabric_xml_tags_before_and_after_the_fabric_manager(tmp_path):
    """Tag names as in fixture 043's <fabric> (state, status, cliqueId, clusterUuid)."""
    path = hgx(tmp_path)
    xml, _rc = run_smi(path, "-q", "-x")
    assert xml.count("<state>In Progress</state>") == 8 and xml.count("<cliqueId>N/A</cliqueId>") == 8
    fabric.start(str(path), "580.95.05")
    xml, _rc = run_smi(path, "-q", "-x")
    assert xml.count("<fabric>\n\t\t\t<state>Completed</state>\n\t\t\t<status>Success</status>\n"
                     "\t\t\t<cliqueId>0</cliqueId>\n"
                     "\t\t\t<clusterUuid>00000000-0000-0000-0000-000000000000</clusterUuid>") == 8


def test_fabric_in_progress_until_the_fabric_manager_runs(tmp_path, monkeypatch):
    path = hgx(tmp_path)
    q, rc = run_smi(path, "-q")
    real = corpus("059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt").splitlines()[1:4]
    assert rc == 0 and fields(real) == fields([l for l in q.splitlines()
                                               if l.strip().startswith(("Fabric", "State", "Status"))][:3])
    assert gpu_topology.fabric_verdict(gpu_topology.parse_fabric(q))["state"] == "not_ready"
    assert fabric.start(str(path), "580.95.05") == (0, [fabric.MSG_CONNECTED, fabric.MSG_CONFIGURED])
    xml, _rc = run_smi(path, "-q", "-x")
    fabrics = gpu_topology.parse_fabric_xml(xml)
    assert len(fabrics) == 8 and {(f["state"], f["status"], f["clique_id"]) for f in fabrics} == \
        {("Completed", "Success", "0")}
    q, _rc = run_smi(path, "-q")
    block = fields(q.splitlines()[q.splitlines().index("    Fabric") + 1:][:4])
    real = fields(corpus("055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt").splitlines())
    at = real.index("Fabric")
    assert block == real[at + 1:at + 5]
    # a boot sets the fabric up anew
    s = st.load(str(path))
    boot.apply_state(s)
    assert s["fabric"] == fabric.NOT_SET_UP


def test_the_fabric_manager_refuses_like_the_real_one(tmp_path):
    path = hgx(tmp_path)
    rc, lines = fabric.start(str(path), "580.105.08")
    # the journal's one line (fixture: gpu-operator#544, 530.30.02 against 530.41.03; the same words as corpus 006,
    # which a bug report wrapped over two lines)
    journal = open(os.path.join(FABRIC, "fabricmanager_version-mismatch_journal-line_fm-530.30.02_driver-530.41.03"
                                ".txt")).read().strip()
    assert rc == 1 and lines == ["fabric manager NVIDIA GPU driver interface version 580.105.08 don't match with "
                                 "driver version 580.95.05. Please update with matching NVIDIA driver package."]
    assert journal.split(": ", 1)[1] == lines[0].replace("580.105.08", "530.30.02").replace("580.95.05", "530.41.03")
    real = host("006_fabricmanager_version-mismatch")
    assert " ".join(real.split()) == lines[0].replace("580.105.08", "590.48.01").replace("580.95.05", "580.126.09")
    plain = tmp_path / "plain.json"
    make_state(plain, models=["h100"])
    rc, lines = fabric.start(str(plain), "580.95.05")
    nothing = [l for l in host("004_journal_fabricmanager_failed_NV_WARN").splitlines() if "NV_WARN_NOTHING_TO_DO" in l]
    assert rc == 1 and lines == [fabric.MSG_NOTHING_TO_DO] and nothing[0].endswith(": " + fabric.MSG_NOTHING_TO_DO)
    assert st.load(str(path))["fabric"] == fabric.NOT_SET_UP


def test_the_fabric_manager_without_a_loaded_driver_fails_and_leaves_the_fabric(tmp_path):
    path = hgx(tmp_path)
    s = st.load(str(path))
    s["driver"]["loaded"] = None
    st.save(s, str(path))
    assert fabric.start(str(path), "580.95.05") == (1, [])
    assert st.load(str(path))["fabric"] == fabric.NOT_SET_UP


def test_the_daemon_command_line(tmp_path, monkeypatch, capsys):
    """`nv-fabricmanager --version` prints the real form (`Fabric Manager version is : 450.102.04`); a refusal
    goes to stderr (the journal) with exit 1; a start prints 001's lines on stdout."""
    version = tmp_path / "fm.version"
    version.write_text("580.95.05\n")
    monkeypatch.setattr(fabric, "VERSION_FILE", str(version))
    assert fabric.main(["--version"]) == 0 and capsys.readouterr().out == "Fabric Manager version is : 580.95.05\n"
    assert fabric.main(["-v"]) == 0 and capsys.readouterr().out == "Fabric Manager version is : 580.95.05\n"
    path = hgx(tmp_path, driver="580.105.08")
    monkeypatch.setenv("GPUSIM_STATE", str(path))
    assert fabric.main(["-c", fabric.DEFAULT_CONFIG]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == (fabric.MSG_MISMATCH % ("580.95.05", "580.105.08")) + "\n"
    path = hgx(tmp_path)
    assert fabric.main(["-c", fabric.DEFAULT_CONFIG, "--no-daemon"]) == 0
    assert capsys.readouterr().out.splitlines() == [l.split(": ", 1)[1] for l in
                                                    host("001_journal_fabricmanager").splitlines()
                                                    if "nv-fabricmanager[" in l]
    assert st.load(str(path))["fabric"] == fabric.SET_UP


def test_cuda_fails_with_802_until_the_fabric_is_set_up(tmp_path):
    from gpusim import cuda_sample
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (root / "dev" / name).write_text("")
    lib = root / cuda_sample.LIBCUDA.lstrip("/")
    lib.parent.mkdir(parents=True)
    lib.write_text("")
    state_file = root / cuda_sample.STATE_IN_CONTAINER.lstrip("/")
    state_file.parent.mkdir(parents=True)
    s = st.load(str(hgx(tmp_path)))
    state_file.write_text(__import__("json").dumps(s))
    out, err = io.StringIO(), io.StringIO()
    assert cuda_sample.vector_add_main(str(root), out, err, {}) == 1
    assert err.getvalue() == "Failed to allocate device vector A (error code system not yet initialized)!\n"
    s["fabric"] = dict(fabric.SET_UP)
    state_file.write_text(__import__("json").dumps(s))
    assert cuda_sample.vector_add_main(str(root), io.StringIO(), io.StringIO(), {}) == 0


def test_boards_of_the_catalogue(tmp_path):
    """hgx-h100: 8 H100 and 4 gen3 switches; hgx-a100: 8 A100 and 6 gen2 switches as the real A100 board's lspci
    (`b7:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)`, research Q5)."""
    h100 = ctl.init_state(["hgx-h100"])
    assert [g["model"] for g in h100["gpus"]] == ["h100"] * 8 and len(h100["nvswitches"]) == 4
    a100 = ctl.init_state(["hgx-a100"], driver="580.95.05:proprietary")
    assert len(a100["gpus"]) == 8 and len(a100["nvswitches"]) == 6
    lines = pci.render(a100, ["-nn", "-d", "10de::0680"])[0].splitlines()
    assert lines[0] == "b7:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)" and len(lines) == 6
    assert lines[-1].startswith("bc:00.0 ")
    assert len(fabric_manager.nvswitches("\n".join(lines))) == 6
