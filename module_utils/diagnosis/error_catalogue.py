# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One table of the error texts a GPU serving host prints, and what each one means.

Pure stdlib, Python >= 3.9 (shipped to hosts as module_utils).

Every entry names the broken layer, a stable kind, the pattern of the decisive line, what it
means in one sentence, the fix, and the gpuhost run that repairs or checks it.  Its `scopes`
say which reader uses it and under which of that reader's own names:
  container  stack_check.classify_container (a `docker run --gpus ... nvidia-smi -L` that failed)
  smi        nvsmi_error.classify_error (an nvidia-smi error text -> facts state)
  vllm       vllm_log (a vLLM start's failure kind)
  cuda       stack_check.check_cuda_probe (NVIDIA's vectorAdd sample in a --gpus container that failed)
  kernel     secure_boot.module_signature_events (a kernel log or journal: the module signature verdicts)
Within a scope the table's order is the reader's order (the first entry that matches wins);
`explain` reads every entry and ranks findings by the layer registry's order (layers/registry.py:
each entry's `layer` is one of its catalogue names).  Adding a pattern is one entry here
plus its real example in tests/unit/test_explain.py.

Every pattern was written against a real text: tests/fixtures/corpus/ (errors/, host/, nvidia_smi/
029-032, vllm_logs/), tests/fixtures/ (secure_boot/, cuda_probe/: each folder's README names the
sources) or the toolkit's and engines' own sources, named at the entry.
"""
import re
from collections import namedtuple

REPAIR_DRIVER = "site.yml --tags driver (checks: playbooks/diagnose.yml)"
REPAIR_TOOLKIT = "site.yml --tags toolkit, then playbooks/drift.yml (re-runs configure, restarts docker)"
REPAIR_CDI = "site.yml --tags cdi (or playbooks/drift.yml: regenerates a stale spec)"
REPAIR_VLLM = "site.yml --tags vllm (the memory plan runs before any container starts)"


def _e(kind, layer, pattern, meaning, fix, repair, scopes=None, gate=None, flags=re.I, failed_start_only=False):
    """failed_start_only: the line is news only when the start did not complete (vLLM prints it, at
    INFO, while a long compile runs too)."""
    return {"kind": kind, "layer": layer, "regex": re.compile(pattern, flags), "meaning": meaning, "fix": fix,
            "repair": repair, "scopes": scopes or {}, "gate": gate, "failed_start_only": failed_start_only}


ENTRIES = (
    # --- driver (nvidia-smi error forms: corpus nvidia_smi/029-032) -----------------------------
    _e("nvml_mismatch", "driver", r"driver/library version mismatch",
       "NVML driver/library version mismatch: the loaded kernel module and the userspace libraries "
       "differ (driver upgraded without reboot or module reload)",
       "reboot, or stop every GPU process and reload the modules: `rmmod nvidia_uvm nvidia_drm nvidia_modeset "
       "nvidia && modprobe nvidia`", REPAIR_DRIVER,
       scopes={"smi": "version_mismatch"}, gate=("mismatch",)),
    # nvidia-settings says it its own way (corpus errors/003, an Ubuntu desktop journal: "nvidia-settings-autostart
    # .desktop[2777]: ERROR: NVIDIA driver is not loaded", after modprobe's Secure Boot refusal). Pastes that went
    # through a blog or an editor carry a typographic apostrophe ("couldn\u2018t": tests/fixtures/errors/phrasings/).
    _e("driver_not_loaded", "driver", r"couldn[\u2018\u2019']?t communicate with the nvidia driver|"
       r"NVIDIA driver is not loaded",
       "nvidia-smi could not communicate with the NVIDIA driver (nvidia-settings: \"NVIDIA driver is not loaded\"): "
       "the kernel module is not loaded",
       "load it: `modprobe nvidia` (or reboot); if it refuses, read `journalctl -k -b | grep -i nvidia` "
       "(Secure Boot, a kernel without the module)", REPAIR_DRIVER,
       scopes={"smi": "driver_not_loaded"}, gate=("communicate", "is not loaded")),
    # `nvidia-smi -r` refused (tests/fixtures/gpu_reset/ and errors/phrasings/: 535+ lists each GPU with why; older
    # drivers print "is currently in use by another process"): a line of its own, or one inside a tool's log with
    # its newlines escaped. Not "Unable to set the compute mode for GPU ...: Not Supported" (another command), nor
    # the MIG mode warning ("pending enable state for GPU ...:In use by another client").
    _e("gpu_reset_in_use", "driver",
       r"(?:^|\\n)\s*GPU [0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
       r"(?:: In use by another client| is currently in use by another process)",
       "the GPU reset was refused: something holds the GPU open (a CUDA process or serving container, "
       "nvidia-persistenced or persistence mode, the fabric manager, DCGM's nv-hostengine, dcgm-exporter, "
       "nvidia_drm with modeset=1)",
       "find the holders (`fuser -v /dev/nvidia*`), stop them (`nvidia-smi -i N -pm 0`, `systemctl stop "
       "nvidia-persistenced nvidia-dcgm`), then `nvidia-smi -r -i N` again; or reboot the host",
       "playbooks/diagnose.yml", gate=("in use by another",)),
    _e("gpu_reset_not_supported", "driver",
       r"(?:^|\\n)\s*GPU [0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]: Not Supported",
       "the GPU cannot be reset on its own here (an active NVLink between A100s, a GPU that drives a display, a "
       "virtual machine without the reset)",
       "reboot the host (or disable NVLink where the platform allows it, then reset)",
       "playbooks/diagnose.yml", gate=("not supported",)),
    # The driver's modules cannot be unloaded (a reload without reboot): tests/fixtures/errors/phrasings/
    # (rmmod lists the modules that use it; modprobe says "is in use." of the first module it cannot remove).
    _e("driver_module_in_use", "driver",
       r"(?:rmmod: ERROR|modprobe: FATAL): Module nvidia\w* is in use",
       "the NVIDIA kernel modules cannot be unloaded: a process holds /dev/nvidia* or another module uses them "
       "(nvidia_uvm, nvidia_drm and nvidia_modeset before nvidia)",
       "stop what holds the GPUs (`fuser -v /dev/nvidia*`: serving containers, nvidia-persistenced, the fabric "
       "manager, DCGM, a display manager), unload in order `modprobe -r nvidia_uvm nvidia_drm nvidia_modeset "
       "nvidia`; or reboot the host", REPAIR_DRIVER, gate=("is in use",)),
    _e("no_devices_found", "driver", r"no devices were found",
       "nvidia-smi found no devices: the driver is loaded but initialised no GPU",
       "read `journalctl -k -b | grep -iE 'nvrm|xid'` for the GPU's fate; check `lspci -nn | grep -i nvidia`",
       REPAIR_DRIVER, scopes={"smi": "error"}, gate=("no devices",)),
    # Not a container's start: runc's `exec: "nvidia-smi": executable file not found in $PATH` is the image's row
    # (container_nvidia_smi_missing) while the host's driver works (tests/fixtures/errors/phrasings/). A tool that
    # runs it names the file last: Python's "FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'"
    # (peci1/nvidia-htop#23, a Proxmox host on nouveau).
    _e("nvidia_smi_missing", "driver",
       r"^(?![^\n]*(?:exec: \\?\"|OCI runtime))[^\n]*?"
       r"(?:nvidia-smi: (?:command )?not found|command 'nvidia-smi' not found|"
       r"nvidia-smi[^\n]*no such file or directory|executable file not found[^\n]*nvidia-smi|"
       r"nvidia-smi[^\n]*executable file not found|no such file or directory: '?nvidia-smi)",
       "nvidia-smi is not installed: no NVIDIA driver userspace",
       "install the driver (the -server branch on Ubuntu, Debian's nvidia-driver on Debian)", REPAIR_DRIVER,
       scopes={"smi": "no_driver"}, gate=("nvidia-smi",)),
    _e("gpu_lost", "hardware", r"unable to determine the device handle for gpu\s*(\S+?):?\s+([^\n]+)",
       "nvidia-smi lost a GPU", "read the kernel log for an Xid (79: fallen off the bus); drain and reboot the host",
       "playbooks/diagnose.yml (hardware layer)", scopes={"smi": "error"}, gate=("device handle",)),
    # Before the NVML rows: nvidia-smi prints it as "Failed to initialize NVML: Insufficient Permissions" (rootless
    # podman, SELinux: tests/fixtures/errors/phrasings/), which their catch-all would take.
    _e("nvml_insufficient_permissions", "driver", r"insufficient permissions",
       "nvidia-smi lacks permissions on /dev/nvidia*",
       "run it as root, or fix the device nodes' mode (NVreg_DeviceFileMode)", REPAIR_DRIVER,
       scopes={"smi": "error"}, gate=("permission",)),
    # A running container whose cgroup lost its device rules (systemctl daemon-reload without
    # /dev/char links): corpus errors/004, NVIDIA/nvidia-container-toolkit#48.
    _e("daemon_reload_lost_devices", "container", r"failed to initialize nvml:\s*unknown error",
       "NVML cannot open the GPU devices: inside a running container this is the container losing its device "
       "access after `systemctl daemon-reload` (runc needs /dev/char links for the NVIDIA device nodes)",
       "recreate the container; create the links so that it does not recur: `nvidia-ctk system "
       "create-dev-char-symlinks --create-all` and NVIDIA's udev rule", REPAIR_TOOLKIT,
       scopes={"smi": "error"}, gate=("nvml",)),
    _e("nvml_init_failed", "driver", r"failed to initialize nvml:\s*([^\n]+)", "NVML failed to initialise",
       "run nvidia-smi on the host: the driver layer decides the rest", REPAIR_DRIVER,
       scopes={"smi": "error"}, gate=("nvml",)),
    # Secure Boot: the kernel refuses the nvidia module (corpus errors/003; tests/fixtures/secure_boot/,
    # README there). modprobe (and Talos) report the kernel's EKEYREJECTED; NVIDIA's installer says it its
    # own way. The kernel's own lines follow (kernel/module/signing.c: they name no module).
    _e("secure_boot_rejected", "driver",
       r"could not insert 'nvidia[\w-]*': Key was rejected by service|"
       r"load nvidia[\w-]* failed: key was rejected by service|"
       r"kernel module failed to load, because it was not signed by a key that is trusted by the kernel",
       "the kernel refused the nvidia module's signature: Secure Boot (or module.sig_enforce) is on and the "
       "module (DKMS-built) is unsigned or signed by a key that is not enrolled",
       "on Ubuntu install the Canonical-signed prebuilt modules (linux-modules-nvidia-<branch>-server[-open]-"
       "<flavour>) instead of nvidia-dkms; otherwise enrol the DKMS key at the console: `mokutil --import "
       "/var/lib/shim-signed/mok/MOK.der` (Ubuntu) or `/var/lib/dkms/mok.pub` (Debian), reboot, confirm in "
       "MokManager (no playbook can complete the enrolment: it needs the console)", REPAIR_DRIVER,
       scopes={"kernel": "key_rejected"}, gate=("rejected", "trusted by the kernel")),
    _e("module_unsigned_rejected", "driver", r"Loading of unsigned module is rejected",
       "the kernel enforces module signatures (Secure Boot or module.sig_enforce) and a module with no "
       "signature was refused (the line names no module: with the nvidia driver, DKMS built it without a "
       "signing key); modprobe says \"Key was rejected by service\"",
       "on Ubuntu install the Canonical-signed linux-modules-nvidia-<branch>-server[-open]-<flavour>; "
       "otherwise let DKMS sign (its key: /var/lib/dkms/mok.key + mok.pub, Ubuntu /var/lib/shim-signed/mok/), "
       "rebuild (`dkms autoinstall`), and enrol the key at the console: `mokutil --import <key>`, reboot, "
       "confirm in MokManager", REPAIR_DRIVER,
       scopes={"kernel": "unsigned_rejected"}, gate=("unsigned module is rejected",)),
    _e("module_key_unavailable", "driver", r"Loading of module with unavailable key is rejected",
       "the kernel enforces module signatures and a module signed by a key it does not trust was refused: "
       "the DKMS key was never enrolled as a MOK, or its enrolment was not confirmed in MokManager at the "
       "console", "check `mokutil --test-key <key>` (Ubuntu /var/lib/shim-signed/mok/MOK.der, Debian "
       "/var/lib/dkms/mok.pub); if not enrolled, `mokutil --import <key>`, reboot and confirm in MokManager "
       "at the console (no playbook can do that step); on Ubuntu the Canonical-signed "
       "linux-modules-nvidia-<branch>-server[-open]-<flavour> needs no MOK", REPAIR_DRIVER,
       scopes={"kernel": "key_unavailable"}, gate=("unavailable key is rejected",)),
    # modprobe's side alone names the module (Bottlerocket's lockdown=integrity, tests/fixtures/errors/phrasings/):
    # as root, EPERM from init_module is lockdown (or modules_disabled).
    _e("lockdown_unsigned_module", "driver", r"Lockdown: [^\n]*unsigned module loading is restricted|"
       r"could not insert 'nvidia[\w-]*': Operation not permitted",
       "kernel lockdown (Debian and Ubuntu kernels turn it on under Secure Boot: kernel_lockdown(7)) refused "
       "an unsigned module; modprobe says \"Operation not permitted\"",
       "load a signed module: on Ubuntu the Canonical-signed linux-modules-nvidia-<branch>-server[-open]-"
       "<flavour>; otherwise a DKMS module signed with a key enrolled at the console (`mokutil --import "
       "<key>`, reboot, MokManager)", REPAIR_DRIVER,
       scopes={"kernel": "lockdown_restricted"}, gate=("lockdown", "operation not permitted")),
    # --- fabric manager (HGX / NVSwitch hosts; corpus errors/001-002, host/004-006) -------------
    # 802 as each CUDA program prints it: deviceQuery "cudaGetDeviceCount returned 802" (errors/001), bandwidthTest
    # "cudaGetDeviceProperties returned 802" and the samples' checkCudaErrors "code=802(cudaErrorSystemNotReady)"
    # (tests/fixtures/fabric/cuda-802_bandwidthTest_*), PyTorch "Error 802: system not yet initialized"
    # (tests/fixtures/fabric/cuda-802_pytorch-*), gpu_burn's "system not yet initialized" (errors/002).
    # --- dcgm: dcgmi's own words (tests/fixtures/dcgmi/: NVIDIA/dcgm-exporter#193, NVIDIA/DCGM#254) ------------------
    _e("dcgm_hostengine_unreachable", "dcgm",
       r"Unable to connect to host engine|unable to establish a connection to the specified host",
       "dcgmi cannot reach DCGM's host engine (nv-hostengine, unit nvidia-dcgm): it is not running, or it listens "
       "elsewhere than dcgmi asks",
       "`systemctl enable --now nvidia-dcgm`; `journalctl -u nvidia-dcgm -b` says why it stopped",
       "site.yml --tags dcgm -e gpuhost_dcgm=true", gate=("host engine", "specified host")),
    _e("dcgm_plugins_missing", "dcgm",
       r"Cannot load plugins\. Unable to change to the plugin dir '[^']*/plugins/cuda\d+/?'",
       "DCGM's diagnostic has no plugins for the CUDA major it runs with: datacenter-gpu-manager-4-cuda<N> is not "
       "installed (N: the major of nvidia-smi's CUDA Version; 12 on Maxwell, Pascal and Volta GPUs)",
       "`apt-get install datacenter-gpu-manager-4-cuda<N>` at the version of datacenter-gpu-manager-4-core, "
       "then hold it", "site.yml --tags dcgm -e gpuhost_dcgm=true", gate=("cannot load plugins",)),
    _e("fabric_manager_not_running", "fabric",
       r"cuda\w+ returned 802\b|system not yet initialized|CUDA error 802|\berror 802\b|\bcode=802\b|"
       r"cudaErrorSystemNotReady",
       "CUDA error 802 (system not yet initialized): on an NVSwitch (HGX) host the fabric manager has not "
       "set up the fabric, so no CUDA program can start while nvidia-smi still looks healthy",
       "install nvidia-fabricmanager at exactly the driver's version and start it: `systemctl enable --now "
       "nvidia-fabricmanager`; check `nvidia-smi -q | grep -A3 Fabric` (State Completed, Status Success)",
       "site.yml --tags driver (fabric manager on HGX hosts)", scopes={"cuda": "system_not_ready"},
       gate=("802", "not yet initialized", "systemnotready")),
    # "don\u2019t" too: the same line quoted through an editor (NVIDIA/nvtrust#55, tests/fixtures/errors/phrasings/).
    _e("fabric_manager_version_mismatch", "fabric",
       r"fabric manager NVIDIA GPU driver interface version \S+ don[\u2018\u2019']?t match with driver version \S+",
       "the fabric manager's version differs from the loaded driver's, so it refuses to start (a driver upgrade "
       "left it behind)",
       "install nvidia-fabricmanager at the driver's exact version (`nvidia-smi` Driver Version) and restart "
       "it, or reboot into the driver the fabric manager matches", "playbooks/drift.yml", gate=("fabric manager",)),
    _e("fabric_manager_not_needed", "fabric", r"NV_WARN_NOTHING_TO_DO",
       "the fabric manager found no NVSwitch to manage and exits: this host (PCIe or NVLink-bridge GPUs) does "
       "not need it", "disable it: `systemctl disable --now nvidia-fabricmanager`",
       "site.yml --tags driver", gate=("nothing_to_do",)),
    _e("fabric_manager_failed", "fabric",
       r"Job for nvidia-fabricmanager\.service failed|nvidia-fabricmanager\.service: (?:Main|Control) process "
       r"exited, code=exited, status=[1-9]",
       "the fabric manager service failed to start", "read `journalctl -u nvidia-fabricmanager -b` and "
       "/var/log/fabricmanager.log; its version must equal the driver's", "playbooks/diagnose.yml",
       gate=("fabricmanager",)),
    # apt: the version the pin names is not in the archive (corpus host/010: from R580 NVIDIA's
    # repository ships an unversioned nvidia-fabricmanager; nvidia-fabricmanager-580 is virtual). Not only at
    # the line's start: a Markdown quote joins apt's lines into one (tests/fixtures/errors/phrasings/).
    _e("package_version_not_found", "driver", r"(?:^|\s)E: Version '[^']+' for '[^']+' was not found",
       "apt has no such version of the package in the configured archives (a pin or version lock names a "
       "version the repository does not carry, or a virtual package name)",
       "`apt-cache policy <package>` lists the versions there are; from R580 NVIDIA's repository names the "
       "fabric manager nvidia-fabricmanager (pin its full version, not nvidia-fabricmanager-<branch>)",
       REPAIR_DRIVER, gate=("was not found",), flags=0),
    # --- docker / toolkit / runtime configuration (stack_check's container errors) ---------------
    # dockerd's own refusal of its config (moby: "unable to configure the Docker daemon with file %s").
    _e("docker_config_refused", "docker", r"unable to configure the Docker daemon with file \S+",
       "dockerd refuses its configuration file, so the daemon does not start (a JSON error, an unknown key, or "
       "an option given both as a flag and in the file)",
       "fix the file at the place the message names (`dockerd --validate --config-file /etc/docker/daemon.json` "
       "checks it), then `systemctl restart docker`", "site.yml --tags docker (merges, never overwrites)",
       gate=("unable to configure",)),
    _e("image_absent", "image",
       r"unable to find image|no such image|pull access denied|manifest unknown|repository does not exist|"
       r"failed to resolve reference|ctr: image \"[^\"]+\": not found",
       "the image is not on the host and could not be pulled",
       "load it (`docker load -i <tarball>`) or pull it from a registry the host reaches", "-",
       scopes={"container": "image_absent"}),
    # Docker 17.x said "Unknown runtime specified nvidia" (NVIDIA/nvidia-docker#578, tests/fixtures/errors/phrasings/).
    _e("runtime_not_registered", "runtime_config", r"unknown or invalid runtime name|Unknown runtime specified",
       "docker does not know the nvidia runtime: `nvidia-ctk runtime configure` was not run (or daemon.json "
       "was replaced) since the toolkit was installed",
       "`nvidia-ctk runtime configure --runtime=docker && systemctl restart docker`", REPAIR_TOOLKIT,
       scopes={"container": "runtime_unknown"}, gate=("runtime",)),
    _e("cdi_not_enabled", "docker", r'could not select device driver "cdi"',
       "docker was asked for a CDI device (--device nvidia.com/gpu=...) but its CDI support is off",
       "enable it in /etc/docker/daemon.json (`\"features\": {\"cdi\": true}`, docker >= 25; default from "
       "28.2) and restart docker, or use `--gpus`", "site.yml --tags docker,cdi", gate=("device driver",)),
    _e("no_gpu_device_driver", "toolkit", r"could not select device driver .* with capabilities",
       "docker has no GPU device driver: the NVIDIA Container Toolkit (its runtime hook) is not installed or "
       "docker was not restarted after it was",
       "install the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker`, restart docker",
       REPAIR_TOOLKIT, scopes={"container": "no_gpu_driver"}, gate=("device driver",)),
    _e("gpus_flag_in_cdi_mode", "runtime_config",
       r"invoking the NVIDIA Container Runtime Hook directly \(e\.g\. specifying the docker --gpus flag\) is "
       r"not supported",
       "the toolkit runs in CDI mode (config.toml mode = \"cdi\") and refuses docker's --gpus hook path",
       "use `--runtime=nvidia --device nvidia.com/gpu=all`, or set the toolkit's mode back to auto/legacy in "
       "/etc/nvidia-container-runtime/config.toml", REPAIR_TOOLKIT, gate=("runtime hook",)),
    # An engine whose CDI library is older than the spec: the library decodes strictly, so an nvidia spec
    # 0.7.0 fails on its new field first (corpus errors/007, NVIDIA/nvidia-container-toolkit#1860, #1865);
    # a spec whose version the library does not know otherwise fails with `invalid CDI Spec: invalid
    # version "0.7.0"` (container-device-interface pkg/cdi/spec.go, v0.6.2 … v1.1.0). Sources:
    # tests/fixtures/cdi_versions/README.md. Any other field the engine's library does not know fails the same way
    # (podman 4.2 on toolkit 1.12's "hostPath": NVIDIA/nvidia-container-toolkit#38, tests/fixtures/errors/phrasings/).
    _e("cdi_spec_too_new", "cdi", r'unknown field "additionalGids"|invalid CDI Spec: invalid version "[^"]*"|'
       r'failed to unmarshal CDI Spec: [^\n]*json: unknown field "\w+"',
       "spec version too new for the engine: its CDI library cannot read the spec (toolkit >= 1.19.1 writes "
       "cdiVersion 0.7.0 with additionalGids where a GPU device node is group-owned; docker < 26.1, "
       "containerd < 1.7.16 and podman < 5.1 read at most 0.6.0), so its devices stay unresolvable",
       "regenerate it for the older engine: `nvidia-ctk cdi generate --feature-flag "
       "no-additional-gids-for-device-nodes --output=/etc/cdi/nvidia.yaml` (and the same flag in "
       "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS of /etc/nvidia-container-toolkit/nvidia-cdi-refresh.env), or "
       "upgrade the engine", "site.yml --tags cdi (nvidia_cdi_engine_compat: auto does both)",
       gate=("additionalgids", "invalid version", "unknown field")),
    _e("cdi_unresolvable", "cdi",
       r"unresolvable CDI devices|CDI device injection failed|failed to inject CDI devices|invalid device|"
       r"not a device node",
       "the engine cannot resolve the CDI device: no CDI spec names it (/etc/cdi/nvidia.yaml missing or stale)",
       "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`", REPAIR_CDI,
       scopes={"container": "cdi_unresolvable"}),
    # The image's CUDA against the driver (corpus errors/008-010). libnvidia-container 1.0 wrote the condition
    # with spaces ("cuda >= 9.0": NVIDIA/nvidia-docker#536, tests/fixtures/errors/phrasings/).
    _e("cuda_driver_too_old", "image",
       r"unsatisfied condition: cuda\s*>=|CUDA driver version is insufficient for CUDA runtime version|"
       r"\berror 803\b|system has unsupported display driver / cuda driver combination",
       "the image needs a newer CUDA than the host's driver supports (nvidia-smi's \"CUDA Version\"); the same "
       "text when the container got no driver libraries at all (not run with the NVIDIA runtime: --gpus, "
       "runtimeClassName: nvidia)",
       "upgrade the driver branch, use an image built for the driver's CUDA, or on a datacenter GPU an image "
       "with cuda-compat (forward compatibility); in Kubernetes, run the pod with the nvidia runtime",
       REPAIR_DRIVER, scopes={"cuda": "driver_insufficient"}, gate=("cuda", "803")),
    _e("forward_compat_unsupported", "image",
       r"forward compatibility was attempted on non supported HW|\berror 804\b",
       "the image tried CUDA forward compatibility (cuda-compat) on a GPU that does not support it (GeForce and "
       "workstation cards)", "use an image built for the driver's CUDA, or upgrade the driver", REPAIR_DRIVER,
       scopes={"cuda": "forward_compat"}, gate=("forward compatibility", "804")),
    # CUDA initialisation in a container (NVIDIA's vectorAdd sample: tests/fixtures/cuda_probe/).
    # Not nvidia-container-cli's own "initialization error: cuda error: no cuda-capable device is detected" (the
    # toolkit, before 1.1, initialised CUDA on the host: its driver row; NVIDIA/nvidia-docker#548, #1235).
    _e("cuda_no_device", "container", r"^(?![^\n]*nvidia-container-cli)[^\n]*?no CUDA-capable device is detected",
       "CUDA in the container sees no GPU: the container got no GPU device (NVIDIA_VISIBLE_DEVICES void/none, "
       "no --gpus or nvidia runtime), or every GPU is in MIG mode without a MIG device for it",
       "run it with `--gpus all` (Kubernetes: a nvidia.com/gpu limit and the nvidia runtime); `nvidia-smi -L` "
       "on the host lists what the driver sees", REPAIR_TOOLKIT, scopes={"cuda": "no_device"},
       gate=("cuda-capable",)),
    _e("cuda_device_busy", "driver", r"CUDA-capable device\(s\) is/are busy or unavailable|"
       r"all CUDA-capable devices are busy or unavailable",
       "CUDA could not open the GPU: its compute mode is Exclusive_Process and another process holds it, MIG "
       "is enabled without a GPU instance for this container, or the GPU is in a bad state",
       "read `nvidia-smi -q -d COMPUTE` (Compute Mode) and `nvidia-smi --query-gpu=mig.mode.current "
       "--format=csv`; `nvidia-smi -c DEFAULT` restores shared compute; MIG needs GPU instances", REPAIR_DRIVER,
       scopes={"cuda": "busy"}, gate=("busy or unavailable",)),
    # The same error 3 as the driver API names it (ffmpeg's cuInit), as ollama and NGC images' start banner
    # print it (tests/fixtures/errors/phrasings/).
    _e("cuda_initialization_error", "driver", r"error code initialization error\)|cudaErrorInitializationError|"
       r"CUDA_ERROR_NOT_INITIALIZED|cuda driver library init failure: 3\b|"
       r"CUDA failed to initialize[^\n]*\(error 3\)",
       "the CUDA driver failed to initialise the GPU (open kernel modules on a GPU that needs the proprietary "
       "ones, a driver too old or too new for the GPU, a GPU that failed to initialise)",
       "read `journalctl -k -b | grep -iE 'nvrm|xid'`; check the kernel module flavour (open from Turing on, "
       "required from Blackwell) and the branch against the GPU", REPAIR_DRIVER,
       scopes={"cuda": "initialization_error"},
       gate=("initialization error", "not_initialized", "init failure", "failed to initialize")),
    # deviceQuery's "cudaGetDeviceCount returned 999" / "-> unknown error" (NVIDIA/cuda-samples#13), as 802 above.
    _e("cuda_unknown_error", "driver", r"error code unknown error\)|cudaErrorUnknown|\bcode=(?:30|999)\b|"
       r"cuda\w+ returned 999\b",
       "CUDA could not initialise in the container (cudaErrorUnknown): most often /dev/nvidia-uvm is missing "
       "or not accessible (nvidia-uvm not loaded), else a GPU fault (an Xid in the kernel log)",
       "load nvidia-uvm and make its nodes: `nvidia-ctk system create-device-nodes --control-devices "
       "--load-kernel-modules` (or `nvidia-modprobe -u -c=0`, or reboot); `ls -l /dev/nvidia-uvm`; "
       "read `journalctl -k -b | grep -i xid`", REPAIR_DRIVER, scopes={"cuda": "unknown_error"},
       gate=("unknown error", "cudaerrorunknown", "code=", "returned 999")),
    _e("driver_libraries_missing", "driver",
       r"nvidia-container-cli: initialization error: load library failed: libnvidia-ml\.so",
       "the toolkit cannot load the driver's NVML library: the driver's userspace is not installed on the host",
       "install the driver (its userspace packages), then retry", REPAIR_DRIVER,
       scopes={"container": "driver"}, gate=("load library",)),
    _e("driver_not_loaded", "driver",
       r"nvidia-container-cli: (?:initialization error|detection error)|driver not loaded|nvml error",
       "the toolkit cannot use the driver (not loaded, or NVML failing)",
       "fix the driver layer first: nvidia-smi on the host must work", REPAIR_DRIVER,
       scopes={"container": "driver"}),
    # runc names the mount first and ends with the same "no such file or directory: unknown" as a
    # missing executable: a mount source gone (a CDI spec of an older driver) is not the image's fault. Later
    # runc says "failed to fulfil mount request", crun "cannot stat `<file>`" or "error stat'ing file <file>"
    # (tests/fixtures/errors/phrasings/).
    _e("driver_files_mount_failed", "cdi", r"error mounting|failed to fulfil mount request|"
       r"crun: (?:cannot stat|error stat'ing file) ",
       "the container could not mount the driver's files: the CDI spec or the runtime's configuration names "
       "files of another driver version", "regenerate the CDI spec for the loaded driver, re-run `nvidia-ctk "
       "runtime configure --runtime=docker`, restart docker", REPAIR_CDI, scopes={"container": "mount"}),
    _e("container_nvidia_smi_missing", "image",
       r"\"?nvidia-smi\"?: executable file not found|exec: \"?nvidia-smi\"?: |nvidia-smi: (?:command )?not found|"
       r"no such file or directory: unknown",
       "the container has no usable nvidia-smi: the toolkit injects the host's only with the utility "
       "capability (NVIDIA_DRIVER_CAPABILITIES), and it needs glibc in the image",
       "run with `-e NVIDIA_DRIVER_CAPABILITIES=compute,utility`, or use an image that keeps utility",
       "-", scopes={"container": "no_nvidia_smi"}),
    _e("driver_files_missing", "cdi", r"no such file or directory",
       "a file the container needs is missing", "regenerate the CDI spec for the loaded driver", REPAIR_CDI,
       scopes={"container": "mount"}),
    # --- the vLLM start (module_utils/serving/vllm_log.py; corpus vllm_logs/) -----------------------------
    _e("shm_exhausted", "container",
       r"unable to open shared memory object|Error while creating shared memory segment|"
       r"failed to extend /dev/shm|posix_fallocate failed|(?:/dev/shm|shm|shared memory).*No space left on device",
       "/dev/shm is too small for weight loading or NCCL between tensor-parallel ranks (docker's default is "
       "64 MB)", "run with `--ipc=host` (vllm_ipc_mode: host) or `--shm-size=16g`", REPAIR_VLLM,
       scopes={"vllm": "shm_exhausted"}, gate=("shared memory", "shm", "posix_fallocate")),
    _e("free_memory_below_utilization", "vllm_memory",
       r"Free memory on device.*is less than desired GPU memory utili[sz]ation",
       "other processes hold part of the GPU, so the requested --gpu-memory-utilization of the whole device "
       "is not free", "lower --gpu-memory-utilization, or stop what holds the memory (`nvidia-smi "
       "--query-compute-apps=pid,used_memory --format=csv`)", REPAIR_VLLM,
       scopes={"vllm": "free_memory_below_utilization"}, gate=("free memory on device",)),
    _e("kv_cache_insufficient", "vllm_memory",
       r"No available memory for the cache blocks|"
       r"is larger than the maximum number of tokens that can be stored in KV cache|"
       r"To serve at least one request with the models?'s max seq len|"
       r"KV cache is needed, which is larger than the available KV cache memory|"
       r"more KV cache is needed than available|"  # seed 000's wording of the same error
       r"Cannot auto-fit max_model_len",
       "after weights and overheads the KV cache holds less than one max_model_len request",
       "quantise the weights (FP8), --kv-cache-dtype fp8, more GPUs (tensor parallel), a lower --max-model-len "
       "or a higher --gpu-memory-utilization: `gpuhost plan` ranks them", REPAIR_VLLM,
       scopes={"vllm": "kv_cache_insufficient"}, gate=("cache blocks", "kv cache", "max seq len", "auto-fit")),
    _e("cuda_oom", "vllm_memory",
       r"CUDA out of memory|HIP out of memory|OutOfMemoryError|CUDA error: out of memory|CUDA Error: out of memory",
       "the GPU ran out of memory (during profiling, graph capture or warm-up: more than the plan left free)",
       "lower --gpu-memory-utilization or --max-num-seqs, or --enforce-eager (no CUDA graphs)", REPAIR_VLLM,
       scopes={"vllm": "cuda_oom"}, gate=("out of memory", "outofmemoryerror")),
    _e("gated_model", "vllm_config",
       r"401 Client Error|403 Client Error|GatedRepoError|Cannot access gated repo|Access to model .* is restricted",
       "the model is gated on the Hugging Face hub and no (valid) token was given",
       "set vllm_hf_token (HF_TOKEN) with access to the model, or serve a local copy", REPAIR_VLLM,
       scopes={"vllm": "gated_model"}, gate=("client error", "gated", "restricted")),
    _e("import_error", "image", r"^(?:ImportError|ModuleNotFoundError)\b|undefined symbol:",
       "the image's Python packages do not fit together (a wheel built for another torch or CUDA)",
       "use a released image of the engine, or rebuild it", "-",
       scopes={"vllm": "import_error"}, gate=("importerror", "modulenotfounderror", "undefined symbol"), flags=0),
    _e("argument_error", "vllm_config",
       r"(?:vllm|api_server\.py|serve)(?: serve)?: error: |^error: (?:unrecognized arguments|argument )|"
       r"User-specified max_model_len .* is greater than",
       "vLLM refused its command line", "fix the instance's arguments (vllm_instances, extra_args)", REPAIR_VLLM,
       scopes={"vllm": "argument_error"}, gate=("error: ", "max_model_len"), flags=0),
    _e("kernel_image_invalid", "image",
       r"device kernel image is invalid|no kernel image is available for execution on the device",
       "the image's GPU kernels were not built for this GPU's compute capability",
       "use an image built for this GPU (e.g. sm_75 for a T4, sm_120 for Blackwell workstation cards)", "-",
       gate=("kernel image",)),
    _e("worker_hang", "vllm_config", r"No available shared memory broadcast block found",
       "a vLLM worker stopped answering (often a tensor-parallel rank stuck in NCCL or a kernel)",
       "read the workers' last lines; check NCCL (NCCL_DEBUG=INFO), /dev/shm and the kernel log for Xids",
       REPAIR_VLLM, gate=("broadcast block",), failed_start_only=True),
    # Pinned (locked) memory refused: NCCL over InfiniBand or OFI, UCX, llama.cpp (tests/fixtures/memlock/). A
    # container's memlock limit is dockerd's unless --ulimit or default-ulimits raise it (seed 000: memlock=-1).
    _e("memlock_limit", "docker",
       r"(?:ibv_reg_mr\w*|ibv_create_cq)(?:\(\))? failed(?: with error|:) Cannot allocate memory|"
       r"Unable to register memory[^\n]*Cannot allocate memory|failed to mlock[^\n]*Cannot allocate memory|"
       r"RLIMIT_MLOCK|cannot allocate pinned memory",
       "the process could not pin (lock) host memory: its memlock limit (`ulimit -l`) is too low - in a container, "
       "dockerd's own (64 KB to 8 MB) unless raised; NCCL, UCX and data loaders pin memory for the GPUs and RDMA",
       "run training containers with `--ulimit memlock=-1 --ulimit stack=67108864`, or give every container "
       "those limits: gpuhost_training: true (docker's default-ulimits in daemon.json)",
       "site.yml --tags docker -e gpuhost_training=true",
       gate=("cannot allocate", "rlimit_mlock", "pinned memory")),
    _e("nccl_error", "other",
       r"NCCL (?:WARN|error)[^\n]*|ncclSystemError|ncclUnhandledCudaError|unhandled system error",
       "NCCL, the GPUs' collective library, failed", "run with NCCL_DEBUG=INFO; check /dev/shm, the GPUs' "
       "P2P and the kernel log", "playbooks/diagnose.yml", gate=("nccl",)),
)

# Kernel log: NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
# One row per Xid: (description, what usually causes it, the immediate action, its source). The action is NVIDIA's
# "Resolution Bucket (Immediate Action)" word from the Xid catalogue (https://docs.nvidia.com/deploy/xid-errors/
# analyzing-xid-catalog.html), as NVIDIA/NVSentinel's xiderrorsmapping.csv copies it (tests/fixtures/xid/, README
# there). The CSV spells CONTACT_SUPPORT "UNEXPECTED_ERR_REPORT_ISSUE" (the catalogue's rows 1-7 say CONTACT_SUPPORT
# where the CSV says that) and names a workflow instead of an action for 45, 48, 74, 144-150 and 154: the rows
# below say which action gpuhost takes there and why (tests/unit/test_xid_policy.py lists every difference).
XID_SOURCE = "NVIDIA Xid catalogue, Resolution Bucket (Immediate Action), via NVSentinel xiderrorsmapping.csv"
_CSV_WORKFLOW = XID_SOURCE + "; the CSV names %s (a workflow, not an action): %s"
XidRow = namedtuple("XidRow", "description cause action source")
_NVLINK5 = _CSV_WORKFLOW % ("WORKFLOW_NVLINK5_ERR", "a GPU reset, as for Xid 74, retrains its links")


def _x(description, cause, action, source=XID_SOURCE):
    return XidRow(description, cause, action, source)


XID_CATALOGUE = {
    8: _x("GPU stopped processing (channel idle timeout)", "an application or driver hang", "RESTART_APP"),
    13: _x("Graphics Engine Exception", "usually the application (illegal instruction or address)", "RESTART_APP"),
    31: _x("GPU memory page fault (MMU fault)", "usually the application (illegal memory access)", "RESTART_APP"),
    # gpuhost said RESET_GPU before; the catalogue says restart the application.
    32: _x("Invalid or corrupted push buffer stream (PBDMA error)", "driver, PCIe or system memory trouble",
           "RESTART_APP"),
    # gpuhost said RESTART_APP before; the catalogue: the GPU is healthy, the channel was stopped.
    43: _x("GPU stopped processing", "the application hit a software fault and its channel was stopped", "IGNORE"),
    # It follows another Xid ("caused by previous Xid 149"), whose row carries the action: report it only.
    45: _x("Preemptive cleanup, due to previous errors", "channels of a killed or failed process torn down; "
           "follows another Xid", "IGNORE",
           _CSV_WORKFLOW % ("WORKFLOW_XID_45", "it follows another Xid, whose own row decides")),
    46: _x("GPU stopped processing (GPU timeout)", "driver or hardware", "RESET_GPU"),
    # The catalogue's Xid 48 workflow reads the Xids after it (63 row remap pending, 64 failure); a reset clears
    # the error either way (NVIDIA's Xid page: "a GPU reset or node reboot is needed").
    48: _x("Double Bit ECC Error (uncorrectable memory error)", "GPU memory", "RESET_GPU",
           _CSV_WORKFLOW % ("WORKFLOW_XID_48", "its immediate step is a GPU reset")),
    # gpuhost said RESET_GPU before; the catalogue: unexpected, report it.
    61: _x("Internal micro-controller breakpoint/warning", "GPU firmware", "CONTACT_SUPPORT"),
    62: _x("Internal micro-controller halt", "GPU firmware or hardware", "RESET_GPU"),
    # gpuhost said WATCH before (no such bucket in the catalogue): a reset activates the remap, nothing is urgent.
    63: _x("ECC page retirement or row remapping recorded", "GPU memory (corrected; a reset activates it)", "IGNORE"),
    64: _x("ECC page retirement or row remapper recording failure", "GPU memory", "RESET_GPU"),
    69: _x("Graphics Engine class error", "usually the application", "RESTART_APP"),
    74: _x("NVLink error", "NVLink/NVSwitch hardware or links", "RESET_GPU",
           _CSV_WORKFLOW % ("WORKFLOW_NVLINK_ERR", "its immediate step is a GPU reset, which retrains the links")),
    79: _x("GPU has fallen off the bus", "PCIe link, power or thermals (hardware)", "RESTART_BM"),
    # gpuhost said WATCH before; the catalogue: no action (watch the rate with dcgm or nvidia-smi -q -d ECC).
    92: _x("High single-bit ECC error rate", "GPU memory wearing out", "IGNORE"),
    94: _x("Contained ECC error", "GPU memory; only the affected application died", "RESTART_APP"),
    95: _x("Uncontained ECC error", "GPU memory; every application on the GPU is affected", "RESET_GPU"),
    # gpuhost said RESTART_APP before; the catalogue resets the GPU.
    109: _x("Context switch timeout", "application or driver hang", "RESET_GPU"),
    110: _x("Security fault error", "GPU firmware or hardware", "RESET_GPU"),
    119: _x("GSP RPC timeout", "GPU System Processor firmware did not answer", "RESET_GPU"),
    120: _x("GSP error", "GPU System Processor firmware", "RESET_GPU"),
    136: _x("NVLink training failed (ALI)", "NVLink links or hardware", "RESET_GPU"),
    140: _x("Unrecoverable ECC error escape", "GPU memory", "RESET_GPU"),
    143: _x("GPU initialisation error", "GPU firmware or hardware", "RESET_GPU"),
    144: _x("NVLink SAW error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    145: _x("NVLink RLW error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    146: _x("NVLink TLW error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    147: _x("NVLink TREX error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    148: _x("NVLink NVLPW control error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    149: _x("NVLink NETIR error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    150: _x("NVLink MSE error", "NVLink 5 links or hardware", "RESET_GPU", _NVLINK5),
    # The action is in its own message ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"):
    # XID_RECOVERY_ACTIONS below; RESET_GPU when the message names none.
    154: _x("GPU recovery action changed", "the driver names the recovery it needs (reset, reboot)", "RESET_GPU",
            _CSV_WORKFLOW % ("\"Follow guidance as it aapplies to another Xid\"", "the action its message names")),
    155: _x("NVLink software-defined error", "NVLink", "RESET_GPU"),
    156: _x("Resource retirement event", "GPU hardware (a reset activates the retirement)", "RESET_GPU"),
    157: _x("Resource retirement failure", "GPU hardware", "IGNORE"),
    158: _x("GPU fatal timeout", "GPU firmware or hardware", "RESET_GPU"),
    160: _x("Channel retirement event", "GPU hardware", "RESTART_BM"),
    161: _x("Channel retirement failure", "GPU hardware", "IGNORE"),
}
# Xid 154's recovery action by its number: NVML's nvmlDeviceGpuRecoveryAction_t (NVIDIA's "Error Recovery and
# Response Flags": 0 None, 1 GPU Reset, 2 Node Reboot, 3 Drain P2P, 4 Drain and Reset). Drain P2P asks to stop
# the GPU's peer-to-peer processes first: for a serving host that is the reset's own first step.
XID_RECOVERY_ACTIONS = {0: "IGNORE", 1: "RESET_GPU", 2: "RESTART_BM", 3: "RESET_GPU", 4: "RESET_GPU"}
XID_ACTIONS = {
    "IGNORE": "nothing: report it (informational, or it follows another Xid that carries the action)",
    "RESTART_APP": "restart the application; if it recurs across different applications on the same GPU, "
                   "drain the GPU and run diagnostics (`dcgmi diag -r 2`)",
    "RESET_GPU": "drain the GPU, reset it (`nvidia-smi -r -i <gpu>`: no process may hold it) and start its work "
                 "again; reboot the host when the reset fails; RMA if it recurs",
    "RESTART_BM": "drain the host and reboot it (a bare-metal restart); check PCIe seating, power and thermals; RMA "
                  "if it recurs",
    "CONTACT_SUPPORT": "take the GPU out of service and contact NVIDIA support with `nvidia-bug-report.sh`'s log",
}
# Mildest first. CONTACT_SUPPORT last: a restart does not settle what support must look at.
XID_SEVERITY = ("IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT")
# What the reports say of an Xid the table lacks: the catalogue's word for an Xid it does not expect.
XID_UNKNOWN_ACTION = "CONTACT_SUPPORT"
# NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: ...     (no name= on older drivers)
# NVRM: Xid (0000:03:00): 13, ...                                  (old drivers, no PCI: prefix)
XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\):\s*(\d+)"
                 r"(?:,\s*(.*))?$")


# Kernel log: a module without a valid signature that loaded anyway (no enforcement: Secure Boot off
# or shim validation disabled), e.g. "nvidia: module verification failed: signature and/or required key
# missing - tainting kernel" (tests/fixtures/secure_boot/dmesg_nvidia-525_unsigned-taint_*). Not an
# error, so not an entry: secure_boot.module_signature_events reads it.
MODULE_SIG_TAINT = re.compile(r"(?:^|\s)([\w-]+): module verification failed: signature and/or required key "
                              r"missing - tainting kernel")


def in_scope(scope):
    """[(name in that scope, entry)] in the scope's order."""
    return [(entry["scopes"][scope], entry) for entry in ENTRIES if scope in entry["scopes"]]


def matches(entry, line, lower=None):
    """The regex match of an entry on one line (its literal gate first, for speed), or None."""
    gate = entry["gate"]
    if gate and not any(g in (lower if lower is not None else line.lower()) for g in gate):
        return None
    return entry["regex"].search(line)
