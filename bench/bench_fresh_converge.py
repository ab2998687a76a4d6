#!/usr/bin/env python3
"""A fresh converge of one simulated GPU host by site.yml, against the same work done by a plain shell
script of seed 000's manual steps, from the same simulated repositories.

Target (issue "First use and fleet rollout", point 4): what gpuhost costs over the steps an operator would
type. The script does what the seed does by hand: the driver's apt source and packages, a reboot,
`nvidia-smi -pm 1`, docker.io, the toolkit from its apt repository, `nvidia-ctk runtime configure`,
a docker restart, `nvidia-ctk cdi generate`, a `--gpus all` container. site.yml does that and its checks
(every layer verified, holds and pins, records, the validation containers). It reports; it never fails.

How: molecule's drift scenario creates and prepares one target (the simulated GPU hardware only: no
driver, no docker), committed as an image. Two clones start from it. site.yml converges the first with
the scenario's inventory variables; the script then installs the same driver and toolkit packages on the
second. Both end with `docker run --gpus all <check image> nvidia-smi -L`. The script's only step that
is not the seed's is the harness's daemon.json (no bridge, no iptables: ground rules of the machine).
Run: python bench/bench_fresh_converge.py (needs `make harness`).
"""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_drift_scale import (BIN, DOCKER_HOST, HARNESS_RUN, ROOT, SCENARIO, SEED,  # noqa: E402
                               cpu_seconds, docker, group_vars, machine_busy_seconds, remove, run,
                               slowest_tasks, start_clones, timed)

FRESH_IMAGE = "local/gpuhost-bench-fresh:latest"
PREFIX = "gpuhost-fresh-"
CHECK_IMAGE = "local/gpuhost-cuda-check:1"
CHECK_ARCHIVE = "/var/lib/gpuhost/images/gpuhost-cuda-check.tar"

# Seed 000, steps 1-3, with the simulated archives in place of Ubuntu's and nvidia.github.io.
DRIVER_STEPS = r"""
repo=$1; shift
apt-get update -q
apt-get install -y -q curl gnupg ca-certificates
install -d -m 0755 /etc/apt/keyrings
curl -fsSL "$repo/keys/gpusim-archive-keyring.asc" | gpg --batch --yes --dearmor -o /etc/apt/keyrings/gpusim.gpg
echo "deb [signed-by=/etc/apt/keyrings/gpusim.gpg] $repo/debian $(. /etc/os-release; echo "$VERSION_CODENAME") non-free non-free-firmware" \
  > /etc/apt/sources.list.d/gpusim-debian.list
apt-get update -q
apt-get install -y -q "$@"
"""

CONTAINER_STEPS = r"""
repo=$1; daemon_json=$2; shift 2
nvidia-smi -pm 1
# Not a seed step: the machine's ground rules for a dockerd inside a target (no bridge, no NAT).
install -d -m 0755 /etc/docker
printf '%s\n' "$daemon_json" > /etc/docker/daemon.json
apt-get install -y -q docker.io docker-cli
curl -fsSL "$repo/libnvidia-container/gpgkey" | gpg --batch --yes --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
echo "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] $repo/libnvidia-container/stable/deb/\$(ARCH) /" \
  > /etc/apt/sources.list.d/nvidia-container-toolkit.list
apt-get update -q
apt-get install -y -q "$@"
nvidia-ctk runtime configure --runtime=docker
systemctl restart docker
nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml
# The target has no registry: the check image comes from its archive (as the roles load it).
docker load -i {archive}
docker run --rm --gpus all {image} nvidia-smi -L
""".format(archive=CHECK_ARCHIVE, image=CHECK_IMAGE)


def fresh_image():
    """One created and prepared target (hardware only), committed; the scenario's target is removed."""
    molecule = os.path.join(BIN, "molecule")
    try:
        for step in ("create", "prepare"):
            print("bench: molecule %s -s %s" % (step, SCENARIO), flush=True)
            run([molecule, step, "-s", SCENARIO])
        docker("commit", SEED, FRESH_IMAGE)
    finally:
        run([molecule, "destroy", "-s", SCENARIO], check=False)


def sim_repo():
    with open(os.path.join(HARNESS_RUN, "simrepo.port"), encoding="ascii") as fh:
        return "http://127.0.0.1:%s" % fh.read().strip()


def daemon_json():
    options = dict(group_vars()["all"]["docker_daemon_options"])
    options["exec-opts"] = []          # trixie: see .config/molecule/config.yml
    return json.dumps(options)


