"""The handover bundle's sealed format: a JSON envelope whose payload is encrypted under a
passphrase and authenticated (scrypt + AES-256-GCM), version 1.

Envelope (UTF-8 JSON, one object)::

    {"format": "commonroom-handover", "version": 1,
     "kdf": {"name": "scrypt", "n": 32768, "r": 8, "p": 1, "salt": "<b64, 16 bytes>"},
     "cipher": "AES-256-GCM", "nonce": "<b64, 12 bytes>",
     "ciphertext": "<b64: the payload's JSON, encrypted, with the 16-byte tag>"}

The associated data is the envelope without `ciphertext`, serialised canonically (sorted
keys, no spaces), so a change to any header field, the nonce, the salt or the ciphertext
makes opening fail. AES-GCM cannot tell a wrong passphrase from a changed bundle: both are
refused with one error (`bundle_refused`). The KDF's cost is bounded on opening (a bundle
cannot make this service spend unbounded memory or time), and so is the bundle's size.

This module knows nothing of communities: `seal` takes any JSON-serialisable payload.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

FORMAT = "commonroom-handover"
VERSION = 1
CIPHER = "AES-256-GCM"
SCRYPT_N = 2 ** 15
SCRYPT_R = 8
SCRYPT_P = 1
# Opening accepts at most this cost (scrypt memory is 128 * n * r bytes: 64 MiB here).
MAX_SCRYPT_N = 2 ** 16
MAX_SCRYPT_R = 8
MAX_SCRYPT_P = 4
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
# Passphrases shown to the primary admin: 20 random bytes, base32 in groups of four.
PASSPHRASE_BYTES = 20
MIN_PASSPHRASE_CHARS = 12


class BundleError(ValueError):
    """A bundle that cannot be opened. `code` is the API's error code; the message says
    why in words an operator understands."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def new_passphrase() -> str:
    """A passphrase of 160 random bits, easy to copy: 32 base32 letters in groups of 4."""
    text = base64.b32encode(secrets.token_bytes(PASSPHRASE_BYTES)).decode("ascii").rstrip("=")
    return "-".join(text[i:i + 4] for i in range(0, len(text), 4))


def _normal(passphrase: str) -> bytes:
    # Tolerate what copying does to a passphrase: case, spaces, dashes.
    cleaned = "".join(ch for ch in passphrase if ch not in " -\t\r\n").upper()
    if len(cleaned) < MIN_PASSPHRASE_CHARS:
        raise BundleError("bad_passphrase",
                          f"a passphrase has at least {MIN_PASSPHRASE_CHARS} characters")
    return cleaned.encode("utf-8")


def _key(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(_normal(passphrase))


def _aad(header: dict[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")


def seal(payload: Any, passphrase: str) -> bytes:
    """The payload, encrypted and authenticated under the passphrase, as envelope bytes."""
    salt = os.urandom(16)
    nonce = os.urandom(12)
    header = {"format": FORMAT, "version": VERSION,
              "kdf": {"name": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P,
                      "salt": base64.b64encode(salt).decode("ascii")},
              "cipher": CIPHER, "nonce": base64.b64encode(nonce).decode("ascii")}
    key = _key(passphrase, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    plain = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")
    ciphertext = AESGCM(key).encrypt(nonce, plain, _aad(header))
    envelope = dict(header, ciphertext=base64.b64encode(ciphertext).decode("ascii"))
    return json.dumps(envelope, indent=1).encode("utf-8") + b"\n"


def _b64(value: Any, what: str, length: int | None = None) -> bytes:
    if not isinstance(value, str):
        raise BundleError("bundle_malformed", f"the bundle's {what} is missing")
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise BundleError("bundle_malformed", f"the bundle's {what} is not base64") from None
    if length is not None and len(raw) != length:
        raise BundleError("bundle_malformed", f"the bundle's {what} has the wrong length")
    return raw


def _int(kdf: dict[str, Any], name: str, low: int, high: int) -> int:
    value = kdf.get(name)
    if type(value) is not int or not low <= value <= high:
        raise BundleError("bundle_unsupported",
                          f"the bundle's scrypt {name} must be between {low} and {high}")
    return value


def open_bundle(data: bytes, passphrase: str) -> Any:
    """The payload sealed in `data`, or BundleError: `bundle_too_large`,
    `bundle_malformed` (not a bundle), `bundle_unsupported` (another format version or a KDF
    cost above the limits), `bad_passphrase` (too short to be one) or `bundle_refused`
    (a wrong passphrase or a changed bundle: the two cannot be told apart)."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise BundleError("bundle_too_large",
                          f"a handover bundle is at most {MAX_BUNDLE_BYTES} bytes")
    try:
        envelope = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BundleError("bundle_malformed", "this is not a handover bundle (not JSON)") from None
    if not isinstance(envelope, dict) or envelope.get("format") != FORMAT:
        raise BundleError("bundle_malformed", "this is not a Commonroom handover bundle")
    if envelope.get("version") != VERSION:
        raise BundleError("bundle_unsupported",
                          f"bundle format version {envelope.get('version')!r} is not supported "
                          f"(this service reads version {VERSION})")
    if envelope.get("cipher") != CIPHER:
        raise BundleError("bundle_unsupported", f"the bundle's cipher must be {CIPHER}")
    kdf = envelope.get("kdf")
    if not isinstance(kdf, dict) or kdf.get("name") != "scrypt":
        raise BundleError("bundle_unsupported", "the bundle's key derivation must be scrypt")
    n = _int(kdf, "n", 2 ** 14, MAX_SCRYPT_N)
    if n & (n - 1):
        raise BundleError("bundle_unsupported", "the bundle's scrypt n must be a power of two")
    r = _int(kdf, "r", 1, MAX_SCRYPT_R)
    p = _int(kdf, "p", 1, MAX_SCRYPT_P)
    salt = _b64(kdf.get("salt"), "salt", 16)
    nonce = _b64(envelope.get("nonce"), "nonce", 12)
    ciphertext = _b64(envelope.get("ciphertext"), "ciphertext")
    header = {k: v for k, v in envelope.items() if k != "ciphertext"}
    key = _key(passphrase, salt, n, r, p)
    try:
        plain = AESGCM(key).decrypt(nonce, ciphertext, _aad(header))
    except InvalidTag:
        raise BundleError("bundle_refused",
                          "the passphrase is wrong or the bundle was changed; nothing was "
                          "imported") from None
    return json.loads(plain)
