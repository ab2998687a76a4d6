"""The nvidia_driver role's decisions (module_utils/driver/: driver_plan.py and the modules it uses) on captured
host outputs.

tests/fixtures/host/README.md names the sources: real ubuntu-drivers and lspci outputs from public
pages, and apt-cache / dpkg-query outputs captured on the molecule targets (real apt and dpkg, with
Debian's own non-free archive and the harness's simulated driver repository side by side).
"""
import os
import shutil
import subprocess

import pytest

from driver import apt_preferences as ap
from driver import branch_choice as br
from driver import debian_version as dv
from driver import driver_packages as pk
from driver import driver_plan as dp
from driver import driver_request as rq
from gpu import host_parse as hp
from conftest import FIXTURES

HOST = os.path.join(FIXTURES, "host")


def load(name):
    with open(os.path.join(HOST, name), encoding="utf-8") as handle:
        return handle.read()


def gpus_of(lspci_fixture):
    return rq.gpu_summary(hp.nvidia_gpus(hp.parse_lspci(load(lspci_fixture))))


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
        return pk.parse_dpkg_query(self.dpkg_text)

    def smi_owner(self):
        return pk.parse_dpkg_search(self.smi_owner_text)

    def madison(self, packages):
        self.madison_asked.append(list(packages))
        found = pk.parse_madison(self.madison_text)
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
    result = dv.compare_versions(left, right)
    assert (result > 0) - (result < 0) == sign


@pytest.mark.skipif(not shutil.which("dpkg"), reason="dpkg not installed")
@pytest.mark.parametrize("left, right, sign", PAIRS)
def test_compare_versions_agrees_with_dpkg(left, right, sign):
    op = {-1: "lt", 0: "eq", 1: "gt"}[sign]
    assert subprocess.run(["dpkg", "--compare-versions", left, op, right]).returncode == 0


def test_upstream_and_branch():
    assert dv.upstream_version("1:580.95.05-0ubuntu0.24.04.1") == "580.95.05"
    # the branch is host_parse.driver_branch's, the one parser of it (tests/unit/test_tool_versions.py)
    assert hp.driver_branch("1:580.95.05-0ubuntu0.24.04.1") == 580
    assert hp.driver_branch("1:0.9.7.6ubuntu3.2") is None


# --- Host outputs ------------------------------------------------------------------------------------

def test_parse_madison_keeps_both_archives():
    versions = pk.parse_madison(MADISON)
    assert versions["nvidia-driver"] == ["580.105.08-1", "580.95.05-1", "570.195.03-1", "550.163.01-2"]
    assert versions["nvidia-open-kernel-dkms"][-1] == "550.163.01-2"  # Debian's own, from contrib
    assert set(versions) == {"nvidia-driver", "nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi",
                             "nvidia-persistenced"}


def test_parse_dpkg_query_holds():
    dpkg = pk.parse_dpkg_query(CONVERGED)
    assert dpkg["nvidia-driver"] == {"version": "580.105.08-1", "want": "h", "held": True, "installed": True,
                                     "config_files": False}
    assert dpkg["apt"]["held"] is False and dpkg["apt"]["installed"] is True
    assert not any(info["held"] for name, info in dpkg.items() if name not in DRIVER_PKGS)


def test_parse_dpkg_query_not_installed_and_half_states():
    dpkg = pk.parse_dpkg_query("foo\t\tun \nbar\t1.0\trc \nbaz\t2.0\tiU \nqux\t3\thi \n")
    assert not dpkg["foo"]["installed"] and not dpkg["bar"]["installed"]
    assert dpkg["baz"]["installed"] and dpkg["qux"]["held"]
    assert dpkg["bar"]["config_files"] and not dpkg["foo"]["config_files"] and not dpkg["qux"]["config_files"]


def test_replaced_pinning_packages_are_the_other_branches_left_in_rc():
    """590 -> 580: apt removed nvidia-driver-pinning-590 (it conflicts with -580), dpkg kept its conffile."""
    dpkg = pk.parse_dpkg_query("nvidia-driver-pinning-590\t590-5\trc \nnvidia-driver-pinning-580\t580-5\thi \n"
                               "nvidia-driver-pinning-575\t575-5\tun \nnvidia-driver\t580.126.09-1\thi \n")
    assert pk.replaced_pinning_packages(dpkg, 580) == ["nvidia-driver-pinning-590"]
    # back to 590: its own leftover conffile is taken up again by the install, nothing to purge
    assert pk.replaced_pinning_packages(dpkg, 590) == []


def test_parse_dpkg_search():
    assert pk.parse_dpkg_search(SMI_OWNER) == "nvidia-smi"
    assert pk.parse_dpkg_search("diversion by foo from: /usr/bin/x\nnvidia-utils-580-server: /usr/bin/nvidia-smi\n") \
        == "nvidia-utils-580-server"
    assert pk.parse_dpkg_search("") is None


# --- GPUs and the request ----------------------------------------------------------------------------

def test_gpu_summary_blackwell_server():
    gpus = gpus_of(BLACKWELL)
    assert len(gpus) == 4
    assert gpus[0]["name"] == "RTX PRO 6000 Blackwell Server Edition"
    assert gpus[0]["min_branch"] == 570 and gpus[0]["open_required"] and gpus[0]["open_supported"]
    assert rq.min_branch(gpus) == 570


def test_gpu_summary_numeric_lspci_a100():
    gpus = gpus_of(A100)
    assert [(g["architecture"], g["open_required"], g["min_branch"]) for g in gpus] == [("Ampere", False, 450)]


def test_branch_below_the_minimum_is_refused_naming_gpu_branch_and_fix():
    with pytest.raises(rq.DriverChoiceError) as err:
        rq.precheck(request(branch="535"), gpus_of(BLACKWELL))
    msg = str(err.value)
    for part in ("RTX PRO 6000 Blackwell Server Edition (10de:2bb5 at 0000:38:00.0)", ">= 570", "branch 535",
                 "nvidia_driver_branch: auto"):
        assert part in msg


