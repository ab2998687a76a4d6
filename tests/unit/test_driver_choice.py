"""The nvidia_driver role's decisions (module_utils/driver_choice.py) on captured host outputs.

tests/fixtures/host/README.md names the sources: real ubuntu-drivers and lspci outputs from public
pages, and apt-cache / dpkg-query outputs captured on the molecule targets (real apt and dpkg, with
Debian's own non-free archive and the harness's simulated driver repository side by side).
"""
import os
import shutil
import subprocess

import pytest

import driver_choice as dc
import host_parse as hp
from conftest import FIXTURES

HOST = os.path.join(FIXTURES, "host")


def load(name):
    with open(os.path.join(HOST, name), encoding="utf-8") as handle:
        return handle.read()


def gpus_of(lspci_fixture):
    return dc.gpu_summary(hp.nvidia_gpus(hp.parse_lspci(load(lspci_fixture))))


BLACKWELL = "lspci-nn-D_4xRTXPRO6000-server_rocky10.txt"
A100 = "lspci-n_A100_gcp.txt"
PASCAL = [{"is_nvidia_gpu": True, "device_id": "15f8", "pci_id": "10de:15f8", "pci_address": "0000:3b:00.0",
           "product": "GP100GL [Tesla P100 PCIe 16GB]"}]


def request(**kw):
    base = {"style": "debian", "flavor": "server", "kernel_modules": "auto", "branch": "auto", "version": "",
            "upgrade": False, "debian_packages": ["nvidia-driver", "firmware-nvidia-gsp", "nvidia-smi", "nvidia-persistenced"],
            "debian_kernel_packages": {"open": "nvidia-open-kernel-dkms", "proprietary": "nvidia-kernel-dkms"},
            "extra_packages": []}
    base.update(kw)
    return base


class Query(object):
    """plan()'s host queries answered from captured outputs."""

    def __init__(self, dpkg_text, madison_text, smi_owner_text="", ubuntu_drivers_text=None):
        self.dpkg_text, self.madison_text = dpkg_text, madison_text
        self.smi_owner_text, self.ubuntu_drivers_text = smi_owner_text, ubuntu_drivers_text
        self.madison_asked = []

    def dpkg(self):
        return dc.parse_dpkg_query(self.dpkg_text)

    def smi_owner(self):
        return dc.parse_dpkg_search(self.smi_owner_text)

    def madison(self, packages):
        self.madison_asked.append(list(packages))
        found = dc.parse_madison(self.madison_text)
        return {p: v for p, v in found.items() if p in packages}

    def ubuntu_drivers(self):
        return self.ubuntu_drivers_text


CONVERGED = load("dpkg-query-W_debian-trixie_nvidia-driver-580-held.txt")
MADISON = load("apt-cache-madison_debian-trixie_nonfree+gpusim.txt")
SMI_OWNER = load("dpkg-query-S_nvidia-smi_debian.txt")
DRIVER_PKGS = ["firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "libnvidia-ptxjitcompiler1", "nvidia-driver",
               "nvidia-open-kernel-dkms", "nvidia-persistenced", "nvidia-smi"]


def fresh_dpkg():
    """The converged capture without its NVIDIA driver packages: the same host before the role."""
    return "".join(line for line in CONVERGED.splitlines(True) if line.split("\t")[0] not in DRIVER_PKGS)


def with_version(text, old, new):
    return text.replace("\t%s\t" % old, "\t%s\t" % new)


# --- Debian versions ------------------------------------------------------------------------------

PAIRS = [
    ("580.95.05-1", "580.105.08-1", -1),
    ("580.105.08-0ubuntu0.24.04.1", "580.105.08-0ubuntu0.22.04.1", 1),
    ("1:0.9", "2.0", 1),
    ("1.0~rc1-1", "1.0-1", -1),
    ("550.163.01-2", "580.95.05-1", -1),
    ("580.95.05-1", "580.95.05-1", 0),
    ("1.0-1", "1.0-1+b1", -1),
    ("1.0a", "1.0+", -1),
    ("2.30-0ubuntu1", "2.3-0ubuntu1", 1),
]


@pytest.mark.parametrize("left, right, sign", PAIRS)
def test_compare_versions(left, right, sign):
    result = dc.compare_versions(left, right)
    assert (result > 0) - (result < 0) == sign


