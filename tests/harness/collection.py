#!/usr/bin/env python3
"""Build the gpuhost.gpu collection from this tree, and run ansible-test sanity on it.

    collection.py build  [--out DIR]              the build tree and the artifact (prints the artifact's path)
    collection.py sanity [--out DIR] [--test T]   the build tree, then ansible-test sanity on it, offline

The repository holds one copy of the code; the collection is generated from it (`make collection`):

    collection/galaxy.yml, meta/, changelogs/ -> the collection's own files
    README.md, COPYING                         -> README.md, COPYING
    roles/<role>/                              -> roles/<role>/ (as they are, but for what is named below)
    roles/<role>/library/<module>.py           -> plugins/modules/<module>.py (a role inside a collection
                                                  gets no embedded plugins; its short name still resolves,
                                                  through the role's collection)
    library/<module>.py                        -> plugins/modules/<module>.py
    module_utils/<package>/<name>.py           -> plugins/module_utils/<package>/<name>.py
    doc_fragments/<name>.py                    -> plugins/doc_fragments/<name>.py
    playbooks/                                 -> playbooks/ (ansible-playbook gpuhost.gpu.site, .diagnose, .drift)
    bin/gpuhost_cli/module_utils_path.py       -> the same path (role nvidia_mig copies it to the host)

and rewritten on the way, each rewrite checked to apply (a source that no longer matches fails the build):

    - imports of this project's module_utils, `ansible.module_utils.<package>.<name>` ->
      `ansible_collections.gpuhost.gpu.plugins.module_utils.<package>.<name>`, continuation lines of an import
      aligned with its parenthesis moved with it (`ansible.module_utils.basic` and Ansible's other names stay);
    - a module's `extends_documentation_fragment: <name>` of this project's fragments -> `gpuhost.gpu.<name>`, and
      its documentation's references to this project's modules (M(name), seealso, the task keys of EXAMPLES) ->
      `gpuhost.gpu.<name>`;
    - role gpuhost_common's fingerprint of gpuhost's code reads the collection's directories
      (playbooks, roles, plugins) instead of the checkout's (playbooks, roles, library, module_utils);
    - role nvidia_mig copies the MIG code for its boot script from plugins/module_utils/.

Roles and playbooks call the modules by their short names: inside the collection these resolve in the role's
(or the collection playbook's) own collection first.

ansible-test sanity runs with --local on this Python. Its single-version tests each build a virtual environment of
their own (requirements pinned by ansible-test itself, from PyPI), bootstrapping pip with a script it downloads
from ci-files.testing.ansible.com, which CI cannot reach; tests/sanity/get_pip.py stands in for it, installing pip
from the wheel tests/sanity/requirements.txt pins (PyPI, hash-checked), both put where ansible-test looks for a
cached copy (~/.ansible/test/cache/). The environments are kept under ~/.ansible/test/venv/ between runs.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

NAMESPACE = "gpuhost"
NAME = "gpu"
FQ = NAMESPACE + "." + NAME
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, ".cache", "collection")
BIN = os.path.dirname(os.path.abspath(sys.executable))
COLLECTION_PREFIX = "ansible_collections.%s.%s.plugins.module_utils." % (NAMESPACE, NAME)

# The sanity tests `make test` runs on the built collection (tests/lint/test_collection.py): every test
# ansible-test 2.19 has for a collection but pslint (PowerShell) and shellcheck (no shell scripts; the tool is
# not installed).
SANITY_TESTS = ["action-plugin-docs", "ansible-doc", "changelog", "compile", "empty-init", "ignores", "import",
                "line-endings", "no-assert", "no-get-exception", "no-illegal-filenames", "no-smart-quotes", "pep8",
                "pylint", "replace-urlopen", "runtime-metadata", "shebang", "symlinks", "use-argspec-type-path",
                "use-compat-six", "validate-modules", "yamllint"]

SANITY_REQUIREMENTS = os.path.join(ROOT, "tests", "sanity", "requirements.txt")
GET_PIP = os.path.join(ROOT, "tests", "sanity", "get_pip.py")


class BuildError(Exception):
    """A source no longer matches what the build rewrites."""


def _packages():
    """This project's module_utils packages (module_utils/<package>/__init__.py)."""
    base = os.path.join(ROOT, "module_utils")
    return sorted(d for d in os.listdir(base) if os.path.isfile(os.path.join(base, d, "__init__.py")))


