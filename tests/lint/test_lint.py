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


def _conditions(node, where):
    """(where, condition) of every `that:` / `when:` / `failed_when:` / `changed_when:` / `until:` item."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("that", "when", "failed_when", "changed_when", "until"):
                for item in value if isinstance(value, list) else [value]:
                    yield where, item
            yield from _conditions(value, where)
    elif isinstance(node, list):
        for item in node:
            yield from _conditions(item, where)


def test_every_condition_is_a_string():
    """A condition with an unquoted ': ' in it is a YAML mapping, which ansible-core refuses at run time
    ("Conditional expressions must be strings") and neither linter reports."""
    import yaml
    bad = []
    for top in ("roles", "playbooks", "molecule"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if not name.endswith((".yml", ".yaml")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as handle:
                    try:
                        doc = yaml.safe_load(handle)
                    except yaml.YAMLError:
                        continue
                bad += ["%s: %r" % (os.path.relpath(where, ROOT), cond) for where, cond in _conditions(doc, path)
                        if not isinstance(cond, (str, bool, int)) and cond is not None]
    assert not bad, "\n".join(bad)
