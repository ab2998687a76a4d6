"""Each molecule scenario as one test: `molecule test -s NAME` against the harness's dockerd.

The scenarios to run come from $GPUHOST_SCENARIOS (the Makefile sets it). Targets are removed
after each scenario, whatever happened, by the harness's cleanup.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = os.environ.get("GPUHOST_SCENARIOS", "default").split()
CLEANUP = os.path.join(ROOT, "tests", "harness", "cleanup.sh")


@pytest.fixture
def harness_cleanup():
    yield
    subprocess.run([CLEANUP], cwd=ROOT, check=False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, harness_cleanup):
    molecule = os.path.join(os.path.dirname(sys.executable), "molecule")
    proc = subprocess.run(
        [molecule, "test", "-s", scenario],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=3600,
    )
    # The whole log on failure; the tail on success keeps timing summaries visible with -rA.
    assert proc.returncode == 0, proc.stdout[-60000:]