def test_version_below_the_minimum_is_refused_too():
    with pytest.raises(rq.DriverChoiceError, match="branch 550 .from nvidia_driver_version"):
        rq.precheck(request(version="550.163.01"), gpus_of(BLACKWELL))


def test_proprietary_modules_on_blackwell_are_refused():
    with pytest.raises(rq.DriverChoiceError) as err:
        rq.precheck(request(kernel_modules="proprietary"), gpus_of(BLACKWELL))
    assert "require the NVIDIA open kernel modules (Blackwell)" in str(err.value)
    assert "nvidia_driver_kernel_modules: auto" in str(err.value)


def test_open_modules_on_pascal_are_refused():
    with pytest.raises(rq.DriverChoiceError, match="cannot use the NVIDIA open kernel modules .no GSP: Pascal"):
        rq.precheck(request(kernel_modules="open"), rq.gpu_summary(PASCAL))


def test_mixed_host_cannot_be_served():
    with pytest.raises(rq.DriverChoiceError, match="no single kernel module flavour"):
        rq.precheck(request(), gpus_of(BLACKWELL) + rq.gpu_summary(PASCAL))


def test_auto_modules():
    assert rq.precheck(request(), gpus_of(BLACKWELL))["kernel_modules"] == "open"
    assert rq.precheck(request(), gpus_of(A100))["kernel_modules"] == "proprietary"
    assert rq.precheck(request(kernel_modules="open"), gpus_of(A100))["kernel_modules"] == "open"


@pytest.mark.parametrize("bad, match", [
    ({"flavor": "workstation"}, "flavor"),
    ({"branch": "58x"}, "branch number"),
    ({"kernel_modules": "closed"}, "kernel_modules"),
    ({"version": "latest"}, "driver version"),
    ({"branch": "570", "version": "580.95.05"}, "not in nvidia_driver_branch 570"),
    ({"style": "rpm"}, "package style"),
])
def test_malformed_requests(bad, match):
    with pytest.raises(rq.DriverChoiceError, match=match):
        rq.validate_request(request(**bad))


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
    got, why = br.branch_from_ubuntu_drivers(load(fixture), request(style="ubuntu", flavor=flavor), modules, [])
    assert got == branch, why


def test_ubuntu_drivers_recommendation_outside_the_flavour_takes_the_newest_of_it():
    text = load("ubuntu-drivers-devices_TeslaT4_aws.txt").replace("nvidia-driver-595-server - distro", "x-595 - distro")
    got, why = br.branch_from_ubuntu_drivers(text, request(style="ubuntu"), "proprietary", [])
    assert got == 580 and "595" in why


def test_ubuntu_drivers_without_the_flavour_is_an_error():
    with pytest.raises(rq.DriverChoiceError, match="offers no nvidia-driver-<branch>-server"):
        br.branch_from_ubuntu_drivers(load("ubuntu-drivers-devices_GTX1080_no-header_old.txt"),
                                      request(style="ubuntu"), "proprietary", [])


def test_ubuntu_drivers_below_the_gpu_minimum_is_not_taken():
    with pytest.raises(rq.DriverChoiceError, match="branch >= 570"):
        br.branch_from_ubuntu_drivers(load("ubuntu-drivers-devices_QuadroP2200_aplay-noise.txt"),
                                      request(style="ubuntu"), "open", gpus_of(BLACKWELL))


def test_package_names():
    assert pk.ubuntu_package(580, "server", "open") == "nvidia-driver-580-server-open"
    assert pk.ubuntu_package(580, "server", "proprietary") == "nvidia-driver-580-server"
    assert pk.ubuntu_package(580, "desktop", "open") == "nvidia-driver-580-open"
    assert pk.ubuntu_package(535, "desktop", "proprietary") == "nvidia-driver-535"


# --- The plan (Debian style, on the trixie capture) ---------------------------------------------------

def test_fresh_install_takes_the_newest_branch_with_the_open_modules():
    query = Query(fresh_dpkg(), MADISON)
    result = dp.plan(request(), gpus_of(BLACKWELL), query)
    assert result["action"] == "install"
    assert result["branch"] == 580 and result["version"] == "580.105.08"
    assert result["packages"] == ["nvidia-driver", "nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "nvidia-smi",
                                  "nvidia-persistenced"]
    assert result["install"] == ["%s=580.105.08-1" % p for p in result["packages"]]
    assert result["installed"]["upstream"] is None and result["unattended_upgrades"] is False


def test_converged_host_plans_nothing_and_lists_what_to_hold():
    result = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert result["action"] == "none"
    installed = result["installed"]
    assert installed["package"] == "nvidia-smi" and installed["upstream"] == "580.105.08"
    assert installed["kernel_modules"] == "open"
    assert installed["packages"] == DRIVER_PKGS and installed["held"] == DRIVER_PKGS
    assert "the installed driver" in result["branch_source"]
    assert dp.verify_installed(result, installed) == []


