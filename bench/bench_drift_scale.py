#!/usr/bin/env python3
"""What a run costs per host: drift.yml --check, a no-op site.yml and `ansible -m ping` over N simulated
GPU hosts (N = 1, 4, 8, 16), and a no-op site.yml on one host against a bare setup.

Targets (issue "Fast and self-contained"): the control node's CPU per added host for `drift.yml --check`
within 3 x the same figure of `ansible -m ping` on the same hosts (the floor Ansible itself sets; site.yml's
no-op run is printed beside it); a no-op `site.yml` on a converged host within 2 x
`ansible -m ansible.builtin.setup` of the same host. Wall time over 16 hosts is printed too,
but on one 2-core machine that also runs the 16 targets it measures the machine, not the fleet. It
reports; it never fails.

How: molecule's `drift` scenario converges one simulated host (create, prepare, converge: untimed),
which is committed to an image; N clones of it are started on the harness's dockerd with the
scenario's platform settings and the scenario's inventory variables, and the runs are timed with the
repo's own ansible.cfg. On each fleet, site.yml first runs with every role (gpuhost_common_fast_path=false,
which also records the fingerprint for the bench inventory's variables; untimed but for one host), then
the no-op runs take the fast path (the default). Each timed command runs GPUHOST_BENCH_REPEATS times (3);
the median run counts. The converged image is kept for the next run. Needs `make harness` first.
Run: python bench/bench_drift_scale.py [N ...]
"""
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
HARNESS_RUN = os.environ.get("HARNESS_RUN", "/run/gpuhost-harness")
DOCKER_HOST = "unix://%s/docker.sock" % HARNESS_RUN
SCENARIO = "drift"
SEED = "%s-trixie" % SCENARIO
IMAGE = "local/gpuhost-bench-converged:latest"
PREFIX = "gpuhost-bench-"
SIZES = [int(n) for n in sys.argv[1:]] or [1, 4, 8, 16]
# Runs of each timed command (each fleet's drift check, the setup, the fast-path no-op): the median counts.
REPEATS = max(1, int(os.environ.get("GPUHOST_BENCH_REPEATS", "3")))
NOOP_TARGET = 2.0
DRIFT_CHECK_TARGET = 3.0

ENV = dict(os.environ, DOCKER_HOST=DOCKER_HOST, HARNESS_RUN=HARNESS_RUN, MOLECULE_PROJECT_DIRECTORY=ROOT,
           ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", PY_COLORS="0",
           PATH=BIN + os.pathsep + os.environ.get("PATH", ""))


def run(argv, check=True, **kw):
    proc = subprocess.run(argv, cwd=ROOT, env=kw.pop("env", ENV), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, **kw)
    if check and proc.returncode != 0:
        sys.stdout.write(proc.stdout[-6000:])
        raise SystemExit("bench: %s failed (rc %d)" % (" ".join(argv[:4]), proc.returncode))
    return proc


def docker(*args, check=True):
    return run(["docker"] + list(args), check=check)


def timed(argv):
    start = time.monotonic()
    proc = run(argv, check=False)
    return time.monotonic() - start, proc