def _fragments():
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "doc_fragments", "*.py")))


def _paren_column(line):
    """Column of the '(' that opens an import's name list left open on this line, or None."""
    match = re.match(r"\s*from\s+\S+\s+import\s+\(", line)
    if not match or line.count("(") <= line.count(")"):
        return None
    return match.end() - 1


def rewrite_imports(text, packages):
    """`ansible.module_utils.<package>` -> the collection's name for each of `packages`; continuation lines
    aligned under an import's '(' move with it. Returns (text, number of names rewritten)."""
    pattern = re.compile(r"\bansible\.module_utils\.(%s)\b" % "|".join(re.escape(p) for p in packages))
    out = []
    count = 0
    shift = None        # (old column of the open '(' + 1, columns to add) while inside an open import list
    for line in text.splitlines(True):
        if shift is not None:
            old, delta = shift
            indent = len(line) - len(line.lstrip(" "))
            if indent == old:
                line = " " * delta + line
            if ")" in line.split("#")[0]:
                shift = None
            out.append(line)
            continue
        new, n = pattern.subn(lambda m: COLLECTION_PREFIX + m.group(1), line)
        if n:
            count += n
            before, after = _paren_column(line), _paren_column(new)
            if before is not None and after is not None and line[before + 1:].split("#")[0].strip():
                shift = (before + 1, after - before)
        out.append(new)
    return "".join(out), count


def rewrite_fragments(text, fragments):
    """A module's extends_documentation_fragment entries naming this project's fragments -> gpuhost.gpu.<name>."""
    names = "|".join(re.escape(f) for f in fragments)
    text, n_list = re.subn(r"(?m)^(extends_documentation_fragment:\s*\n(?:\s+-\s+\S+\s*\n)*?\s+-\s+)(%s)\s*$" % names,
                           lambda m: m.group(1) + FQ + "." + m.group(2), text)
    text, n_inline = re.subn(r"(?m)^(extends_documentation_fragment:\s+)(%s)\s*$" % names,
                             lambda m: m.group(1) + FQ + "." + m.group(2), text)
    return text, n_list + n_inline


def rewrite_module_refs(text, modules):
    """In a module's documentation, this project's modules by their FQCN: M(name), seealso's `- module: name`,
    and the task keys of EXAMPLES. Returns (text, number of names rewritten)."""
    names = "|".join(re.escape(m) for m in sorted(modules, key=len, reverse=True))
    text, n_markup = re.subn(r"\bM\((%s)\)" % names, lambda m: "M(%s.%s)" % (FQ, m.group(1)), text)
    text, n_seealso = re.subn(r"(?m)^(\s+-\s+module:\s+)(%s)\s*$" % names, lambda m: m.group(1) + FQ + "." + m.group(2), text)
    n_examples = 0
    match = re.search(r'(?ms)^EXAMPLES = r?"""(.*?)"""', text)
    if match:
        examples, n_examples = re.subn(r"(?m)^(\s+)(%s):" % names, lambda m: m.group(1) + FQ + "." + m.group(2) + ":",
                                       match.group(1))
        text = text[:match.start(1)] + examples + text[match.end(1):]
    return text, n_markup + n_seealso + n_examples


def _replace_once(path, old, new):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if text.count(old) != 1:
        raise BuildError("%s: expected %r once, found it %d times: the build's rewrite no longer fits the role"
                         % (os.path.relpath(path), old, text.count(old)))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace(old, new))