def test_version_pin_downgrades_within_the_branch():
    result = dp.plan(request(version="580.95.05"), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert result["action"] == "downgrade" and result["install"][0] == "nvidia-driver=580.95.05-1"


def test_upgrade_takes_the_newest_of_the_branch_only_when_asked():
    older = CONVERGED
    for name in DRIVER_PKGS:
        older = older.replace("%s\t580.105.08-1\t" % name, "%s\t580.95.05-1\t" % name)
    keep = dp.plan(request(), gpus_of(BLACKWELL), Query(older, MADISON, SMI_OWNER))
    assert keep["action"] == "none" and keep["version"] == "580.95.05"
    up = dp.plan(request(upgrade=True), gpus_of(BLACKWELL), Query(older, MADISON, SMI_OWNER))
    assert up["action"] == "upgrade" and up["version"] == "580.105.08"
    assert up["installed"]["held"] == DRIVER_PKGS  # what the role releases before the upgrade


def test_explicit_branch_picks_debians_own_package():
    result = dp.plan(request(branch="550"), gpus_of(A100), Query(fresh_dpkg(), MADISON))
    assert result["version"] == "550.163.01" and result["kernel_modules"] == "proprietary"
    # Debian's nvidia-kernel-dkms is not in the capture: named without a version, apt picks it
    assert "nvidia-kernel-dkms" in result["install"]
    assert "nvidia-driver=550.163.01-2" in result["install"]


def test_unavailable_version_names_what_the_branch_offers():
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(request(version="580.65.06"), gpus_of(BLACKWELL), Query(fresh_dpkg(), MADISON))
    assert "580.105.08-1, 580.95.05-1" in str(err.value)


def test_no_driver_in_the_sources():
    with pytest.raises(rq.DriverChoiceError, match="enable non-free"):
        dp.plan(request(), gpus_of(BLACKWELL), Query(fresh_dpkg(), ""))


def test_check_run_before_its_sources_exist_predicts_by_name():
    # A fresh Debian host in --check: non-free is enabled and the repository added only in the prediction,
    # so apt knows no driver yet; the plan names the packages of the branch instead of failing.
    result = dp.plan(request(sources_pending=True), gpus_of(BLACKWELL), Query(fresh_dpkg(), ""))
    assert result["predicted"] is True and result["action"] == "install"
    # Debian's package names carry no branch: at least the one Blackwell needs, whichever the sources offer.
    assert result["branch"] == 570 and result["version"] == ">=570"
    assert result["kernel_modules"] == "open" and "nvidia-open-kernel-dkms" in result["install"]
    assert all("=" not in spec for spec in result["install"])
    # With sources present, the same request is not a prediction.
    assert "predicted" not in dp.plan(request(sources_pending=True), gpus_of(BLACKWELL), Query(fresh_dpkg(), MADISON))
    # An explicit branch is named as such.
    assert dp.plan(request(branch="580", sources_pending=True), gpus_of(BLACKWELL),
                   Query(fresh_dpkg(), ""))["version"] == "580.*"


# --- The plan (Ubuntu style) -------------------------------------------------------------------------

# Constructed in apt-cache madison's format (as the Debian capture above), with Ubuntu's version scheme.
UBUNTU_MADISON = "".join(
    " %s | %s-0ubuntu0.24.04.1 | http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages\n" % (p, v)
    for p in ("nvidia-driver-580-server-open",) for v in ("580.105.08", "580.95.05"))


def test_ubuntu_dkms_fresh_install_follows_ubuntu_drivers():
    query = Query(fresh_dpkg(), UBUNTU_MADISON, "", load("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt"))
    result = dp.plan(request(style="ubuntu", dkms=True), gpus_of(BLACKWELL), query)
    assert result["install"] == ["nvidia-driver-580-server-open=580.105.08-0ubuntu0.24.04.1"]
    assert result["branch_source"] == "ubuntu-drivers recommends branch 580"


def test_ubuntu_auto_without_ubuntu_drivers_says_what_to_install():
    with pytest.raises(rq.DriverChoiceError, match="ubuntu-drivers-common"):
        dp.plan(request(style="ubuntu", dkms=True), gpus_of(BLACKWELL), Query(fresh_dpkg(), UBUNTU_MADISON))


def test_ubuntu_transitional_package_is_refused_before_install():
    # Ubuntu's retired -server branches become transitional packages carrying a newer branch's version.
    madison = " nvidia-driver-570-server-open | 580.95.05-0ubuntu0.24.04.1 | http://archive.ubuntu.com/ubuntu " \
              "noble-updates/restricted amd64 Packages\n"
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(request(style="ubuntu", dkms=True, branch="570"), gpus_of(BLACKWELL), Query(fresh_dpkg(), madison))
    assert "transitional" in str(err.value) and "nvidia_driver_branch: 580" in str(err.value)


def test_verify_installed_reports_a_branch_pulled_by_a_transitional_package():
    planned = {"branch": 535, "version": "535.274.02", "main_package": "nvidia-driver-535-server",
               "install": ["nvidia-driver-535-server=535.274.02-0ubuntu1"], "kernel_modules": "proprietary"}
    installed = {"package": "nvidia-utils-580-server", "upstream": "580.95.05", "branch": 580,
                 "kernel_modules": "proprietary"}
    errors = dp.verify_installed(planned, installed)
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
    result = dp.reboot_decision(installed, "open", facts)
    assert result["required"] is required
    if word:
        assert word in result["reason"]


def test_disruption_names_the_change_then_the_reboot_and_is_empty_otherwise():
    converged = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    loaded = {"state": "ok", "driver_version_kernel": converged["installed"]["upstream"],
              "kernel_modules": {"flavor": converged["installed"]["kernel_modules"]}}
    converged["reboot"] = dp.reboot_decision(converged["installed"]["upstream"],
                                             converged["installed"]["kernel_modules"], loaded)
    assert converged["action"] == "none" and dp.disruption(converged) == ""
    # the installed driver is not the loaded one: the run reboots the host
    stale = dict(converged, reboot=dp.reboot_decision(converged["installed"]["upstream"], "open",
                                                       {"state": "ok", "driver_version_kernel": "580.95.05"}))
    assert dp.disruption(stale) == "reboot: driver %s is installed but 580.95.05 is loaded" % (
        converged["installed"]["upstream"])
    # a version change disrupts whatever the reboot says, and names both versions
    change = dict(converged, action="change", version="580.95.05")
    assert dp.disruption(change) == "driver change %s -> 580.95.05" % converged["installed"]["upstream"]
    fresh = dict(converged, action="install", version="580.95.05", installed={"upstream": None})
    assert dp.disruption(fresh) == "driver install none -> 580.95.05"
    # the same version with a package missing (installed by hand without nvidia-persistenced): no version
    # change to name, the packages the run adds instead
    missing = [dict(p, installed=None) if p["name"] == converged["packages"][-1] else p
               for p in converged["package_versions"]]
    added = dict(converged, action="change", version=converged["installed"]["upstream"], package_versions=missing)
    assert dp.disruption(added) == "driver %s packages added: %s" % (converged["installed"]["upstream"],
                                                                     converged["packages"][-1])


# --- Whose holds: gpuhost's (recorded) or the operator's ------------------------------------------------

def test_holds_not_recorded_as_gpuhosts_are_the_operators():
    result = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    record = {"version": "580.105.08", "held_by_gpuhost": ["nvidia-driver", "nvidia-smi"]}
    owners = dp.hold_owners(result["installed"], record)
    assert owners["ours"] == ["nvidia-driver", "nvidia-smi"]
    assert owners["operator"] == sorted(set(DRIVER_PKGS) - {"nvidia-driver", "nvidia-smi"})
    # no record at all (a driver the operator installed and held): every hold is the operator's
    no_record = dp.hold_owners(result["installed"], None)
    assert (no_record["ours"], no_record["operator"], no_record["gpuhost"]) == ([], DRIVER_PKGS, [])


def test_records_older_than_held_by_gpuhost_count_their_packages_as_gpuhosts():
    result = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    owners = dp.hold_owners(result["installed"], {"version": "580.105.08", "packages": DRIVER_PKGS})
    assert (owners["ours"], owners["operator"]) == (DRIVER_PKGS, [])
    # an empty held_by_gpuhost is a record that gpuhost held nothing, not an old record
    owners = dp.hold_owners(result["installed"], {"packages": DRIVER_PKGS, "held_by_gpuhost": []})
    assert owners["operator"] == DRIVER_PKGS


def test_a_hold_is_gpuhosts_only_on_the_version_gpuhost_held_it_at():
    result = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    installed = result["installed"]
    assert installed["versions"]["nvidia-smi"] == "580.105.08-1"
    held_then = ["%s=%s" % (p, installed["versions"][p]) for p in DRIVER_PKGS]
    owners = dp.hold_owners(installed, {"version": "580.105.08", "held_by_gpuhost": DRIVER_PKGS,
                                        "held_versions": held_then})
    assert owners["ours"] == DRIVER_PKGS and owners["operator"] == []
    assert owners["gpuhost"] == sorted(installed["packages"])
    assert "nvidia-smi=580.105.08-1" in owners["gpuhost_versions"]
    # The operator downgraded and held the same names: gpuhost held them on 580.126.09, so these holds are
    # the operator's (the run must not release them), and gpuhost records nothing of them as its own.
    newer = ["%s=580.126.09-1" % p for p in DRIVER_PKGS]
    owners = dp.hold_owners(installed, {"version": "580.126.09", "held_by_gpuhost": DRIVER_PKGS,
                                        "held_versions": newer})
    assert owners["ours"] == [] and owners["operator"] == DRIVER_PKGS
    assert not set(DRIVER_PKGS) & set(owners["gpuhost"])
    # A record from before held_versions: its driver version tells whether the names still hold.
    old = dp.hold_owners(installed, {"version": "580.126.09", "held_by_gpuhost": DRIVER_PKGS})
    assert old["operator"] == DRIVER_PKGS
    assert dp.hold_owners(installed, {"version": "580.105.08", "held_by_gpuhost": DRIVER_PKGS})["ours"] == DRIVER_PKGS


def test_a_change_under_the_operators_holds_is_refused_naming_packages_versions_and_variable():
    result = dp.plan(request(version="580.95.05"), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    message = dp.operator_hold_error(result, ["nvidia-driver", "nvidia-smi"])
    assert "nvidia-driver, nvidia-smi" in message
    assert "580.105.08" in message and "580.95.05" in message and "downgrade" in message
    assert "nvidia_driver_release_operator_holds" in message and "Nothing was changed" in message
    # no change planned, or no operator hold: nothing to refuse
    same = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert dp.operator_hold_error(same, ["nvidia-driver"]) is None
    assert dp.operator_hold_error(result, []) is None


# --- The operator's apt pins (apt_preferences(5)) ------------------------------------------------------

OWN_PIN = "/etc/apt/preferences.d/gpuhost-nvidia-driver.pref"
# What the role's template writes (tests/unit/test_driver_pin.py renders it), at the converged version.
GPUHOST_PIN = ("# Ansible managed\n# Role nvidia_driver: every package of the NVIDIA driver stays at 580.105.08\n"
               "Package: *nvidia* libcuda* libnv*\nPin: version 580.105.08-*\nPin-Priority: 1001\n")
# apt_preferences(5)'s own forms: a version pin, release pins, comments, Explanation lines.
OPERATOR_PIN = """# Keep the fleet on the validated driver
Explanation: validated with our serving stack
Package: nvidia-*
Pin: version 580.105.08*
Pin-Priority: 1001

Explanation: Uninstall or do not install any Debian-originated
Explanation: package versions other than those in the distribution
Package: *
Pin: release a=unstable
Pin-Priority: 50
"""


def downgrade_plan():
    return dp.plan(request(version="580.95.05"), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))


def test_parse_preferences_reads_the_man_page_forms():
    stanzas = ap.parse_preferences(OPERATOR_PIN)
    assert [s["packages"] for s in stanzas] == [["nvidia-*"], ["*"]]
    assert stanzas[0] == {"line": 1, "packages": ["nvidia-*"], "generic": False, "pin_type": "version",
                          "pin": "580.105.08*", "priority": 1001}
    assert stanzas[1]["generic"] is True and stanzas[1]["pin_type"] == "release"
    assert stanzas[1]["pin"] == "a=unstable" and stanzas[1]["priority"] == 50
    multi = ap.parse_preferences("Package: libcuda1 /^libnv/ nvidia-smi:amd64\nPin: origin \"\"\nPin-Priority: -10\n")
    assert multi[0]["packages"] == ["libcuda1", "/^libnv/", "nvidia-smi:amd64"] and multi[0]["priority"] == -10
    assert ap.parse_preferences("# only a comment\n\n\n") == []
    with pytest.raises(ValueError, match="line 2"):
        ap.parse_preferences("Package: nvidia-driver\nthis is not a field\n")


@pytest.mark.parametrize("name, read", [
    ("operator-nvidia", True), ("10-nvidia.pref", True), ("nvidia_v2.pref", True), ("pref", True),
    ("a.b.pref", True),
    # apt ignores other extensions, odd characters, hidden files and a trailing period
    ("nvidia.conf", False), ("nvidia.pref.dpkg-old", False), ("nvidia.pref.bak", False), ("nvidia.PREF", False),
    ("nvidia~", False), ("nvidia pin", False), (".nvidia.pref", False), ("nvidia.", False), ("", False),
])
def test_which_preferences_d_files_apt_reads(name, read):
    assert ap.apt_reads_preferences_part(name) is read


def test_preference_files_in_apts_order():
    names = ["zz-last", "gpuhost-nvidia-driver.pref", "operator.bak", "00-first.pref", "README.md"]
    assert ap.preference_files(names) == [
        "/etc/apt/preferences.d/00-first.pref", "/etc/apt/preferences.d/gpuhost-nvidia-driver.pref",
        "/etc/apt/preferences.d/zz-last", "/etc/apt/preferences"]


def test_a_version_pin_of_the_operator_stands_in_the_way_of_a_downgrade():
    result = downgrade_plan()
    files = [(OWN_PIN, GPUHOST_PIN), ("/etc/apt/preferences.d/operator-nvidia", OPERATOR_PIN)]
    pins = ap.operator_pins(files, OWN_PIN, result)
    # gpuhost's own file (the same globs at 1001) is not the operator's; the generic release pin chooses sources
    assert len(pins) == 1
    pin = pins[0]
    assert pin["file"] == "/etc/apt/preferences.d/operator-nvidia" and pin["line"] == 1
    assert pin["packages"] == ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "nvidia-persistenced"]
    assert pin["pin"] == "version 580.105.08*" and pin["priority"] == 1001 and pin["effect"] == "pinned"
    assert pin["wanted"] == "580.95.05-1"
    message = ap.operator_pin_error(result, pins)
    assert message.startswith("the operator pinned nvidia-driver, nvidia-open-kernel-dkms, nvidia-smi, "
                              "nvidia-persistenced to version 580.105.08* in /etc/apt/preferences.d/operator-nvidia "
                              "(Pin-Priority 1001); this run would downgrade the driver from 580.105.08 to 580.95.05-1")
    assert "Nothing was changed" in message and "nvidia_driver_release_operator_holds: true" in message
    assert "/var/backups/gpuhost" in message and "at the pinned driver" in message
    # The same file under gpuhost's path is gpuhost's own.
    assert ap.operator_pins([(OWN_PIN, OPERATOR_PIN)], OWN_PIN, result) == []
    # Under /etc/apt/preferences it is the operator's too.
    assert ap.operator_pins([("/etc/apt/preferences", OPERATOR_PIN)], OWN_PIN, result)[0]["file"] == \
        "/etc/apt/preferences"


