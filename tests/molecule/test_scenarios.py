"""Each molecule scenario as one test: `molecule test -s NAME` against the harness's dockerd.

The scenarios to run come from $GPUHOST_SCENARIOS (the Makefile sets it). Targets are removed
after each scenario, whatever happened, by the harness's cleanup.
"""
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = os.environ.get("GPUHOST_SCENARIOS", "default").split()
CLEANUP = os.path.join(ROOT, "tests", "harness", "cleanup.sh")
# Each scenario's whole log, kept for reading after a green run too (profile_tasks' timings are in it).
LOG_DIR = os.path.join(ROOT, ".cache", "molecule-logs")


@pytest.fixture
def harness_cleanup():
    yield
    subprocess.run([CLEANUP], cwd=ROOT, check=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, harness_cleanup):
    molecule = os.path.join(os.path.dirname(sys.executable), "molecule")
    started = time.monotonic()
    proc = subprocess.run(
        [molecule, "test", "-s", scenario],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=3600,
    )
    os.makedirs(LOG_DIR, exist_ok=True)
    with open(os.path.join(LOG_DIR, scenario + ".log"), "w", encoding="utf-8") as log:
        log.write(proc.stdout)
        log.write("\n# molecule test -s %s: rc %d in %.0f s\n" % (scenario, proc.returncode, time.monotonic() - started))
    # The whole log on failure; the tail on success keeps timing summaries visible with -rA.
    assert proc.returncode == 0, proc.stdout[-60000:]
