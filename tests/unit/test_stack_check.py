"""gpu_stack_check's decisions (module_utils/layers/stack_check.py), each check on real outputs.

Real outputs: tests/fixtures/nvidia_smi (nvidia-smi), host/ (lspci, /proc/driver/nvidia/version),
nvidia_ctk/ (nvidia-ctk 1.20.0: CDI spec, `cdi list`, daemon.json). Where the corpus has no capture
(docker's error texts, Xid lines, dpkg-query), the text is the tool's own wording, cited in the test.
"""
import json
import os
import subprocess
import sys

import pytest

from host import dpkg
from layers import stack_check as sc
from layers import health
from containers import gpus_path as gp
from conftest import FIXTURES, MODULE_RUNNER, ROOT

SMI = os.path.join(FIXTURES, "nvidia_smi")
HOST = os.path.join(FIXTURES, "host")
CTK = os.path.join(FIXTURES, "nvidia_ctk")

# The format the simulator and the real open driver write (DESIGN.md "Boot"; host fixture 550.54.15).
PROC_580 = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu Sep 18 09:55:41 UTC 2025\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


def load(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8", newline="") as handle:
        return handle.read()


def cap(argv, rc=0, stdout="", stderr=""):
    return {"argv": list(argv), "rc": rc, "stdout": stdout, "stderr": stderr}


def gpu_captures(smi_name=None, smi_text=None, smi_rc=0, lspci=None, proc=None, smi_path="/usr/bin/nvidia-smi"):
    """Captures in the shape gpu_facts.capture() returns, from fixtures."""
    text = smi_text if smi_text is not None else (load(SMI, smi_name) if smi_name else "")
    # nvidia-smi prints its error texts on stdout, as the captures show.
    smi = [{"kind": "xml", "argv": [smi_path, "-q", "-x"], "rc": smi_rc, "stdout": text, "stderr": "",
            "fields": None}] if smi_path else []
    return {"nvidia_smi_path": smi_path, "nvidia_smi_requested": None, "smi": smi,
            "lspci": cap(["/usr/bin/lspci", "-nn", "-D"], 0, load(HOST, lspci)) if lspci else None,
            "sysfs_pci": None if lspci else [], "proc_version": proc,
            "proc_version_path": "/proc/driver/nvidia/version"}


def facts_of(caps, alive=True):
    return sc.build_facts(caps, pid_exists=lambda pid: alive)


# --- driver layer ------------------------------------------------------------------------------

def test_pci_lists_the_gpus_with_the_lspci_lines():
    caps = gpu_captures(lspci="lspci-nn-D_4xRTXPRO6000-server_rocky10.txt", smi_path=None)
    check = sc.check_pci(facts_of(caps), caps["lspci"])
    assert check["status"] == "ok" and check["layer"] == "driver"
    assert "4 NVIDIA GPU(s)" in check["summary"] and "RTX PRO 6000 Blackwell Server Edition" in check["summary"]
    assert len(check["evidence"]["lines"]) == 4 and all("[10de:2bb5]" in l for l in check["evidence"]["lines"])
    assert check["evidence"]["command"] == "/usr/bin/lspci -nn -D"


def test_pci_no_gpu_on_the_bus_fails_with_a_passthrough_hint():
    caps = gpu_captures(smi_path=None)
    caps["lspci"] = cap(["/usr/bin/lspci", "-nn", "-D"], 0,
                        "00:00.0 Host bridge [0600]: Intel Corporation 440FX [8086:1237] (rev 02)\n")
    check = sc.check_pci(facts_of(caps), caps["lspci"])
    assert check["status"] == "fail" and "passed through" in check["remedy"]


def test_kernel_module_open_and_proprietary_from_the_proc_file():
    facts = {"pci_devices": []}
    open_ = sc.check_kernel_module(load(HOST, "proc-driver-nvidia-version_open_550.54.15.txt"), facts)
    assert open_["status"] == "ok" and "open kernel module 550.54.15" in open_["summary"]
    assert open_["evidence"]["lines"][0].startswith("NVRM version: NVIDIA UNIX Open Kernel Module")
    prop = sc.check_kernel_module(load(HOST, "proc-driver-nvidia-version_proprietary_515.76.txt"), facts)
    assert prop["status"] == "ok" and prop["data"]["flavor"] == "proprietary"


def test_kernel_module_not_loaded_vs_not_installed():
    installed = sc.check_kernel_module(None, {"nvidia_smi_path": "/usr/bin/nvidia-smi", "pci_devices": []})
    assert installed["status"] == "fail" and "modprobe nvidia" in installed["remedy"]
    absent = sc.check_kernel_module(None, {"nvidia_smi_path": None, "state": "no_driver", "pci_devices": []})
    assert absent["status"] == "fail" and "--tags driver" in absent["remedy"]
    assert "no driver userspace" in absent["summary"]


def test_blackwell_needs_the_open_modules():
    caps = gpu_captures(lspci="lspci-nn-D_4xRTXPRO6000-server_rocky10.txt", smi_path=None)
    check = sc.check_kernel_module(load(HOST, "proc-driver-nvidia-version_proprietary_515.76.txt"), facts_of(caps))
    assert check["status"] == "fail" and "open kernel modules" in check["summary"]


def nodes(gpus=2, uvm=508, skip=(), wrong=None):
    found = dict(("/dev/nvidia%d" % i, {"kind": "char", "major": 195, "minor": i}) for i in range(gpus))
    found["/dev/nvidiactl"] = {"kind": "char", "major": 195, "minor": 255}
    found["/dev/nvidia-uvm"] = {"kind": "char", "major": uvm, "minor": 0}
    found["/dev/nvidia-uvm-tools"] = {"kind": "char", "major": uvm, "minor": 1}
    found.update(wrong or {})
    for path in skip:
        found.pop(path)
    return found


def test_device_nodes_ok_with_the_majors_and_minors():
    facts = {"gpus": [{"minor_number": 0}, {"minor_number": 1}], "gpu_count": 2}
    check = sc.check_device_nodes(nodes(), facts, "195 nvidia-frontend\n508 nvidia-uvm\n")
    assert check["status"] == "ok"
    assert "crw 195, 255 /dev/nvidiactl" in check["evidence"]["lines"]


def test_device_nodes_missing_and_wrong():
    facts = {"gpus": [{"minor_number": 0}, {"minor_number": 1}], "gpu_count": 2}
    missing = sc.check_device_nodes(nodes(skip=["/dev/nvidia1"]), facts)
    assert missing["status"] == "fail" and "missing /dev/nvidia1" in missing["summary"]
    # nvidia-ctk makes only the control nodes; a GPU's node comes from nvidia-modprobe -c=<minor>
    assert "`nvidia-modprobe -c=1`" in missing["remedy"] and "create-device-nodes" not in missing["remedy"]
    assert "/dev/nvidia1: no such file" in missing["evidence"]["lines"]
    wrong = sc.check_device_nodes(nodes(wrong={"/dev/nvidiactl": {"kind": "char", "major": 195, "minor": 0}}), facts)
    assert wrong["status"] == "fail" and "/dev/nvidiactl is c 195 0, expected c 195 255" in wrong["summary"]
    assert wrong["remedy"].startswith("remove the wrong node(s) (`rm /dev/nvidiactl`)")
    assert "create-device-nodes --control-devices" in wrong["remedy"]
    uvm = sc.check_device_nodes(nodes(), facts, "509 nvidia-uvm\n")
    assert uvm["status"] == "fail" and "expected c 509 0" in uvm["summary"]


def test_device_nodes_uvm_missing_is_a_warning_and_no_module_skips():
    facts = {"gpus": [{"minor_number": 0}, {"minor_number": 1}]}
    assert sc.check_device_nodes(nodes(skip=["/dev/nvidia-uvm-tools"]), facts)["status"] == "warn"
    # nvidia-uvm is loaded on the first CUDA use: missing on a host that ran nothing yet
    uvm = sc.check_device_nodes(nodes(skip=["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]), facts)
    assert uvm["status"] == "warn" and "create-device-nodes" in uvm["remedy"]
    assert sc.check_device_nodes({}, facts, module_loaded=False)["status"] == "skipped"


def test_uvm_major_from_proc_devices():
    assert sc.uvm_major("Character devices:\n  1 mem\n195 nvidia-frontend\n511 nvidia-uvm\n") == 511
    assert sc.uvm_major("Character devices:\n  1 mem\n") is None


def test_nvml_ok_on_a_real_xml_with_a_matching_module():
    proc = PROC_580.replace("580.95.05", "590.44.01")
    caps = gpu_captures("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml", proc=proc)
    check = sc.check_nvml(facts_of(caps), caps)
    assert check["status"] == "ok", check
    assert "<driver_version>590.44.01</driver_version>" in check["evidence"]["lines"]


def test_nvml_real_xml_against_another_module_warns():
    # A10G at 515.105.01 with the 515.76 module file from another host: the versions differ.
    caps = gpu_captures("041_qx_515.105.01_A10G.xml",
                        proc=load(HOST, "proc-driver-nvidia-version_proprietary_515.76.txt"))
    check = sc.check_nvml(facts_of(caps), caps)
    assert check["status"] == "warn" and "differs from userspace" in check["summary"]


@pytest.mark.parametrize("name", ["029_error_nvml-version-mismatch_570.124.txt",
                                  "030_error_nvml-version-mismatch_550.144.txt"])
def test_nvml_mismatch_says_reboot_or_reload(name):
    caps = gpu_captures(name, smi_rc=18, proc=PROC_580)
    check = sc.check_nvml(facts_of(caps), caps)
    assert check["status"] == "fail" and "mismatch" in check["summary"]
    assert "kernel module 580.95.05" in check["summary"]
    assert check["remedy"].startswith("reboot") and "rmmod" in check["remedy"]
    assert any("version mismatch" in l for l in check["evidence"]["lines"])


def test_nvml_cannot_communicate_means_module_not_loaded():
    caps = gpu_captures("032_error_couldnt-communicate-with-driver.txt", smi_rc=9)
    check = sc.check_nvml(facts_of(caps), caps)
    assert check["status"] == "fail" and "modprobe nvidia" in check["remedy"]


def test_persistence_off_on_a_real_xml():
    caps = gpu_captures("041_qx_515.105.01_A10G.xml", proc=PROC_580.replace("580.95.05", "515.105.01"))
    check = sc.check_persistence(facts_of(caps), caps, persistenced_active="inactive")
    assert check["status"] == "fail" and check["layer"] == "persistence"
    assert "GPU 0" in check["summary"] and "nvidia-persistenced is inactive" in check["summary"]
    assert "<persistence_mode>Disabled</persistence_mode>" in check["evidence"]["lines"]
    assert "systemctl enable --now nvidia-persistenced" in check["remedy"]


def test_persistence_on_on_a_real_xml():
    caps = gpu_captures("043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml", proc=PROC_580.replace("580.95.05", "590.44.01"))
    assert sc.check_persistence(facts_of(caps), caps)["status"] == "ok"


# --- docker, toolkit, runtime ------------------------------------------------------------------

DOCKER_INFO = {"ServerVersion": "26.1.5+dfsg1", "Driver": "overlay2", "DefaultRuntime": "runc",
               "Runtimes": {"io.containerd.runc.v2": {"path": "runc"}, "nvidia": {"path": "nvidia-container-runtime"},
                            "runc": {"path": "runc"}}}
INFO_CMD = ["/usr/bin/docker", "info", "--format", "{{json .}}"]


def test_docker_up_down_absent():
    up = sc.check_docker(cap(INFO_CMD, 0, json.dumps(DOCKER_INFO)), "/usr/bin/docker")
    assert up["status"] == "ok" and "26.1.5" in up["summary"]
    # docker's own text when the socket has no daemon behind it
    down = sc.check_docker(cap(INFO_CMD, 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                                                "Is the docker daemon running?\n"), "/usr/bin/docker")
    assert down["status"] == "fail" and "systemctl enable --now docker" in down["remedy"]
    assert "Is the docker daemon running?" in down["evidence"]["lines"][0]
    # 20.10's client prints the JSON with ServerErrors and exits 0... or 1; both are down.
    info = {"ServerErrors": ["Cannot connect to the Docker daemon at unix:///var/run/docker.sock."]}
    assert sc.check_docker(cap(INFO_CMD, 0, json.dumps(info)), "/usr/bin/docker")["status"] == "fail"
    absent = sc.check_docker(None, None)
    assert absent["status"] == "fail" and "--tags docker" in absent["remedy"]


def test_runtime_registered():
    daemon = load(CTK, "docker_configure_existing-keys.json")
    check = sc.check_runtime(cap(INFO_CMD, 0, json.dumps(DOCKER_INFO)), daemon, True)
    assert check["status"] == "ok" and check["layer"] == "runtime_config"


def test_runtime_not_registered_names_configure_and_restart():
    info = dict(DOCKER_INFO, Runtimes={"runc": {"path": "runc"}})
    check = sc.check_runtime(cap(INFO_CMD, 0, json.dumps(info)), '{"log-opts": {"max-size": "10m"}}')
    assert check["status"] == "fail"
    assert check["summary"] == "nvidia runtime not registered with docker"
    assert check["remedy"] == "run `nvidia-ctk runtime configure --runtime=docker` and restart docker"


def test_runtime_configured_but_docker_not_restarted():
    info = dict(DOCKER_INFO, Runtimes={"runc": {"path": "runc"}})
    check = sc.check_runtime(cap(INFO_CMD, 0, json.dumps(info)), load(CTK, "docker_configure_missing-file.json"))
    assert check["status"] == "fail" and check["remedy"].startswith("restart docker")


def test_runtime_skipped_when_docker_is_down_and_cdi_detection():
    down = sc.check_runtime(cap(INFO_CMD, 1, "", "Cannot connect to the Docker daemon"), None)
    assert down["status"] == "skipped"
    cdi = json.loads(load(CTK, "docker_configure_cdi-enabled.json"))
    assert sc.cdi_enabled(DOCKER_INFO, cdi) is True
    assert sc.cdi_enabled(DOCKER_INFO, {}) is False
    assert sc.cdi_enabled(dict(DOCKER_INFO, ServerVersion="20.10.24+dfsg1"), cdi) is False
    assert sc.cdi_enabled(dict(DOCKER_INFO, ServerVersion="28.0.1"), {}) is True


DPKG_CMD = dpkg.query_argv("/usr/bin/dpkg-query", sc.DEFAULT_TOOLKIT_PACKAGES)
GENERIC = os.path.join(FIXTURES, "generic")


def test_toolkit_packages_installed():
    out = ("nvidia-container-toolkit\t1.18.0-1\tii \nnvidia-container-toolkit-base\t1.18.0-1\tii \n"
           "libnvidia-container-tools\t1.18.0-1\tii \nlibnvidia-container1:amd64\t1.18.0-1\tii \n")
    ctk = cap(["/usr/bin/nvidia-ctk", "--version"], 0, "NVIDIA Container Toolkit CLI version 1.18.0\n"
                                                       "commit: f8daa5e26de9fd7eb79259040b6dd5a52060048c\n")
    check = sc.check_toolkit(cap(DPKG_CMD, 0, out), ctk, "/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime-hook")
    assert check["status"] == "ok" and "1.18.0-1" in check["summary"] and check["data"]["nvidia_ctk_version"] == "1.18.0"


def test_toolkit_removed_package_and_missing_binaries():
    # dpkg-query's own wording for an unknown name (stderr, exit 1); 'rc' = removed, config files left
    # (generic/dpkg-query-W_toolkit-base_rc_scratch-db.txt: real dpkg 1.21.22 after `dpkg -r`).
    out = load(GENERIC, "dpkg-query-W_toolkit-base_rc_scratch-db.txt") + "libnvidia-container1\t1.18.0-1\tii \n"
    err = ("dpkg-query: no packages found matching nvidia-container-toolkit\n"
           "dpkg-query: no packages found matching libnvidia-container-tools\n")
    check = sc.check_toolkit(cap(DPKG_CMD, 1, out, err), None, None, None)
    assert check["status"] == "fail" and check["layer"] == "toolkit"
    assert "not installed: nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools" \
        in check["summary"]
    assert "nvidia-ctk not found" in check["summary"] and "--tags toolkit" in check["remedy"]


def test_toolkit_held_counts_as_installed_and_half_configured_does_not():
    """Real dpkg 1.21.22 states (generic/ scratch database): base held (hi), the toolkit half-configured (iF, its
    postinst failed), tools unpacked only (iU), libnvidia-container1 installed (ii) at 1.17.7-1."""
    out = load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db.txt")
    err = load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db_stderr.txt")
    check = sc.check_toolkit(cap(DPKG_CMD, 1, out, err), cap(["nvidia-ctk", "--version"], 0, "version 1.17.8"),
                             "/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime-hook")
    assert check["status"] == "fail"
    assert "not installed" not in check["summary"]   # the held base is installed
    assert ("left half done by dpkg: nvidia-container-toolkit half-configured (dpkg iF), libnvidia-container-tools "
            "unpacked (dpkg iU)") in check["summary"]
    assert check["data"]["packages"] == {"nvidia-container-toolkit-base": "1.17.8-1", "libnvidia-container1": "1.17.7-1"}


def test_toolkit_versions_not_pinned_together_warns():
    out = ("nvidia-container-toolkit\t1.18.0-1\tii \nnvidia-container-toolkit-base\t1.17.8-1\tii \n"
           "libnvidia-container-tools\t1.18.0-1\tii \nlibnvidia-container1\t1.18.0-1\thi \n")
    check = sc.check_toolkit(cap(DPKG_CMD, 0, out), cap(["nvidia-ctk", "--version"], 0, "version 1.17.8"),
                             "/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime-hook")
    assert check["status"] == "warn"


# --- CDI ---------------------------------------------------------------------------------------

def spec_text():
    return load(CTK, "cdi-generate_mock-A100_nvidia.yaml")


def test_cdi_spec_fresh():
    check = sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": spec_text()}, "999.88.77", 1)
    assert check["status"] == "ok" and "fresh for driver 999.88.77" in check["summary"]


def test_cdi_spec_missing():
    check = sc.check_cdi_spec({}, "580.95.05", 1)
    assert check["status"] == "fail" and "no CDI spec at /etc/cdi/nvidia.yaml" in check["summary"]
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in check["remedy"]
    only_run = sc.check_cdi_spec({"/var/run/cdi/nvidia.yaml": spec_text()}, "999.88.77", 1)
    assert "only /var/run/cdi/nvidia.yaml (wiped at reboot)" in only_run["summary"]


def test_cdi_spec_stale_after_an_upgrade():
    check = sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": spec_text()}, "580.105.08", 1)
    assert check["status"] == "fail" and "stale" in check["summary"]
    assert "999.88.77" in check["summary"] and "580.105.08" in check["summary"]
    assert "regenerate it for the loaded driver" in check["remedy"]


def test_cdi_spec_shadowed_by_var_run():
    check = sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": spec_text(), "/var/run/cdi/nvidia.yaml": spec_text()},
                              "999.88.77", 1)
    assert check["status"] == "fail" and check["data"]["shadowed_by"] == ["/var/run/cdi/nvidia.yaml"]
    assert "remove /var/run/cdi/nvidia.yaml" in check["remedy"] and "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH" in check["remedy"]


def test_cdi_spec_malformed_and_too_few_gpus():
    bad = sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": load(CTK, "docker_configure_missing-file.json")}, "1.0", 1)
    assert bad["status"] == "fail" and "not a CDI spec" in bad["summary"]
    few = sc.check_cdi_spec({"/etc/cdi/nvidia.yaml": spec_text()}, "999.88.77", 2)
    assert few["status"] == "fail" and "lists 1 GPU(s), nvidia-smi lists 2" in few["summary"]


def test_cdi_list_real_outputs():
    ok = sc.check_cdi_list(cap(["/usr/bin/nvidia-ctk", "cdi", "list"], 0, load(CTK, "cdi-list_with-spec.stdout")),
                           "/usr/bin/nvidia-ctk")
    assert ok["status"] == "ok" and "nvidia.com/gpu=all" in ok["data"]["devices"]
    none = sc.check_cdi_list(cap(["/usr/bin/nvidia-ctk", "cdi", "list"], 0, "", load(CTK, "cdi-list_no-spec.stderr")),
                             "/usr/bin/nvidia-ctk")
    assert none["status"] == "fail" and any("Found 0 CDI devices" in l for l in none["evidence"]["lines"])
    assert sc.check_cdi_list(None, None)["status"] == "skipped"


# --- container ---------------------------------------------------------------------------------

UUIDS = ["GPU-8d163861-7b18-489e-88ea-e453e9eabc3d", "GPU-c121693e-e25c-4a1c-bb55-c4754eefcd14"]
RUN = ["/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--gpus", "all", "img", "nvidia-smi", "-L"]


def test_container_lists_the_host_gpus_real_L_output():
    text = load(SMI, "027_L_590.48.01_H100.txt")
    uuids = [l.split("UUID: ")[1].rstrip(")\r\n ") for l in text.splitlines() if "UUID: " in l]
    check = sc.check_container(cap(RUN, 0, text), uuids, "img")
    assert check["status"] == "ok" and check["data"]["uuids"] == uuids


def test_container_sees_fewer_gpus():
    out = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: %s)\n" % UUIDS[0]
    check = sc.check_container(cap(RUN, 0, out), UUIDS, "img")
    assert check["status"] == "fail" and "1 of the host's 2" in check["summary"]


# docker's own error texts (docker CLI / daemon / libnvidia-container wording)
@pytest.mark.parametrize("stderr,cause,status,remedy", [
    ("docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].",
     "no_gpu_driver", "fail", "--tags toolkit"),
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia.", "runtime_unknown", "fail",
     "nvidia-ctk runtime configure"),
    ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
     "runtime create failed: runc create failed: unable to start container process: error during container init: "
     "error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
     "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown.", "driver", "fail",
     "driver layer"),
    ("docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI "
     "runtime create failed: runc create failed: unable to start container process: exec: \"nvidia-smi\": "
     "executable file not found in $PATH: unknown.", "no_nvidia_smi", "fail", "NVIDIA_DRIVER_CAPABILITIES"),
    ("docker: Error response from daemon: could not select device driver \"cdi\" with capabilities: []. "
     "unresolvable CDI devices nvidia.com/gpu=all.", "no_gpu_driver", "fail", "toolkit"),
    ("Unable to find image 'img:latest' locally\ndocker: Error response from daemon: No such image: img:latest.",
     "image_absent", "warn", "docker load"),
])
def test_container_failures_are_classified(stderr, cause, status, remedy):
    check = sc.check_container(cap(RUN, 125, "", stderr), UUIDS, "img")
    assert check["data"]["cause"] == cause and check["status"] == status
    assert remedy in check["remedy"]