def cpu_seconds(names):
    """CPU seconds used so far by the control node's finished children and by the targets' cgroups.

    On this machine the simulated hosts share the control node's cores, so a drift check over N hosts
    cannot take less wall time than all of this CPU divided by the cores; on a real fleet each host's
    share runs on that host.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    targets = 0.0
    for name in names:
        cid = docker("inspect", "-f", "{{.Id}}", name, check=False).stdout.strip()
        for path, scale in (("/sys/fs/cgroup/unified/gpuhost-harness/%s/cpu.stat" % cid, 1e6),
                            ("/sys/fs/cgroup/gpuhost-harness/%s/cpu.stat" % cid, 1e6),
                            ("/sys/fs/cgroup/cpuacct/gpuhost-harness/%s/cpuacct.usage" % cid, 1e9)):
            if os.path.exists(path):
                with open(path, encoding="ascii") as fh:
                    text = fh.read()
                value = text.split("usage_usec", 1)[1].split()[0] if "usage_usec" in text else text.strip()
                targets += int(value) / scale
                break
    return usage.ru_utime + usage.ru_stime, targets


def machine_busy_seconds():
    """CPU seconds the whole machine has been busy (/proc/stat): besides the control node and the targets'
    cgroups, the harness's dockerd, containerd and the `docker exec`/runc processes of every connection."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(v) for v in fh.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def median_run(runs, key=0):
    """The run whose wall time (item `key`) is the median (the upper one of an even count)."""
    return sorted(runs, key=lambda run: run[key])[len(runs) // 2]


def slowest_tasks(output, count=8):
    """The first lines of profile_tasks' recap (ansible.cfg enables it): the slowest tasks first."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("TASKS RECAP")), None)
    if start is None:
        return []
    return ["  " + line for line in lines[start + 1:] if re.search(r" -+ [0-9.]+s$", line)][:count]


def group_vars():
    """The scenario's inventory variables: the shared base merged with the drift scenario's, as molecule does."""
    with open(os.path.join(ROOT, ".config", "molecule", "config.yml"), encoding="utf-8") as fh:
        base = yaml.safe_load(fh)["provisioner"]["inventory"]["group_vars"]
    with open(os.path.join(ROOT, "molecule", SCENARIO, "molecule.yml"), encoding="utf-8") as fh:
        scenario = yaml.safe_load(fh)["provisioner"]["inventory"]["group_vars"]
    merged = {group: dict(values) for group, values in base.items()}
    for group, values in scenario.items():
        merged.setdefault(group, {}).update(values)
    # molecule reads `$$` as a literal `$`.
    return json.loads(json.dumps(merged).replace("$$", "$"))


def platform_args():
    with open(os.path.join(ROOT, "molecule", SCENARIO, "molecule.yml"), encoding="utf-8") as fh:
        platform = yaml.safe_load(fh)["platforms"][0]
    args = ["--network", platform["network_mode"], "--cgroupns", platform["cgroupns_mode"],
            "--stop-signal", platform["stop_signal"], "--restart", platform["restart_policy"],
            "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "/var/lib/docker"]
    for cap in platform["capabilities"]:
        args += ["--cap-add", cap]
    for opt in platform["security_opts"]:
        args += ["--security-opt", opt]
    for key, value in platform["labels"].items():
        args += ["--label", "%s=%s" % (key, value)]
    return args, platform["command"]


def simrepo_port():
    """The port the harness serves the simulated repositories on: it changes with every harness start,
    and a converged image's apt sources name it."""
    with open(os.path.join(HARNESS_RUN, "simrepo.port"), encoding="ascii") as fh:
        return fh.read().strip()


def image_is_current():
    """The kept converged image exists and its apt sources name the simulated repositories served now."""
    proc = docker("image", "inspect", "--format", '{{ index .Config.Labels "gpuhost.simrepo" }}', IMAGE, check=False)
    return proc.returncode == 0 and proc.stdout.strip() == simrepo_port()


def seed_image():
    """One converged host, committed; the scenario's targets are removed afterwards."""
    molecule = os.path.join(BIN, "molecule")
    try:
        for step in ("create", "prepare", "converge"):
            print("bench: molecule %s -s %s" % (step, SCENARIO), flush=True)
            run([molecule, step, "-s", SCENARIO])
        docker("commit", "--change", "LABEL gpuhost.simrepo=%s" % simrepo_port(), SEED, IMAGE)
    finally:
        run([molecule, "destroy", "-s", SCENARIO], check=False)


def start_clones(count, workdir, names, image=IMAGE, prefix=PREFIX, converged=True):
    """Starts the clones, appending each to `names` as it starts (so a failure still removes it).
    A converged clone also gets its inner dockerd waited for and the check image loaded."""
    args, command = platform_args()
    for name in ["%s%02d" % (prefix, i) for i in range(1, count + 1)]:
        # A clone left behind by an interrupted run would block the name.
        docker("rm", "-f", name, check=False)
        docker("run", "-d", "--name", name, "--hostname", name, *args, image, command)
        names.append(name)
    for name in names:
        # systemd up (degraded is fine), the inner dockerd answering, then its check image.
        docker("exec", name, "timeout", "180", "systemctl", "is-system-running", "--wait", check=False)
        if not converged:
            continue
        # Sixteen systemd+dockerd targets booting at once on two cores take minutes.
        deadline = time.monotonic() + 900
        while docker("exec", name, "docker", "info", check=False).returncode != 0 and time.monotonic() < deadline:
            time.sleep(2)
        docker("exec", name, "docker", "load", "-i", "/var/lib/gpuhost/images/gpuhost-cuda-check.tar")
    inventory = os.path.join(workdir, "inventory-%s%d" % (prefix, count))
    os.makedirs(os.path.join(inventory, "group_vars"))
    hosts = {name: {"ansible_connection": "community.docker.docker",
                    "ansible_docker_extra_args": "-H=%s" % DOCKER_HOST} for name in names}
    with open(os.path.join(inventory, "hosts.yml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump({"all": {"children": {"gpu_hosts": {"hosts": hosts}, "suite_trixie": {"hosts": dict.fromkeys(names)}}}}, fh)
    for group, values in group_vars().items():
        with open(os.path.join(inventory, "group_vars", "%s.yml" % group), "w", encoding="utf-8") as fh:
            yaml.safe_dump(values, fh)
    return inventory


def remove(names):
    if names:
        docker("rm", "-f", *names, check=False)


def measure(label, count, names, argv):
    """REPEATS runs of `argv`: (count, wall s, rc, control-node CPU s, targets' CPU s, machine CPU s) of the
    median run, and that run's process."""
    runs = []
    for _ in range(REPEATS):
        cpu_before, busy_before = cpu_seconds(names), machine_busy_seconds()
        seconds, proc = timed(argv)
        busy = machine_busy_seconds() - busy_before
        cpu_after = cpu_seconds(names)
        control_cpu, target_cpu = (cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1])
        runs.append(((count, seconds, proc.returncode, control_cpu, target_cpu, busy), proc))
        print("bench: %s over %2d hosts: %6.1f s (rc %d), CPU s: control node %.1f, targets %.1f, whole machine"
              " %.1f" % (label, count, seconds, proc.returncode, control_cpu, target_cpu, busy), flush=True)
    # Single runs vary by a second or more on this machine: the median run counts.
    return sorted(runs, key=lambda run: run[0][1])[len(runs) // 2]


def per_added_host(rows):
    """Control-node CPU seconds per host beyond the first: the slope between the smallest and largest fleet."""
    if len(rows) < 2:
        return None
    small, big = min(rows), max(rows)
    if big[0] == small[0]:
        return None
    return (big[3] - small[3]) / (big[0] - small[0])


def main():
    if docker("info", check=False).returncode != 0:
        print("bench: no harness dockerd at %s (run `make harness` first); nothing measured" % DOCKER_HOST)
        return 0
    workdir = tempfile.mkdtemp(prefix="gpuhost-bench-")
    rows = {"ping": [], "drift.yml --check": [], "site.yml no-op": []}
    noop = []
    try:
        # The converged image is kept between runs of one harness (`docker rmi` it to start from a fresh
        # converge); a harness started since serves its repositories on another port.
        if not image_is_current():
            seed_image()
        else:
            print("bench: reusing %s" % IMAGE, flush=True)
        for count in SIZES:
            names = []
            try:
                inventory = start_clones(count, workdir, names)
                reports = os.path.join(workdir, "reports-%d" % count)
                playbook = os.path.join(BIN, "ansible-playbook")
                rows["ping"].append(measure("ansible -m ping", count, names, [
                    os.path.join(BIN, "ansible"), "-i", inventory, "gpu_hosts", "-m", "ansible.builtin.ping"])[0])
                rows["drift.yml --check"].append(measure("drift.yml --check", count, names, [
                    playbook, "-i", inventory, "playbooks/drift.yml", "--check", "-e", "gpuhost_reports_dir=%s" % reports])[0])
                # Every role once (records the fingerprint for this inventory's variables), then the fast path.
                full_s, full = timed([playbook, "-i", inventory, "site.yml", "-e", "gpuhost_common_fast_path=false"])
                print("bench: site.yml with every role over %2d hosts: %.1f s (rc %d)" % (count, full_s, full.returncode),
                      flush=True)
                # The molecule variables the bench inventory copies turn the fast path off; it is the
                # product's default, so it goes back on here.
                site_row, site = measure("site.yml no-op (fast path)", count, names,
                                         [playbook, "-i", inventory, "site.yml", "-e", "gpuhost_common_fast_path=true"])
                rows["site.yml no-op"].append(site_row)
                if count == 1:
                    setups = [timed([os.path.join(BIN, "ansible"), "-i", inventory, "gpu_hosts",
                                     "-m", "ansible.builtin.setup"]) for _ in range(REPEATS)]
                    setup_s, setup = median_run(setups)
                    print("bench: setup %s s, median %.1f s (rc %d)" % (
                        ", ".join("%.1f" % run_s for run_s, _ in setups), setup_s, setup.returncode), flush=True)
                    for fast_path, site_s, proc in (("false", full_s, full), ("true", site_row[1], site)):
                        changed = [line for line in proc.stdout.splitlines() if " changed=" in line and PREFIX in line]
                        noop.append((fast_path, setup_s, setup.returncode, site_s, proc.returncode, changed))
                        print("bench: no-op site.yml, gpuhost_common_fast_path=%s: %.1f s (rc %d); its slowest tasks:"
                              % (fast_path, site_s, proc.returncode), flush=True)
                        print("\n".join(slowest_tasks(proc.stdout)), flush=True)
            finally:
                remove(names)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    cores = os.cpu_count() or 1
    # The floor: no schedule on these cores can finish the run sooner than the machine's busy CPU allows.
    print("\n| command | hosts | wall s | rc | control-node CPU s | targets' CPU s | whole machine's CPU s |"
          " CPU-bound floor s (machine CPU / %d cores) |\n|---|---:|---:|---:|---:|---:|---:|---:|" % cores)
    for label, measured in rows.items():
        for count, seconds, rc, control_cpu, target_cpu, busy in measured:
            print("| %s | %d | %.1f | %d | %.1f | %.1f | %.1f | %.1f |" % (
                label, count, seconds, rc, control_cpu, target_cpu, busy, busy / cores))
    floor = per_added_host(rows["ping"])
    print("\n| command | control-node CPU s per added host | ratio to ansible -m ping |\n|---|---:|---:|")
    for label, measured in rows.items():
        slope = per_added_host(measured)
        print("| %s | %s | %s |" % (label, "%.2f" % slope if slope is not None else "-",
                                     "%.1f x" % (slope / floor) if slope is not None and floor else "-"))
    slope = per_added_host(rows["drift.yml --check"])
    if slope is not None and floor:
        print("drift.yml --check: %.1f x ansible -m ping per added host (target <= %.1f x): %s" % (
            slope / floor, DRIFT_CHECK_TARGET, "met" if slope / floor <= DRIFT_CHECK_TARGET else "NOT met"))
    for fast_path, setup_s, setup_rc, site_s, site_rc, changed in noop:
        ratio = site_s / setup_s
        print("no-op site.yml (gpuhost_common_fast_path=%s) %.1f s (rc %d; %s) vs setup %.1f s (rc %d) = %.1f x"
              " (target <= %.1f x): %s" % (fast_path, site_s, site_rc, "; ".join(c.strip() for c in changed), setup_s,
                                           setup_rc, ratio, NOOP_TARGET, "met" if ratio <= NOOP_TARGET else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
