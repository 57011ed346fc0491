"""API key format and hashing: ``cr_`` + 64 lowercase hex characters from a CSPRNG."""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "cr_"
KEY_RE = re.compile(r"cr_[0-9a-f]{64}")  # always fullmatch


def new_key() -> str:
    return KEY_PREFIX + secrets.token_hex(32)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_app_id() -> str:
    return "app_" + secrets.token_hex(8)
