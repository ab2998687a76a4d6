"""module_utils/host/runner.py is the one host-command runner: nothing else in library/ or module_utils/ starts a
process (subprocess, AnsibleModule.run_command, os.system/os.popen); its two backends keep the behaviours the
modules relied on (run_command's defaults, the checks' timeout and C locale, the boot script's subprocess)."""
import glob
import io
import os
import sys
import tokenize

import pytest

from conftest import ROOT
from host import runner
from host.runner import C_LOCALE, ModuleHostIO, SubprocessHostIO, command_line, module_host_io

RUNNER = os.path.join(ROOT, "module_utils", "host", "runner.py")
SOURCES = sorted(set(glob.glob(os.path.join(ROOT, "library", "*.py"))
                     + glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py"))
                     + glob.glob(os.path.join(ROOT, "module_utils", "**", "*.py"), recursive=True)))


def process_calls(text):
    """The places a source starts a process itself, from its tokens (comments and strings do not count)."""
    found = []
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.NAME:
            continue
        before = tokens[i - 1].string if i else ""
        owner = tokens[i - 2].string if i > 1 else ""
        if tok.string == "subprocess":
            found.append((tok.start[0], "subprocess"))
        elif tok.string == "run_command" and before == ".":
            found.append((tok.start[0], ".run_command("))
        elif tok.string in ("system", "popen", "spawnv", "spawnvp", "execv", "execvp") and before == "." \
                and owner == "os":
            found.append((tok.start[0], "os." + tok.string))
    return found


def test_no_process_is_started_outside_the_runner():
    offenders = []
    for path in SOURCES:
        if os.path.abspath(path) == RUNNER:
            continue
        with open(path, encoding="utf-8") as handle:
            for line, what in process_calls(handle.read()):
                offenders.append("%s:%d: %s" % (os.path.relpath(path, ROOT), line, what))
    assert not offenders, "run commands through module_utils/host/runner.py (a HostIO):\n" + "\n".join(offenders)


def test_the_scan_sees_a_process_call():
    """The scan above is not blind: code is found, a comment or a docstring is not."""
    assert [w for _l, w in process_calls("import subprocess\nrc, out, err = module.run_command(['ls'])\n")] == \
        ["subprocess", ".run_command("]
    assert process_calls("os.system('ls')\n") == [(1, "os.system")]
    assert process_calls('"""through AnsibleModule.run_command or subprocess"""\n# module.run_command(x)\n') == []
    assert process_calls(open(RUNNER, encoding="utf-8").read())       # the runner itself does


# --- ModuleHostIO: AnsibleModule.run_command underneath ---------------------------------------------

class FakeModule(object):
    def __init__(self, params=None, binaries=None, raises=None):
        self.params = params or {}
        self.binaries = binaries or {}
        self.raises = raises
        self.calls = []

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return self.binaries.get(name)

    def run_command(self, args, **options):
        self.calls.append((args, options))
        if self.raises:
            raise self.raises
        return 0, "out", "err"

    def fail_json(self, **result):
        raise AssertionError(result)


def test_module_defaults_are_run_commands_own():
    module = FakeModule(binaries={"timeout": "/usr/bin/timeout"})
    assert ModuleHostIO(module).run(["docker", "version"]) == (0, "out", "err")
    assert module.calls == [(["docker", "version"], {"check_rc": False, "errors": "surrogate_or_strict",
                                                     "handle_exceptions": True})]


def test_module_host_io_bounds_each_command_in_the_c_locale():
    module = FakeModule(params={"timeout": 30}, binaries={"timeout": "/usr/bin/timeout"})
    module_host_io(module).run(["nvidia-smi", "-q", "-x"])
    args, options = module.calls[0]
    assert args == ["/usr/bin/timeout", "-k", "5", "30", "nvidia-smi", "-q", "-x"]
    assert options == {"check_rc": False, "errors": "replace", "handle_exceptions": False,
                       "environ_update": {"LC_ALL": "C"}}
    with pytest.raises(AssertionError, match="positive"):
        module_host_io(FakeModule(params={"timeout": 0}))


def test_a_command_that_cannot_start_is_exit_127_where_asked():
    module = FakeModule(raises=OSError(2, "No such file or directory"))
    rc, out, err = ModuleHostIO(module, handle_exceptions=False).run(["/nonexistent/tool", "--version"])
    assert (rc, out) == (127, "") and err.startswith("/nonexistent/tool: ") and "No such file" in err


def test_merged_streams_run_as_a_quoted_shell_line():
    module = FakeModule()
    ModuleHostIO(module, errors="surrogate_then_replace").run(["docker", "logs", "--tail", "5", "a b"],
                                                             merge_stderr=True)
    args, options = module.calls[0]
    assert args == "docker logs --tail 5 'a b' 2>&1" == command_line(["docker", "logs", "--tail", "5", "a b"], True)
    assert options["use_unsafe_shell"] is True and options["errors"] == "surrogate_then_replace"


def test_module_environment_is_added_not_shared():
    module = FakeModule()
    host = ModuleHostIO(module, environ_update=C_LOCALE)
    host.run(["apt-cache", "madison", "nvidia-driver"])
    module.calls[0][1]["environ_update"]["LANG"] = "x"
    host.run(["apt-cache", "madison", "nvidia-driver"])
    assert module.calls[1][1]["environ_update"] == {"LC_ALL": "C"}


# --- SubprocessHostIO: outside Ansible (the MIG boot script) ------------------------------------------

def test_subprocess_run_returns_both_streams_and_the_status():
    host = SubprocessHostIO()
    assert host.run(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out\n", "err\n")
    assert host.run(["sh", "-c", "echo out; echo err >&2"], merge_stderr=True) == (0, "out\nerr\n", "")


def test_subprocess_run_never_raises():
    rc, out, err = SubprocessHostIO().run(["/nonexistent/gpuhost-tool"])
    assert (rc, out) == (127, "") and "nonexistent" in err
    rc, out, err = SubprocessHostIO(timeout=0.2).run([sys.executable, "-c", "import time; time.sleep(5)"])
    assert rc == runner.TIMEOUT_RC == 124 and err.endswith("timed out after 0.2 s")


def test_subprocess_environment_and_which():
    host = SubprocessHostIO(environ_update={"GPUHOST_RUNNER_TEST": "1"})
    assert host.run(["sh", "-c", "echo $GPUHOST_RUNNER_TEST"])[1] == "1\n"
    assert host.which("sh") and host.which("gpuhost-no-such-tool") is None


def test_the_boot_script_gets_the_runner():
    """mig_apply runs at boot outside Ansible: the nvidia_mig role copies the runner and its package with it."""
    from test_mig_apply import _role_copies
    copied = _role_copies("Copy the layout logic for the boot script")
    assert "host/__init__.py" in copied and "host/runner.py" in copied
    assert "host" in _role_copies("Make the boot script's directories")