def test_cdi_container_unresolvable():
    err = ("docker: Error response from daemon: CDI device injection failed: unresolvable CDI devices "
           "nvidia.com/gpu=all.")
    check = sc.check_container(cap(RUN, 125, "", err), UUIDS, "img", mode="cdi")
    assert check["name"] == "container_cdi" and check["data"]["cause"] == "cdi_unresolvable"
    assert "nvidia-ctk cdi generate" in check["remedy"]


def test_cdi_container_of_a_stale_spec_is_a_mount_failure():
    # trixie's runc (docker.io 26) on a spec made for 580.95.05 after the upgrade to 580.105.08 (drift scenario).
    err = ('docker: Error response from daemon: failed to create task for container: failed to create shim task: '
           'OCI runtime create failed: runc create failed: unable to start container process: error during container '
           'init: error mounting "/lib/x86_64-linux-gnu/libcuda.so.580.95.05" to rootfs at '
           '"/lib/x86_64-linux-gnu/libcuda.so.580.95.05": create mount destination for '
           '/lib/x86_64-linux-gnu/libcuda.so.580.95.05 mount: bind mount source stat: stat '
           '/lib/x86_64-linux-gnu/libcuda.so.580.95.05: no such file or directory: unknown.')
    check = sc.check_container(cap(RUN, 127, "", err), UUIDS, "img", mode="cdi")
    assert check["data"]["cause"] == "mount" and check["status"] == "fail"
    assert "stale spec" in check["summary"] and "regenerate the CDI spec" in check["remedy"]