# Role files whose paths into the checkout differ in the collection: (file, text in the checkout, text in the collection).
ROLE_REWRITES = [
    ("roles/gpuhost_common/defaults/main.yml",
     "gpuhost_common_fingerprint_code: [playbooks, roles, library, module_utils]",
     "gpuhost_common_fingerprint_code: [playbooks, roles, plugins]"),
    ("roles/nvidia_mig/tasks/main.yml",
     "{{ role_path }}/../../module_utils/",
     "{{ role_path }}/../../plugins/module_utils/"),
]

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def _copy_python(src, dest, packages, fragments, modules=()):
    with open(src, encoding="utf-8") as handle:
        text = handle.read()
    text, _n = rewrite_imports(text, packages)
    text, _n = rewrite_fragments(text, fragments)
    if modules:
        text, _n = rewrite_module_refs(text, modules)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w", encoding="utf-8") as handle:
        handle.write(text)
    shutil.copymode(src, dest)


def build_tree(out):
    """Generate the collection's tree under out/ansible_collections/gpuhost/gpu (replacing any earlier one)."""
    tree = os.path.join(out, "ansible_collections", NAMESPACE, NAME)
    if os.path.isdir(tree):
        shutil.rmtree(tree)
    packages, fragments = _packages(), _fragments()
    # What the build would otherwise leave behind: plugins a collection's role cannot carry, module_utils
    # outside a package.
    embedded = [p for p in glob.glob(os.path.join(ROOT, "roles", "*", "*"))
                if os.path.basename(p).endswith("_plugins") or os.path.basename(p) == "module_utils"]
    loose = [p for p in glob.glob(os.path.join(ROOT, "module_utils", "**", "*.py"), recursive=True)
             if os.path.relpath(p, os.path.join(ROOT, "module_utils")).count(os.sep) != 1]
    if embedded or loose:
        raise BuildError("no place in the collection for: %s" % ", ".join(os.path.relpath(p, ROOT) for p in embedded + loose))

    shutil.copytree(os.path.join(ROOT, "collection"), tree, ignore=IGNORE)
    for name in ("README.md", "COPYING"):
        shutil.copy2(os.path.join(ROOT, name), os.path.join(tree, name))
    shutil.copytree(os.path.join(ROOT, "playbooks"), os.path.join(tree, "playbooks"), ignore=IGNORE)
    shutil.copytree(os.path.join(ROOT, "roles"), os.path.join(tree, "roles"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "library"))

    modules = sorted(glob.glob(os.path.join(ROOT, "library", "*.py")))
    modules += sorted(glob.glob(os.path.join(ROOT, "roles", "*", "library", "*.py")))
    names = [os.path.splitext(os.path.basename(src))[0] for src in modules]
    if len(set(names)) != len(names):
        raise BuildError("two modules of the same name: %s" % sorted(n for n in names if names.count(n) > 1))
    for src in modules:
        _copy_python(src, os.path.join(tree, "plugins", "modules", os.path.basename(src)), packages, fragments, names)
    for src in sorted(glob.glob(os.path.join(ROOT, "module_utils", "*", "*.py"))):
        rel = os.path.relpath(src, os.path.join(ROOT, "module_utils"))
        _copy_python(src, os.path.join(tree, "plugins", "module_utils", rel), packages, fragments)
    for src in sorted(glob.glob(os.path.join(ROOT, "doc_fragments", "*.py"))):
        _copy_python(src, os.path.join(tree, "plugins", "doc_fragments", os.path.basename(src)), packages, fragments)
    helper = os.path.join("bin", "gpuhost_cli", "module_utils_path.py")
    os.makedirs(os.path.dirname(os.path.join(tree, helper)))
    shutil.copy2(os.path.join(ROOT, helper), os.path.join(tree, helper))

    for rel, old, new in ROLE_REWRITES:
        _replace_once(os.path.join(tree, rel), old, new)
    return tree


