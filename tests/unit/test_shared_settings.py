"""What several roles read is written once, in roles/gpuhost (defaults only, a dependency of every role that reads
it): no role or playbook reads another role's variable with a literal default (the scan below), each role that
reads a shared value depends on roles/gpuhost, so it works alone in a play of its own (the plays below run each
role alone and read what it derives), and the values are those the literals gave before."""
import glob
import json
import os
import re
import subprocess
import sys

import yaml

from conftest import ROOT

ROLES = os.path.join(ROOT, "roles")
HOME = "gpuhost"
CHECK_IMAGE = "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"
TOOLKIT_PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1"]

# A playbook's own policy, not a role's default repeated: drift.yml reboots only a host whose inventory asks for
# it (nvidia_driver_reboot: auto); the role's default (auto) is site.yml's.
ALLOWED = {("playbooks/drift.yml", "nvidia_driver_reboot")}


def load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except (OSError, yaml.YAMLError):
        return None


def role_names():
    return sorted(d for d in os.listdir(ROLES) if os.path.isfile(os.path.join(ROLES, d, "meta", "main.yml")))


def _set_or_registered(node, found):
    if isinstance(node, list):
        for item in node:
            _set_or_registered(item, found)
    elif isinstance(node, dict):
        if isinstance(node.get("register"), str):
            found.add(node["register"])
        for key in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(node.get(key), dict):
                found.update(k for k in node[key] if k != "cacheable")
        for key in ("block", "rescue", "always"):
            _set_or_registered(node.get(key), found)


def defined_by(role):
    """The variables a role defines: its defaults and vars, its argument specs, what its tasks set or register."""
    base = os.path.join(ROLES, role)
    names = set()
    for name in ("defaults/main.yml", "vars/main.yml"):
        data = load(os.path.join(base, name))
        if isinstance(data, dict):
            names.update(data)
    for entry in ((load(os.path.join(base, "meta", "argument_specs.yml")) or {}).get("argument_specs") or {}).values():
        names.update((entry or {}).get("options") or {})
    for path in glob.glob(os.path.join(base, "tasks", "*.yml")) + glob.glob(os.path.join(base, "handlers", "*.yml")):
        _set_or_registered(load(path), names)
    return names


def owners():
    found = {}
    for role in role_names():
        for name in defined_by(role):
            found.setdefault(name, set()).add(role)
    return found


_READ = re.compile(r"(?<![\w.'\"\]])([A-Za-z_][A-Za-z0-9_]*)\s*\|\s*(?:default|d)\s*\(")
_DEFAULT = re.compile(r"\|\s*(?:default|d)\s*\(")
_LITERAL = re.compile(r"""^(?:'[^']*'|"[^"]*"|-?\d+(?:\.\d+)?|true|false|True|False|none|None|\[.*\]|\{.*\})$""", re.S)


