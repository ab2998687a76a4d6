"""Enabling non-free in a host's own Debian sources (module_utils/driver/driver_sources.py)."""
import os

import pytest

from driver import driver_sources as ds
from conftest import FIXTURES

WANT = ["contrib", "non-free", "non-free-firmware"]


def load(name):
    with open(os.path.join(FIXTURES, "host", name), encoding="utf-8") as handle:
        return handle.read()


BOOKWORM = load("debian.sources_bookworm_debootstrap.txt")

# Debian 12's installer default /etc/apt/sources.list (one-line format), with a comment and a cdrom line.
ONE_LINE = """#deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_ - Official amd64 NETINST with firmware 20240210-11:27]/ bookworm contrib main non-free-firmware

deb http://deb.debian.org/debian/ bookworm main non-free-firmware
deb-src http://deb.debian.org/debian/ bookworm main non-free-firmware

deb http://security.debian.org/debian-security bookworm-security main non-free-firmware # security
deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/debian bookworm stable
"""


def test_deb822_components_appended_rest_byte_for_byte():
    after, changes = ds.enable_deb822(BOOKWORM, WANT)
    assert len(changes) == 2
    assert after == BOOKWORM.replace("Components: main\n", "Components: main contrib non-free non-free-firmware\n")
    assert ds.components_of(after) == [["main"] + WANT, ["main"] + WANT]


def test_deb822_idempotent():
    once, _ = ds.enable_deb822(BOOKWORM, WANT)
    twice, changes = ds.enable_deb822(once, WANT)
    assert twice == once and changes == []


def test_deb822_keeps_order_of_existing_components_and_adds_only_missing():
    text = "Types: deb\nURIs: http://m/debian\nSuites: trixie\nComponents: main non-free-firmware\n"
    after, _ = ds.enable_deb822(text, WANT)
    assert after.endswith("Components: main non-free-firmware contrib non-free\n")


def test_deb822_skips_disabled_flat_and_foreign_stanzas():
    text = ("# a comment stanza\n# only comments\n\n"
            "Types: deb\nURIs: http://m/debian\nSuites: trixie\nComponents: main\nEnabled: no\n\n"
            "Types: deb\nURIs: https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)\nSuites: /\n\n"
            "Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: trixie\nComponents: stable\n")
    after, changes = ds.enable_deb822(text, WANT)
    assert after == text and changes == []


def test_deb822_comment_inside_stanza_and_no_final_newline():
    text = "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\nURIs: http://m/debian\nComponents: main"
    after, changes = ds.enable_deb822(text, ["non-free"])
    assert after == text + " non-free" and len(changes) == 1


def test_deb822_continuation_lines_are_joined_when_changed():
    text = "Types: deb\nURIs: http://m/debian\nSuites: trixie\nComponents: main\n contrib\nSigned-By: /k.gpg\n"
    after, _ = ds.enable_deb822(text, WANT)
    assert after == "Types: deb\nURIs: http://m/debian\nSuites: trixie\nComponents: main contrib non-free non-free-firmware\nSigned-By: /k.gpg\n"


def test_deb822_garbage_is_refused():
    with pytest.raises(ds.SourcesError):
        ds.enable_deb822("deb http://m/debian trixie main\n", WANT)


def test_one_line_format():
    after, changes = ds.enable_one_line(ONE_LINE, WANT)
    lines = after.splitlines()
    assert lines[0] == ONE_LINE.splitlines()[0]  # commented cdrom line untouched
    assert lines[2] == "deb http://deb.debian.org/debian/ bookworm main non-free-firmware contrib non-free"
    assert lines[3].startswith("deb-src http://deb.debian.org/debian/ bookworm main non-free-firmware contrib")
    assert lines[5] == ("deb http://security.debian.org/debian-security bookworm-security main non-free-firmware "
                        "contrib non-free # security")
    assert lines[6] == ONE_LINE.splitlines()[6]  # docker: no main
    assert len(changes) == 3
    assert ds.enable_one_line(after, WANT) == (after, [])


# --- another source of the same repository ------------------------------------------------------------------

CUDA13 = "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"


def cuda_keyring_list():
    with open(os.path.join(FIXTURES, "cuda_repo", "cuda-debian13-x86_64.list"), encoding="utf-8") as handle:
        return handle.read()


def test_cuda_keyrings_list_is_a_conflict_for_another_key():
    """cuda-keyring's real source line (signed-by its own keyring) against gpuhost's source with its own key."""
    files = {"/etc/apt/sources.list.d/cuda-debian13-x86_64.list": cuda_keyring_list(),
             "/etc/apt/sources.list.d/debian.sources": load("debian.sources_bookworm_debootstrap.txt")}
    found = ds.conflicting_sources(files, CUDA13.rstrip("/"), "/", "/etc/apt/keyrings/nvidia-cuda.asc")
    assert found == [{"path": "/etc/apt/sources.list.d/cuda-debian13-x86_64.list", "line": 1,
                      "signed_by": "/usr/share/keyrings/cuda-archive-keyring.gpg"}]
    # the same keyring is no conflict (apt only warns of a source configured twice), nor is another suite
    assert ds.conflicting_sources(files, CUDA13, "/", "/usr/share/keyrings/cuda-archive-keyring.gpg") == []
    assert ds.conflicting_sources(files, CUDA13, "bookworm", "/etc/apt/keyrings/nvidia-cuda.asc") == []


def test_deb822_entries_per_uri_and_suite():
    entries = ds.source_entries(load("debian.sources_bookworm_debootstrap.txt"), deb822=True)
    assert [(e["uri"], e["suite"], e["line"]) for e in entries] == [
        ("http://deb.debian.org/debian", "bookworm", 1), ("http://deb.debian.org/debian", "bookworm-updates", 1),
        ("http://deb.debian.org/debian-security", "bookworm-security", 7)]
    assert {e["signed_by"] for e in entries} == {"/usr/share/keyrings/debian-archive-keyring.gpg"}
    disabled = load("debian.sources_bookworm_debootstrap.txt").replace("Types: deb\n", "Types: deb\nEnabled: no\n", 1)
    assert [e["suite"] for e in ds.source_entries(disabled, deb822=True)] == ["bookworm-security"]


def test_toolkit_list_written_by_hand_names_the_arch_uri_gpuhost_writes():
    """NVIDIA's toolkit repository as a by-hand list has it (amd64 put in, another keyring), and as gpuhost's
    own source writes it ($(ARCH), which apt expands before it compares)."""
    files = {"/etc/apt/sources.list.d/nvidia-container-toolkit.list": load("nvidia-container-toolkit.list_by-hand_amd64.txt")}
    ours = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
    keyring = "/usr/share/keyrings/nvidia-container-toolkit-keyring.asc"
    assert ds.conflicting_sources(files, ours, "/", keyring, arch="amd64") == [
        {"path": "/etc/apt/sources.list.d/nvidia-container-toolkit.list", "line": 1,
         "signed_by": "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"}]
    assert ds.conflicting_sources(files, ours, "/", keyring, arch="arm64") == []
