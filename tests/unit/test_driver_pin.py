"""The driver role's apt pin: its Package globs pin exactly the packages driver_packages counts as the
driver's (names from real dpkg, apt-cache and ubuntu-drivers outputs), and it uses no /regex/, which apt
matches against every package name at every cache open."""
import fnmatch
import glob
import os
import re

import jinja2

from conftest import FIXTURES, ROOT
from driver.driver_packages import DRIVER_PACKAGE

TEMPLATE = os.path.join(ROOT, "roles", "nvidia_driver", "templates", "apt-pin.pref.j2")


def rendered():
    with open(TEMPLATE, encoding="utf-8") as fh:
        # Ansible's template module renders with trim_blocks.
        template = jinja2.Environment(trim_blocks=True).from_string(fh.read())
    return template.render(ansible_managed="Ansible managed", nvidia_driver_plan={"version": "580.105.08", "branch": "580"})


def package_names():
    names = set()
    for path in glob.glob(os.path.join(FIXTURES, "host", "*")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            names.update(re.findall(r"\b[a-z0-9][a-z0-9+.-]{2,}\b", fh.read()))
    return names


def test_pin_is_one_stanza_of_globs_at_the_converged_version():
    text = rendered()
    stanza = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert stanza == ["Package: *nvidia* libcuda* libnv*", "Pin: version 580.105.08-*", "Pin-Priority: 1001"]
    assert "/" not in stanza[0]


def test_globs_pin_the_same_packages_as_the_driver_package_rule():
    globs = rendered().split("Package: ", 1)[1].splitlines()[0].split()
    names = package_names()
    pinned = {n for n in names if any(fnmatch.fnmatchcase(n, g) for g in globs)}
    driver = {n for n in names if DRIVER_PACKAGE.search(n)}
    # Real names from the fixtures: Debian's libcuda1 and firmware-nvidia-gsp, Ubuntu's -server-open metapackages.
    assert {"libcuda1", "firmware-nvidia-gsp", "libnvidia-ml1", "nvidia-driver"} <= pinned
    assert any(n.startswith("nvidia-driver-") and n.endswith("-server-open") for n in pinned)
    assert pinned == driver
    assert "libc6" not in pinned and "dkms" not in pinned