@pytest.mark.skipif(not shutil.which("dpkg"), reason="dpkg not installed")
@pytest.mark.parametrize("left, right, sign", PAIRS)
def test_compare_versions_agrees_with_dpkg(left, right, sign):
    op = {-1: "lt", 0: "eq", 1: "gt"}[sign]
    assert subprocess.run(["dpkg", "--compare-versions", left, op, right]).returncode == 0


def test_upstream_and_branch():
    assert dc.upstream_version("1:580.95.05-0ubuntu0.24.04.1") == "580.95.05"
    assert dc.version_branch("580.105.08-1") == 580
    assert dc.version_branch("580.95.05") == 580
    assert dc.version_branch("1:0.9.7.6ubuntu3.2") is None


# --- Host outputs ------------------------------------------------------------------------------------

def test_parse_madison_keeps_both_archives():
    versions = dc.parse_madison(MADISON)
    assert versions["nvidia-driver"] == ["580.105.08-1", "580.95.05-1", "570.195.03-1", "550.163.01-2"]
    assert versions["nvidia-open-kernel-dkms"][-1] == "550.163.01-2"  # Debian's own, from contrib
    assert set(versions) == {"nvidia-driver", "nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi",
                             "nvidia-persistenced"}


def test_parse_dpkg_query_holds():
    dpkg = dc.parse_dpkg_query(CONVERGED)
    assert dpkg["nvidia-driver"] == {"version": "580.105.08-1", "want": "h", "held": True, "installed": True}
    assert dpkg["apt"]["held"] is False and dpkg["apt"]["installed"] is True
    assert not any(info["held"] for name, info in dpkg.items() if name not in DRIVER_PKGS)


def test_parse_dpkg_query_not_installed_and_half_states():
    dpkg = dc.parse_dpkg_query("foo\t\tun \nbar\t1.0\trc \nbaz\t2.0\tiU \nqux\t3\thi \n")
    assert not dpkg["foo"]["installed"] and not dpkg["bar"]["installed"]
    assert dpkg["baz"]["installed"] and dpkg["qux"]["held"]


def test_parse_dpkg_search():
    assert dc.parse_dpkg_search(SMI_OWNER) == "nvidia-smi"
    assert dc.parse_dpkg_search("diversion by foo from: /usr/bin/x\nnvidia-utils-580-server: /usr/bin/nvidia-smi\n") \
        == "nvidia-utils-580-server"
    assert dc.parse_dpkg_search("") is None


# --- GPUs and the request ----------------------------------------------------------------------------

def test_gpu_summary_blackwell_server():
    gpus = gpus_of(BLACKWELL)
    assert len(gpus) == 4
    assert gpus[0]["name"] == "RTX PRO 6000 Blackwell Server Edition"
    assert gpus[0]["min_branch"] == 570 and gpus[0]["open_required"] and gpus[0]["open_supported"]
    assert dc.min_branch(gpus) == 570


def test_gpu_summary_numeric_lspci_a100():
    gpus = gpus_of(A100)
    assert [(g["architecture"], g["open_required"], g["min_branch"]) for g in gpus] == [("Ampere", False, 450)]


def test_branch_below_the_minimum_is_refused_naming_gpu_branch_and_fix():
    with pytest.raises(dc.DriverChoiceError) as err:
        dc.precheck(request(branch="535"), gpus_of(BLACKWELL))
    msg = str(err.value)
    for part in ("RTX PRO 6000 Blackwell Server Edition (10de:2bb5 at 0000:38:00.0)", ">= 570", "branch 535",
                 "nvidia_driver_branch: auto"):
        assert part in msg


def test_version_below_the_minimum_is_refused_too():
    with pytest.raises(dc.DriverChoiceError, match="branch 550 .from nvidia_driver_version"):
        dc.precheck(request(version="550.163.01"), gpus_of(BLACKWELL))


def test_proprietary_modules_on_blackwell_are_refused():
    with pytest.raises(dc.DriverChoiceError) as err:
        dc.precheck(request(kernel_modules="proprietary"), gpus_of(BLACKWELL))
    assert "require the NVIDIA open kernel modules (Blackwell)" in str(err.value)
    assert "nvidia_driver_kernel_modules: auto" in str(err.value)


def test_open_modules_on_pascal_are_refused():
    with pytest.raises(dc.DriverChoiceError, match="cannot use the NVIDIA open kernel modules .no GSP: Pascal"):
        dc.precheck(request(kernel_modules="open"), dc.gpu_summary(PASCAL))


def test_mixed_host_cannot_be_served():
    with pytest.raises(dc.DriverChoiceError, match="no single kernel module flavour"):
        dc.precheck(request(), gpus_of(BLACKWELL) + dc.gpu_summary(PASCAL))


