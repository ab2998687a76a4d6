"""An HGX board in the simulator: NVSwitches on the PCI bus, the fabric in nvidia-smi, the fabric manager
daemon with the real texts (shared/corpus/host 001/004/006, nvidia_smi 055/059/060), CUDA's 802."""
import io
import re

import fabric_manager
import gpu_topology
from simhelpers import corpus, host, make_state, run_smi
from gpusim import boot, ctl, fabric, pci, state as st

HGX = ["h100"] * 8


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
    real = host("006_fabricmanager_version-mismatch")
    assert rc == 1 and lines == ["fabric manager NVIDIA GPU driver interface version 580.105.08 don't match with "
                                 "driver version 580.95.05.", "Please update with matching NVIDIA driver package."]
    assert real.replace("590.48.01", "X").replace("580.126.09", "Y").splitlines() == \
        [l.replace("580.105.08", "X").replace("580.95.05", "Y") for l in lines]
    plain = tmp_path / "plain.json"
    make_state(plain, models=["h100"])
    rc, lines = fabric.start(str(plain), "580.95.05")
    nothing = [l for l in host("004_journal_fabricmanager_failed_NV_WARN").splitlines() if "NV_WARN_NOTHING_TO_DO" in l]
    assert rc == 1 and lines == [fabric.MSG_NOTHING_TO_DO] and nothing[0].endswith(": " + fabric.MSG_NOTHING_TO_DO)
    assert st.load(str(path))["fabric"] == fabric.NOT_SET_UP


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
    assert lines[0] == "bd:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:1af1] (rev a1)" and len(lines) == 6
    assert len(fabric_manager.nvswitches("\n".join(lines))) == 6