def test_no_refusal_when_the_pin_allows_the_planned_version_or_nothing_changes():
    result = downgrade_plan()
    allows = "Package: nvidia-*\nPin: version 580.95.05*\nPin-Priority: 1001\n"
    assert ap.operator_pins([("/etc/apt/preferences.d/ok", allows)], OWN_PIN, result) == []
    branch = "Package: /nvidia/ libcuda1\nPin: version 580.*\nPin-Priority: 1001\n"
    assert ap.operator_pins([("/etc/apt/preferences.d/ok", branch)], OWN_PIN, result) == []
    same = dp.plan(request(), gpus_of(BLACKWELL), Query(CONVERGED, MADISON, SMI_OWNER))
    assert same["action"] == "none"
    assert ap.operator_pins([("/etc/apt/preferences.d/op", OPERATOR_PIN)], OWN_PIN, same) == []
    assert ap.operator_pin_error(same, [{"file": "x"}]) is None
    assert ap.operator_pin_error(result, []) is None


def test_glob_and_regex_package_patterns():
    result = downgrade_plan()
    regex = "Package: /^(nvidia-smi|libcuda.*)$/\nPin: version 570.195.03-1\nPin-Priority: 990\n"
    pins = ap.operator_pins([("/etc/apt/preferences.d/re.pref", regex)], OWN_PIN, result)
    # libcuda1 is not in the plan but is a package of the installed driver the change moves
    assert pins[0]["packages"] == ["nvidia-smi", "libcuda1"] and pins[0]["priority"] == 990
    glob = "Package: nvidia-smi:amd64 firmware-nvidia-gs?\nPin: version 580.105.08-1\nPin-Priority: 600\n"
    pins = ap.operator_pins([("/etc/apt/preferences.d/g", glob)], OWN_PIN, result)
    assert pins[0]["packages"] == ["firmware-nvidia-gsp", "nvidia-smi"]
    other = "Package: cuda-toolkit-* src:nvidia-graphics-drivers\nPin: version 12.8*\nPin-Priority: 1001\n"
    assert ap.operator_pins([("/etc/apt/preferences.d/c", other)], OWN_PIN, result) == []


