"""API keys: their format (``cr_`` + 64 lowercase hex characters from a CSPRNG), their
hash, and the check of a request's X-Api-Key header (the `cr_authenticate` hook)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from daemon.plugin import ApiError, Principal, hookimpl
from daemon.plugin.storage import AppsTable, VersionedCache

KEY_PREFIX = "cr_"
KEY_RE = re.compile(r"cr_[0-9a-f]{64}")  # always fullmatch


def new_key() -> str:
    return KEY_PREFIX + secrets.token_hex(32)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def new_app_id() -> str:
    return "app_" + secrets.token_hex(8)


@hookimpl(tryfirst=True)
def cr_authenticate(handler: Any) -> Any:
    """Registered with the plugin's package (imported by its __init__), beside the check."""
    key = handler.request.headers.get("X-Api-Key")
    if key is None:
        return None
    app = handler.app
    cache: VersionedCache = app.apps.key_cache  # this plugin's own service object (service.py)
    version = cache.version(app.db)
    known = cache.get(version, key)
    return known if known is not None else authenticate_api_key(app, key, version)


async def authenticate_api_key(app: Any, key: str, version: Any) -> Principal:
    """The app owning `key`, or 401. Looked up by SHA-256 through a unique index (the hash,
    not the key, is what an attacker could time), then compared in constant time.

    Valid keys are remembered in a `VersionedCache` (in memory only, by the key itself: a
    repeat costs one dict lookup, keyed by Python's per-process seeded string hash, not a
    SHA-256), which forgets everything as soon as this daemon commits anything: a key
    rotated or an app deactivated through the API is refused on the very next request;
    through the operator CLI (another process), within a second. Refusals are not cached.
    `cr_authenticate` answers a remembered key itself, with no coroutine; `version` is the
    cache's version it read (`VersionedCache.version`)."""
    cache: VersionedCache = app.apps.key_cache
    if not KEY_RE.fullmatch(key):
        raise ApiError(401, "invalid_api_key", "The API key is malformed.")
    digest = hash_key(key)
    row = await AppsTable.by_key_hash(app.db, digest)
    if row is None or not hmac.compare_digest(bytes(row["key_hash"]), digest):
        raise ApiError(401, "invalid_api_key", "The API key is not valid.")
    if not row["active"]:
        raise ApiError(401, "app_deactivated", "The app of this API key is deactivated.")
    custom = None
    if row["rate_limit_requests"] is not None:
        custom = (int(row["rate_limit_requests"]), float(row["rate_limit_window_seconds"]))
    principal = Principal(kind="app", app_id=row["id"], app_owner_did=row["owner_did"], rate_limit=custom,
                          extra={"app_name": row["name"], "app_domain": row["domain"]})
    cache.put(version, key, principal)
    return principal
