"""`gpuhost smi` is one door for pasted output: every real nvidia-smi output in the fixtures - all its forms from
driver 346 to 610, whole or cut, and its error texts - is read (exit 0), never refused; the outputs that another
gpuhost command reads (topo -m, a Fabric excerpt of -q, nvidia-smi mig listings, mokutil and the lockdown file)
get that command's reading, the same object `gpuhost <command> --json` prints, named in `command`; a -q with
Fabric blocks gets its facts and the fabric reading; other texts with known errors get `gpuhost explain`'s
findings. Sources of every file: the folders' READMEs and tests/fixtures/corpus/MANIFEST.tsv."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT
from diagnosis import explain as ex
from gpuhost_cli import fabric as fabric_cli
from gpuhost_cli import mig as mig_cli
from gpuhost_cli import secure_boot as secure_boot_cli
from gpuhost_cli import smi as cli
from gpuhost_cli import topo as topo_cli

GPUHOST = os.path.join(ROOT, "bin", "gpuhost")
# The fixture folders that hold nvidia-smi output (corpus/nvidia_smi and its copy nvidia_smi/, the memory
# captures, the MIG listings and -L, the topology matrices).
SMI_FOLDERS = ("corpus/nvidia_smi", "nvidia_smi", "nvidia_smi_memory", "mig", "fabric", "gpu_reset")
# The files in them that are not nvidia-smi output, and what they are instead.
NOT_NVIDIA_SMI = (
    (r"^nvidia_smi_memory/.*_deviceQuery\.txt$", "CUDA's deviceQuery sample"),
    (r"^nvidia_smi_memory/.*cuda-oom.*\.txt$", "a PyTorch out-of-memory error"),
    (r"^nvidia_smi_memory/A100-80GB-PCIe_htcondor-CUDAGlobalMemoryMb\.txt$", "HTCondor's condor_status"),
    (r"^fabric/cuda-802_", "a CUDA program's error 802"),
    (r"^fabric/fabricmanager_version-mismatch_", "the fabric manager's journal"),
    (r"(?:^|/)(?:README\.md|SOURCES\.tsv)$", "documentation"),
)
# nvidia-smi error texts outside those folders (pasted with prose, prompts and other commands around them),
# and other texts whose error is one of nvidia-smi's states (the error table's "smi" scope), with the state each
# one reads as: never "not a recognised nvidia-smi output".
ERROR_TEXTS = {
    # "Failed to initialize NVML: Unknown Error" in the container after the host's `systemctl daemon-reload`,
    # below the head of a table of driver 510.68.02
    "corpus/errors/004_container-nvml-unknown-error-after-daemon-reload_510.68.02_markdown-section.txt":
        ("error", "510.68.02"),
    "errors/004_container-nvml-unknown-error-after-daemon-reload_510.68.02_markdown-section.txt":
        ("error", "510.68.02"),
    # the same in `nvidia-smi -L`; the host's -L and `nvidia-smi | head -n 4` (570.133.20) follow
    "devchar/nvml-unknown-error_after-daemon-reload_ubuntu22.04_systemd249_570.133.20_markdown-section.txt":
        ("error", "570.133.20"),
    "devchar/devices-list_before-after-daemon-reload_cgroupv1_systemd239_markdown-section.txt": ("error", None),
    # "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", then modprobe's refusal
    "secure_boot/nvidia-smi-and-modprobe_key-rejected_ubuntu22.04-535_nvidia-graphics-drivers-62.txt":
        ("driver_not_loaded", None),
    # an Ubuntu journal: modprobe's "Key was rejected by service", then nvidia-settings' "ERROR: NVIDIA driver is
    # not loaded" - the state is driver_not_loaded, and `also` names the Secure Boot refusal
    "corpus/errors/003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt": ("driver_not_loaded", None),
    "errors/003_journal_modprobe-nvidia-key-rejected-by-service_secure-boot.txt": ("driver_not_loaded", None),
    "nvidia_smi/029_error_nvml-version-mismatch_570.124.txt": ("version_mismatch", "570.124"),
    "nvidia_smi/030_error_nvml-version-mismatch_550.144.txt": ("version_mismatch", "550.144"),
    "nvidia_smi/031_error_nvml-version-mismatch_old-460-no-version-line.txt": ("version_mismatch", None),
    "nvidia_smi/032_error_couldnt-communicate-with-driver.txt": ("driver_not_loaded", None),
}
# Other nvidia-smi outputs outside those folders: `nvidia-smi -L` in a vGPU container (open-webui#5338).
ELSEWHERE = ("cuda_probe/002_success_open-webui-5338.txt",)
# Other folders of pasted texts: what smi answers there is explain's reading, or a refusal where explain finds
# nothing either (package lists, hexdumps, a successful CUDA sample); their Secure Boot outputs (SECURE_BOOT,
# below) get gpuhost secure-boot's reading.
OTHER_FOLDERS = ("corpus/errors", "errors", "corpus/host", "devchar", "secure_boot", "cuda_probe")


def _files(folders):
    out = []
    for folder in folders:
        directory = os.path.join(FIXTURES, folder)
        out.extend("%s/%s" % (folder, name) for name in sorted(os.listdir(directory))
                   if os.path.isfile(os.path.join(directory, name)))
    return out


def _not_smi(name):
    return next((what for pattern, what in NOT_NVIDIA_SMI if re.search(pattern, name)), None)


SECURE_BOOT = {
    "mokutil-sb-state_enabled_ubuntu22.04_salt-66955.txt": "--sb-state",
    "mokutil-sb-state_disabled_setup-mode_system76-firmware-open-388.txt": "--sb-state",
    "mokutil-sb-state_enabled_validation-disabled-in-shim_holoscan-aja-doc.txt": "--sb-state",
    "mokutil-sb-state-stderr_no-secure-boot_mokutil-source.txt": "--sb-state",
    "mokutil-stderr_efi-variables-not-supported_ublue-hwe-173.txt": "--sb-state",
    "mokutil-test-key_enrolled_dkms-mok.pub_r-pufky-docs.txt": "--test-key",
    "mokutil-test-key_enrolled_mokutil-commit-9ae73db.txt": "--test-key",
    "mokutil-test-key_not-enrolled_dkms-mok.pub_r-pufky-docs.txt": "--test-key",
    "lockdown_integrity_two-levels_ibm-linux-on-z-doc.txt": "--lockdown",
    "lockdown_none_two-levels_ibm-linux-on-z-doc.txt": "--lockdown",
    "lockdown_none_ubuntu18.04_bpftrace-2455.txt": "--lockdown",
}
SMI_OUTPUTS = [name for name in _files(SMI_FOLDERS) if not _not_smi(name)] + \
    [name for name in ERROR_TEXTS if not name.startswith("nvidia_smi/")] + list(ELSEWHERE)
OTHER_TEXTS = [name for name in _files(SMI_FOLDERS) if _not_smi(name) and not _not_smi(name) == "documentation"] + \
    [name for name in _files(OTHER_FOLDERS) if name not in ERROR_TEXTS and name not in ELSEWHERE
     and not name.endswith("README.md") and os.path.basename(name) not in SECURE_BOOT]


def expected_command(name):
    """The reader that answers each nvidia-smi output, from what the file is (its name says it)."""
    base = os.path.basename(name)
    if re.search(r"(?:^|_)topo-", base):
        return "topo"
    if re.search(r"_q-(?:grep-)?fabric_", base):
        return "fabric"
    if re.match(r"(?:lgip|lgipp|lgi|lci)_", base) or "_mig-lg" in base:
        return "mig"
    if name.startswith("gpu_reset/"):
        return "reset"
    return "smi"


@pytest.fixture
def smi_json(capsys):
    """cli.main in-process with --json: (exit status, the JSON object or None, stderr)."""
    def run(path):
        rc = cli.main(["--json", path])
        captured = capsys.readouterr()
        return rc, json.loads(captured.out) if captured.out else None, captured.err
    return run


def _path(name):
    return os.path.join(FIXTURES, name)


def test_the_fixtures_hold_the_forms_of_every_driver_era():
    names = " ".join(SMI_OUTPUTS)
    for form in ("_table_346.46", "_table_390.25", "_table_610.62", "_q_", "_qx_", "_query-gpu_",
                 "_query-compute-apps_", "_dmon_", "_pmon_", "_L_", "_version_", "_error_", "_topo-m_", "_mig-lgi",
                 "lgipp_", "lci_", "_q-grep-fabric_", "_table.txt"):
        assert form in names, form
    assert len(SMI_OUTPUTS) > 120


@pytest.mark.parametrize("name", SMI_OUTPUTS)
def test_every_nvidia_smi_output_is_read(smi_json, name):
    rc, out, err = smi_json(_path(name))
    assert rc == 0 and err == "", err
    assert out["command"] == expected_command(name), out["command"]
    if out["command"] == "smi":
        assert out["form"] in ("xml", "q", "table", "csv_query_gpu", "csv_compute_apps", "list", "version", "error",
                               "dmon", "pmon")
        # what was read is there: GPUs, processes, versions, or the error's state
        assert out["gpus"] or out["processes"] or out["driver_version"] or out["state"] != "ok"
        if out["partial"]:
            assert any(w.startswith("partial capture: ") for w in out["warnings"])
    else:
        assert out["read_as"] == cli.READ_AS[out["command"]] and out["reading"]


@pytest.mark.parametrize("name", sorted(ERROR_TEXTS))
def test_nvidia_smi_error_texts_read_as_their_state(smi_json, name):
    state, driver = ERROR_TEXTS[name]
    rc, out, err = smi_json(_path(name))
    assert rc == 0 and out["command"] == "smi" and out["form"] == "error"
    assert (out["state"], out["driver_version"]) == (state, driver)
    assert "not a recognised" not in json.dumps(out)


def test_what_else_an_error_paste_says_is_named(smi_json):
    _, out, _ = smi_json(_path("secure_boot/nvidia-smi-and-modprobe_key-rejected_ubuntu22.04-535_"
                               "nvidia-graphics-drivers-62.txt"))
    assert [(f["layer"], f["kind"], f["line"]) for f in out["also"]] == [("driver", "secure_boot_rejected", 2)]


@pytest.mark.parametrize("name", OTHER_TEXTS)
def test_other_texts_get_explain_or_a_one_line_refusal(smi_json, name):
    rc, out, err = smi_json(_path(name))
    with open(_path(name), "rb") as handle:
        findings = ex.explain(handle.read())["findings"]
    if findings:
        assert rc == 0 and out["command"] == "explain" and out["reading"]["findings"] == findings
    else:
        assert rc == 2 and out is None and err.startswith("gpuhost smi: ") and err.count("\n") == 1


# --- the same reading as the command's own -------------------------------------------------------------------

def _own(module, *args):
    """`gpuhost <command> --json ARGS` in-process: its JSON object."""
    import io
    from contextlib import redirect_stdout
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        module.main(["--json"] + list(args))
    return json.loads(buffer.getvalue())


@pytest.mark.parametrize("name", [n for n in SMI_OUTPUTS if expected_command(n) == "topo"])
def test_topology_is_gpuhost_topos_reading(smi_json, name):
    _, out, _ = smi_json(_path(name))
    assert out["reading"] == _own(topo_cli, _path(name))


@pytest.mark.parametrize("name", [n for n in SMI_OUTPUTS if expected_command(n) == "fabric"])
def test_fabric_excerpts_are_gpuhost_fabrics_reading(smi_json, name):
    _, out, _ = smi_json(_path(name))
    assert out["reading"] == _own(fabric_cli, _path(name))


def test_fabric_in_progress_says_so_first(capsys):
    # 8x H100 SXM (p5, RHEL 9), driver 570.133.20: "State : In Progress" - the fabric manager has not finished
    path = _path("nvidia_smi/059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt")
    assert cli.main([path]) == 0
    text = capsys.readouterr().out
    assert text.startswith("read as the Fabric blocks of `nvidia-smi -q`: the reading of `gpuhost fabric`\n")
    assert "fabric: not_ready: the NVSwitch fabric is not set up (State In Progress" in text


@pytest.mark.parametrize("name, verdict", [
    ("nvidia_smi/055_q_565.57.01_8xH100-SXM_fabric-completed-cliqueid0.txt", "ready"),
    ("nvidia_smi/056_q_555.42.02_4xA100-SXM4-80GB_fabric-NA_no-nvswitch.txt", "not_applicable"),
    ("nvidia_smi/057_q_590.48.01_H100-SXM-1gpu-vm_fabric-completed-health-block.txt", "ready"),
])
def test_a_whole_q_with_fabric_blocks_gets_facts_and_the_fabric_reading(smi_json, capsys, name, verdict):
    _, out, _ = smi_json(_path(name))
    assert out["command"] == "smi" and out["gpus"]
    assert out["fabric"] == _own(fabric_cli, _path(name)) and out["fabric"]["verdict"] == verdict
    cli.main([_path(name)])
    assert "fabric (as `gpuhost fabric` reads it):\n" in capsys.readouterr().out


def test_a_table_shows_no_fabric(smi_json):
    # the default table of the in-progress host looks healthy and has no Fabric block to read
    _, out, _ = smi_json(_path("nvidia_smi/061_table_570.133.20_8xH100-SXM_p5-rhel9_fabric-in-progress-looks-"
                               "healthy.txt"))
    assert out["command"] == "smi" and out["fabric"] is None and len(out["gpus"]) == 8


@pytest.mark.parametrize("name", [n for n in SMI_OUTPUTS if expected_command(n) == "mig"])
def test_mig_listings_are_gpuhost_migs_reading(smi_json, name):
    _, out, _ = smi_json(_path(name))
    found = mig_cli.read_listings([open(_path(name), "rb").read()])
    gpus = mig_cli.gpus_listed(found) or [0]
    assert [r["gpu"] for r in out["reading"]["gpus"]] == gpus
    for report in out["reading"]["gpus"]:
        assert report == _own(mig_cli, "--gpu", str(report["gpu"]), _path(name))


def test_an_lgip_excerpt_without_its_header_names_its_gpu(smi_json):
    # mig-parted#120: H200 GPU 6's rows only (1g.18gb ... 4g.71gb), no title, no header
    _, out, _ = smi_json(_path("mig/lgip_H200_gpu6_excerpt-no-header_mig-parted-120.txt"))
    (gpu6,) = out["reading"]["gpus"]
    assert gpu6["gpu"] == 6 and [p["name"] for p in gpu6["profiles"]] == [
        "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb"]


@pytest.mark.parametrize("name", sorted(SECURE_BOOT))
def test_secure_boot_outputs_are_gpuhost_secure_boots_reading(smi_json, name):
    path = _path("secure_boot/" + name)
    _, out, _ = smi_json(path)
    assert out["command"] == "secure-boot"
    option = SECURE_BOOT[name]
    if option == "--sb-state":
        assert out["reading"] == _own(secure_boot_cli, "--sb-state", path)
    else:
        # `gpuhost secure-boot` needs the Secure Boot state; smi reads the key or the lockdown file alone
        with open(path, "rb") as handle:
            text = handle.read()
        assert out["reading"] == secure_boot_cli.report_texts(
            **{"test_key" if option == "--test-key" else "lockdown": text})


def test_secure_boot_texts_name_the_key_and_the_lockdown(capsys):
    cli.main([_path("secure_boot/mokutil-test-key_not-enrolled_dkms-mok.pub_r-pufky-docs.txt")])
    assert "MOK: /var/lib/dkms/mok.pub is not enrolled" in capsys.readouterr().out
    cli.main([_path("secure_boot/lockdown_integrity_two-levels_ibm-linux-on-z-doc.txt")])
    assert "module signatures: enforced (kernel lockdown: integrity)" in capsys.readouterr().out


def test_the_real_entry_point_names_the_command_it_used():
    proc = subprocess.run([sys.executable, GPUHOST, "smi", _path("nvidia_smi/062_topo-m_8xH200_NV18_10xNIC-mlx5.txt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("read as `nvidia-smi topo -m` (or `topo -p2p`): the reading of `gpuhost topo`\n")
    assert "every GPU pair on NVLink: yes" in proc.stdout


# --- a GPU reset's output -------------------------------------------------------------------------------------

def test_a_reset_paste_says_which_gpus_were_reset(smi_json, capsys):
    rc, out, _err = smi_json(_path("gpu_reset/gpu-reset_8gpus_success_k8s-test-infra-759.txt"))
    assert rc == 0 and out["command"] == "reset" and out["reading"]["all_done"]
    assert len(out["reading"]["reset"]) == 8 and out["reading"]["not_reset"] == [] and out["reading"]["findings"] == []
    assert cli.main([_path("gpu_reset/reset_535_2xA100_success_yandex-enable-mig_dedented.txt")]) == 0
    assert capsys.readouterr().out.startswith("read as `nvidia-smi -r` (a GPU reset)")


def test_a_refused_reset_names_each_gpu_and_the_fix(smi_json):
    rc, out, _err = smi_json(_path("gpu_reset/reset_535_2xA100_in-use_yandex-troubleshooting.txt"))
    assert rc == 0 and out["command"] == "reset" and out["reading"]["reset"] == []
    assert [g["kind"] for g in out["reading"]["not_reset"]] == ["in_use", "in_use"]
    assert [f["kind"] for f in out["reading"]["findings"]] == ["gpu_reset_in_use"]
    assert "fuser -v /dev/nvidia*" in out["reading"]["findings"][0]["fix"]



# --- DCGM's diagnostic ------------------------------------------------------------------------------------------

def test_a_pasted_dcgm_diagnostic_names_the_failed_and_the_skipped_tests(smi_json, capsys):
    rc, out, _err = smi_json(_path("dcgm_diag/diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-skip.json"))
    assert rc == 0 and out["command"] == "dcgm-diag" and out["reading"]["version"] == "4.5.2"
    assert out["reading"]["verdict"]["status"] == "fail"
    assert [(s["gpu"], s["test"]) for s in out["reading"]["verdict"]["skipped"]] == [(0, "memory"), (0, "pcie")]
    assert cli.main([_path("dcgm_diag/diag-r2-j_4.5.2_GB10_software-fail_memory-pcie-pass.json")]) == 0
    text = capsys.readouterr().out
    # smi's own reading: no other gpuhost command is named.
    assert text.startswith("read as `dcgmi diag -j` (DCGM's GPU diagnostic)\nDCGM 4.5.2, driver 580.82.09: fail\n")
    assert "GPU 0: pcie (Integration) pass" in text and "(DCGM error 29)" in text