def test_auto_modules():
    assert dc.precheck(request(), gpus_of(BLACKWELL))["kernel_modules"] == "open"
    assert dc.precheck(request(), gpus_of(A100))["kernel_modules"] == "proprietary"
    assert dc.precheck(request(kernel_modules="open"), gpus_of(A100))["kernel_modules"] == "open"


@pytest.mark.parametrize("bad, match", [
    ({"flavor": "workstation"}, "flavor"),
    ({"branch": "58x"}, "branch number"),
    ({"kernel_modules": "closed"}, "kernel_modules"),
    ({"version": "latest"}, "driver version"),
    ({"branch": "570", "version": "580.95.05"}, "not in nvidia_driver_branch 570"),
    ({"style": "rpm"}, "package style"),
])
def test_malformed_requests(bad, match):
    with pytest.raises(dc.DriverChoiceError, match=match):
        dc.validate_request(request(**bad))


# --- ubuntu-drivers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture, flavor, modules, branch", [
    # recommends nvidia-driver-595-open; the -server flavour of 595 is offered too
    ("ubuntu-drivers-devices_TeslaT4_aws.txt", "server", "proprietary", 595),
    ("ubuntu-drivers-devices_TeslaT4_aws.txt", "server", "open", 595),
    ("ubuntu-drivers-devices_TeslaT4_aws.txt", "desktop", "open", 595),
    ("ubuntu-drivers-devices_QuadroP2200_aplay-noise.txt", "server", "proprietary", 535),
    ("ubuntu-drivers-devices_GTX960_manual-install.txt", "server", "proprietary", 535),
    ("ubuntu-drivers-devices_GTX1080_no-header_old.txt", "desktop", "proprietary", 384),
    # the simulated Blackwell host: recommends nvidia-driver-580-open -> nvidia-driver-580-server-open
    ("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt", "server", "open", 580),
])
def test_branch_from_ubuntu_drivers(fixture, flavor, modules, branch):
    got, why = dc.branch_from_ubuntu_drivers(load(fixture), request(style="ubuntu", flavor=flavor), modules, [])
    assert got == branch, why


def test_ubuntu_drivers_recommendation_outside_the_flavour_takes_the_newest_of_it():
    text = load("ubuntu-drivers-devices_TeslaT4_aws.txt").replace("nvidia-driver-595-server - distro", "x-595 - distro")
    got, why = dc.branch_from_ubuntu_drivers(text, request(style="ubuntu"), "proprietary", [])
    assert got == 580 and "595" in why


def test_ubuntu_drivers_without_the_flavour_is_an_error():
    with pytest.raises(dc.DriverChoiceError, match="offers no nvidia-driver-<branch>-server"):
        dc.branch_from_ubuntu_drivers(load("ubuntu-drivers-devices_GTX1080_no-header_old.txt"),
                                      request(style="ubuntu"), "proprietary", [])


def test_ubuntu_drivers_below_the_gpu_minimum_is_not_taken():
    with pytest.raises(dc.DriverChoiceError, match="branch >= 570"):
        dc.branch_from_ubuntu_drivers(load("ubuntu-drivers-devices_QuadroP2200_aplay-noise.txt"),
                                      request(style="ubuntu"), "open", gpus_of(BLACKWELL))


def test_package_names():
    assert dc.ubuntu_package(580, "server", "open") == "nvidia-driver-580-server-open"
    assert dc.ubuntu_package(580, "server", "proprietary") == "nvidia-driver-580-server"
    assert dc.ubuntu_package(580, "desktop", "open") == "nvidia-driver-580-open"
    assert dc.ubuntu_package(535, "desktop", "proprietary") == "nvidia-driver-535"


# --- The plan (Debian style, on the trixie capture) ---------------------------------------------------

def test_fresh_install_takes_the_newest_branch_with_the_open_modules():
    query = Query(fresh_dpkg(), MADISON)
    result = dc.plan(request(), gpus_of(BLACKWELL), query)
    assert result["action"] == "install"
    assert result["branch"] == 580 and result["version"] == "580.105.08"
    assert result["packages"] == ["nvidia-driver", "nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi",
                                  "nvidia-persistenced"]
    assert result["install"] == ["%s=580.105.08-1" % p for p in result["packages"]]
    assert result["installed"]["upstream"] is None and result["unattended_upgrades"] is False


