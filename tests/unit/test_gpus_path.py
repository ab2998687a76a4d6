"""gpus_path (module_utils/containers/gpus_path.py): which way docker's --gpus reaches the GPUs, legacy hook or CDI.

Docker 29's behaviour is tested here at unit level only: the docker versions gpuhost runs on are Debian's
(26.1.5+dfsg1 in trixie), which serve --gpus through the hook alone. The inputs are real captures
(tests/fixtures/gpus_path/README.md: `docker info` of Docker 26.1.5+dfsg1, 29.1.3, 29.3.0, 29.4.2, 29.7.2,
the container environment of both paths, error texts of both paths) and, where no capture exists (a
HostConfig from `docker inspect`), the shape docker's own source gives, cited where it is used.
"""
import json
import os

import pytest

from containers import gpus_path as gp
from layers import stack_check as sc
from conftest import FIXTURES

HERE = os.path.join(FIXTURES, "gpus_path")
ERRORS = os.path.join(FIXTURES, "errors")

# The request `docker run --gpus all` sends (docker/cli opts/gpus.go: Count -1 for "all", Options made an
# empty map, Capabilities [["gpu"]] when none given); `--gpus device=0` sends DeviceIDs ["0"], Count 0.
GPUS_ALL = {"DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]],
                                "Options": {}}], "Runtime": "runc"}
GPUS_DEVICE = {"DeviceRequests": [{"Driver": "", "Count": 0, "DeviceIDs": ["0"], "Capabilities": [["gpu"]],
                                   "Options": {}}], "Runtime": "runc"}
# `--device nvidia.com/gpu=all` (moby integration/container/cdi_test.go: {Driver: "cdi", DeviceIDs: [...]}).
CDI_DEVICE = {"DeviceRequests": [{"Driver": "cdi", "DeviceIDs": ["nvidia.com/gpu=all"]}], "Runtime": "runc"}
# The shape test_stack_check uses for Debian's docker.io 26.1.5 (`docker info --format '{{json .}}'`).
DEBIAN_JSON = {"ServerVersion": "26.1.5+dfsg1", "Driver": "overlay2", "DefaultRuntime": "runc",
               "Runtimes": {"io.containerd.runc.v2": {"path": "runc"}, "nvidia": {"path": "nvidia-container-runtime"},
                            "runc": {"path": "runc"}}}


def text(name, folder=HERE):
    with open(os.path.join(folder, name), encoding="utf-8", newline="") as handle:
        return handle.read()


def info(name):
    return gp.info_from_text(text(name))


def env(name):
    return text(name).splitlines()


F29_4 = "docker-info_29.4.2_fedora44_cdi-devices.txt"
F29_3 = "docker-info_29.3.0_ubuntu22.04_default-runtime-nvidia_excerpt.txt"
F29_7 = "docker-info_29.7.2_toolkit-1.20.0_nvidia-container-toolkit-1967_excerpt.txt"
F29_1 = "docker-info_29.1.3_docker-desktop_webgpu-cdi-device_excerpt.txt"
DEBIAN = "docker-info_26.1.5+dfsg1_debian13_no-cdi.txt"
ENV_HOOK = "env_gpus-all_runtime-hook_moby-52704.txt"
ENV_CDI = "env_gpus-all_cdi_moby-52704.txt"


def test_every_fixture_is_cited_in_the_readme():
    readme = text("README.md")
    names = sorted(n for n in os.listdir(HERE) if n != "README.md")
    assert names and [n for n in names if "`%s`" % n not in readme] == []


# ---------------------------------------------------------------------------------------------
# reading docker info


def test_info_from_text_reads_the_cdi_fields_of_docker_29():
    parsed = info(F29_4)
    assert parsed["ServerVersion"] == "29.4.2"
    assert parsed["CDISpecDirs"] == ["/etc/cdi", "/run/cdi"]
    assert gp.cdi_devices(parsed) == ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-672c39b8-f391-2e57-ad8e-33037a7e8aa5",
                                      "nvidia.com/gpu=all"]
    assert parsed["DiscoveredDevices"][0] == {"Source": "cdi", "ID": "nvidia.com/gpu=0"}
    assert sorted(parsed["Runtimes"]) == ["io.containerd.runc.v2", "nvidia", "runc"]
    assert parsed["DefaultRuntime"] == "runc"
    assert gp.engine_version(parsed) == (29, 4, 2)


