"""apt_signing_key: a repository key reaches the keyring path apt reads only after its fingerprint passed, and a
key with another fingerprint never stays there. Real keys (tests/fixtures/apt_keys/README.md): NVIDIA's
container toolkit key, Debian's bookworm release key (binary and armored)."""
import os

import pytest

from conftest import ANSIBLE, FIXTURES, run_ansible_module
from driver import signing_key
from driver.openpgp import armor, dearmor
from driver.signing_key import MISSING, TRUSTED, WRONG, SigningKeyError

pytestmark = pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible not installed in this venv")

KEYS = os.path.join(FIXTURES, "apt_keys")
NVIDIA = os.path.join(KEYS, "nvidia-container-toolkit-gpgkey.asc")
DEBIAN_GPG = os.path.join(KEYS, "debian-archive-bookworm-stable.gpg")
DEBIAN_ASC = os.path.join(KEYS, "debian-archive-bookworm-stable.asc")
NVIDIA_FPR = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
DEBIAN_FPR = "4D64FEC119C2029067D6E791F8D2585B8783D481"


def _bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


# The pure decisions.

def test_fingerprints_of_the_real_keys():
    assert signing_key.read_key(_bytes(NVIDIA)) == ([NVIDIA_FPR], None)
    assert signing_key.read_key(_bytes(DEBIAN_GPG)) == ([DEBIAN_FPR], None)
    assert signing_key.read_key(_bytes(DEBIAN_ASC)) == ([DEBIAN_FPR], None)
    assert signing_key.read_key(None) == ([], None)


@pytest.mark.parametrize("data", [b"<html>404 Not Found</html>", b"", _bytes(DEBIAN_GPG)[:7]])
def test_a_file_that_is_no_key_is_described_not_raised(data):
    found, error = signing_key.read_key(data)
    assert found == [] and error.startswith("not an OpenPGP public key")


def test_expected_fingerprint_is_a_full_one():
    assert signing_key.expected_fingerprint("c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0") == NVIDIA_FPR
    with pytest.raises(SigningKeyError, match="short key ID"):
        signing_key.expected_fingerprint("0xF796ECB0")


def test_dest_must_be_an_asc_file():
    signing_key.check_dest("/usr/share/keyrings/nvidia-container-toolkit-keyring.asc")
    with pytest.raises(SigningKeyError, match=r"\*\.asc"):
        signing_key.check_dest("/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg")


def test_disk_state_and_when_to_fetch():
    assert signing_key.disk_state(None, [], NVIDIA_FPR) == MISSING
    assert signing_key.disk_state(b"x", [NVIDIA_FPR], NVIDIA_FPR) == TRUSTED
    assert signing_key.disk_state(b"x", [DEBIAN_FPR], NVIDIA_FPR) == WRONG
    assert signing_key.disk_state(b"<html>", [], NVIDIA_FPR) == WRONG
    assert not signing_key.needs_fetch(TRUSTED, force=False)
    assert signing_key.needs_fetch(TRUSTED, force=True)
    assert signing_key.needs_fetch(MISSING, force=False) and signing_key.needs_fetch(WRONG, force=False)


def test_stored_text_keeps_an_armored_key_and_armors_a_binary_one_as_gpg_does():
    assert signing_key.stored_text(_bytes(NVIDIA)) == _bytes(NVIDIA).decode("ascii")
    # Debian ships the same key both ways: our armor of the binary file is its .asc, byte for byte.
    assert signing_key.stored_text(_bytes(DEBIAN_GPG)) == _bytes(DEBIAN_ASC).decode("ascii")
    assert dearmor(armor(_bytes(DEBIAN_GPG)).encode("ascii")) == _bytes(DEBIAN_GPG)


def test_fetch_ok():
    assert signing_key.fetch_ok("https://x/key", 200, True)
    assert signing_key.fetch_ok("file:///k.asc", None, True)
    assert not signing_key.fetch_ok("https://x/key", 404, True)
    assert not signing_key.fetch_ok("file:///k.asc", -1, False)


