"""The nvidia runtime on a node's own containerd (Debian trixie, no docker), after converge and idempotence."""
import difflib
import os

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       "tests", "fixtures", "containerd", "config-1.7-default-systemdcgroup_lucheng0127-k8s_setup_guide.toml")


def test_no_docker_on_the_node(host):
    assert not host.exists("dockerd")
    assert host.service("containerd").is_running


def test_operator_config_keeps_every_line_but_gains_the_drop_in_import(host):
    with open(FIXTURE, encoding="utf-8") as handle:
        before = handle.read().splitlines()
    after = host.file("/etc/containerd/config.toml").content_string.splitlines()
    changed = [line for line in difflib.ndiff(before, after) if line[:2] in ("- ", "+ ")]
    # containerd 1.7's default has `imports = []`; the role fills in the toolkit's drop-in directory.
    assert changed == ["- imports = []", "+ imports = [\"/etc/containerd/conf.d/*.toml\"]"], changed


def test_containerd_merged_the_nvidia_runtime(host):
    dump = host.check_output("containerd config dump")
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]' in dump
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert host.file("/etc/containerd/conf.d/99-nvidia.toml").exists


def test_a_container_run_through_the_nvidia_runtime_lists_the_gpus(host):
    image = host.check_output("ctr images list -q | grep gpuhost-cuda-check")
    out = host.check_output(
        "ctr run --rm --runc-binary=/usr/bin/nvidia-container-runtime --env NVIDIA_VISIBLE_DEVICES=all "
        "%s gpuhost-verify-gpus nvidia-smi -L" % image)
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("GPU %d: NVIDIA H100 80GB HBM3 (UUID: GPU-" % i)
                                   for i, line in enumerate(lines)), out


def test_without_the_runtime_the_container_has_no_gpu(host):
    image = host.check_output("ctr images list -q | grep gpuhost-cuda-check")
    run = host.run("ctr run --rm --env NVIDIA_VISIBLE_DEVICES=all %s gpuhost-verify-plain nvidia-smi -L" % image)
    assert run.rc != 0
    assert "nvidia-smi" in run.stderr + run.stdout