# --- health ------------------------------------------------------------------------------------

def test_zombie_memory_on_a_real_xml():
    # A10G capture: one process (pid 725). Not on this host -> held by nobody.
    caps = gpu_captures("041_qx_515.105.01_A10G.xml", proc=PROC_580.replace("580.95.05", "515.105.01"))
    dead = sc.check_zombies(facts_of(caps, alive=False), caps)
    assert dead["status"] == "fail" and dead["layer"] == "health"
    assert "725" in dead["summary"] and "fuser -v /dev/nvidia*" in dead["remedy"]
    alive = sc.check_zombies(facts_of(caps, alive=True), caps)
    assert alive["status"] == "ok"


def test_gpu_idle_is_not_throttling_on_a_real_xml():
    caps = gpu_captures("041_qx_515.105.01_A10G.xml", proc=PROC_580.replace("580.95.05", "515.105.01"))
    facts = facts_of(caps)
    assert facts["gpus"][0]["clocks_event_reasons_active"] == ["gpu_idle"]
    assert sc.check_throttle(facts, caps)["status"] == "ok"


def test_thermal_throttling_names_cooling():
    facts = {"state": "ok", "gpus": [{"index": 0, "clocks_event_reasons_active": ["gpu_idle"]},
                                     {"index": 1, "clocks_event_reasons_active": ["hw_thermal_slowdown"]}]}
    check = sc.check_throttle(facts, {"smi": []})
    assert check["status"] == "fail" and "GPU 1 hw_thermal_slowdown" in check["summary"]
    assert "cooling" in check["remedy"]


# Xid lines: the simulator's format (DESIGN.md "Kernel log"), and public kernel logs: a row-remapper
# line quoted in stas00/ml-engineering (debug.md), a journalctl capture from kohsuke's gist
# (84ce815d0a8ad85ecaf6), a Xid 79 from NVIDIA/open-gpu-kernel-modules#1151.
KMSG = """\
[    3.500000] NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[    3.500731] NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.
[ 1843.308145] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
Dec 23 23:30:56 rescue kernel: [ 179.437933] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000005 intr 00008000
May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
[  200.1] NVRM: Xid (PCI:0000:17:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0)
"""


def test_parse_xids():
    events = sc.parse_xids(KMSG)
    assert [e["code"] for e in events] == [79, 63, 32, 79, 13]
    assert events[0]["pci"] == "0000:17:00" and events[0]["pid"] is None and events[0]["name"] is None
    assert events[0]["message"] == "GPU has fallen off the bus."
    assert events[1]["pid"] == 1896 and events[1]["message"].startswith("Row Remapper")
    assert events[4]["pid"] == 4242 and events[4]["name"] == "python3"


def test_xid_check_names_the_worst_and_its_meaning():
    check = sc.check_xid(cap(["/usr/bin/dmesg"], 0, KMSG))
    assert check["status"] == "fail" and check["layer"] == "health"
    codes = dict((x["code"], x) for x in check["data"]["xids"])
    assert codes[79]["count"] == 2 and codes[79]["description"] == "GPU has fallen off the bus"
    assert codes[63]["action"] == "IGNORE" and codes[13]["action"] == "RESTART_APP"
    assert check["remedy"].startswith("Xid 79") and "reboot" in check["remedy"]
    assert len(check["evidence"]["lines"]) == 5