def test_the_refusal_names_url_both_fingerprints_dest_and_fix():
    msg = signing_key.refusal("toolkit", "https://x/gpgkey", [DEBIAN_FPR], None, NVIDIA_FPR, "/k.asc", None)
    assert msg.startswith("toolkit: the key at https://x/gpgkey has fingerprint %s, expected %s" % (DEBIAN_FPR, NVIDIA_FPR))
    assert "not written to /k.asc" in msg and "Fix: " + signing_key.DEFAULT_FIX in msg


def test_diff_shows_fingerprints():
    assert signing_key.diff("/k.asc", [], None, False, [NVIDIA_FPR]) == dict(
        before="", after="fingerprint %s\n" % NVIDIA_FPR, before_header="/k.asc", after_header="/k.asc")
    assert signing_key.diff("/k.asc", [], "not an OpenPGP public key: x", True, [NVIDIA_FPR])["before"] == \
        "no key (not an OpenPGP public key: x)\n"


# The module, run by real ansible on files in tmp_path (file:// URLs; backups in tmp_path, never /var/backups).

def run(tmp_path, url, expected=NVIDIA_FPR, *flags, **extra):
    args = dict(url="file://" + url, dest=str(tmp_path / "keyrings" / "vendor.asc"), expected_fingerprint=expected,
                layer="toolkit", backup_dir=str(tmp_path / "backups"))
    args.update(extra)
    return run_ansible_module("apt_signing_key", args, *flags)


def dest_of(tmp_path):
    return tmp_path / "keyrings" / "vendor.asc"


def test_a_wrong_key_fails_and_nothing_is_written(tmp_path):
    res = run(tmp_path, DEBIAN_ASC)
    assert res["failed"] is True
    assert "expected %s" % NVIDIA_FPR in res["msg"] and DEBIAN_FPR in res["msg"] and DEBIAN_ASC in res["msg"]
    assert res["fingerprints"] == [DEBIAN_FPR] and res["fetched"] is True
    assert not dest_of(tmp_path).exists()


def test_a_wrong_key_left_at_dest_is_moved_out_of_apts_reach_when_the_run_fails(tmp_path):
    dest = dest_of(tmp_path)
    dest.parent.mkdir()
    dest.write_bytes(_bytes(DEBIAN_ASC))  # what get_url (force: false) left before the fingerprint check
    res = run(tmp_path, DEBIAN_ASC)
    assert res["failed"] is True
    assert not dest.exists()
    assert res["rejected_path"].startswith(str(tmp_path / "backups"))
    assert _bytes(res["rejected_path"]) == _bytes(DEBIAN_ASC)
    assert "moved to %s" % res["rejected_path"] in res["msg"]
    assert os.listdir(dest.parent) == []


def test_the_right_key_is_written_then_left_alone(tmp_path):
    res = run(tmp_path, NVIDIA)
    assert res["changed"] is True and res["fetched"] is True and res["fingerprints"] == [NVIDIA_FPR]
    dest = dest_of(tmp_path)
    assert _bytes(str(dest)) == _bytes(NVIDIA)
    assert os.stat(dest).st_mode & 0o777 == 0o644
    assert "backup_file" not in res or res["backup_file"] is None
    again = run(tmp_path, NVIDIA)
    assert again["changed"] is False and again["fetched"] is False and again["fingerprints"] == [NVIDIA_FPR]


def test_a_right_key_on_disk_is_not_fetched(tmp_path):
    dest = dest_of(tmp_path)
    dest.parent.mkdir()
    dest.write_bytes(_bytes(NVIDIA))
    res = run(tmp_path, str(tmp_path / "no-such-key"))
    assert res.get("failed") is not True
    assert res["changed"] is False and res["fetched"] is False


def test_force_fetches_and_keeps_the_trusted_key_when_the_fetched_one_is_wrong(tmp_path):
    dest = dest_of(tmp_path)
    dest.parent.mkdir()
    dest.write_bytes(_bytes(NVIDIA))
    same = run(tmp_path, NVIDIA, force=True)
    assert same["changed"] is False and same["fetched"] is True
    wrong = run(tmp_path, DEBIAN_ASC, force=True)
    assert wrong["failed"] is True and "rejected_path" not in wrong
    assert _bytes(str(dest)) == _bytes(NVIDIA)