def test_negative_priority_bars_the_planned_version():
    result = downgrade_plan()
    barred = "Package: nvidia-driver\nPin: version 580.95.*\nPin-Priority: -1\n"
    pins = ap.operator_pins([("/etc/apt/preferences.d/no-58095", barred)], OWN_PIN, result)
    assert pins[0]["effect"] == "barred" and pins[0]["packages"] == ["nvidia-driver"]
    message = ap.operator_pin_error(result, pins)
    assert "the operator barred nvidia-driver (Pin: version 580.95.*) in /etc/apt/preferences.d/no-58095 " \
           "(Pin-Priority -1)" in message and "a driver the pins allow" in message
    # a negative pin on other versions bars nothing this run wants
    other = "Package: nvidia-driver\nPin: version 550.*\nPin-Priority: -1\n"
    assert ap.operator_pins([("/etc/apt/preferences.d/no-550", other)], OWN_PIN, result) == []
    # a negative pin on every source bars every version
    nowhere = "Package: nvidia-smi\nPin: release *\nPin-Priority: -1\n"
    assert ap.operator_pins([("/etc/apt/preferences.d/never", nowhere)], OWN_PIN, result)[0]["effect"] == "barred"


def test_release_and_origin_pins_choose_sources_and_are_not_the_operators_version_pins():
    result = downgrade_plan()
    text = ("Package: nvidia-*\nPin: origin developer.download.nvidia.com\nPin-Priority: -1\n\n"
            "Package: nvidia-*\nPin: release o=Debian,a=trixie,c=non-free\nPin-Priority: 1001\n\n"
            "Package: nvidia-*\nPin: release n=trixie-backports\nPin-Priority: 900\n")
    assert ap.operator_pins([("/etc/apt/preferences.d/sources", text)], OWN_PIN, result) == []


