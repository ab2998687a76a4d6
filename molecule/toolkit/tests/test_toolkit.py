"""Container layers on a simulated 2 x H100 host after site.yml."""
import json

H100_UUID_PREFIX = "GPU-"


def daemon_json(host):
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def host_uuids(host):
    out = host.check_output("nvidia-smi --query-gpu=uuid --format=csv,noheader")
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_toolkit_packages_pinned_together(host):
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                 "libnvidia-container-tools", "libnvidia-container1"):
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == "1.18.0-1", (name, pkg.version)


def test_repository_is_deb822_with_signed_by(host):
    source = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").content_string
    assert "Suites: /" in source
    assert "Signed-By: /usr/share/keyrings/nvidia-container-toolkit-keyring.asc" in source


def test_runtime_registered_and_operator_keys_kept(host):
    data = daemon_json(host)
    assert data["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}
    assert data["registry-mirrors"] == ["https://mirror.example"]
    assert data["log-opts"] == {"max-size": "10m"}
    # features.cdi (set on Docker 25+) must not have dropped the operator's buildkit key.
    assert data["features"]["buildkit"] is True


def test_docker_lists_nvidia_runtime(host):
    info = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert "nvidia" in info


def test_gpus_container_sees_both_gpus(host):
    uuids = host_uuids(host)
    assert len(uuids) == 2
    out = host.check_output("docker run --rm --gpus all local/gpuhost-cuda-check:1 nvidia-smi -L")
    for uuid in uuids:
        assert uuid in out


def test_gpus_device_selects_one_gpu(host):
    out = host.check_output("docker run --rm --gpus device=1 local/gpuhost-cuda-check:1 nvidia-smi -L")
    assert out.count("GPU ") == 1
    assert host_uuids(host)[1] in out


def test_cdi_spec_fresh_for_loaded_driver(host):
    spec = host.file("/etc/cdi/nvidia.yaml")
    assert spec.exists and spec.mode == 0o644
    assert "libcuda.so.580.95.05" in spec.content_string
    assert "--host-driver-version=580.95.05" in spec.content_string
    assert not host.file("/var/run/cdi/nvidia.yaml").exists


def test_refresh_service_points_at_managed_spec(host):
    env = host.file("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env").content_string
    assert "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml" in env


def test_cdi_device_on_docker_with_cdi(host):
    version = host.check_output("docker version --format '{{.Server.Version}}'")
    if int(version.split(".")[0]) < 25:
        # Docker 20.10 (bookworm) has no CDI; it rejects the name as a device path.
        cmd = host.run("docker run --rm --device nvidia.com/gpu=0 local/gpuhost-cuda-check:1 true")
        assert cmd.rc != 0
        return
    out = host.check_output("docker run --rm --device nvidia.com/gpu=0 local/gpuhost-cuda-check:1 nvidia-smi -L")
    assert "GPU 0:" in out


def test_local_record(host):
    record = json.loads(host.file("/etc/ansible/facts.d/gpuhost.fact").content_string)
    assert record["cdi"]["driver_version"] == "580.95.05"