def test_xid_catalogue_covers_the_common_codes():
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert code in sc.XID_CATALOGUE, code
        assert sc.XID_CATALOGUE[code][2] in sc.XID_ACTIONS


def test_xid_none_only_45_and_unreadable():
    assert sc.check_xid(cap(["dmesg"], 0, "[    0.0] Linux version 6.1\n"))["status"] == "ok"
    only45 = sc.check_xid(cap(["dmesg"], 0, "NVRM: Xid (PCI:0000:17:00): 45, pid=1, name=x, Ch 00000010\n"))
    assert only45["status"] == "ok" and only45["data"]["xids"][0]["code"] == 45
    # util-linux's wording when dmesg_restrict is set
    denied = sc.check_xid(cap(["dmesg"], 1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"))
    assert denied["status"] == "warn" and "journalctl -k" in denied["remedy"]


# --- layers, first failure ---------------------------------------------------------------------

def mk(name, layer, status, summary="s", remedy="r"):
    return sc.result(name, layer, status, summary, remedy=remedy)


def test_first_failing_required_layer_and_its_message():
    checks = [mk("pci", "driver", "ok"), mk("docker", "docker", "ok"),
              sc.result("runtime", "runtime_config", "fail", "nvidia runtime not registered with docker",
                        remedy=sc.REMEDY_CONFIGURE),
              mk("cdi_spec", "cdi", "fail"), mk("xid", "health", "fail")]
    out = sc.summarise(checks)
    assert out["failed_layer"] == "runtime_config" and not out["ok"]
    assert out["message"] == ("toolkit configuration: nvidia runtime not registered with docker — run "
                              "`nvidia-ctk runtime configure --runtime=docker` and restart docker")
    assert out["layers"]["health"]["status"] == "warn" and out["layers"]["cdi"]["status"] == "fail"
    assert [l for l in sc.LAYERS if l not in out["layers"]] == []


def test_health_fails_only_when_required():
    checks = [mk("pci", "driver", "ok"), mk("xid", "health", "fail", "Xid 79")]
    out = sc.summarise(checks)
    assert out["failed_layer"] is None and out["ok"] and "warnings" in out["message"]
    assert out["checks"][1]["status"] == "warn" and out["checks"][1]["required"] is False
    required = sc.summarise(checks, list(sc.LAYERS))
    assert required["failed_layer"] == "health"


def test_statuses_are_checked():
    with pytest.raises(ValueError):
        sc.result("x", "driver", "broken", "s")
    with pytest.raises(ValueError):
        sc.result("x", "nowhere", "ok", "s")


def test_kernel_log_argv():
    assert sc.kernel_log_argv("journalctl -k -b --no-pager") == ["journalctl", "-k", "-b", "--no-pager"]
    assert sc.kernel_log_argv(["/usr/local/bin/gpusim", "kmsg"]) == ["/usr/local/bin/gpusim", "kmsg"]


# --- the whole pipeline on a fake host, and the module's documentation ------------------------

class FakeIO(object):
    def __init__(self, commands, files, dirs, nodes_):
        self.commands, self.files, self.dirs, self.nodes = commands, files, dirs, nodes_
        self.ran = []

    def which(self, name):
        return "/usr/bin/" + name if any(k[0] == "/usr/bin/" + name for k in self.commands) else None

    def run(self, argv):
        self.ran.append(list(argv))
        for key, value in self.commands.items():
            if tuple(argv[:len(key)]) == key:
                return value
        return 127, "", "%s: not found" % argv[0]

    def read(self, path):
        return self.files.get(path)

    def listdir(self, path):
        return self.dirs.get(path)

    def exists(self, path):
        return path in self.files or path in self.dirs

    def readlink(self, path):
        return getattr(self, "links", {}).get(path)

    def stat(self, path):
        node = self.nodes.get(path)
        if node is None:
            return None

        class St(object):
            st_mode = 0o20666
            st_rdev = os.makedev(node["major"], node["minor"])
        return St()


CUDA_PROBE = os.path.join(FIXTURES, "cuda_probe")
PROBE_OPTS = {"check_image": "img", "cuda_probe_image": "probe"}
PROBE_RUN = ("/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--gpus", "all", "probe")


def healthy_host():
    xml = load(SMI, "043_qx_590.44.01_RTX-PRO-6000-Blackwell_v13.xml")
    uuid = "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"
    spec = spec_text().replace("999.88.77", "590.44.01")
    dpkg = "".join("%s\t1.18.0-1\tii \n" % p for p in sc.DEFAULT_TOOLKIT_PACKAGES)
    commands = {
        ("/usr/bin/nvidia-smi", "-q", "-x"): (0, xml, ""),
        ("/usr/bin/lspci",): (0, load(HOST, "lspci-nn-D_GB10-dgx-spark.txt"), ""),
        ("/usr/bin/systemctl",): (0, "active\n", ""),
        ("/usr/bin/docker", "info"): (0, json.dumps(DOCKER_INFO), ""),
        ("/usr/bin/dpkg-query",): (0, dpkg, ""),
        ("/usr/bin/nvidia-ctk", "--version"): (0, "NVIDIA Container Toolkit CLI version 1.18.0\n", ""),
        ("/usr/bin/nvidia-ctk", "cdi", "list"): (0, load(CTK, "cdi-list_with-spec.stdout"), ""),
        PROBE_RUN: (0, load(CUDA_PROBE, "001_success_gpu-operator-346.txt"), ""),
        ("/usr/bin/docker", "run"): (0, "GPU 0: NVIDIA RTX PRO 6000 (UUID: %s)\n" % uuid, ""),
        ("/usr/bin/dmesg",): (0, "[    0.000000] Linux version 6.12\n", ""),
        ("/usr/bin/nvidia-container-runtime-hook",): (0, "", ""),
        ("/usr/bin/nvidia-container-runtime",): (0, "", ""),
    }
    files = {"/proc/driver/nvidia/version": PROC_580.replace("580.95.05", "590.44.01"),
             "/etc/docker/daemon.json": load(CTK, "docker_configure_cdi-enabled.json"),
             "/etc/cdi/nvidia.yaml": spec, "/proc/devices": "195 nvidia\n508 nvidia-uvm\n"}
    dirs = {"/dev": ["null", "nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"], "/etc/cdi": ["nvidia.yaml"]}
    return FakeIO(commands, files, dirs, nodes(gpus=1))


def test_pipeline_on_a_healthy_fake_host():
    io = healthy_host()
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    statuses = dict((c["name"], c["status"]) for c in out["checks"])
    assert out["failed_layer"] is None, out["message"]
    assert statuses["container_gpus"] == "ok" and statuses["container_cdi"] == "ok"
    assert statuses["container_cuda"] == "ok"
    assert statuses["xid"] == "ok" and statuses["nvml"] == "ok"
    runs = [r for r in io.ran if r[:2] == ["/usr/bin/docker", "run"]]
    assert len(runs) == 4 and all("--rm" in r and "never" in r for r in runs)
    assert ["/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--gpus", "all",
            "--entrypoint", "env", "img"] in runs
    assert list(PROBE_RUN) + ["/cuda-samples/vectorAdd"] in runs
    assert ["/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--device",
            "nvidia.com/gpu=all", "img", "nvidia-smi", "-L"] in runs


def test_pipeline_docker_stopped_skips_the_containers():
    io = healthy_host()
    io.commands[("/usr/bin/docker", "info")] = (1, "", "Cannot connect to the Docker daemon at "
                                                      "unix:///var/run/docker.sock. Is the docker daemon running?")
    out = sc.evaluate(sc.capture(io, {}), {})
    assert out["failed_layer"] == "docker" and "systemctl enable --now docker" in out["message"]
    assert not [r for r in io.ran if r[:2] == ["/usr/bin/docker", "run"]]
    statuses = dict((c["name"], c["status"]) for c in out["checks"])
    assert statuses["container_gpus"] == "skipped" and statuses["runtime"] == "skipped"


def test_module_documents_every_option_and_return_key():
    sys.path.insert(0, os.path.join(ROOT, "library"))
    import yaml
    import gpu_stack_check as mod
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert set(doc["options"]) == set(mod.ARGUMENT_SPEC)
    for name, spec in mod.ARGUMENT_SPEC.items():
        assert doc["options"][name]["type"] == spec["type"], name
        if "default" in spec:
            assert doc["options"][name]["default"] == spec["default"], name
    ret = yaml.safe_load(mod.RETURN)
    io = healthy_host()
    out = sc.evaluate(sc.capture(io, {}), {})
    assert set(out) == set(ret) - {"drift"}, set(out) ^ set(ret)
    out = sc.evaluate(sc.capture(io, {"compare_record": True}), {"compare_record": True})
    assert set(out) == set(ret), set(out) ^ set(ret)


RECORD = "/etc/ansible/facts.d/gpuhost.fact"


def test_compare_record_gives_the_drift_in_the_same_call():
    # drift.yml's check in one module call: the recorded driver (580.95.05) is not the one loaded (590.44.01), the
    # recorded driver package is not installed, the recorded serving container is gone.
    io = healthy_host()
    io.files[RECORD] = json.dumps({"driver": {"version": "580.95.05", "packages": ["nvidia-driver-580-server"]},
                                   "vllm": {"instances": [{"name": "vllm-a"}]}})
    opts = {"compare_record": True}
    drift = sc.evaluate(sc.capture(io, opts), opts)["drift"]
    assert drift["drifted"] and drift["recorded_driver_version"] == "580.95.05"
    assert drift["loaded_driver_version"] == "590.44.01"
    codes = dict((layer, [f["code"] for f in v["findings"]]) for layer, v in drift["layers"].items())
    assert "driver_changed" in codes["driver"] and "package_missing" in codes["driver"]
    assert codes["serving"] == ["serving_down"]
    assert "nvidia_driver" in drift["repair_roles"] and "vllm" in drift["repair_roles"]
    assert [r for r in io.ran if r[0] == "dpkg-query"][0][-1] == "nvidia-driver-580-server"
    assert ["/usr/bin/docker", "inspect", "-f", "{{.State.Status}}", "vllm-a"] in io.ran


def test_compare_record_names_a_malformed_record_and_the_fix():
    io = healthy_host()
    io.files[RECORD] = "{oops"
    opts = {"compare_record": True}
    drift = sc.evaluate(sc.capture(io, opts), opts)["drift"]
    assert drift["error"].startswith("gpuhost record: %s is not valid JSON" % RECORD)
    assert drift["error"].endswith("run site.yml to write it again")


def test_without_compare_record_the_record_is_not_compared():
    io = healthy_host()
    io.files[RECORD] = json.dumps({"driver": {"version": "580.95.05", "packages": ["nvidia-driver-580-server"]}})
    out = sc.evaluate(sc.capture(io, {}), {})
    assert "drift" not in out and not [r for r in io.ran if r[0] == "dpkg-query"]


def test_module_never_fails_a_broken_host(tmp_path):
    """The module run directly on this machine (no GPU, no docker daemon at DOCKER_HOST): data, no failure."""
    pytest.importorskip("ansible")
    args = {"container_check": False, "kernel_log_command": "true", "_ansible_check_mode": True}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ,
               DOCKER_HOST="unix://%s/no-docker.sock" % tmp_path)
    proc = subprocess.run([sys.executable, *MODULE_RUNNER, os.path.join(ROOT, "library", "gpu_stack_check.py"), str(args_file)],
                          capture_output=True, text=True, env=env, timeout=120)
    res = json.loads(proc.stdout)
    assert not res.get("failed"), res
    assert res["changed"] is False and res["failed_layer"] in ("driver", "docker")
    assert [c["name"] for c in res["checks"]] == ["hardware", "driver_basics", "pci", "kernel_module",
                                                  "module_signature", "next_boot", "driver_upgrade", "device_nodes", "nvml",
                                                  "fabric_basics", "fabric",
                                                  "persistence_basics", "persistence", "mig_layout",
                                                  "dcgm_basics", "dcgm",
                                                  "docker_basics", "docker", "container_limits",
                                                  "toolkit_basics", "toolkit",
                                                  "runtime_config_basics", "runtime", "dev_char",
                                                  "cdi_basics", "cdi_spec", "cdi_list",
                                                  "container_gpus", "gpus_path", "container_cdi", "container_cuda",
                                                  "serving_gpus", "serving_running",
                                                  "zombies", "throttle",
                                                  "xid", "compute_mode", "dcgm_diag"]
    assert res["message"].startswith(sc.LAYER_TITLES[res["failed_layer"]] + ": ")


def test_fail_on_required_fails_with_the_diagnosis(tmp_path):
    pytest.importorskip("ansible")
    args = {"container_check": False, "kernel_log_command": "true", "fail_on_required": True}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ,
               DOCKER_HOST="unix://%s/no-docker.sock" % tmp_path)
    proc = subprocess.run([sys.executable, *MODULE_RUNNER, os.path.join(ROOT, "library", "gpu_stack_check.py"), str(args_file)],
                          capture_output=True, text=True, env=env, timeout=120)
    res = json.loads(proc.stdout)
    assert res["failed"] is True and res["msg"].startswith(sc.LAYER_TITLES[res["failed_layer"]])
    assert len(res["checks"]) == 38


