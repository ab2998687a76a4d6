"""OpenPGP fingerprints computed without gpg, checked against gpg's own answer on a real key."""
import os
import shutil
import subprocess

import pytest

from driver.openpgp import OpenPGPError, dearmor, normalise, primary_fingerprints

GPG = shutil.which("gpg")


@pytest.fixture(scope="module")
def generated_key(tmp_path_factory):
    if not GPG:
        pytest.skip("gpg not installed")
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    for algo in ("ed25519", "rsa2048"):
        subprocess.run([GPG, "--batch", "--passphrase", "", "--quick-gen-key", "t-%s@example.invalid" % algo,
                        algo, "default", "never"], env=env, check=True, capture_output=True)
    listing = subprocess.run([GPG, "--batch", "--with-colons", "--list-keys"], env=env, check=True,
                             capture_output=True, text=True).stdout
    # gpg's own view: the fpr line that follows each pub line.
    expected, take = [], False
    for line in listing.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            take = True
        elif fields[0] == "fpr" and take:
            expected.append(fields[9])
            take = False
    armored = subprocess.run([GPG, "--batch", "--armor", "--export"], env=env, check=True, capture_output=True).stdout
    binary = subprocess.run([GPG, "--batch", "--export"], env=env, check=True, capture_output=True).stdout
    return expected, armored, binary


def test_fingerprints_match_gpg_armored_and_binary(generated_key):
    expected, armored, binary = generated_key
    assert len(expected) == 2
    assert primary_fingerprints(armored) == expected
    assert primary_fingerprints(binary) == expected
    assert dearmor(armored) == binary


@pytest.mark.parametrize("data", [b"", b"hello world", b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n-----END PGP"])
def test_not_a_key(data):
    with pytest.raises(OpenPGPError):
        primary_fingerprints(data)


def test_normalise():
    assert normalise("c95b 321b 61e8 8c18 09c4  f759 ddca e044 f796 ecb0") == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    assert normalise("0xDDCAE044") == "DDCAE044"