def nvidia_packages(name):
    """The driver and toolkit packages site.yml left installed, with their versions (the script's work)."""
    out = docker("exec", name, "dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}=${Version}\n").stdout
    # "ii" or "hi": installed, held or not (site.yml holds the driver's packages).
    installed = [line.split()[1] for line in out.splitlines() if line[1:2] == "i"]
    toolkit = [p for p in installed if p.split("=")[0] in (
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
        "libnvidia-container1")]
    driver = [p for p in installed if p not in toolkit and (
        "nvidia" in p.split("=")[0] or p.startswith(("libcuda", "libnv")))]
    return driver, toolkit


def gpu_lines(output):
    """The GPUs `nvidia-smi -L` listed in a container (docker's own warnings left out)."""
    return "\n".join(line for line in output.splitlines() if line.startswith("GPU "))


def reboot(name):
    """`reboot` as the seed does; the target's container restarts (restart policy), then systemd and the
    simulated boot (the module loaded, /proc/driver/nvidia) come up."""
    docker("exec", name, "systemctl", "reboot", check=False)
    time.sleep(3)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if docker("exec", name, "test", "-e", "/proc/driver/nvidia/version", check=False).returncode == 0:
            break
        time.sleep(1)
    docker("exec", name, "timeout", "180", "systemctl", "is-system-running", "--wait", check=False)


def measure(label, names, steps):
    """Runs `steps` (callables returning a process) and returns the row: label, wall s, rc, control-node
    CPU s, targets' CPU s, the whole machine's CPU s, the last step's output."""
    cpu_before, busy_before = cpu_seconds(names), machine_busy_seconds()
    start = time.monotonic()
    rc, proc = 0, None
    for step in steps:
        proc = step()
        rc = rc or (proc.returncode if proc is not None else 0)
        if rc:
            break
    seconds = time.monotonic() - start
    cpu_after, busy = cpu_seconds(names), machine_busy_seconds() - busy_before
    row = (label, seconds, rc, cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1], busy)
    print("bench: %s: %.1f s (rc %d), CPU s: control node %.1f, target %.1f, whole machine %.1f" % row, flush=True)
    return row, proc


def main():
    if docker("info", check=False).returncode != 0:
        print("bench: no harness dockerd at %s (run `make harness` first); nothing measured" % DOCKER_HOST)
        return 0
    workdir = tempfile.mkdtemp(prefix="gpuhost-bench-fresh-")
    rows, works = [], {}
    names = []
    try:
        if docker("image", "inspect", FRESH_IMAGE, check=False).returncode != 0:
            fresh_image()
        else:
            print("bench: reusing %s" % FRESH_IMAGE, flush=True)
        inventory = start_clones(2, workdir, names, image=FRESH_IMAGE, prefix=PREFIX, converged=False)
        site_host, script_host = names
        playbook = os.path.join(BIN, "ansible-playbook")
        row, site = measure("site.yml, fresh host", [site_host], [
            lambda: timed([playbook, "-i", inventory, "site.yml", "--limit", site_host])[1]])
        rows.append(row)
        print("bench: site.yml's slowest tasks:\n%s" % "\n".join(slowest_tasks(site.stdout)), flush=True)
        works[row[0]] = gpu_lines(docker("exec", site_host, "docker", "run", "--rm", "--gpus", "all", CHECK_IMAGE,
                                         "nvidia-smi", "-L", check=False).stdout)
        driver, toolkit = nvidia_packages(site_host)
        print("bench: the script installs what site.yml installed: %s" % " ".join(driver + toolkit), flush=True)
        repo = sim_repo()
        row, script = measure("seed 000's steps as a shell script", [script_host], [
            lambda: docker("exec", script_host, "bash", "-euo", "pipefail", "-c", DRIVER_STEPS, "driver", repo,
                           *driver, check=False),
            lambda: reboot(script_host),
            lambda: docker("exec", script_host, "bash", "-euo", "pipefail", "-c", CONTAINER_STEPS, "container",
                           repo, daemon_json(), *toolkit, check=False)])
        rows.append(row)
        if row[2]:
            sys.stdout.write(script.stdout[-3000:])
        works[row[0]] = gpu_lines(script.stdout)
    finally:
        remove(names)
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n| how | wall s | rc | control-node CPU s | target's CPU s | whole machine's CPU s | "
          "`docker run --gpus all ... nvidia-smi -L` after |\n|---|---:|---:|---:|---:|---:|---|")
    for label, seconds, rc, control_cpu, target_cpu, busy in rows:
        print("| %s | %.1f | %d | %.1f | %.1f | %.1f | %s |" % (
            label, seconds, rc, control_cpu, target_cpu, busy, "<br>".join(works.get(label, "").splitlines()) or "-"))
    if len(rows) == 2 and rows[1][1]:
        print("\nsite.yml / script: wall %.1f x, whole machine's CPU %.1f x" % (
            rows[0][1] / rows[1][1], rows[0][5] / rows[1][5] if rows[1][5] else float("nan")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
