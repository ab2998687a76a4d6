# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What apt_signing_key decides about a repository key: whether the key on disk is the expected one, whether
to fetch, what to write, and what to say. No Ansible imports, no I/O.

The rule the module keeps: after it ran, the keyring path apt reads (Signed-By) holds the expected key or
nothing. A fetched key is written only once its fingerprint passed; a key there without the expected
fingerprint (an earlier version's download, a hand-placed file) is moved away, also when the run fails.
"""
import re
import struct

from ansible.module_utils.driver.openpgp import OpenPGPError, armor, dearmor, normalise, primary_fingerprints

# A full fingerprint only: v4 (SHA-1, 40 hex digits) or v6 (SHA-256, 64). A short key ID can be forged.
FULL_FINGERPRINT = re.compile(r"^(?:[0-9A-F]{40}|[0-9A-F]{64})$")
# Repository keys are a few KiB; anything this large is not one (an error page, a wrong URL).
MAX_KEY_BYTES = 1024 * 1024
DEFAULT_FIX = "check the key URL, or set the expected fingerprint if the vendor rotated its key"

MISSING, TRUSTED, WRONG = "missing", "trusted", "wrong"


class SigningKeyError(ValueError):
    """An option the module cannot work with."""


def expected_fingerprint(text):
    """The expected fingerprint in canonical form; SigningKeyError unless it is a full one."""
    fpr = normalise(text)
    if not FULL_FINGERPRINT.match(fpr):
        raise SigningKeyError("expected_fingerprint %r is not a full fingerprint (40 hex digits, 64 for a v6 key); "
                              "a short key ID can be forged" % text)
    return fpr


def check_dest(dest):
    """SigningKeyError unless apt reads `dest` as the armored key this module writes."""
    if not dest.endswith(".asc"):
        raise SigningKeyError("dest %s must end in .asc: the key is stored armored, and apt reads an armored "
                              "Signed-By key only from a file named *.asc" % dest)


def read_key(data):
    """(fingerprints, error) of a key file's bytes: ([], None) for no file, ([], why) for a file that holds no
    OpenPGP public key (an HTML error page saved in its place, say)."""
    if data is None:
        return [], None
    try:
        return primary_fingerprints(data), None
    except (OpenPGPError, IndexError, struct.error) as exc:  # the last two: cut off inside a packet header
        return [], "not an OpenPGP public key: %s" % exc


def disk_state(data, fingerprints, expected):
    """MISSING (no file), TRUSTED (it holds the expected key) or WRONG (anything else)."""
    if data is None:
        return MISSING
    return TRUSTED if expected in fingerprints else WRONG


def needs_fetch(state, force):
    """A key that is right on disk is left alone, without network access (air-gapped re-runs), unless forced."""
    return force or state != TRUSTED


def stored_text(data):
    """The text written to the *.asc path: an armored key as its publisher serves it, a binary one armored."""
    if b"-----BEGIN PGP" in data:
        try:
            return data.decode("ascii")
        except UnicodeDecodeError:
            return armor(dearmor(data))
    return armor(data)


def describe(fingerprints, error):
    """'fingerprint X', 'fingerprints X, Y', or why the file holds no key."""
    if error:
        return "no key (%s)" % error
    return "fingerprint%s %s" % ("s" if len(fingerprints) > 1 else "", ", ".join(fingerprints))


def fetch_ok(url, status, has_body):
    """Whether fetch_url's answer is the file: HTTP 200, or a file:// URL that was read (no status)."""
    if not has_body:
        return False
    return status == 200 or (status is None and url.startswith("file:"))


def rejected_note(dest, disk_fingerprints, disk_error, rejected_path, check_mode):
    """What happened to the wrong file at dest, for the message ('' when dest held none)."""
    held = describe(disk_fingerprints, disk_error)
    if check_mode:
        return "%s holds %s; a run would move it to the backup directory, out of apt's reach. " % (dest, held)
    return "%s held %s; it was moved to %s, out of apt's reach. " % (dest, held, rejected_path)


def refusal(layer, url, fingerprints, error, expected, dest, fix, note=""):
    """The failure for a fetched key without the expected fingerprint (or no key at all)."""
    return ("%s: the key at %s has %s, expected %s; it was not written to %s, and apt does not trust it. %s"
            "Fix: %s" % (layer, url, describe(fingerprints, error), expected, dest, note, fix or DEFAULT_FIX))


def fetch_failure(layer, url, why, expected, dest, fix, note=""):
    """The failure for a key that could not be fetched."""
    return ("%s: cannot fetch the repository key %s: %s; nothing was written to %s. %sFix: %s (or put the key "
            "with fingerprint %s at %s by hand: a key that is right there is not fetched again)"
            % (layer, url, why, dest, note, fix or DEFAULT_FIX, expected, dest))


def diff(dest, before_fingerprints, before_error, before_exists, after_fingerprints):
    """--diff of the keyring: the fingerprints before and after, not the base64."""
    before = ""
    if before_exists:
        before = "%s\n" % describe(before_fingerprints, before_error)
    after = "%s\n" % describe(after_fingerprints, None) if after_fingerprints else ""
    return dict(before=before, after=after, before_header=dest, after_header=dest)