def test_a_check_that_raises_is_a_warning_not_a_failure(monkeypatch):
    def broken(*_args, **_kwargs):
        raise KeyError("gpus")
    monkeypatch.setattr(health, "check_throttle", broken)
    out = sc.evaluate(sc.capture(healthy_host(), PROBE_OPTS), PROBE_OPTS)
    throttle = next(c for c in out["checks"] if c["name"] == "throttle")
    assert throttle["status"] == "warn" and "internal error" in throttle["summary"]
    assert out["failed_layer"] is None and len(out["checks"]) == 38


# --- CUDA initialisation in a container (NVIDIA's vectorAdd sample; tests/fixtures/cuda_probe/) --------

def probe_cap(name, rc=1):
    return {"argv": list(PROBE_RUN) + ["/cuda-samples/vectorAdd"], "rc": rc, "stdout": load(CUDA_PROBE, name),
            "stderr": ""}


@pytest.mark.parametrize("name, cause", [
    ("003_driver_too_old_gpu-operator-389.txt", "driver_insufficient"),
    ("004_other-runtime-not-nvidia_gpu-operator-pr1017.txt", "driver_insufficient"),
    ("006_no_device_gpu-operator-1900.txt", "no_device"),
    ("007_other-forward-compat_gpu-operator-277.txt", "forward_compat"),
    ("008_other-busy-unavailable_nvidia-container-toolkit-614.txt", "busy"),
    ("010_other-all-busy-unavailable-old-wording_gpu-operator-129.txt", "busy"),
    ("011_other-initialization-error_gpu-operator-1546.txt", "initialization_error"),
    ("012_other-unknown-error-gpu-fault_gpu-operator-1146.txt", "unknown_error"),
])
def test_cuda_probe_failures_are_named(name, cause):
    check = sc.check_cuda_probe(probe_cap(name), "probe")
    assert check["status"] == "fail" and check["layer"] == "container"
    assert check["data"]["cause"] == cause
    assert check["evidence"]["lines"][0].endswith(")!")  # the sample's own error line decides


def test_cuda_probe_success_needs_test_passed_and_exit_0():
    ok = sc.check_cuda_probe(probe_cap("002_success_open-webui-5338.txt", rc=0), "probe")
    assert ok["status"] == "ok" and "Test PASSED" in ok["evidence"]["lines"]
    assert sc.check_cuda_probe(probe_cap("002_success_open-webui-5338.txt", rc=1), "probe")["status"] == "fail"


def test_cuda_probe_image_absent_is_a_warning():
    cap = {"argv": list(PROBE_RUN), "rc": 125, "stdout": "",
           "stderr": "docker: Error response from daemon: No such image: probe:latest.\n"}
    check = sc.check_cuda_probe(cap, "probe")
    assert check["status"] == "warn" and "not on the host" in check["summary"]
    assert "gpu_validate_cuda_probe_image" in check["remedy"]


def test_missing_uvm_node_with_cuda_failing_is_the_drivers_failure():
    """/dev/nvidia-uvm missing is only a warning on a host that ran no CUDA yet; when CUDA then fails in a
    container with cudaErrorUnknown, the missing node is the decisive cause: the driver layer fails."""
    io = healthy_host()
    io.dirs["/dev"] = ["null", "nvidia0", "nvidiactl"]
    del io.nodes["/dev/nvidia-uvm"], io.nodes["/dev/nvidia-uvm-tools"]
    io.commands[PROBE_RUN] = (1, "", load(CUDA_PROBE, "012_other-unknown-error-gpu-fault_gpu-operator-1146.txt"))
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "driver", out["message"]
    nodes_check = next(c for c in out["checks"] if c["name"] == "device_nodes")
    assert nodes_check["status"] == "fail"
    assert "missing /dev/nvidia-uvm, /dev/nvidia-uvm-tools: every CUDA program in a container fails" \
        in nodes_check["summary"]
    assert "nvidia-ctk system create-device-nodes --control-devices --load-kernel-modules" in out["message"]
    assert "Failed to allocate device vector A (error code unknown error)!" in nodes_check["evidence"]["lines"]


def test_cuda_failing_with_the_nodes_present_is_the_containers_failure():
    io = healthy_host()
    io.commands[PROBE_RUN] = (1, "", load(CUDA_PROBE, "008_other-busy-unavailable_nvidia-container-toolkit-614.txt"))
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "container"
    probe = next(c for c in out["checks"] if c["name"] == "container_cuda")
    assert probe["data"]["cause"] == "busy" and "Compute Mode" in probe["remedy"]


def test_cuda_probe_off_and_after_a_failed_container_check():
    io = healthy_host()
    out = sc.evaluate(sc.capture(io, dict(PROBE_OPTS, cuda_probe_image="")), dict(PROBE_OPTS, cuda_probe_image=""))
    assert next(c for c in out["checks"] if c["name"] == "container_cuda")["status"] == "skipped"
    # --gpus, its environment (gpus_path), CDI: no probe.
    assert len([r for r in io.ran if r[:2] == ["/usr/bin/docker", "run"]]) == 3