def build(out):
    """The build tree and the artifact; returns the artifact's path."""
    tree = build_tree(out)
    proc = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--force", "--output-path", out, tree],
                          capture_output=True, text=True, cwd=out, check=False)
    if proc.returncode:
        raise BuildError("ansible-galaxy collection build failed:\n" + proc.stdout + proc.stderr)
    artifacts = glob.glob(os.path.join(out, "%s-%s-*.tar.gz" % (NAMESPACE, NAME)))
    return max(artifacts, key=os.path.getmtime)


def _pinned_pip():
    """(version, wheel requirement line) from tests/sanity/requirements.txt."""
    with open(SANITY_REQUIREMENTS, encoding="utf-8") as handle:
        for line in handle:
            match = re.match(r"pip==(\S+)", line)
            if match:
                return match.group(1)
    raise BuildError("%s pins no pip" % SANITY_REQUIREMENTS)


def _ansible_test_pip():
    """The pip version ansible-test bootstraps into its environments."""
    import ansible_test  # the package of the pinned ansible-core
    path = os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")
    with open(path, encoding="utf-8") as handle:
        match = re.search(r"default_packages = dict\(\s*pip='([^']+)'", handle.read())
    return match.group(1) if match else None


def prepare_bootstrap():
    """Put the pip bootstrap where ansible-test looks for its cached copy (idempotent)."""
    version = _pinned_pip()
    wanted = _ansible_test_pip()
    if wanted != version:
        raise BuildError("ansible-test bootstraps pip %s, %s pins pip %s: pin %s (with its wheel's sha256 from PyPI)"
                         % (wanted, os.path.relpath(SANITY_REQUIREMENTS, ROOT), version, wanted))
    cache = os.path.expanduser(os.path.join("~", ".ansible", "test", "cache"))
    os.makedirs(cache, exist_ok=True)
    if not glob.glob(os.path.join(cache, "pip-%s-*.whl" % version)):
        subprocess.run([os.path.join(BIN, "python"), "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--no-deps", "--only-binary=:all:", "--require-hashes", "-r", SANITY_REQUIREMENTS,
                        "-d", cache], check=True)
    target = os.path.join(cache, "get_pip_%s.py" % version.replace(".", "_"))
    shutil.copyfile(GET_PIP, target)
    return cache


def sanity(out, tests, extra=()):
    """ansible-test sanity on a fresh build tree; returns its exit status. The tree must lie outside any git
    checkout: ansible-test walks up to the nearest .git and would list only the files git tracks there."""
    tree = build_tree(out)
    prepare_bootstrap()
    cmd = [os.path.join(BIN, "ansible-test"), "sanity", "--local", "--python",
           "%d.%d" % sys.version_info[:2], "--color", "no"]
    for test in tests:
        cmd += ["--test", test]
    cmd += list(extra)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ANSIBLE_CONFIG", None)
    print("+ (cd %s && %s)" % (tree, " ".join(cmd)), flush=True)
    # ansible-test reads its stdin's blocking flag and dies with a closed one (as CI starts `make test`).
    return subprocess.run(cmd, cwd=tree, env=env, stdin=subprocess.DEVNULL, check=False).returncode


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["build", "tree", "sanity"])
    parser.add_argument("--out", help="where the tree and the artifact go (build: %s; sanity: a new temporary "
                                      "directory, removed afterwards)" % DEFAULT_OUT)
    parser.add_argument("--test", action="append", help="a sanity test (repeatable; default: %s)" % " ".join(SANITY_TESTS))
    args, extra = parser.parse_known_args(argv)
    temporary = args.command == "sanity" and not args.out
    out = os.path.abspath(tempfile.mkdtemp(prefix="gpuhost-sanity-") if temporary else args.out or DEFAULT_OUT)
    os.makedirs(out, exist_ok=True)
    try:
        if args.command == "build":
            print(build(out))
        elif args.command == "tree":
            print(build_tree(out))
        else:
            return sanity(out, args.test or SANITY_TESTS, extra)
    except BuildError as error:
        print("collection.py: %s" % error, file=sys.stderr)
        return 1
    finally:
        if temporary:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
