"""gpusim.state and gpusim.catalogue: the contracts other simulator parts rely on (DESIGN.md)."""
import os
import stat

import pytest

from simhelpers import make_state
from gpusim import catalogue, state as st


def test_load_missing_file_gives_full_defaults(tmp_path):
    s = st.load(str(tmp_path / "none.json"))
    assert s["schema"] == 1 and s["gpus"] == [] and s["processes"] == [] and s["kernel_log"] == []
    assert s["driver"] == {"installed": None, "loaded": None, "modules": None}
    assert s["faults"] == {"module_not_loaded": False, "missing_device_nodes": [], "persistenced_stopped": False}
    assert st.driver_state(s) == "no_driver"


def test_load_fills_defaults_of_partial_state(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"gpus": [{"model": "h100"}], "faults": {"module_not_loaded": true}}')
    s = st.load(str(p))
    assert s["gpus"][0]["index"] == 0 and s["gpus"][0]["persistence_mode"] is False
    assert s["faults"]["module_not_loaded"] is True and s["faults"]["missing_device_nodes"] == []


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    p = tmp_path / "d" / "state.json"
    s = st.default_state()
    st.save(s, str(p))
    inode = os.stat(str(p)).st_ino
    s["repo_branches"] = ["580"]
    st.save(s, str(p))
    assert os.stat(str(p)).st_ino != inode            # replaced by rename, never rewritten in place
    assert sorted(os.listdir(str(p.parent))) == ["state.json"]
    assert stat.S_IMODE(os.stat(str(p)).st_mode) == 0o644
    assert st.load(str(p))["repo_branches"] == ["580"]


def test_path_from_env(monkeypatch):
    monkeypatch.delenv("GPUSIM_STATE", raising=False)
    assert st.path_from_env() == "/var/lib/gpu-sim/state.json"
    monkeypatch.setenv("GPUSIM_STATE", "/tmp/x.json")
    assert st.path_from_env() == "/tmp/x.json"


def test_update_applies_and_saves(tmp_path):
    p = tmp_path / "s.json"
    make_state(p, models=("h100", "h100"))
    st.update(lambda s: s["gpus"][1].update(persistence_mode=True), str(p))
    assert [g["persistence_mode"] for g in st.load(str(p))["gpus"]] == [False, True]


@pytest.mark.parametrize("value,expected", [
    (None, [0, 1, 2]), ("", [0, 1, 2]), ("all", [0, 1, 2]), ("none", []), ("void", []),
    ("0", [0]), ("0,2", [0, 2]), ("2,0", [2, 0]), ("7", []), ("UUID1", [1]), ("0,UUID1", [0, 1]),
])
def test_visible_gpus(tmp_path, value, expected):
    s = make_state(tmp_path / "s.json", models=("h100", "h100", "h100"))
    s["gpus"][1]["uuid"] = "GPU-11111111-2222-3333-4444-555555555555"
    env = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value.replace("UUID1", s["gpus"][1]["uuid"])}
    assert [g["index"] for g in st.visible_gpus(s, env)] == expected


def test_driver_state(tmp_path):
    s = make_state(tmp_path / "s.json")
    assert st.driver_state(s) == "ok"
    s["driver"]["installed"]["version"] = "580.105.08"
    assert st.driver_state(s) == "mismatch"
    s["driver"]["loaded"] = None
    assert st.driver_state(s) == "not_loaded"


REQUIRED = ("name", "memory_total_mib", "pci_device_id", "pci_subsystem_id", "architecture",
            "compute_capability", "power_limit_w", "needs_open_modules", "min_branch")


@pytest.mark.parametrize("key", sorted(catalogue.MODELS))
def test_catalogue_contract_keys(key):
    m = catalogue.MODELS[key]
    for k in REQUIRED:
        assert k in m, k
    assert isinstance(m["pci_device_id"], int) and isinstance(m["min_branch"], int)


@pytest.mark.parametrize("key,name,mib,dev,cc,open_,branch", [
    ("rtx-pro-6000-bse", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 0x2BB5, "12.0", True, 570),
    ("h100", "NVIDIA H100 80GB HBM3", 81559, 0x2330, "9.0", False, None),
    ("h200", "NVIDIA H200", 143771, 0x2335, "9.0", False, None),
    ("l4", "NVIDIA L4", 23034, 0x27B8, "8.9", False, None),
    ("a100-80gb", "NVIDIA A100-SXM4-80GB", 81920, 0x20B2, "8.0", False, None),
    ("rtx-4090", "NVIDIA GeForce RTX 4090", 24564, 0x2684, "8.9", False, 520),
])
def test_catalogue_facts(key, name, mib, dev, cc, open_, branch):
    m = catalogue.get(key)
    assert (m["name"], m["memory_total_mib"], m["pci_device_id"], m["compute_capability"],
            m["needs_open_modules"]) == (name, mib, dev, cc, open_)
    if branch:
        assert m["min_branch"] == branch


def test_catalogue_aliases_and_cuda():
    assert catalogue.resolve("RTX-PRO-6000") == "rtx-pro-6000-bse"
    assert catalogue.resolve("RTX4090") == catalogue.resolve("4090") == "rtx-4090"
    with pytest.raises(KeyError):
        catalogue.resolve("gtx-480")
    assert catalogue.cuda_version("570.133.20") == "12.8" and catalogue.cuda_version("590.48.01") == "13.1"


def test_firmware_secure_boot_is_the_efivarfs_file_the_product_reads(tmp_path, monkeypatch):
    """gpusim firmware secure-boot writes the SecureBoot variable as efivarfs shows it (the real hexdumps'
    06 00 00 00 01 / 00), which module_utils/secure_boot reads; none is a host booted without EFI."""
    from driver import secure_boot as sb
    from gpusim import boot as bootmod, ctl
    path = str(tmp_path / "state.json")
    make_state(path)
    monkeypatch.setenv("GPUSIM_STATE", path)
    monkeypatch.setenv("GPUSIM_ROOT", str(tmp_path))
    var = tmp_path / "sys/firmware/efi/efivars" / ("SecureBoot-" + bootmod.EFI_GLOBAL_GUID)
    assert str(var).endswith(sb.SECUREBOOT_EFIVAR)
    assert ctl.main(["firmware", "secure-boot", "on"]) == 0
    assert var.read_bytes() == b"\x06\x00\x00\x00\x01" and sb.parse_efivar_secureboot(var.read_bytes()) is True
    assert ctl.main(["firmware", "secure-boot", "off"]) == 0
    assert sb.parse_efivar_secureboot(var.read_bytes()) is False
    # it is firmware: a boot lays it down again from the state
    var.unlink()
    bootmod.lay_down_firmware(st.load(path), str(tmp_path))
    assert var.read_bytes() == b"\x06\x00\x00\x00\x00"
    assert ctl.main(["firmware", "secure-boot", "none"]) == 0
    assert not var.exists()
    with pytest.raises(SystemExit):
        ctl.main(["firmware", "secure-boot", "maybe"])