def test_a_wrong_key_at_dest_is_replaced_by_the_right_one_with_a_backup(tmp_path):
    dest = dest_of(tmp_path)
    dest.parent.mkdir()
    dest.write_bytes(_bytes(DEBIAN_ASC))
    os.chmod(dest, 0o600)
    res = run(tmp_path, NVIDIA, NVIDIA_FPR, "--diff")
    assert res["changed"] is True
    assert _bytes(str(dest)) == _bytes(NVIDIA)
    assert os.stat(dest).st_mode & 0o777 == 0o644  # apt reads it as _apt
    assert res["rejected_path"] == res["backup_file"] and _bytes(res["backup_file"]) == _bytes(DEBIAN_ASC)
    assert res["diff"]["before"] == "fingerprint %s\n" % DEBIAN_FPR
    assert res["diff"]["after"] == "fingerprint %s\n" % NVIDIA_FPR


def test_a_binary_key_is_stored_armored(tmp_path):
    res = run(tmp_path, DEBIAN_GPG, DEBIAN_FPR)
    assert res["changed"] is True
    assert _bytes(str(dest_of(tmp_path))) == _bytes(DEBIAN_ASC)
    assert run(tmp_path, DEBIAN_GPG, DEBIAN_FPR, force=True)["changed"] is False


def test_check_mode_writes_nothing_and_reports_the_change(tmp_path):
    res = run(tmp_path, NVIDIA, NVIDIA_FPR, "--check", "--diff")
    assert res["changed"] is True and res["fetched"] is True
    assert res["diff"]["after"] == "fingerprint %s\n" % NVIDIA_FPR
    assert os.listdir(tmp_path) == []


def test_check_mode_refuses_a_wrong_key_and_moves_nothing(tmp_path):
    dest = dest_of(tmp_path)
    dest.parent.mkdir()
    dest.write_bytes(_bytes(DEBIAN_ASC))
    res = run(tmp_path, DEBIAN_ASC, NVIDIA_FPR, "--check")
    assert res["failed"] is True and "expected %s" % NVIDIA_FPR in res["msg"]
    assert "a run would move it" in res["msg"] and "rejected_path" not in res
    assert _bytes(str(dest)) == _bytes(DEBIAN_ASC) and not (tmp_path / "backups").exists()


def test_a_key_that_cannot_be_fetched_fails_a_run_and_warns_in_check_mode(tmp_path):
    missing = str(tmp_path / "no-such-key")
    checked = run(tmp_path, missing, NVIDIA_FPR, "--check")
    assert checked.get("failed") is not True and checked["changed"] is True and checked["fetched"] is False
    assert any("cannot fetch" in w for w in checked["warnings"])
    dest = dest_of(tmp_path)
    dest.parent.mkdir()
    dest.write_bytes(b"<html>404</html>")  # an error page saved as the key
    res = run(tmp_path, missing)
    assert res["failed"] is True and "cannot fetch the repository key" in res["msg"]
    assert "put the key with fingerprint %s at %s" % (NVIDIA_FPR, dest) in res["msg"]
    assert not dest.exists() and _bytes(res["rejected_path"]) == b"<html>404</html>"


def test_options_it_cannot_work_with_fail_naming_the_layer(tmp_path):
    short = run(tmp_path, NVIDIA, "F796ECB0")
    assert short["failed"] is True and short["msg"].startswith("toolkit: expected_fingerprint")
    gpg = run(tmp_path, NVIDIA, NVIDIA_FPR, dest=str(tmp_path / "vendor.gpg"))
    assert gpg["failed"] is True and "must end in .asc" in gpg["msg"]
    assert os.listdir(tmp_path) == []


def test_a_dest_it_cannot_read_fails_naming_it(tmp_path):
    dest = dest_of(tmp_path)
    dest.mkdir(parents=True)
    res = run(tmp_path, NVIDIA)
    assert res["failed"] is True and res["msg"].startswith("toolkit: cannot read %s" % dest)
    assert dest.is_dir()
