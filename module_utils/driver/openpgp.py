# -*- coding: utf-8 -*-
# Copyright (c) gpuhost contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fingerprints of OpenPGP public keys (armored or binary), without gpg. No Ansible imports.

Why not gpg: the repository key must be checked before apt ever trusts it, also in check mode and on
hosts where gnupg is not installed yet. A v4 fingerprint is the SHA-1 of 0x99, the two-byte body
length and the public-key packet body (RFC 4880 §12.2); v6 keys use SHA-256 over 0x9B and a four-byte
length (RFC 9580 §5.5.4).
"""
import base64
import binascii
import hashlib
import struct

PUBLIC_KEY_TAG = 6


class OpenPGPError(ValueError):
    """The data is not an OpenPGP public key."""


def dearmor(data):
    """Binary packets of an ASCII-armored block, or `data` unchanged when it is binary already."""
    if b"-----BEGIN PGP" not in data:
        return data
    lines = data.decode("ascii", "replace").splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("-----BEGIN PGP"))
    except StopIteration:
        raise OpenPGPError("no armor header")
    body, in_headers = [], True
    for line in lines[start + 1:]:
        if line.startswith("-----END PGP"):
            break
        if in_headers:
            if not line.strip():
                in_headers = False
            elif ":" not in line:
                in_headers = False
                body.append(line)
            continue
        if line.startswith("="):  # CRC-24 checksum line
            continue
        body.append(line.strip())
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise OpenPGPError("bad armor: %s" % exc)


def packets(data):
    """(tag, body) of each packet, old and new formats."""
    pos = 0
    while pos < len(data):
        header = data[pos]
        if not header & 0x80:
            raise OpenPGPError("not an OpenPGP packet at byte %d" % pos)
        if header & 0x40:  # new format
            tag = header & 0x3F
            pos += 1
            first = data[pos]
            if first < 192:
                length, pos = first, pos + 1
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif first == 255:
                length, pos = struct.unpack(">I", data[pos + 1:pos + 5])[0], pos + 5
            else:
                raise OpenPGPError("partial body lengths are not used in key packets")
        else:
            tag = (header >> 2) & 0x0F
            kind = header & 0x03
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                raise OpenPGPError("indeterminate packet length")
            length = int.from_bytes(data[pos + 1:pos + 1 + size], "big")
            pos += 1 + size
        body = data[pos:pos + length]
        if len(body) != length:
            raise OpenPGPError("truncated packet")
        yield tag, body
        pos += length


def fingerprint(body):
    """Upper-case hex fingerprint of a public-key packet body."""
    version = body[0] if body else None
    if version == 4:
        return hashlib.sha1(b"\x99" + struct.pack(">H", len(body)) + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + struct.pack(">I", len(body)) + body).hexdigest().upper()
    raise OpenPGPError("unsupported key version %r" % version)


def primary_fingerprints(data):
    """Fingerprints of the primary keys in a keyring file's bytes (subkeys are not listed)."""
    found = [fingerprint(body) for tag, body in packets(dearmor(data)) if tag == PUBLIC_KEY_TAG]
    if not found:
        raise OpenPGPError("no public key in the file")
    return found


def normalise(fpr):
    """A fingerprint as written by people (spaces, lower case, 0x) in canonical form."""
    text = (fpr or "").replace(" ", "").upper()
    return text[2:] if text.startswith("0X") else text


def crc24(data):
    """The armor checksum (RFC 4880 §6.1)."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(data):
    """ASCII-armored public key block of binary packets (what `gpg --armor --export` writes), as text."""
    body = base64.b64encode(data).decode("ascii")
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    checksum = base64.b64encode(struct.pack(">I", crc24(data))[1:]).decode("ascii")
    return "\n".join(["-----BEGIN PGP PUBLIC KEY BLOCK-----", ""] + lines
                     + ["=" + checksum, "-----END PGP PUBLIC KEY BLOCK-----", ""])
