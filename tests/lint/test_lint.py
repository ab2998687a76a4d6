"""yamllint and ansible-lint (production profile) over the whole repository."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def run(cmd):
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return proc.returncode, proc.stdout + proc.stderr


def test_yamllint_clean():
    rc, out = run([os.path.join(BIN, "yamllint"), "--strict", "."])
    assert rc == 0, out


def test_ansible_lint_production_profile():
    rc, out = run([os.path.join(BIN, "ansible-lint"), "--profile", "production", "--offline"])
    assert rc == 0, out
