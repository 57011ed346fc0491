"""Browser sessions: the `sid` cookie (HttpOnly) and the `csrf-token` cookie (readable by
scripts, sent back in the `x-csrf-token` header). The database keeps only a SHA-256 of
the sid, so a copy of the database does not hand out live sessions."""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import TYPE_CHECKING, Any, NamedTuple

from daemon.base import ApiError, Principal
from daemon.http.base import SID_COOKIE
from store import sessions as sessions_store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

CSRF_COOKIE = "csrf-token"
TOUCH_EVERY_SECONDS = 60.0


def hash_sid(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


class NewSession(NamedTuple):
    """What `create_session` returns: the cookie values, and the id the session is known by
    (`Principal.session_id`, what `end_session` takes); the sid itself is never stored."""
    sid: str
    csrf: str
    id_hash: str


async def create_session(app: "Application", did: str, handle: str | None) -> NewSession:
    """A new session for `did`: returns (sid, csrf token, session id hash)."""
    sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
    now = app.clock.time()
    async with app.db.transaction("sessions.create") as tx:
        await sessions_store.create_session_tx(
            tx, id_hash=hash_sid(sid), did=did, handle=handle, csrf_token=csrf, now=now,
            expires_at=now + app.config.sessions.lifetime_seconds)
    return NewSession(sid, csrf, hash_sid(sid))


def set_session_cookies(handler: Any, sid: str, csrf: str) -> None:
    """Send the session's two cookies (`Secure` when the site's base URL is https)."""
    secure = handler.app.config.server.base_url.startswith("https://")
    max_age = handler.app.config.sessions.lifetime_seconds
    handler.set_cookie(SID_COOKIE, sid, path="/", httponly=True, samesite="Lax", secure=secure,
                       expires_days=max_age / 86400)
    handler.set_cookie(CSRF_COOKIE, csrf, path="/", httponly=False, samesite="Lax", secure=secure,
                       expires_days=max_age / 86400)


def clear_session_cookies(handler: Any) -> None:
    """Tell the browser to drop the session's cookies."""
    handler.clear_cookie(SID_COOKIE, path="/")
    handler.clear_cookie(CSRF_COOKIE, path="/")


async def authenticate_session(app: "Application", sid: str) -> Principal:
    """The `Principal` of a live session (its idle clock touched), or 401 `session_invalid` /
    `session_expired`."""
    id_hash = hash_sid(sid)
    row = await sessions_store.get_session(app.db, id_hash)
    now = app.clock.time()
    if row is None:
        raise ApiError(401, "session_invalid", "The session is unknown or has ended; log in again.")
    idle_cutoff = now - app.config.sessions.idle_timeout_seconds
    if row["expires_at"] <= now or row["last_seen_at"] <= idle_cutoff:
        if not app.read_only:  # a follower leaves the row to the primary's clean-up
            async with app.db.transaction("sessions.expire") as tx:
                await sessions_store.delete_session_tx(tx, id_hash)
        raise ApiError(401, "session_expired", "The session has expired; log in again.")
    # A follower skips the touch: the idle timeout counts from the primary's last one.
    if now - row["last_seen_at"] >= TOUCH_EVERY_SECONDS and not app.read_only:
        async with app.db.transaction("sessions.touch") as tx:
            await sessions_store.touch_session_tx(tx, id_hash, now)
    return Principal(kind="session", did=row["did"], handle=row["handle"], session_id=id_hash,
                     csrf_token=row["csrf_token"])


async def end_session(app: "Application", id_hash: str) -> None:
    """End the session known by `id_hash` (`Principal.session_id`); ending one already gone is no error."""
    async with app.db.transaction("sessions.delete") as tx:
        await sessions_store.delete_session_tx(tx, id_hash)


async def end_sessions_of(app: "Application", did: str) -> int:
    """Sign `did` out everywhere (an operator's ban): their sessions' OAuth grants are
    forgotten and every session ends, each in one local transaction, so their cookies stop
    working before this returns; the grants' tokens are revoked at their PDS in the
    background (best effort: a PDS that stalls delays nothing). Returns how many sessions
    ended. A session begun afterwards is the login's business."""
    ids = await sessions_store.session_ids_of(app.db, did)
    if not ids:
        return 0
    oauth = app.oauth  # the OAuthService (daemon/runtime/services.py), None without the oauth plugin
    if oauth is not None:
        await oauth.sign_out_all(ids)
    async with app.db.transaction("sessions.delete_all") as tx:
        return await sessions_store.delete_sessions_of_tx(tx, did)


async def delete_expired_sessions(app: "Application") -> int:
    """Remove sessions past their lifetime or idle timeout; returns how many."""
    now = app.clock.time()
    async with app.db.transaction("sessions.expire_all") as tx:
        return await sessions_store.delete_expired_tx(
            tx, now, now - app.config.sessions.idle_timeout_seconds)


async def expire_sessions_pass(app: "Application") -> None:
    """One pass of the hourly clean-up (see `Application.spawn_periodic`)."""
    removed = await delete_expired_sessions(app)
    if removed:
        logging.getLogger(__name__).info("expired %d session(s)", removed)
