"""Checking an X-Api-Key header."""

from __future__ import annotations

import hmac
from typing import Any

from daemon.http.base import ApiError, Principal
from plugins.apikeys.keys import KEY_RE, hash_key
from store import apps as apps_store
from store.db import VersionedCache

async def authenticate_api_key(app: Any, key: str) -> Principal:
    """The app owning `key`, or 401. Looked up by SHA-256 through a unique index (the hash,
    not the key, is what an attacker could time), then compared in constant time.

    Valid keys are remembered in a `VersionedCache`, which forgets everything as soon as
    this daemon commits anything: a key rotated or an app deactivated through the API is
    refused on the very next request; through the operator CLI (another process), within
    a second. Refusals are not cached."""
    if not KEY_RE.fullmatch(key):
        raise ApiError(401, "invalid_api_key", "The API key is malformed.")
    digest = hash_key(key)
    cache: VersionedCache = app.apps.key_cache  # this plugin's own service object (facade.py)
    version = cache.version(app.db)
    cached = cache.get(version, digest)
    if cached is not None:
        return cached
    row = await apps_store.find_by_key_hash(app.db, digest)
    if row is None or not hmac.compare_digest(bytes(row["key_hash"]), digest):
        raise ApiError(401, "invalid_api_key", "The API key is not valid.")
    if not row["active"]:
        raise ApiError(401, "app_deactivated", "The app of this API key is deactivated.")
    custom = None
    if row["rate_limit_requests"] is not None:
        custom = (int(row["rate_limit_requests"]), float(row["rate_limit_window_seconds"]))
    principal = Principal(kind="app", app_id=row["id"], app_owner_did=row["owner_did"], rate_limit=custom,
                          extra={"app_name": row["name"], "app_domain": row["domain"]})
    cache.put(version, digest, principal)
    return principal
