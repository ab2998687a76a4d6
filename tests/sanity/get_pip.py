"""Stand-in for the pip bootstrap script ansible-test downloads (get-pip.py from ci-files.testing.ansible.com).

ansible-test runs its cached copy, ~/.ansible/test/cache/get_pip_<version>.py, inside a new virtual environment
that has no pip, as `python get_pip_<version>.py --disable-pip-version-check pip==<version> --no-setuptools
--no-wheel`. get-pip.py carries pip's wheel inside itself; this script uses the same wheel from PyPI, saved
next to it (tests/sanity/requirements.txt pins it by hash; tests/harness/collection.py downloads it and copies
this file there), and installs it without any index.
"""
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(args):
    # get-pip.py's own options: this pip wheel brings neither setuptools nor wheel.
    args = [a for a in args if a not in ("--no-setuptools", "--no-wheel")]
    wanted = [a.split("==", 1)[1] for a in args if a.startswith("pip==")]
    pattern = "pip-%s-*.whl" % (wanted[0] if wanted else "*")
    wheels = sorted(glob.glob(os.path.join(HERE, pattern)))
    if not wheels:
        sys.stderr.write("get_pip: no %s in %s (run: make sanity-setup)\n" % (pattern, HERE))
        return 1
    sys.path.insert(0, wheels[-1])
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel
    return pip_main(["install", "--no-index", "--find-links", HERE] + args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