def test_an_unreadable_preferences_file_is_named():
    with pytest.raises(rq.DriverChoiceError, match="/etc/apt/preferences.d/broken"):
        ap.operator_pins([("/etc/apt/preferences.d/broken", "Package: nvidia-smi\nPin version 1\n")], OWN_PIN,
                         downgrade_plan())


def test_predicted_plans_compare_the_pin_with_the_branch():
    # --check on a fresh host whose sources this run adds: no package version yet, only the branch (580.*).
    result = dp.plan(request(branch="580", sources_pending=True), gpus_of(BLACKWELL), Query(fresh_dpkg(), ""))
    assert result["predicted"] is True and result["version"] == "580.*" and result["action"] == "install"

    def pins(text):
        return ap.operator_pins([("/etc/apt/preferences.d/op", text)], OWN_PIN, result)

    assert pins("Package: nvidia-driver\nPin: version 570.*\nPin-Priority: 1001\n")[0]["wanted"] == "580.*"
    assert pins("Package: nvidia-driver\nPin: version 580.105.08-1\nPin-Priority: 1001\n") == []
    assert pins("Package: nvidia-driver\nPin: version 58*\nPin-Priority: 1001\n") == []
    assert pins("Package: nvidia-driver\nPin: version /^57/\nPin-Priority: 1001\n") == []  # cannot tell: no refusal
    assert pins("Package: nvidia-driver\nPin: version 580*\nPin-Priority: -1\n")[0]["effect"] == "barred"
    assert pins("Package: nvidia-driver\nPin: version 580.95.*\nPin-Priority: -1\n") == []
    # an exact version asked for: 580.95.05-<revision>
    exact = dict(result, version="580.95.05")
    assert ap.operator_pins([("/x/p", "Package: nvidia-smi\nPin: version 580.105.08*\nPin-Priority: 1001\n")],
                            OWN_PIN, exact)[0]["wanted"] == "580.95.05"
    assert ap.operator_pins([("/x/p", "Package: nvidia-smi\nPin: version 580.95.05-*\nPin-Priority: 1001\n")],
                            OWN_PIN, exact) == []


def test_the_module_reads_the_files_apt_reads(tmp_path, monkeypatch):
    import nvidia_driver_plan as module
    parts = tmp_path / "preferences.d"
    parts.mkdir()
    (parts / "operator-nvidia").write_text(OPERATOR_PIN)
    (parts / "gpuhost-nvidia-driver.pref").write_text(GPUHOST_PIN)
    (parts / "operator-nvidia.bak").write_text(OPERATOR_PIN)  # apt ignores it
    (parts / "sub.pref").mkdir()                                # not a file
    (tmp_path / "preferences").write_text("Package: nvidia-smi\nPin: version 570.*\nPin-Priority: 1001\n")
    monkeypatch.setattr(module, "PREFERENCES", str(tmp_path / "preferences"))
    monkeypatch.setattr(module, "PREFERENCES_PARTS", str(parts))
    files = module.HostQuery(None).preferences()
    assert [path for path, _ in files] == [str(parts / "gpuhost-nvidia-driver.pref"), str(parts / "operator-nvidia"),
                                          str(tmp_path / "preferences")]
    pins = ap.operator_pins(files, str(parts / "gpuhost-nvidia-driver.pref"), downgrade_plan())
    assert [p["file"] for p in pins] == [str(parts / "operator-nvidia"), str(tmp_path / "preferences")]
    monkeypatch.setattr(module, "PREFERENCES_PARTS", str(tmp_path / "missing"))
    assert [path for path, _ in module.HostQuery(None).preferences()] == [str(tmp_path / "preferences")]


# --- The fabric manager of NVSwitch (HGX) hosts ----------------------------------------------------------

# Addresses as the research's real H100 HGX lspci shows its NVSwitch functions (10de:22a3).
NVSWITCHES = ["0000:bd:00.0", "0000:be:00.0", "0000:bf:00.0", "0000:c0:00.0"]


def fm_madison(versions=("580.105.08", "580.95.05")):
    return UBUNTU_MADISON.replace("http://archive.ubuntu.com/ubuntu", "MIRROR") + "".join(
        " %s | %s-0ubuntu0.24.04.1 | MIRROR noble-updates/restricted amd64 Packages\n" % (p, v)
        for p in ("nvidia-fabricmanager-580", "libnvidia-nscq-580") for v in versions)