def _scan(text, start, depth, stop_at_comma):
    """Index where the bracket depth, counted from start (quotes skipped), falls to 0 - or, with stop_at_comma, of
    the first comma at depth 0; len(text) when neither comes."""
    i = start
    while i < len(text):
        char = text[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0 and not stop_at_comma:
                return i
        elif char in "'\"":
            i = text.index(char, i + 1)
        elif char == "," and depth == 0 and stop_at_comma:
            return i
        i += 1
    return len(text)


def _closing(text, start):
    """The text from start to the parenthesis that closes the one opened just before it."""
    return text[start:_scan(text, start, 1, False)]


def _first_argument(text):
    return text[:_scan(text, 0, 0, True)].strip()


def last_fallback(argument):
    """What a default() falls back to in the end: `x | default(y | default('z'))` -> "'z'"."""
    value = _first_argument(argument)
    while True:
        found = list(_DEFAULT.finditer(value))
        if not found:
            return value
        inner = _closing(value, found[-1].end())
        if value[found[-1].end() + len(inner) + 1:].strip():
            return value            # something is done with the default's result: a computed value
        value = _first_argument(inner)


def literal_defaults(text, mine, owner_of):
    """(line, variable, default) of each read of another role's variable whose default ends in a literal."""
    code = "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())
    found = []
    for match in _READ.finditer(code):
        name = match.group(1)
        roles = owner_of.get(name)
        if not roles or mine in roles:
            continue
        argument = _closing(code, match.end())
        if _LITERAL.match(last_fallback(argument)):
            found.append((code.count("\n", 0, match.start()) + 1, name, " ".join(argument.split())))
    return found


def sources():
    for role in role_names():
        for path in sorted(glob.glob(os.path.join(ROLES, role, "**", "*.yml"), recursive=True)
                           + glob.glob(os.path.join(ROLES, role, "**", "*.j2"), recursive=True)):
            yield role, path
    for path in sorted(glob.glob(os.path.join(ROOT, "playbooks", "**", "*.yml"), recursive=True)) + \
            [os.path.join(ROOT, "site.yml")]:
        yield None, path


def test_no_role_reads_another_roles_variable_with_a_literal_default():
    owner_of = owners()
    found = []
    for role, path in sources():
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as handle:
            for line, name, argument in literal_defaults(handle.read(), role, owner_of):
                if (rel, name) not in ALLOWED:
                    found.append("%s:%d: %s | default(%s) - %s's variable" % (rel, line, name, argument,
                                                                              "/".join(sorted(owner_of[name]))))
    assert not found, ("give the value one home (roles/gpuhost/defaults/main.yml) and read it without a "
                       "literal:\n" + "\n".join(found))


def test_the_scan_sees_a_literal_default():
    owner_of = {"nvidia_cdi_spec_path": {"nvidia_cdi"}, "docker_managed": {"docker"}, "vllm_x": {"vllm"}}
    text = ("a: \"{{ nvidia_cdi_spec_path | default('/etc/cdi/nvidia.yaml') }}\"\n"
            "b: \"{{ nvidia_cdi_spec_path | default(record.cdi.spec | default('/etc/cdi/nvidia.yaml')) }}\"\n"
            "c: \"{{ docker_managed | d(false) }}\"\n"
            "# d: \"{{ docker_managed | default(false) }}\"\n"
            "e: \"{{ nvidia_cdi_spec_path | default(record.cdi.spec | default(gpuhost_cdi_spec_path)) }}\"\n"
            "f: \"{{ record.docker_managed | default(false) }}\"\n"
            "g: \"{{ vllm_x | default(omit) }} {{ vllm_x | default(playbook_dir ~ '/x') }}\"\n")
    assert [(line, name) for line, name, _ in literal_defaults(text, "gpu_validate", owner_of)] == \
        [(1, "nvidia_cdi_spec_path"), (2, "nvidia_cdi_spec_path"), (3, "docker_managed")]
    assert literal_defaults(text, "nvidia_cdi", owner_of)[0][:2] == (3, "docker_managed")   # its own: fine


def test_every_role_that_reads_a_shared_value_depends_on_the_home():
    shared = set(load(os.path.join(ROLES, HOME, "defaults", "main.yml")))
    missing = []
    for role in role_names():
        if role == HOME:
            continue
        own = defined_by(role)
        text = ""
        for path in glob.glob(os.path.join(ROLES, role, "**", "*.yml"), recursive=True):
            with open(path, encoding="utf-8") as handle:
                text += handle.read()
        if "gpuhost_handlers/handlers/chain.yml" in text:          # it imports the handler chain: what it reads
            with open(os.path.join(ROLES, "gpuhost_handlers", "handlers", "chain.yml"), encoding="utf-8") as handle:
                text += handle.read()
        reads = sorted(n for n in shared - own if re.search(r"\b%s\b" % re.escape(n), text))
        dependencies = load(os.path.join(ROLES, role, "meta", "main.yml")).get("dependencies") or []
        if reads and HOME not in [d if isinstance(d, str) else d.get("role") for d in dependencies]:
            missing.append("%s reads %s" % (role, ", ".join(reads)))
    assert not missing, "add `dependencies: [gpuhost]` to their meta/main.yml:\n" + "\n".join(missing)


def test_the_home_defines_each_value_once():
    """A variable of another role whose default the home holds is documented by its role and defaulted nowhere
    else; the home's own settings are its argument specs' options."""
    home = load(os.path.join(ROLES, HOME, "defaults", "main.yml"))
    spec = load(os.path.join(ROLES, HOME, "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"]
    assert {n for n in home if re.match(r"^gpuhost_(?!common_)", n)} == set(spec)
    owner_of = owners()
    for name in home:
        for role in owner_of[name] - {HOME}:
            defaults = load(os.path.join(ROLES, role, "defaults", "main.yml")) or {}
            assert name not in defaults, "%s: defaulted by %s and by roles/gpuhost" % (name, role)


def test_the_check_image_and_the_toolkit_packages_are_written_once():
    texts = {}
    for top in ("roles", "playbooks"):
        for path in glob.glob(os.path.join(ROOT, top, "**", "*.yml"), recursive=True):
            with open(path, encoding="utf-8") as handle:
                texts[os.path.relpath(path, ROOT)] = handle.read()
    assert [p for p, t in texts.items() if CHECK_IMAGE in t] == ["roles/gpuhost/defaults/main.yml"]
    assert [p for p, t in texts.items() if "libnvidia-container-tools" in t] == ["roles/gpuhost/defaults/main.yml"]
    home = load(os.path.join(ROLES, HOME, "defaults", "main.yml"))
    assert home["nvidia_container_toolkit_check_image"] == CHECK_IMAGE
    assert home["nvidia_container_toolkit_packages"] == TOOLKIT_PACKAGES
    # gpu_stack_check's own defaults (the module also runs without the roles) are the same values
    from layers import base
    assert base.DEFAULT_CHECK_IMAGE == CHECK_IMAGE and list(base.DEFAULT_TOOLKIT_PACKAGES) == TOOLKIT_PACKAGES


# --- each role alone in a play of its own: what it derives from the shared values ----------------------------

# Each role's variables that come from a shared value, and what they were with the literals they replace.
ALONE = {
    "gpu_validate": {"gpu_validate_check_image": CHECK_IMAGE, "gpu_validate_check_image_archive": "",
                     "gpu_validate_cdi_spec_path": "/etc/cdi/nvidia.yaml",
                     "gpu_validate_toolkit_packages": TOOLKIT_PACKAGES,
                     "gpu_validate_docker_config": "/etc/docker/daemon.json", "gpu_validate_container_engine": "auto",
                     "gpu_validate_mig_layout": {}},
    "nvidia_cdi": {"nvidia_cdi_check_image": CHECK_IMAGE, "nvidia_cdi_spec_path": "/etc/cdi/nvidia.yaml",
                   "nvidia_cdi_verify": "auto", "nvidia_container_toolkit_managed": False},
    "nvidia_container_toolkit": {"nvidia_container_toolkit_runtimes": ["docker"],
                                 "nvidia_container_toolkit_docker_config": "/etc/docker/daemon.json",
                                 "nvidia_container_toolkit_check_image": CHECK_IMAGE,
                                 "nvidia_container_toolkit_check_image_archive": "",
                                 "nvidia_container_toolkit_packages": TOOLKIT_PACKAGES,
                                 "docker_engine_predicted": False},
    "docker": {"docker_daemon_json_path": "/etc/docker/daemon.json"},
    "nvidia_driver": {"nvidia_driver_facts_path": "/etc/ansible/facts.d/gpuhost.fact",
                      "nvidia_driver_apt_lock_timeout": 300, "nvidia_driver_upgrade": False},
    "vllm": {"vllm_instances": [], "docker_engine_predicted": False,
             "nvidia_container_toolkit_runtime_predicted": False, "gpuhost_container_engine": "auto"},
    "gpuhost_common": {"gpuhost_common_fast_path": True, "gpuhost_common_facts_dir": "/etc/ansible/facts.d",
                       "gpuhost_common_apt_lock_timeout": 300, "nvidia_driver_upgrade": False},
    "nvidia_mig": {"nvidia_mig_layout": {}},
}
# What the handler chain reads (docker, nvidia_container_toolkit, nvidia_driver, nvidia_mig and gpuhost_handlers
# import it), with no other role in the play.
CHAIN = {"nvidia_container_toolkit_managed": False, "vllm_instances": [], "vllm_managed": False,
         "nvidia_cdi_managed": False, "docker_managed": False, "docker_engine_predicted": False,
         "gpuhost_docker_config": "/etc/docker/daemon.json", "gpuhost_cdi_spec_path": "/etc/cdi/nvidia.yaml"}
# An inventory that sets the owners' variables and the engine: every role alone follows it, as before.
INVENTORY = {"nvidia_container_toolkit_check_image": "local/check:1", "gpuhost_container_engine": "containerd"}
FOLLOWS = {
    "gpu_validate": {"gpu_validate_check_image": "local/check:1", "gpu_validate_container_engine": "containerd"},
    "nvidia_cdi": {"nvidia_cdi_check_image": "local/check:1", "nvidia_cdi_verify": "never"},
    "nvidia_container_toolkit": {"nvidia_container_toolkit_runtimes": ["containerd"]},
    "gpuhost_common": {"gpuhost_common_fast_path": False},
}


def _play(role, expected, extra_vars):
    # `when: false`: the role is loaded (its defaults and its dependencies') and none of its tasks runs.
    return {"name": role, "hosts": "localhost", "connection": "local", "gather_facts": False, "vars": extra_vars,
            "roles": [{"role": role, "when": False}],
            "tasks": [{"name": "read", "ansible.builtin.set_fact": {
                "shared_values": dict((name, "{{ %s }}" % name) for name in expected)}}]}


def _run_alone(tmp_path, cases, extra_vars):
    plays = [_play(role, expected, extra_vars) for role, expected in cases.items()]
    (tmp_path / "alone.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json",
               ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "alone.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    got = {}
    for play in out["plays"]:
        task = [t for t in play["tasks"] if t["task"]["name"] == "read"][0]
        got[play["play"]["name"]] = task["hosts"]["localhost"]["ansible_facts"]["shared_values"]
    return got


def test_each_role_alone_gets_the_values_the_literals_gave(tmp_path):
    cases = dict((role, dict(expected, **(CHAIN if role in ("docker", "nvidia_container_toolkit", "nvidia_driver",
                                                              "nvidia_mig") else {})))
                 for role, expected in ALONE.items())
    cases["gpuhost_handlers"] = CHAIN
    assert _run_alone(tmp_path, cases, {}) == cases


def test_each_role_alone_follows_the_inventory(tmp_path):
    assert _run_alone(tmp_path, FOLLOWS, INVENTORY) == FOLLOWS