def test_info_from_text_debian_has_no_cdi_lines():
    parsed = info(DEBIAN)
    assert parsed["ServerVersion"] == "26.1.5+dfsg1" and gp.engine_version(parsed) == (26, 1, 5)
    assert parsed["CDISpecDirs"] == [] and gp.cdi_devices(parsed) == [] and not gp.cdi_on(parsed)
    assert sorted(parsed["Runtimes"]) == ["io.containerd.runc.v2", "runc"]


def test_listed_devices_prove_cdi_even_where_an_excerpt_lacks_the_spec_dirs():
    parsed = info(F29_3)  # the author kept Discovered Devices but not "CDI spec directories"
    assert parsed["CDISpecDirs"] == [] and gp.cdi_on(parsed)
    assert parsed["DefaultRuntime"] == "nvidia"


def test_json_shape_through_stack_checks_parser():
    """stack_check.parse_docker_info's dict (the `{{json .}}` form: DiscoveredDevices as moby's DeviceInfo
    {Source, ID}) gives what the text form gives."""
    as_json = json.dumps(info(F29_4))
    parsed, error = sc.parse_docker_info({"argv": ["docker", "info"], "rc": 0, "stdout": as_json, "stderr": ""})
    assert error is None
    assert gp.gpus_path(parsed, True) == gp.gpus_path(info(F29_4), True)


def test_server_version_not_understood_is_unknown():
    assert gp.predict({"ServerVersion": "dev"}, True)["path"] == "unknown"
    assert gp.predict(None, True)["path"] == "unknown"
    assert gp.engine_version({"ServerVersion": "29.2.0-rc.1"}) == (29, 2, 0)


# ---------------------------------------------------------------------------------------------
# prediction from docker info and PATH


@pytest.mark.parametrize("source", ["text", "json"])
def test_debian_docker_26_takes_the_hook_whatever_is_installed(source):
    parsed = info(DEBIAN) if source == "text" else DEBIAN_JSON
    for cdi_hook in (True, False):
        result = gp.gpus_path(parsed, cdi_hook)
        assert result["path"] == "legacy"
        assert "26.1.5+dfsg1" in result["reason"] and "29.2.0" in result["reason"]
    # Debian's docker with features.cdi on: CDI serves --device only, --gpus still goes through the hook.
    enabled = dict(parsed, CDISpecDirs=["/etc/cdi", "/var/run/cdi"])
    assert gp.predict(enabled, True)["path"] == "legacy"


def test_debian_docker_without_the_hook_fails():
    result = gp.predict(DEBIAN_JSON, True, runtime_hook_on_path=False)
    assert result["path"] == "unknown"
    assert 'could not select device driver "" with capabilities: [[gpu]]' in result["reason"]
    # ...the text the daemon answers then (a real capture of it):
    assert gp.classify_error(text("run-error_gpus-all_no-gpu-driver_xagent-273.txt"))["path"] == "unknown"


def test_docker_29_1_is_still_legacy_despite_cdi_devices():
    parsed = info(F29_1)
    assert gp.cdi_on(parsed) and gp.cdi_devices(parsed) == ["docker.com/gpu=webgpu"]
    assert gp.predict(parsed, True)["path"] == "legacy"


@pytest.mark.parametrize("name", [F29_4, F29_7])
def test_docker_29_2_plus_with_the_cdi_hook_and_a_spec_is_cdi(name):
    result = gp.gpus_path(info(name), True, runtime_hook_on_path=True)
    assert result["path"] == "cdi"
    assert "nvidia.com/gpu=all" in result["reason"] and "moby#50228" in result["reason"]


def test_docker_29_without_the_cdi_hook_is_legacy():
    result = gp.gpus_path(info(F29_4), False)
    assert result["path"] == "legacy" and "nvidia-cdi-hook is not on PATH" in result["reason"]


def test_docker_29_with_cdi_off_falls_back_to_the_hook():
    off = dict(info(F29_4), CDISpecDirs=[], DiscoveredDevices=[])
    assert gp.predict(off, True)["path"] == "legacy"
    assert "CDI off" in gp.predict(off, True)["reason"]
    assert gp.predict(off, True, runtime_hook_on_path=False)["path"] == "unknown"


