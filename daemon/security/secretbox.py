"""Secrets at rest: AES-256-GCM with a key id, so the key can be rotated.

A sealed value is text: ``v1.<key id>.<base64url(nonce || ciphertext+tag)>``. The
associated data binds a ciphertext to where it is stored (table, column, row), so a
value copied to another row does not decrypt.
"""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class SecretBoxError(Exception):
    """A sealed value cannot be opened (unknown key id, tampered, wrong context)."""


def parse_key(text: str) -> bytes:
    """A key is 32 bytes written as 64 hex characters or as base64 (either alphabet)."""
    text = text.strip()
    try:
        if len(text) == 64:
            return bytes.fromhex(text)
    except ValueError:
        pass
    try:
        raw = base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != 32:
        raise ValueError("a secret key must be 32 bytes, written as 64 hex characters or base64")
    return raw


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"commonroom-key-id" + key).hexdigest()[:8]


class SecretBox:
    def __init__(self, current: bytes, previous: tuple[bytes, ...] = ()) -> None:
        self._current_id = key_id(current)
        self._keys = {key_id(k): AESGCM(k) for k in (*previous, current)}

    @property
    def current_key_id(self) -> str:
        return self._current_id

    def seal(self, plaintext: str | bytes, context: str) -> str:
        data = plaintext.encode() if isinstance(plaintext, str) else plaintext
        nonce = os.urandom(12)
        ct = self._keys[self._current_id].encrypt(nonce, data, context.encode())
        return f"v1.{self._current_id}.{base64.urlsafe_b64encode(nonce + ct).decode().rstrip('=')}"

    def open_bytes(self, sealed: str, context: str) -> bytes:
        try:
            version, kid, body = sealed.split(".", 2)
        except ValueError:
            raise SecretBoxError("not a sealed value") from None
        if version != "v1" or kid not in self._keys:
            raise SecretBoxError(f"no key with id {kid!r} (was the secret key changed?)")
        try:
            # binascii.Error (bad padding) and non-ASCII text are ValueErrors: a damaged
            # value is this module's error, like any other that cannot be opened.
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except ValueError:
            raise SecretBoxError("sealed value is not base64url") from None
        if len(raw) < 12 + 16:
            raise SecretBoxError("sealed value is too short")
        try:
            return self._keys[kid].decrypt(raw[:12], raw[12:], context.encode())
        except Exception:
            raise SecretBoxError("sealed value failed authentication") from None

    def open(self, sealed: str, context: str) -> str:
        return self.open_bytes(sealed, context).decode()

    def needs_reseal(self, sealed: str) -> bool:
        return not sealed.startswith(f"v1.{self._current_id}.")