def test_mig_mode_is_named_as_the_cause_of_a_busy_cuda():
    """Fixture 010: an A100 with MIG mode on, vectorAdd in a whole-GPU container: busy or unavailable."""
    probe = sc.check_cuda_probe(probe_cap("010_other-all-busy-unavailable-old-wording_gpu-operator-129.txt"), "probe")
    hardware = sc.result("hardware", "hardware", "warn", "GPU 0 has MIG mode on",
                         data={"gpus": [{"index": 0, "mig_mode": True}, {"index": 1, "mig_mode": False}]})
    named = sc.mig_decides(probe, hardware)
    assert named["status"] == "fail" and "GPU 0 has MIG mode on and the container gets no MIG device" in named["summary"]
    assert "nvidia-smi -i 0 -mig 0" in named["remedy"] and named["data"]["mig_gpus"] == [0]
    # without MIG on any GPU, the busy probe keeps its own reading
    assert sc.mig_decides(probe, sc.result("hardware", "hardware", "ok", "ok", data={"gpus": []})) is probe


# --- module signatures in the driver layer (tests/fixtures/secure_boot/) ------------------------------

def test_a_secure_boot_rejection_in_the_kernel_log_fails_the_driver_layer():
    io = healthy_host()
    io.commands[("/usr/bin/dmesg",)] = (0, load(os.path.join(FIXTURES, "secure_boot"),
                                                "talos-kern-log_nvidia_unavailable-key-rejected_talos-7043.txt"), "")
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "driver", out["message"]
    signature = next(c for c in out["checks"] if c["name"] == "module_signature")
    assert signature["status"] == "fail" and "mokutil" in signature["remedy"]
    assert out["message"].startswith(sc.LAYER_TITLES["driver"] + ": module rejected by Secure Boot")


def test_an_unreadable_kernel_log_is_one_warning_not_two():
    io = healthy_host()
    io.commands[("/usr/bin/dmesg",)] = (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    statuses = dict((c["name"], c["status"]) for c in out["checks"])
    assert statuses["xid"] == "warn" and statuses["module_signature"] == "skipped"
    assert out["failed_layer"] is None


# --- containerd engine mode (real Debian containerd 1.7.24 outputs: tests/fixtures/containerd/) --------

CONTAINERD = os.path.join(FIXTURES, "containerd")
CTR_RUN = ("/usr/bin/ctr", "-n", "default", "run")
from containers import containerd_config  # noqa: E402  (module_utils on sys.path, as above)


def containerd_host(dump="config-dump_nvidia-ctk-drop-in_containerd-1.7.24.toml"):
    """The healthy host with containerd instead of docker: no docker CLI, ctr and containerd answering."""
    io = healthy_host()
    for key in [k for k in io.commands if k[0] == "/usr/bin/docker"]:
        del io.commands[key]
    uuid = "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"
    io.commands.update({
        ("/usr/bin/ctr", "version"): (0, load(CONTAINERD, "ctr-version_containerd-1.7.24_debian13.stdout"), ""),
        ("/usr/bin/containerd", "config", "dump"): (0, load(CONTAINERD, dump), ""),
        CTR_RUN + ("--rm", "--runc-binary", "/usr/bin/nvidia-container-runtime", "--env", "NVIDIA_VISIBLE_DEVICES=all",
                   "docker.io/library/probe"): (0, load(CUDA_PROBE, "001_success_gpu-operator-346.txt"), ""),
        CTR_RUN: (0, "GPU 0: NVIDIA RTX PRO 6000 (UUID: %s)\n" % uuid, ""),
    })
    io.files["/usr/bin/nvidia-container-runtime"] = ""
    return io


def test_parse_ctr_version_on_real_outputs():
    assert sc.parse_ctr_version(load(CONTAINERD, "ctr-version_containerd-1.7.24_debian13.stdout")) == \
        {"client": "1.7.24~ds1", "server": "1.7.24~ds1"}
    stopped = load(CONTAINERD, "ctr-version_containerd-stopped_debian13.stdout") + \
        load(CONTAINERD, "ctr-version_containerd-stopped_debian13.stderr")
    assert sc.parse_ctr_version(stopped) == {"client": "1.7.24~ds1", "server": None}


def test_runtime_binaries_of_real_config_dumps():
    assert containerd_config.runtime_binaries(load(CONTAINERD, "config-dump_default_containerd-1.7.24.toml")) == \
        {"runc": ""}
    dump = load(CONTAINERD, "config-dump_nvidia-ctk-drop-in_containerd-1.7.24.toml")
    # The merged config lists the imported runtime only: the default's runc table is not in it.
    assert containerd_config.runtime_binaries(dump) == {"nvidia": "/usr/bin/nvidia-container-runtime"}
    # containerd 2's dump ('...' quoting, the io.containerd.cri.v1.runtime plugin; gpu-operator#1374)
    v3 = load(os.path.join(FIXTURES, "k3s"), "005_containerd-2-config-dump_nvidia-and-nvidia-cdi_gpu-operator-1374_excerpt.toml")
    found = containerd_config.runtime_binaries(v3)
    assert found["nvidia"].endswith("/nvidia-container-runtime") and "nvidia-cdi" in found


def test_normalize_image_ref_as_ctr_import_names_images():
    assert sc.normalize_image_ref("local/gpuhost-cuda-check:1") == "docker.io/local/gpuhost-cuda-check:1"
    assert sc.normalize_image_ref("ubuntu:24.04") == "docker.io/library/ubuntu:24.04"
    assert sc.normalize_image_ref("nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04") == \
        "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"
    assert sc.normalize_image_ref("localhost:5000/cuda:1") == "localhost:5000/cuda:1"


def test_choose_engine():
    assert sc.choose_engine("auto", "/usr/bin/docker", "/usr/bin/ctr") == "docker"
    assert sc.choose_engine("auto", None, "/usr/bin/ctr") == "containerd"
    assert sc.choose_engine("auto", None, None) == "docker"
    assert sc.choose_engine("containerd", "/usr/bin/docker", "/usr/bin/ctr") == "containerd"


def test_containerd_host_passes_through_ctr_and_the_nvidia_runtime():
    io = containerd_host()
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    statuses = dict((c["name"], c["status"]) for c in out["checks"])
    assert out["failed_layer"] is None, out["message"]
    assert out["container_engine"] == "containerd" and out["engine_version"] == "1.7.24~ds1"
    assert out["docker_version"] is None and out["layers"]["docker"]["title"] == "containerd engine"
    assert statuses["containerd"] == statuses["runtime"] == statuses["container_gpus"] == "ok"
    assert statuses["container_cdi"] == "skipped" and "docker" not in statuses
    runs = [r for r in io.ran if tuple(r[:4]) == CTR_RUN]
    assert runs[0][:12] == ["/usr/bin/ctr", "-n", "default", "run", "--rm", "--runc-binary",
                            "/usr/bin/nvidia-container-runtime", "--env", "NVIDIA_VISIBLE_DEVICES=all",
                            "docker.io/library/img", "gpuhost-stack-check-%d" % os.getpid(), "nvidia-smi"]
    assert runs[1][9] == "docker.io/library/probe" and len(runs) == 2
    assert not [r for r in io.ran if r[0] == "/usr/bin/docker"]


def test_containerd_stopped_names_the_engine_and_runs_no_container():
    io = containerd_host()
    io.commands[("/usr/bin/ctr", "version")] = (
        1, load(CONTAINERD, "ctr-version_containerd-stopped_debian13.stdout"),
        load(CONTAINERD, "ctr-version_containerd-stopped_debian13.stderr"))
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "docker"
    assert out["message"].startswith('containerd engine: containerd is not running: ctr: failed to dial '
                                     '"/run/containerd/containerd.sock"')
    assert "systemctl enable --now containerd" in out["remedy"]
    assert not [r for r in io.ran if tuple(r[:4]) == CTR_RUN]


def test_containerd_without_the_nvidia_runtime_and_with_a_malformed_config():
    out = sc.evaluate(sc.capture(containerd_host("config-dump_default_containerd-1.7.24.toml"), PROBE_OPTS),
                      PROBE_OPTS)
    assert out["failed_layer"] == "runtime_config"
    assert out["message"].startswith("toolkit configuration (containerd): nvidia runtime not in containerd's config")
    assert "nvidia-ctk runtime configure --runtime=containerd" in out["remedy"]
    io = containerd_host()
    io.commands[("/usr/bin/containerd", "config", "dump")] = (
        1, "", load(CONTAINERD, "config-dump_malformed-config_containerd-1.7.24.stderr"))
    runtime = next(c for c in sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)["checks"] if c["name"] == "runtime")
    assert runtime["status"] == "fail" and "(2, 2): unexpected token unclosed table key" in runtime["summary"]
    assert "restart containerd" in runtime["remedy"]


def test_containerd_check_image_absent_is_a_warning_naming_ctr_import():
    io = containerd_host()
    io.commands[CTR_RUN] = (1, "", load(CONTAINERD, "ctr-run_image-not-found_debian13.stderr"))
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    gpus = next(c for c in out["checks"] if c["name"] == "container_gpus")
    assert gpus["status"] == "warn" and gpus["data"]["cause"] == "image_absent"
    assert "ctr images import" in gpus["remedy"]


# --- serving containers keep their GPUs (/dev/char links; tests/fixtures/devchar/) ---------------------

DEVCHAR = os.path.join(FIXTURES, "devchar")
# The container's own words after `systemctl daemon-reload` (NVIDIA/nvidia-container-toolkit#1227).
LOST_TEXT = next(l for l in load(DEVCHAR, "nvml-unknown-error_after-daemon-reload_ubuntu22.04_systemd249_570.133.20_"
                                          "markdown-section.txt").splitlines()
                 if l.startswith("Failed to initialize NVML"))