def test_docker_29_without_the_name_in_a_spec_falls_back_or_fails():
    parsed = info(F29_4)
    # `--gpus device=1` on a one-GPU host: nvidia.com/gpu=1 is in no spec.
    one = {"DeviceRequests": [dict(GPUS_DEVICE["DeviceRequests"][0], DeviceIDs=["1"])]}
    fallback = gp.predict(parsed, True, host_config=one)
    assert fallback["path"] == "legacy" and gp.FALLBACK_LOG in fallback["reason"]
    failed = gp.predict(parsed, True, runtime_hook_on_path=False, host_config=one)
    assert failed["path"] == "cdi" and "unresolvable CDI devices nvidia.com/gpu=1" in failed["reason"]
    # A spec with nothing in it (docker info lists no device) for --gpus all:
    empty = dict(parsed, DiscoveredDevices=[])
    assert gp.predict(empty, True)["path"] == "legacy"


def test_requested_names_follow_the_nvidia_cdi_driver_mapping():
    assert gp.requested_names() == ["nvidia.com/gpu=all"]
    assert gp.requested_names(GPUS_ALL) == ["nvidia.com/gpu=all"]
    assert gp.requested_names(GPUS_DEVICE) == ["nvidia.com/gpu=0"]
    count = {"DeviceRequests": [{"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]}
    assert gp.requested_names(count) == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    uuid = {"DeviceRequests": [{"Driver": "", "DeviceIDs": ["GPU-672c39b8-f391-2e57-ad8e-33037a7e8aa5"],
                                "Capabilities": [["gpu"]]}]}
    assert gp.predict(info(F29_4), True, host_config=uuid)["path"] == "cdi"


def test_docker_29_3_plus_without_any_nvidia_binary_answers_through_the_amd_driver():
    result = gp.predict(info(F29_4), False, runtime_hook_on_path=False)
    assert result["path"] == "unknown" and "AMD CDI spec not found" in result["reason"]
    no_spec = dict(info(F29_4), DiscoveredDevices=[])
    assert "no known GPU vendor" in gp.predict(no_spec, False, runtime_hook_on_path=False)["reason"]
    # 29.2 has no AMD composite driver yet (moby#52048 is in 29.3.0).
    older = dict(info(F29_4), ServerVersion="29.2.1")
    assert 'could not select device driver ""' in gp.predict(older, False, runtime_hook_on_path=False)["reason"]


def test_explicit_driver_names():
    parsed = info(F29_4)
    hook = {"DeviceRequests": [dict(GPUS_ALL["DeviceRequests"][0], Driver="nvidia.runtime-hook")]}
    assert gp.predict(parsed, True, host_config=hook)["path"] == "legacy"
    forced = {"DeviceRequests": [dict(GPUS_ALL["DeviceRequests"][0], Driver="nvidia.cdi")]}
    assert gp.predict(parsed, False, host_config=forced)["path"] == "cdi"
    assert gp.predict(info(DEBIAN), False, host_config=CDI_DEVICE)["path"] == "cdi"
    # compose's `driver: nvidia` is the composite driver on 29.2+, the hook driver before.
    compose = {"DeviceRequests": [dict(GPUS_ALL["DeviceRequests"][0], Driver="nvidia")]}
    assert gp.predict(parsed, True, host_config=compose)["path"] == "cdi"
    assert gp.predict(info(DEBIAN), True, host_config=compose)["path"] == "legacy"


# ---------------------------------------------------------------------------------------------
# what a container shows


def test_visible_devices_is_the_last_entry():
    assert gp.visible_devices(env(ENV_CDI)) == "void"
    assert gp.visible_devices(["NVIDIA_VISIBLE_DEVICES=all", "PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]) == "0"
    assert gp.visible_devices(["PATH=/bin"]) is None


def test_observed_environment_of_each_path():
    cdi = gp.observe(env(ENV_CDI), GPUS_ALL)
    assert cdi["path"] == "cdi" and "void" in cdi["reason"]
    hook = gp.observe(env(ENV_HOOK), GPUS_ALL)
    assert hook["path"] == "legacy" and "NVIDIA_VISIBLE_DEVICES=all" in hook["reason"]
    missing = gp.observe(["PATH=/usr/bin"], GPUS_ALL)
    assert missing["path"] == "unknown" and "/proc/<pid>/environ" in missing["reason"]


def test_observation_wins_and_says_where_it_differs():
    parsed = info(F29_4)
    agree = gp.gpus_path(parsed, True, env=env(ENV_CDI), host_config=GPUS_ALL)
    assert agree["path"] == "cdi" and "as docker info predicts" in agree["reason"]
    fell_back = gp.gpus_path(parsed, True, env=env(ENV_HOOK), host_config=GPUS_ALL)
    assert fell_back["path"] == "legacy" and gp.FALLBACK_LOG in fell_back["reason"]
    debian = gp.gpus_path(info(DEBIAN), True, env=env(ENV_HOOK), host_config=GPUS_ALL)
    assert debian["path"] == "legacy"
    unread = gp.gpus_path(parsed, True, env=["PATH=/bin"], host_config=GPUS_ALL)
    assert unread["path"] == "cdi" and "not in the environment read" in unread["reason"]


def test_void_under_the_nvidia_runtime_is_the_runtime_s_cdi():
    """29.3.0 with default runtime nvidia: even where docker itself takes the hook (no nvidia-cdi-hook), the
    runtime in jit-cdi mode (toolkit 1.18+) removes the hook and injects through CDI."""
    parsed = info(F29_3)
    result = gp.gpus_path(parsed, False, env=env(ENV_CDI), host_config=dict(GPUS_ALL, Runtime="nvidia"))
    assert result["path"] == "cdi" and "nvidia runtime" in result["reason"]


def test_a_container_without_a_gpu_request():
    result = gp.gpus_path(info(F29_3), True, env=["NVIDIA_VISIBLE_DEVICES=all"],
                          host_config={"DeviceRequests": [], "Runtime": "nvidia"})
    assert result["path"] == "unknown" and "no --gpus" in result["reason"]
    assert "nvidia runtime injects" in result["reason"]
    zero = {"DeviceRequests": [{"Driver": "", "Count": 0, "Capabilities": [["gpu"]]}]}
    assert gp.observe(["NVIDIA_VISIBLE_DEVICES=void"], zero)["path"] == "unknown"


# ---------------------------------------------------------------------------------------------
# failure texts


@pytest.mark.parametrize("name,folder,path,words", [
    ("run-error_gpus-device0_legacy-hook_nvidia-container-cli_biop-desktop-2.txt", HERE, "legacy",
     "nvidia-container-cli"),
    ("005_docker-gpus-flag-rejected-in-cdi-mode_dstack-log.txt", ERRORS, "legacy", "mode is cdi"),
    ("run-error_gpus-all_docker29_amd-cdi-spec-not-found_wolf-386.txt", HERE, "unknown", "restart docker"),
    ("run-error_gpus-all_no-gpu-driver_xagent-273.txt", HERE, "unknown", "registered no NVIDIA driver"),
    ("run-error_runtime-nvidia-gpus-all_jit-cdi_nvidia-container-toolkit-1537.txt", HERE, "cdi", "jit-cdi"),
    ("start-error_stale-cdi-mount_610.43.03_nvidia-settings-124.txt", HERE, "cdi", "older than the driver"),
])
def test_error_texts_name_their_path(name, folder, path, words):
    result = gp.classify_error(text(name, folder))
    assert result["path"] == path and words in result["reason"]


def test_cdi_error_text_of_docker_itself():
    # docker's CDI driver failing (moby daemon/cdi.go injectCDIDevices), as compose printed it.
    result = gp.classify_error(text("run-error_compose-cdi_unresolvable_chatterbox-tts-server-5_excerpt.txt"))
    assert result["path"] == "cdi" and "CDI device injection failed" in result["reason"]
    assert gp.classify_error("nvidia-smi: command not found") is None


def test_error_text_is_used_when_no_container_ran():
    result = gp.gpus_path(info(F29_4), True, error_text=text("run-error_gpus-all_docker29_amd-cdi-spec-not-found_"
                                                              "wolf-386.txt"))
    assert result["path"] == "unknown" and "AMD" in result["reason"]
    assert gp.gpus_path(info(F29_4), True, error_text="something else")["path"] == "cdi"


def test_report_line():
    line = gp.report_line(gp.gpus_path(info(DEBIAN), True))
    assert line.startswith("--gpus path: legacy (docker 26.1.5+dfsg1 ")
    assert "\n" not in line
    assert gp.report_line({"path": "cdi", "reason": "x"}, subject="serving container vllm") == \
        "serving container vllm path: cdi (x)"


def test_paths_are_the_three_words():
    with pytest.raises(ValueError):
        gp._result("hook", "x")
    for name in (F29_4, F29_7, F29_3, F29_1, DEBIAN):
        for cdi_hook in (True, False):
            for hook in (True, False, None):
                assert gp.gpus_path(info(name), cdi_hook, runtime_hook_on_path=hook)["path"] in gp.PATHS
