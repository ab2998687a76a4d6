"""The one dpkg parser (module_utils/host/dpkg.py) and its four users, on real dpkg output.

tests/fixtures/generic/: real dpkg 1.21.22 on scratch databases (README.md there): the same toolkit states in
the three ways dpkg prints them (db:Status-Abbrev, the words, `dpkg -l`), a removed package (rc), a failed DKMS
postinst (iF) next to a held driver (hi). tests/fixtures/host/: a converged trixie host (held driver packages),
corpus 007 (`dpkg -l` of Ubuntu's signed modules), the words form drift used to ask for (debian12).
"""
import os

from conftest import FIXTURES
from diagnosis import drift
from driver import driver_packages as pk
from driver import secure_boot as sb
from host import dpkg
from layers import stack_check as sc

GENERIC = os.path.join(FIXTURES, "generic")
HOST = os.path.join(FIXTURES, "host")
TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")


def load(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8", newline="") as handle:
        return handle.read()


def test_one_format_for_every_caller():
    assert dpkg.FORMAT == "${Package}\t${Version}\t${db:Status-Abbrev}\n"
    assert drift.DPKG_FORMAT == dpkg.FORMAT
    assert dpkg.query_argv("/usr/bin/dpkg-query", ["linux-image-*"], extra=["${Depends}"]) == [
        "/usr/bin/dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\t${Depends}\n", "linux-image-*"]


def test_the_three_forms_of_one_database_read_the_same():
    abbrev = dpkg.parse(load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db.txt"))
    words = dpkg.parse(load(GENERIC, "dpkg-query-W_toolkit_status-words_scratch-db.txt"))
    listed = dpkg.parse(load(GENERIC, "dpkg-l_toolkit_iF-hi-iU-ii_scratch-db.txt"))
    assert abbrev == words == listed
    assert set(abbrev) == set(TOOLKIT)   # nvidia-container-runtime: only on stderr ("no packages found")


def test_held_counts_as_installed_half_configured_and_unpacked_do_not():
    states = dpkg.parse(load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db.txt"))
    base = states["nvidia-container-toolkit-base"]
    assert (base["want"], base["status"], base["held"], base["installed"], base["half"]) == \
        ("hold", "installed", True, True, False)
    toolkit = states["nvidia-container-toolkit"]
    assert (toolkit["status"], toolkit["installed"], toolkit["unpacked"], toolkit["half"]) == \
        ("half-configured", False, True, True)
    assert dpkg.describe(toolkit) == "half-configured (dpkg iF)"
    tools = states["libnvidia-container-tools"]
    assert (tools["status"], tools["installed"], tools["half"]) == ("unpacked", False, True)
    assert dpkg.installed_versions(states) == {"nvidia-container-toolkit-base": "1.17.8-1",
                                               "libnvidia-container1": "1.17.7-1"}


def test_removed_with_conffiles_is_not_installed():
    states = dpkg.parse(load(GENERIC, "dpkg-query-W_toolkit-base_rc_scratch-db.txt"))
    base = states["nvidia-container-toolkit-base"]
    assert (base["want"], base["status"], base["installed"], base["half"], base["abbrev"]) == \
        ("deinstall", "config-files", False, False, "rc ")


def test_a_converged_host_with_held_driver_packages():
    states = dpkg.parse(load(HOST, "dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt"))
    assert states["nvidia-driver"]["held"] and states["nvidia-driver"]["installed"]
    assert states["apt"] == dpkg.entry("3.0.4", "install", "installed")


def test_dpkg_list_drops_the_architecture():
    states = dpkg.parse(load(HOST, "007_dpkg-l_550.127.08-server_ubuntu24.04_linux-modules-nvidia-signed_excerpt.txt"))
    assert states["libnvidia-compute-550-server"]["version"] == "550.127.08-0ubuntu0.24.04.1"
    assert "# dpkg -l | grep -i nvidia" not in states and len(states) == 7


def test_the_four_users_agree_on_one_host():
    """A held package is installed for the toolkit check, the driver plan, Secure Boot and drift alike."""
    text = load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db.txt")
    check = sc.check_toolkit({"argv": dpkg.query_argv("dpkg-query", TOOLKIT), "rc": 1, "stdout": text,
                              "stderr": ""}, None, "/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime-hook")
    assert "nvidia-container-toolkit-base" in check["data"]["packages"]
    assert pk.parse_dpkg_query(text)["nvidia-container-toolkit-base"]["installed"] is True
    assert pk.parse_dpkg_query(text)["nvidia-container-toolkit-base"]["want"] == "h"
    assert sb.installed_packages(text)["nvidia-container-toolkit-base"] == "1.17.8-1"
    assert drift.parse_dpkg_status(text)["nvidia-container-toolkit-base"]["want"] == "hold"
    # The iF package: its files are on disk for the driver plan (it would otherwise plan a fresh install), not
    # installed for the others.
    assert pk.parse_dpkg_query(text)["nvidia-container-toolkit"]["installed"] is True
    assert "nvidia-container-toolkit" not in sb.installed_packages(text)
    assert drift.parse_dpkg_status(text)["nvidia-container-toolkit"]["status"] == "half-configured"


def test_drift_fingerprint_reads_the_same_from_the_new_format_as_from_the_words():
    """The converged fingerprint stores 'version want status': asking with the one format leaves it unchanged."""
    new = drift.parse_dpkg_status(load(GENERIC, "dpkg-query-W_toolkit_iF-hi-iU-ii_scratch-db.txt"))
    old = drift.parse_dpkg_status(load(GENERIC, "dpkg-query-W_toolkit_status-words_scratch-db.txt"))
    assert dict((n, (p["version"], p["want"], p["status"])) for n, p in new.items()) == \
        dict((n, (p["version"], p["want"], p["status"])) for n, p in old.items())
    # the words form of the older captures still reads
    assert drift.parse_dpkg_status(load(HOST, "dpkg-query_status_debian12.txt"))["dpkg"]["status"] == "installed"


def test_kernel_images_with_depends_and_a_never_installed_row():
    images = pk.parse_kernel_images(load(HOST, "dpkg-query-W-Depends_linux-image_gpusim-ubuntu.txt"))
    states = dpkg.parse(load(HOST, "dpkg-query-W-Depends_linux-image_gpusim-ubuntu.txt"))
    never = [n for n, p in states.items() if p["status"] == "not-installed"]
    assert never and all(images[n]["installed"] is False and states[n]["version"] is None for n in never)


def test_a_failed_dkms_build_leaves_the_driver_half_configured():
    states = dpkg.parse(load(GENERIC, "dpkg-query-W_driver_dkms-iF_driver-hi_scratch-db.txt"))
    assert states["nvidia-dkms-580"]["half"] and not states["nvidia-dkms-580"]["installed"]
    assert states["nvidia-driver-580"]["held"] and states["nvidia-driver-580"]["installed"]