PS = ("/usr/bin/docker", "ps")


def linked(io):
    """Every NVIDIA node of the fake host with its /dev/char link, as the toolkit role leaves them."""
    io.links = dict(("/dev/char/%d:%d" % (os.major(io.stat(p).st_rdev), os.minor(io.stat(p).st_rdev)), p)
                    for p in io.nodes)
    return io


def test_dev_char_links_missing_is_a_warning_naming_them():
    io = healthy_host()
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    check = next(c for c in out["checks"] if c["name"] == "dev_char")
    assert check["status"] == "warn" and check["layer"] == "runtime_config"
    assert "/dev/char/195:0" in check["summary"] and "daemon-reload" in check["summary"]
    assert "create-dev-char-symlinks --create-all" in check["remedy"]
    out = sc.evaluate(sc.capture(linked(healthy_host()), PROBE_OPTS), PROBE_OPTS)
    assert next(c for c in out["checks"] if c["name"] == "dev_char")["status"] == "ok"


def test_a_serving_container_that_lost_its_gpus_is_named_with_the_fix():
    assert LOST_TEXT == "Failed to initialize NVML: Unknown Error"
    io = healthy_host()
    io.commands = dict([(PS, (0, "qwen3-32b\nqwen25-3b\n", "")),
                        (("/usr/bin/docker", "exec", "qwen3-32b"), (255, LOST_TEXT + "\n", "")),
                        (("/usr/bin/docker", "exec", "qwen25-3b"),
                         (0, "GPU 0: NVIDIA RTX PRO 6000 (UUID: GPU-12345678-aaaa-bbbb-cccc-0123456789ab)\n", ""))]
                       + list(io.commands.items()))
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    assert out["failed_layer"] == "container"
    serving = next(c for c in out["checks"] if c["name"] == "serving_gpus")
    assert serving["summary"].startswith("container qwen3-32b lost its GPU devices (systemd reload without "
                                         "/dev/char links): nvidia-smi inside says Failed to initialize NVML")
    assert "docker restart qwen3-32b" in serving["remedy"] and "--tags toolkit" in serving["remedy"]
    assert serving["data"] == {"ok": ["qwen25-3b"], "lost": ["qwen3-32b"], "failed": [],
                               "cause": "systemd reload without /dev/char links"}
    assert ["/usr/bin/docker", "exec", "qwen3-32b", "nvidia-smi", "-L"] in io.ran
    # With the links there now, the cause is said as it is: they were not there at the reload.
    out = sc.evaluate(sc.capture(linked(io), PROBE_OPTS), PROBE_OPTS)
    serving = next(c for c in out["checks"] if c["name"] == "serving_gpus")
    assert serving["status"] == "fail" and "the /dev/char links are there now" in serving["summary"]


def test_no_serving_container_is_fine():
    io = healthy_host()
    io.commands = dict([(PS, (0, "", ""))] + list(io.commands.items()))
    out = sc.evaluate(sc.capture(io, PROBE_OPTS), PROBE_OPTS)
    serving = next(c for c in out["checks"] if c["name"] == "serving_gpus")
    assert serving["status"] == "ok" and "no serving container running" in serving["summary"]


GPUS_PATH = os.path.join(FIXTURES, "gpus_path")
ENV_RUN = ("/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--gpus", "all", "--entrypoint")


def gpus_path_host(info_fixture=None, env_fixture=None, cdi_hook=False):
    """The healthy fake host with docker info from a real capture, the --gpus container's real environment,
    and nvidia-cdi-hook on PATH or not."""
    io = healthy_host()
    if info_fixture:
        info = gp.info_from_text(load(GPUS_PATH, info_fixture))
        io.commands[("/usr/bin/docker", "info")] = (0, json.dumps(dict(DOCKER_INFO, **info)), "")
    head = {}
    if env_fixture:
        head[ENV_RUN] = (0, load(GPUS_PATH, env_fixture), "")
    if cdi_hook:
        head[("/usr/bin/nvidia-cdi-hook",)] = (0, "", "")
    io.commands = dict(list(head.items()) + list(io.commands.items()))
    return io


def gpus_path_check(io, opts=PROBE_OPTS):
    out = sc.evaluate(sc.capture(io, opts), opts)
    return out, next(c for c in out["checks"] if c["name"] == "gpus_path")


def test_gpus_path_debian_docker_takes_the_hook():
    """Debian's docker 26 with the toolkit's hook: the container says NVIDIA_VISIBLE_DEVICES=all (moby#52704)."""
    out, check = gpus_path_check(gpus_path_host(env_fixture="env_gpus-all_runtime-hook_moby-52704.txt",
                                                cdi_hook=True))
    assert check["status"] == "ok" and check["layer"] == "container"
    assert check["data"]["path"] == "legacy" and check["data"]["visible_devices"] == "all"
    assert check["summary"].startswith("--gpus path: legacy (NVIDIA_VISIBLE_DEVICES=all")
    assert "docker 26.1.5+dfsg1 serves --gpus only through nvidia-container-runtime-hook" in check["summary"]
    assert out["gpus_path"]["path"] == "legacy" and out["gpus_path"]["predicted"] == "legacy"


def test_gpus_path_docker_29_with_the_cdi_hook_is_cdi():
    """Docker 29.4.2 (real docker info with nvidia.com/gpu devices) and nvidia-cdi-hook: CDI, and the
    container's NVIDIA_VISIBLE_DEVICES=void agrees."""
    out, check = gpus_path_check(gpus_path_host("docker-info_29.4.2_fedora44_cdi-devices.txt",
                                                "env_gpus-all_cdi_moby-52704.txt", cdi_hook=True))
    assert check["status"] == "ok", check
    assert check["data"]["path"] == "cdi" and check["data"]["predicted"] == "cdi"
    assert check["data"]["cdi_hook"] == "/usr/bin/nvidia-cdi-hook"
    assert "in the container: NVIDIA_VISIBLE_DEVICES=void" in check["evidence"]["lines"]


def test_gpus_path_fallback_from_cdi_to_the_hook_is_a_warning():
    """Docker 29.4.2 predicts CDI, but the container got NVIDIA_VISIBLE_DEVICES=all: docker fell back."""
    out, check = gpus_path_check(gpus_path_host("docker-info_29.4.2_fedora44_cdi-devices.txt",
                                                "env_gpus-all_runtime-hook_moby-52704.txt", cdi_hook=True))
    assert check["status"] == "warn" and "fell back from CDI to the hook" in check["summary"]
    assert "nvidia-ctk cdi list" in check["remedy"]
    assert out["failed_layer"] is None


def test_gpus_path_through_cdi_inherits_a_stale_spec():
    io = gpus_path_host("docker-info_29.4.2_fedora44_cdi-devices.txt", "env_gpus-all_cdi_moby-52704.txt",
                        cdi_hook=True)
    io.files["/etc/cdi/nvidia.yaml"] = spec_text().replace("999.88.77", "580.95.05")
    out, check = gpus_path_check(io)
    assert check["status"] == "warn" and "--gpus goes through CDI" in check["summary"]
    assert "stale" in check["summary"] and "nvidia-ctk cdi generate" in check["remedy"]


def test_gpus_path_of_a_failed_run_is_read_from_its_error():
    """Docker 29.3's AMD driver answered --gpus (neither NVIDIA binary on PATH at start): the real text."""
    io = gpus_path_host("docker-info_29.3.0_ubuntu22.04_default-runtime-nvidia_excerpt.txt")
    error = load(GPUS_PATH, "run-error_gpus-all_docker29_amd-cdi-spec-not-found_wolf-386.txt")
    io.commands[("/usr/bin/docker", "run")] = (125, "", error)
    out, check = gpus_path_check(io)
    assert not [r for r in io.ran if "--entrypoint" in r]
    assert check["status"] == "warn" and check["data"]["path"] == "unknown"
    assert "AMD" in check["summary"] and "restart docker" in check["remedy"]


def test_gpus_path_skipped_without_docker():
    io = healthy_host()
    io.commands[("/usr/bin/docker", "info")] = (1, "", "Cannot connect to the Docker daemon")
    out, check = gpus_path_check(io)
    assert check["status"] == "skipped" and out["gpus_path"] is None


# ---------------------------------------------------------------------------------------------
# The NVSwitch fabric (HGX hosts): real nvidia-smi -q Fabric blocks through gpu_topology's parser.

from gpu import gpu_facts  # noqa: E402  (module_utils on sys.path, as above)
from gpu import gpu_topology  # noqa: E402
from gpu.nvsmi_parse import facts_from_output  # noqa: E402

FM_DPKG = "nvidia-fabricmanager-570\t570.133.20-0ubuntu1\tii \n"
IMEX_DPKG = "nvidia-imex-570\t570.133.20-0ubuntu1\tii \n"


def fabrics(name, switches=()):
    """The GPU facts' fabric of a real nvidia-smi -q (gpu_facts.fabric_facts over gpu_topology's parser)."""
    return gpu_facts.fabric_facts(gpu_topology.parse_fabric(load(SMI, name)), list(switches))