def hgx_plan(madison, **kw):
    query = Query(fresh_dpkg(), madison, "", load("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt"))
    return dp.plan(request(style="ubuntu", dkms=True, nvswitches=NVSWITCHES, **kw), gpus_of(BLACKWELL), query)


def test_an_nvswitch_host_gets_the_fabric_manager_at_the_drivers_version():
    result = hgx_plan(fm_madison())
    assert result["fabric_manager"] is True and "4 NVSwitch on the PCI bus" in result["fabric_manager_reason"]
    assert result["install"] == ["nvidia-driver-580-server-open=580.105.08-0ubuntu0.24.04.1",
                                 "nvidia-fabricmanager-580=580.105.08-0ubuntu0.24.04.1",
                                 "libnvidia-nscq-580=580.105.08-0ubuntu0.24.04.1"]
    pinned = hgx_plan(fm_madison(), version="580.95.05")
    assert "nvidia-fabricmanager-580=580.95.05-0ubuntu0.24.04.1" in pinned["install"]


def test_a_fabric_manager_the_archive_lacks_at_the_drivers_version_stops_the_plan():
    with pytest.raises(rq.DriverChoiceError) as err:
        hgx_plan(fm_madison(versions=("580.95.05",)))
    assert "nvidia-fabricmanager-580 580.105.08 is not in the apt sources (they offer 580.95.05)" in str(err.value)


def test_fabric_manager_modes_and_refusals():
    without = dp.plan(request(style="ubuntu", dkms=True, nvswitches=NVSWITCHES, fabric_manager="never"), gpus_of(BLACKWELL),
                      Query(fresh_dpkg(), fm_madison(), "", load("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt")))
    assert without["fabric_manager"] is False and len(without["install"]) == 1
    assert "802" in without["fabric_manager_reason"]
    with pytest.raises(rq.DriverChoiceError, match="NV_WARN_NOTHING_TO_DO"):
        rq.precheck(request(style="ubuntu", fabric_manager="always"), gpus_of(BLACKWELL))
    with pytest.raises(rq.DriverChoiceError) as err:
        rq.precheck(request(nvswitches=NVSWITCHES), gpus_of(BLACKWELL))
    assert ("Debian's archive does not carry the fabric manager (nvidia-fabricmanager, libnvidia-nscq). Fix: "
            "nvidia_driver_package_style: nvidia, i.e. NVIDIA's CUDA repository, for the driver and the fabric "
            "manager together, or nvidia_driver_fabric_manager: never") in str(err.value)
    with pytest.raises(rq.DriverChoiceError, match="auto, always or never"):
        rq.precheck(request(fabric_manager="yes"), gpus_of(BLACKWELL))
    assert rq.precheck(request(), gpus_of(BLACKWELL))["fabric_manager"] is False


# --- Ubuntu without DKMS: Canonical's signed modules ----------------------------------------------------

# Captured on the driver scenario's target (real dpkg/apt, the simulated Ubuntu archive; README).
KERNEL = "6.18.44-fc-v1272"
KERNEL_IMAGES = load("dpkg-query-W-Depends_linux-image_gpusim-ubuntu.txt")
PKGNAMES_OPEN = load("apt-cache-pkgnames_linux-modules-nvidia-580-server-open_gpusim.txt")
PKGNAMES_CLOSED = load("apt-cache-pkgnames_linux-modules-nvidia-580-server_gpusim.txt")
SHOW_OPEN = load("apt-cache-show_linux-modules-nvidia-580-server-open_gpusim.txt")
NO_DKMS_MADISON = "".join(
    " %s | %s-0ubuntu0.24.04.1 | MIRROR noble-updates/restricted amd64 Packages\n" % (p, v)
    for p in ("nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server") for v in ("580.105.08", "580.95.05"))


class SignedQuery(Query):
    """Query plus the signed-modules questions, from the captures."""

    def __init__(self, dpkg_text, kernel=KERNEL, images=KERNEL_IMAGES, pkgnames=PKGNAMES_OPEN, show=SHOW_OPEN):
        super().__init__(dpkg_text, NO_DKMS_MADISON, "", load("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt"))
        self.kernel, self.images, self.names, self.shown = kernel, images, pkgnames, show

    def kernel_release(self):
        return self.kernel

    def kernel_images(self):
        return pk.parse_kernel_images(self.images)

    def pkgnames(self, prefix):
        return "\n".join(n for n in self.names.split() if n.startswith(prefix))

    def show(self, packages):
        return "\n\n".join(block for block in self.shown.split("\n\n") if any(
            ("Package: %s\n" % p) in block for p in packages))


def test_kernel_flavour_from_the_image_metapackage():
    images = pk.parse_kernel_images(KERNEL_IMAGES)
    assert images["linux-image-generic"] == {"version": "6.18.44-1.1", "installed": True,
                                             "depends": ["linux-image-" + KERNEL]}
    assert images["linux-image-unsigned-" + KERNEL]["installed"] is False
    flavour, why = pk.kernel_flavour(images, KERNEL)
    assert flavour == "generic" and why == "linux-image-generic depends on linux-image-" + KERNEL
    # another kernel running: no metapackage depends on it
    flavour, why = pk.kernel_flavour(images, "6.8.0-149-generic")
    assert flavour is None and "installed metapackages: linux-image-generic" in why


def test_signed_flavours_are_the_metapackages_of_that_variant_only():
    assert pk.signed_flavours(PKGNAMES_OPEN, "580-server-open") == ["generic"]
    # the closed variant's prefix also matches the open packages: they are not its flavours
    assert pk.signed_flavours(PKGNAMES_CLOSED, "580-server") == ["generic"]


