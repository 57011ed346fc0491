"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

The secret is ``whsec_`` + base64 of 32 random bytes; the HMAC key is the decoded bytes.
Each request carries ``webhook-id`` (the event id, the same on every retry and
redelivery), ``webhook-timestamp`` (unix seconds of this attempt) and
``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``. While a
rotated-out secret is still honoured, the header lists one signature per secret,
separated by a space. ``X-Webhook-Signature`` (spec §6) carries the same value.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("not a webhook secret")
    return base64.b64decode(secret[len(SECRET_PREFIX):])


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def signed_headers(keys: list[bytes], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The signature headers for one attempt; `keys` newest first."""
    value = " ".join(signature(k, msg_id, timestamp, body) for k in keys)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": value,
        "X-Webhook-Signature": value,
    }
