"""The repo's ansible.cfg as ansible-core reads it (not as the file reads): settings the fleet runs rely on."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def effective_config():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    for name in list(env):
        # Only the file decides here, not the caller's environment.
        if name.startswith("ANSIBLE_") and name != "ANSIBLE_CONFIG":
            del env[name]
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-config"), "dump", "--only-changed"],
                         cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    settings = {}
    for line in out.splitlines():
        if "(" in line and ") = " in line:
            name, value = line.split("(", 1)[0], line.split(") = ", 1)[1]
            settings[name] = value
    return settings


def test_pipelining_reaches_every_connection_plugin():
    # [ssh_connection] pipelining reaches the ssh plugin only; docker and local connections read this one.
    assert effective_config().get("ANSIBLE_PIPELINING") == "True"


def test_forks_cover_a_sixteen_host_batch_and_python_is_found_quietly():
    settings = effective_config()
    assert int(settings["DEFAULT_FORKS"]) >= 16
    assert settings["INTERPRETER_PYTHON"] == "auto_silent"