def test_built_for_driver_reads_the_real_per_kernel_stanza():
    # Ubuntu 22.04's real apt-cache show (NVIDIA's GPU Operator docs): kernel-common pinned to 515.86.01
    stanzas = pk.parse_apt_show(load("apt-cache-show_linux-modules-nvidia-515-server-5.15.0-56-generic_cloud-native-docs.txt"))
    assert [(s["package"], s["version"]) for s in stanzas] == [
        ("linux-modules-nvidia-515-server-5.15.0-56-generic", "5.15.0-56.62+1")]
    assert pk.built_for_driver(stanzas[0]["depends"], 515, "server") == "515.86.01"
    assert pk.built_for_driver(stanzas[0]["depends"], 580, "server") is None
    assert pk.built_for_driver(stanzas[0]["depends"], 515, "desktop") is None


def test_signed_plan_installs_no_dkms_userspace_and_the_modules_built_for_the_driver():
    result = dp.plan(request(style="ubuntu"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg()))
    own = "linux-modules-nvidia-580-server-open-" + KERNEL
    assert result["install"] == [
        "nvidia-headless-no-dkms-580-server-open=580.105.08-0ubuntu0.24.04.1",
        "nvidia-utils-580-server=580.105.08-0ubuntu0.24.04.1",
        # the builds whose Depends carry nvidia-kernel-common-580-server (>= 580.105.08) in the capture
        "linux-modules-nvidia-580-server-open-generic=6.18.44-1.1+3", own + "=6.18.44-1.1+3"]
    assert result["kernel"]["flavour"] == "generic" and result["kernel"]["release"] == KERNEL
    assert result["remove"] == [] and result["action"] == "install"
    older = dp.plan(request(style="ubuntu", version="580.95.05"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg()))
    assert "%s=6.18.44-1.1+2" % own in older["install"]


def test_signed_plan_refusals_name_the_fix():
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(request(style="ubuntu", kernel_flavour="aws"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg()))
    assert "no Canonical-signed nvidia modules for the aws kernel flavour" in str(err.value)
    assert "flavours with signed 580-server-open modules: generic" in str(err.value)
    assert "nvidia_driver_dkms: true" in str(err.value)
    # a running kernel the archive has no build for
    images = KERNEL_IMAGES.replace(KERNEL, "6.8.0-149-generic")
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(request(style="ubuntu"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg(), kernel="6.8.0-149-generic",
                                                                         images=images))
    assert "no signed nvidia modules for the running kernel 6.8.0-149-generic" in str(err.value)
    assert "apt install linux-generic" in str(err.value)
    # no flavour to be found
    with pytest.raises(rq.DriverChoiceError, match="nvidia_driver_kernel_flavour"):
        dp.plan(request(style="ubuntu"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg(), images=""))
    with pytest.raises(rq.DriverChoiceError, match="nvidia_driver_kernel_flavour must be auto"):
        rq.precheck(request(style="ubuntu", kernel_flavour="Generic!"), gpus_of(BLACKWELL))


def test_signed_plan_refuses_a_driver_no_build_for_the_running_kernel_fits():
    show = "\n\n".join(b for b in SHOW_OPEN.split("\n\n") if "(>= 580.95.05)" not in b)
    with pytest.raises(rq.DriverChoiceError) as err:
        dp.plan(request(style="ubuntu", version="580.95.05"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg(), show=show))
    assert "built for driver 580.105.08, not 580.95.05" in str(err.value)
    assert "nvidia_driver_version: 580.105.08" in str(err.value)


def test_signed_plan_removes_the_dkms_packages_it_replaces():
    # the driver scenario's own dpkg capture of a host gpuhost converged with the DKMS driver metapackage
    dkms = "nvidia-driver-580-server-open\t580.105.08-0ubuntu0.24.04.1\thi \n" \
           "nvidia-dkms-580-server-open\t580.105.08-0ubuntu0.24.04.1\tii \n"
    result = dp.plan(request(style="ubuntu"), gpus_of(BLACKWELL), SignedQuery(fresh_dpkg() + dkms))
    assert result["remove"] == ["nvidia-dkms-580-server-open", "nvidia-driver-580-server-open"]
    assert result["action"] != "none"
    assert dp.plan(request(style="ubuntu", dkms=True), gpus_of(BLACKWELL),
                   Query(fresh_dpkg() + dkms, UBUNTU_MADISON, "", load("ubuntu-drivers-devices_RTXPRO6000-server_gpusim.txt")))["remove"] == []


# --- A preferences file the driver's own packages ship -------------------------------------------------

def test_dpkg_owners_of_several_paths():
    # the real single-path capture, and dpkg's form for a path two packages share
    assert pk.parse_dpkg_owners(load("dpkg-query-S_nvidia-smi_debian.txt")) == {"/usr/bin/nvidia-smi": "nvidia-smi"}
    assert pk.parse_dpkg_search(load("dpkg-query-S_nvidia-smi_debian.txt")) == "nvidia-smi"
    assert pk.parse_dpkg_owners("diversion by dash from: /bin/sh\nlibc6:amd64, libc6-dev:amd64: /usr/share/doc\n") == {
        "/usr/share/doc": "libc6"}


def test_a_pin_file_of_a_driver_package_is_not_the_operators():
    # NVIDIA's pinning package holds its branch in a preferences file it ships; a branch change replaces it
    pin = "Package: nvidia-driver\nPin: version 580.*\nPin-Priority: 1000\n"
    path = "/etc/apt/preferences.d/nvidia-driver-pin"
    planned = {"action": "change", "packages": ["nvidia-driver", "nvidia-driver-pinning-590"],
               "package_versions": [{"name": "nvidia-driver", "version": "590.48.01-1"}],
               "package_version": "590.48.01-1", "version": "590.48.01",
               "installed": {"packages": ["nvidia-driver", "nvidia-driver-pinning-580"]}}
    assert [p["file"] for p in ap.operator_pins([(path, pin)], None, planned)] == [path]
    assert ap.operator_pins([(path, pin)], None, planned, owners={path: "nvidia-driver-pinning-580"}) == []
    # a file some other package ships is still a pin in the driver's way
    assert ap.operator_pins([(path, pin)], None, planned, owners={path: "site-apt-policy"}) != []
