"""Make module_utils/, library/ and bin/ importable as plain modules in unit tests."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("library", "bin"):
    path = os.path.join(ROOT, sub)
    if path not in sys.path:
        sys.path.insert(0, path)

from gpuhost_cli.module_utils_path import install  # noqa: E402  (bin/ is on the path from here)

install(os.path.join(ROOT, "module_utils"))

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
# The real captures other people made (the project's copy, byte for byte; sources in its MANIFEST.tsv).
# Tests read nothing outside the repository: a user who clones it has only this.
CORPUS = os.path.join(FIXTURES, "corpus")

ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def fixture_path(folder, prefix):
    """The path of the first fixture (by name) in tests/fixtures/<folder>/ whose name starts with prefix."""
    directory = os.path.join(FIXTURES, folder)
    return os.path.join(directory, next(f for f in sorted(os.listdir(directory)) if f.startswith(prefix)))


def read_fixture(folder, prefix):
    """fixture_path()'s text."""
    with open(fixture_path(folder, prefix), encoding="utf-8") as handle:
        return handle.read()


def containerd_fixture(name):
    """A containerd config.toml fixture, byte for byte (CRLF kept): nvidia-ctk's own outputs live in
    tests/fixtures/nvidia_ctk/, other real files in tests/fixtures/containerd/."""
    sub = "nvidia_ctk" if name.startswith("containerd_configure") else "containerd"
    with open(os.path.join(FIXTURES, sub, name), encoding="utf-8", newline="") as handle:
        return handle.read()


def run_ansible_module(module, args, *flags, cwd="/"):
    """One task of `module` (from library/) on localhost through real ansible: its result as a dict."""
    import json
    import subprocess
    env = dict(os.environ, ANSIBLE_LIBRARY=os.path.join(ROOT, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(ROOT, "module_utils"),
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    proc = subprocess.run([ANSIBLE, "localhost", "-c", "local", "-m", module, "-a", json.dumps(args), *flags],
                          capture_output=True, text=True, env=env, timeout=120, cwd=cwd)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


# A module file run as Ansible runs it (its args file as argv[1]), with module_utils/ served as
# ansible.module_utils as the CLI serves it: `[sys.executable, *MODULE_RUNNER, module_path, args_file]`.
MODULE_RUNNER = ("-c", "import runpy, sys; sys.path.insert(0, %r); "
                 "from gpuhost_cli.module_utils_path import install; install(%r); "
                 "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
                 % (os.path.join(ROOT, "bin"), os.path.join(ROOT, "module_utils")))


# Each molecule scenario's outcome and seconds, from its test report: under pytest-xdist (`make test`) the
# scenarios run in a worker, and only their reports reach this process.
MOLECULE_SCENARIOS = []


def pytest_runtest_logreport(report):
    if report.when == "call" and "test_molecule_scenario[" in report.nodeid:
        MOLECULE_SCENARIOS.append((report.nodeid.split("[", 1)[1].rstrip("]"), report.passed, report.duration))


def pytest_terminal_summary(terminalreporter, config):
    """The molecule scenarios' seconds, as a table at the end of `make test` / `make molecule`: where the minutes
    go. (Here, not in tests/molecule/conftest.py: a second conftest module would shadow this one's name, which
    the tests import.)"""
    if not MOLECULE_SCENARIOS or hasattr(config, "workerinput"):
        return
    terminalreporter.section("molecule scenarios: seconds")
    for scenario, passed, seconds in MOLECULE_SCENARIOS:
        terminalreporter.write_line("%-16s %6.0f  %s" % (scenario, seconds, "ok" if passed else "FAILED"))
    total = sum(seconds for _name, _passed, seconds in MOLECULE_SCENARIOS)
    terminalreporter.write_line("%-16s %6.0f  (%.1f min)" % ("total", total, total / 60))


@pytest.fixture(scope="session")
def promtool():
    """promtool's path (.cache/tools/, from Debian's prometheus package: tests/harness/promtool.sh fetches it once)."""
    import subprocess
    proc = subprocess.run(["bash", os.path.join(ROOT, "tests", "harness", "promtool.sh")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, "tests/harness/promtool.sh could not provide promtool:\n" + proc.stderr
    return proc.stdout.strip()