def test_converged_host_plans_nothing_and_lists_what_to_hold():
    result = dc.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert result["action"] == "none"
    installed = result["installed"]
    assert installed["package"] == "nvidia-smi" and installed["upstream"] == "580.105.08"
    assert installed["kernel_modules"] == "open"
    assert installed["packages"] == DRIVER_PKGS and installed["held"] == DRIVER_PKGS
    assert "the installed driver" in result["branch_source"]
    assert dc.verify_installed(result, installed) == []


def test_version_pin_downgrades_within_the_branch():
    result = dc.plan(request(version="580.95.05"), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert result["action"] == "downgrade" and result["install"][0] == "nvidia-driver=580.95.05-1"


def test_upgrade_takes_the_newest_of_the_branch_only_when_asked():
    older = CONVERGED
    for name in DRIVER_PKGS:
        older = older.replace("%s\t580.105.08-1\t" % name, "%s\t580.95.05-1\t" % name)
    keep = dc.plan(request(), gpus_of(BLACKWELL), Query(older, MADISON, SMI_OWNER))
    assert keep["action"] == "none" and keep["version"] == "580.95.05"
    up = dc.plan(request(upgrade=True), gpus_of(BLACKWELL), Query(older, MADISON, SMI_OWNER))
    assert up["action"] == "upgrade" and up["version"] == "580.105.08"
    assert up["installed"]["held"] == DRIVER_PKGS  # what the role releases before the upgrade


def test_explicit_branch_picks_debians_own_package():
    result = dc.plan(request(branch="550"), gpus_of(A100), Query(fresh_dpkg(), MADISON))
    assert result["version"] == "550.163.01" and result["kernel_modules"] == "proprietary"
    # Debian's nvidia-kernel-dkms is not in the capture: named without a version, apt picks it
    assert "nvidia-kernel-dkms" in result["install"]
    assert "nvidia-driver=550.163.01-2" in result["install"]


def test_unavailable_version_names_what_the_branch_offers():
    with pytest.raises(dc.DriverChoiceError) as err:
        dc.plan(request(version="580.65.06"), gpus_of(BLACKWELL), Query(fresh_dpkg(), MADISON))
    assert "580.105.08-1, 580.95.05-1" in str(err.value)


def test_no_driver_in_the_sources():
    with pytest.raises(dc.DriverChoiceError, match="enable non-free"):
        dc.plan(request(), gpus_of(BLACKWELL), Query(fresh_dpkg(), ""))


def test_check_run_before_its_sources_exist_predicts_by_name():
    # A fresh Debian host in --check: non-free is enabled and the repository added only in the prediction,
    # so apt knows no driver yet; the plan names the packages of the branch instead of failing.
    result = dc.plan(request(sources_pending=True), gpus_of(BLACKWELL), Query(fresh_dpkg(), ""))
    assert result["predicted"] is True and result["action"] == "install"
    # Debian's package names carry no branch: at least the one Blackwell needs, whichever the sources offer.
    assert result["branch"] == 570 and result["version"] == ">=570"
    assert result["kernel_modules"] == "open" and "nvidia-open-kernel-dkms" in result["install"]
    assert all("=" not in spec for spec in result["install"])
    # With sources present, the same request is not a prediction.
    assert "predicted" not in dc.plan(request(sources_pending=True), gpus_of(BLACKWELL), Query(fresh_dpkg(), MADISON))
    # An explicit branch is named as such.
    assert dc.plan(request(branch="580", sources_pending=True), gpus_of(BLACKWELL),
                   Query(fresh_dpkg(), ""))["version"] == "580.*"


# --- The plan (Ubuntu style) -------------------------------------------------------------------------

# Constructed in apt-cache madison's format (as the Debian capture above), with Ubuntu's version scheme.
UBUNTU_MADISON = "".join(
    " %s | %s-0ubuntu0.24.04.1 | http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages\n" % (p, v)
    for p in ("nvidia-driver-580-server-open",) for v in ("580.105.08", "580.95.05"))


def test_ubuntu_fresh_install_follows_ubuntu_drivers():
    query = Query(fresh_dpkg(), UBUNTU_MADISON, "", load("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt"))
    result = dc.plan(request(style="ubuntu"), gpus_of(BLACKWELL), query)
    assert result["install"] == ["nvidia-driver-580-server-open=580.105.08-0ubuntu0.24.04.1"]
    assert result["branch_source"] == "ubuntu-drivers recommends branch 580"


def test_ubuntu_auto_without_ubuntu_drivers_says_what_to_install():
    with pytest.raises(dc.DriverChoiceError, match="ubuntu-drivers-common"):
        dc.plan(request(style="ubuntu"), gpus_of(BLACKWELL), Query(fresh_dpkg(), UBUNTU_MADISON))


def test_ubuntu_transitional_package_is_refused_before_install():
    # Ubuntu's retired -server branches become transitional packages carrying a newer branch's version.
    madison = " nvidia-driver-570-server-open | 580.95.05-0ubuntu0.24.04.1 | http://archive.ubuntu.com/ubuntu " \
              "noble-updates/restricted amd64 Packages\n"
    with pytest.raises(dc.DriverChoiceError) as err:
        dc.plan(request(style="ubuntu", branch="570"), gpus_of(BLACKWELL), Query(fresh_dpkg(), madison))
    assert "transitional" in str(err.value) and "nvidia_driver_branch: 580" in str(err.value)


def test_verify_installed_reports_a_branch_pulled_by_a_transitional_package():
    planned = {"branch": 535, "version": "535.274.02", "main_package": "nvidia-driver-535-server",
               "install": ["nvidia-driver-535-server=535.274.02-0ubuntu1"], "kernel_modules": "proprietary"}
    installed = {"package": "nvidia-utils-580-server", "upstream": "580.95.05", "branch": 580,
                 "kernel_modules": "proprietary"}
    errors = dc.verify_installed(planned, installed)
    assert len(errors) == 1 and "transitional" in errors[0] and "nvidia-utils-580-server" in errors[0]


# --- Reboot ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("installed, facts, required, word", [
    ("580.105.08", {"state": "ok", "driver_version_kernel": "580.105.08", "kernel_modules": {"flavor": "open"}}, False, None),
    ("580.105.08", {"state": "version_mismatch", "driver_version_kernel": "580.95.05"}, True, "mismatch"),
    ("580.105.08", {"state": "driver_not_loaded", "driver_version_kernel": None}, True, "no NVIDIA kernel module"),
    ("580.105.08", {"state": "ok", "driver_version_kernel": "580.95.05"}, True, "580.95.05 is loaded"),
    ("580.105.08", {"state": "ok", "driver_version_kernel": "580.105.08", "kernel_modules": {"flavor": "proprietary"}},
     True, "open kernel modules are installed"),
    (None, {"state": "no_driver"}, False, None),
])
def test_reboot_decision(installed, facts, required, word):
    result = dc.reboot_decision(installed, "open", facts)
    assert result["required"] is required
    if word:
        assert word in result["reason"]