def test_fabric_ready_on_an_hgx_host():
    check = sc.check_fabric(fabrics("060_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_completed.txt"), [], FM_DPKG,
                            "active", "570.133.20")
    assert check["status"] == "ok" and check["layer"] == "fabric"
    assert check["data"]["needed"] is True and check["data"]["fabric_manager"] == {"nvidia-fabricmanager-570": "570.133.20"}
    assert "nvidia-fabricmanager 570.133.20 running" in check["summary"]


def test_fabric_in_progress_fails_with_the_802_meaning():
    """p5 (8x H100 SXM) right after boot: nvidia-smi looks healthy, State In Progress."""
    check = sc.check_fabric(fabrics("059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt"), [], FM_DPKG,
                            "active", "570.133.20")
    assert check["status"] == "fail" and "802" in check["summary"] and "In Progress" in check["summary"]


def test_fabric_manager_missing_or_at_another_version_or_stopped():
    hgx = fabrics("059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt")
    missing = sc.check_fabric(hgx, [], "", "inactive", "570.133.20")
    assert missing["status"] == "fail" and "no nvidia-fabricmanager package is installed" in missing["summary"]
    assert "nvidia-fabricmanager-570=570.133.20-*" in missing["remedy"]
    # the corpus' H200 host: fabric manager 590.48.01 left behind a driver at 580.126.09
    behind = sc.check_fabric(hgx, [], "nvidia-fabricmanager-590\t590.48.01-1\tii \n", "failed", "580.126.09")
    assert behind["status"] == "fail"
    assert behind["summary"].startswith("fabric manager 590.48.01, driver 580.126.09: the fabric manager refuses")
    assert "nvidia-fabricmanager-580=580.126.09-*" in behind["remedy"]
    stopped = sc.check_fabric(hgx, [], FM_DPKG, "inactive", "570.133.20")
    assert stopped["status"] == "fail" and "systemctl enable --now nvidia-fabricmanager" in stopped["remedy"]


def test_fabric_unhealthy_warns_and_insufficient_resources_fails():
    # 066 names clique 2 of a cluster: a GB200-class tray, which needs IMEX and no fabric manager
    tray = fabrics("066_q-grep-fabric_completed-success_health-unhealthy_cliqueid2.txt")
    assert tray["need"] == "imex"
    assert sc.check_fabric(tray, [], IMEX_DPKG, "inactive", "570.133.20", "active")["status"] == "warn"
    failed = sc.check_fabric(fabrics("067_q-fabric_completed-insufficient-resources_cliqueid0_dedented.txt"), [],
                             FM_DPKG, "active", "570.133.20")
    assert failed["status"] == "fail" and "not usable" in failed["summary"]


def b200_fabric(name="059_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_in-progress.txt"):
    """The facts of an HGX B200 host: the GPUs as nvidia-smi -L names them (tests/fixtures/fabric, 8x B200) with a
    real Fabric block (no verbatim B200 Fabric block was found: research doc 6)."""
    gpus = facts_from_output(load(os.path.join(FIXTURES, "fabric"), "L_8xB200-HGX_595.91.07.txt"))["gpus"]
    return gpu_facts.fabric_facts(gpu_topology.parse_fabric(load(SMI, name)), [], gpus, "x86_64")


def test_hgx_b200_needs_nvlsm_beside_the_fabric_manager():
    fm_dpkg = "nvidia-fabricmanager\t580.65.06-1\tii \nlibnvidia-nscq\t580.65.06-1\tii \n"
    fabric = b200_fabric()
    assert fabric["need"] == "fabric_manager+nvlsm" and fabric["needed"] is True
    missing = sc.check_fabric(fabric, [], fm_dpkg, "failed", "580.65.06")
    assert missing["status"] == "fail" and "NVLSM (package nvlsm) is not installed" in missing["summary"]
    assert "nvidia-fabricmanager=580.65.06-* libnvidia-nscq=580.65.06-* nvlsm infiniband-diags libibumad3" \
        in missing["remedy"] and "modprobe ib_umad" in missing["remedy"]
    # Ubuntu's archive has no NVLSM: the remedy names NVIDIA's CUDA repository only
    assert "Ubuntu's archive" not in missing["remedy"]
    nothing = sc.check_fabric(fabric, [], "", None, "580.65.06")
    assert nothing["status"] == "fail" and "no nvidia-fabricmanager package is installed" in nothing["summary"]
    ready = sc.check_fabric(b200_fabric("060_q-grep-fabric_570.133.20_8xH100-SXM_p5-rhel9_completed.txt"), [],
                            fm_dpkg + "nvlsm\t2025.10.14-1\tii \n", "active", "580.65.06")
    assert ready["status"] == "ok" and "nvidia-fabricmanager 580.65.06 running with NVLSM 2025.10.14-1" \
        in ready["summary"]
    assert ready["data"]["need"] == "fabric_manager+nvlsm" and ready["data"]["nvlsm"] == "2025.10.14-1"


def test_a_gb200_tray_needs_imex_at_the_drivers_version_and_no_fabric_manager():
    gpus = facts_from_output(load(os.path.join(FIXTURES, "fabric"), "nvlink-info_2xGB200_k8s-test-infra-371.txt"),
                             partial=True)["gpus"]
    tray = gpu_facts.fabric_facts(gpu_topology.parse_fabric(load(SMI, "060_q-grep-fabric_570.133.20_8xH100-SXM_p5-"
                                                                      "rhel9_completed.txt")), [], gpus, "aarch64")
    assert tray["need"] == "imex" and tray["needed"] is False and tray["services"] == ["nvidia-imex"]
    missing = sc.check_fabric(tray, [], "", None, "570.133.20", None)
    assert missing["status"] == "fail" and "no nvidia-imex package is installed" in missing["summary"]
    assert "`apt-get install nvidia-imex-570=570.133.20-*` (Ubuntu's archive)" in missing["remedy"]
    assert "`apt-get install nvidia-imex-570=570.133.20-*` (NVIDIA's CUDA repository)" in missing["remedy"]
    behind = sc.check_fabric(tray, [], "nvidia-imex\t580.65.06-1\tii \n", None, "570.133.20", "failed")
    assert behind["status"] == "fail" and "IMEX aborts on another driver version" in behind["summary"]
    alone = sc.check_fabric(tray, [], IMEX_DPKG, "inactive", "570.133.20", "inactive")
    assert alone["status"] == "ok" and "a tray serving alone does without it" in alone["summary"]
    assert "/etc/nvidia-imex/nodes_config.cfg" in alone["summary"]
    running = sc.check_fabric(tray, [], IMEX_DPKG + FM_DPKG, "active", "570.133.20", "active")
    assert running["status"] == "warn" and "systemctl disable --now nvidia-fabricmanager" in running["remedy"]
    assert sc.check_fabric(tray, [], IMEX_DPKG, "inactive", "570.133.20", "active")["status"] == "ok"


def test_no_nvswitch_needs_no_fabric_manager():
    """4x A100 SXM4 without NVSwitch (State N/A), and the healthy fake host's real 590 XML (RTX PRO 6000)."""
    check = sc.check_fabric(fabrics("056_q_555.42.02_4xA100-SXM4-80GB_fabric-NA_no-nvswitch.txt"), [], "", None,
                            "555.42.02")
    assert check["status"] == "ok" and check["data"]["needed"] is False
    out = sc.evaluate(sc.capture(healthy_host(), PROBE_OPTS), PROBE_OPTS)
    fabric = next(c for c in out["checks"] if c["name"] == "fabric")
    assert fabric["status"] == "ok" and "no NVSwitch fabric" in fabric["summary"]
    assert out["layers"]["fabric"]["status"] == "ok"
    # no fabric block at all (nvidia-smi does not answer) and no NVSwitch on the bus: nothing to judge
    assert sc.check_fabric(gpu_facts.fabric_facts([], []), [], "", None, None)["status"] == "skipped"
    assert sc.check_fabric(None, None, "", None, None)["status"] == "skipped"


def test_a_cuda_program_failing_with_802_names_the_fabric_manager():
    """A real CUDA sample on an HGX host whose fabric is not set up (bandwidthTest: 802): nvidia-smi -L would
    pass there; the probe's failure names the fabric manager."""
    cap = {"argv": list(PROBE_RUN), "rc": 1, "stdout": load(os.path.join(FIXTURES, "fabric"),
                                                              "cuda-802_bandwidthTest_cudaErrorSystemNotReady.txt"),
           "stderr": ""}
    probe = sc.check_cuda_probe(cap, "probe")
    assert probe["status"] == "fail" and probe["data"]["cause"] == "system_not_ready"
    assert "fabric manager" in probe["summary"] and "nvidia-fabricmanager" in probe["remedy"]


def test_without_the_path_container_one_gpus_container_runs_and_the_path_is_predicted():
    # site.yml's fast path: one --gpus container proves the container path; which path --gpus took is predicted.
    io = healthy_host()
    opts = dict(PROBE_OPTS, cuda_probe_image="", cdi_container_check="never", gpus_path_container=False)
    out = sc.evaluate(sc.capture(io, opts), opts)
    runs = [r for r in io.ran if r[:2] == ["/usr/bin/docker", "run"]]
    assert runs == [["/usr/bin/docker", "run", "--rm", "--pull", "never", "--network", "none", "--gpus", "all",
                     "img", "nvidia-smi", "-L"]]
    assert out["failed_layer"] is None, out["message"]
    assert out["gpus_path"]["path"] == out["gpus_path"]["predicted"]