# --- Whose holds: gpuhost's (recorded) or the operator's ------------------------------------------------

def test_holds_not_recorded_as_gpuhosts_are_the_operators():
    result = dc.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    record = {"version": "580.105.08", "held_by_gpuhost": ["nvidia-driver", "nvidia-smi"]}
    owners = dc.hold_owners(result["installed"], record)
    assert owners["ours"] == ["nvidia-driver", "nvidia-smi"]
    assert owners["operator"] == sorted(set(DRIVER_PKGS) - {"nvidia-driver", "nvidia-smi"})
    # no record at all (a driver the operator installed and held): every hold is the operator's
    assert dc.hold_owners(result["installed"], None) == {"ours": [], "operator": DRIVER_PKGS}


def test_records_older_than_held_by_gpuhost_count_their_packages_as_gpuhosts():
    result = dc.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    owners = dc.hold_owners(result["installed"], {"version": "580.105.08", "packages": DRIVER_PKGS})
    assert owners == {"ours": DRIVER_PKGS, "operator": []}
    # an empty held_by_gpuhost is a record that gpuhost held nothing, not an old record
    owners = dc.hold_owners(result["installed"], {"packages": DRIVER_PKGS, "held_by_gpuhost": []})
    assert owners["operator"] == DRIVER_PKGS


def test_a_change_under_the_operators_holds_is_refused_naming_packages_versions_and_variable():
    result = dc.plan(request(version="580.95.05"), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    message = dc.operator_hold_error(result, ["nvidia-driver", "nvidia-smi"])
    assert "nvidia-driver, nvidia-smi" in message
    assert "580.105.08" in message and "580.95.05" in message and "downgrade" in message
    assert "nvidia_driver_release_operator_holds" in message and "Nothing was changed" in message
    # no change planned, or no operator hold: nothing to refuse
    same = dc.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert dc.operator_hold_error(same, ["nvidia-driver"]) is None
    assert dc.operator_hold_error(result, []) is None
