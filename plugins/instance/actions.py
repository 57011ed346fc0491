"""What an operator does to people and communities instance-wide (issue 38, items 3 and 4):
ban and unban a DID or a handle domain, suspend and lift a community, remove one from the
index. The console's forms and the command line call these; each lands with its entry in
the instance audit log, in the same transaction."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from daemon.plugin import ApiError, iso, is_did
from daemon.plugin.security import end_sessions_of
from plugins.instance.policy import ban_in_force  # noqa: F401 (the console and tests ask it here)
from plugins.instance import audit, store

log = logging.getLogger("commonroom.instance")

MAX_REASON = 500
#: Memberships one ban ends at most in one pass (a person in more runs the ban again).
MAX_ENDED = 1000
_DOMAIN = re.compile(r"^\*\.(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z][a-z0-9-]{0,62}$")


def ban_subject(value: Any) -> tuple[str, str]:
    """(subject, kind) of what an operator bans: a DID, or a handle domain `*.spam.example`."""
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, "invalid_request", "subject: a DID (did:plc:…) or a handle domain (*.spam.example)")
    value = value.strip()
    if value.startswith("did:"):
        if not is_did(value):
            raise ApiError(400, "invalid_request", f"subject: not a DID: {value}")
        return value, "did"
    value = value.lower().lstrip("@")
    if not _DOMAIN.match(value):
        raise ApiError(400, "invalid_request",
                       f"subject: not a DID or a handle domain written *.domain (e.g. *.spam.example): {value}")
    return value, "domain"


def reason_text(value: Any, *, required: bool) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if required and not text:
        raise ApiError(400, "invalid_request", "reason: say why (it is kept in the instance audit log)")
    if len(text) > MAX_REASON:
        raise ApiError(400, "invalid_request", f"reason: at most {MAX_REASON} characters")
    return text


def expiry(value: Any, now: float) -> str | None:
    """None (until lifted), `Nd` (days from now), an ISO 8601 time in the future, or a date:
    the ban's last day (UTC)."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ApiError(400, "invalid_request", "expires: a number of days (30d) or a date (2027-01-31)")
    value = value.strip()
    days = re.fullmatch(r"(\d{1,5})d", value)
    if days:
        if int(days.group(1)) < 1:
            raise ApiError(400, "invalid_request", "expires: at least 1d")
        return iso(now + int(days.group(1)) * 86400)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, "invalid_request",
                       f"expires: a number of days (30d) or a date (2027-01-31), not {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        when += timedelta(days=1)   # a date is the ban's last day (UTC): it ends at the next midnight
    stamp = when.timestamp()
    if stamp <= now:
        raise ApiError(400, "invalid_request", "expires: must be in the future")
    return iso(stamp)


def ban_json(row: Any, now: str) -> dict[str, Any]:
    return {"subject": row["subject"], "kind": row["kind"], "reason": row["reason"],
            "expiresAt": row["expires_at"], "endMemberships": bool(row["end_memberships"]),
            "inForce": row["expires_at"] is None or row["expires_at"] > now,
            "bannedBy": row["operator_did"], "createdAt": row["created_at"]}


# ------------------------------------------------------------------ bans


async def ban(app: Any, operator_did: str, subject: Any, *, reason: Any, expires: Any = None,
              end_memberships: bool = False, via: str = "web") -> dict[str, Any]:
    """Ban on the instance (again: the new reason and expiry replace the old). A banned DID
    is signed out of the site everywhere (``signedOut``: how many sessions ended). With
    `end_memberships` (a DID only) every membership ends with a ``member.removed`` event
    and every pending join request is declined (``member.rejected``);
    one that could not end (the primary admin of a community, a PDS that failed) is named
    in ``notEnded``, and banning again retries them."""
    subject, kind = ban_subject(subject)
    reason = reason_text(reason, required=True)
    expires_at = expiry(expires, app.clock.time())
    if end_memberships and kind != "did":
        raise ApiError(400, "invalid_request",
                       "endMemberships: only for a DID (a domain's people are refused from now on)")
    if app.config.plugin("instance").is_operator(subject):
        raise ApiError(409, "cannot_ban_operator", "An operator cannot be banned; remove them from "
                       "instance.operators in config.yaml first.")
    now = app.clock.iso_now()
    async with app.db.transaction("instance.ban") as tx:
        await store.put_ban_tx(tx, subject=subject, kind=kind, reason=reason, expires_at=expires_at,
                               end_memberships=end_memberships, operator_did=operator_did, now=now)
        await audit.record_tx(tx, now, operator_did, "person.ban", subject,
                              {"reason": reason, "expiresAt": expires_at, "endMemberships": end_memberships},
                              via=via)
    out: dict[str, Any] = {"subject": subject, "kind": kind, "reason": reason, "expiresAt": expires_at,
                           "endMemberships": end_memberships, "ended": [], "notEnded": []}
    if kind == "did":
        # Signed out of this site at once (a domain's people are refused at their next
        # sign-in, and the actions docs/operations.md lists are refused meanwhile).
        try:
            out["signedOut"] = await end_sessions_of(app, subject)
        except Exception:  # noqa: BLE001 - the ban holds; ending memberships must still run
            log.exception("instance ban: could not end the sessions of %s", subject)
            out["signedOut"] = None
    if end_memberships:
        ended, not_ended = await end_memberships_of(app, subject, operator_did, reason)
        out.update(ended=ended, notEnded=not_ended)
    return out


async def end_memberships_of(app: Any, did: str, operator_did: str, reason: str) -> tuple[list[str], list[dict]]:
    """Decline each of `did`'s pending join requests, then end each of their memberships,
    through the communities service (events, audit). Requests first: one approved while
    this runs is then a membership when the memberships are read, and ends with them."""
    communities = app.communities
    ended: list[str] = []
    not_ended: list[dict] = []
    seen: set[str] = set()
    while True:  # the service lists 100 requests at a time
        batch = [row for row in await communities.requests_of(did) if row["did"] not in seen]
        if not batch:
            break
        for row in batch:
            seen.add(row["did"])
            await _end_one(communities, row, did, operator_did, reason, ended, not_ended)
    for row in await communities.memberships_of(did, limit=MAX_ENDED, after_id=None):
        if row["did"] not in ended:
            await _end_one(communities, row, did, operator_did, reason, ended, not_ended)
    return ended, not_ended


async def _end_one(communities: Any, row: Any, did: str, operator_did: str, reason: str,
                   ended: list[str], not_ended: list[dict]) -> None:
    try:
        await communities.end_membership(row["did"], did, by=operator_did, reason=f"banned on the instance: {reason}")
        ended.append(row["did"])
    except ApiError as exc:
        if exc.code != "not_member":  # not_member: ended meanwhile
            not_ended.append({"community": row["did"], "name": row["display_name"], "error": exc.code,
                              "message": exc.message})


async def unban(app: Any, operator_did: str, subject: Any, *, via: str = "web") -> dict[str, Any]:
    subject, _ = ban_subject(subject)
    now = app.clock.iso_now()
    async with app.db.transaction("instance.unban") as tx:
        if not await store.delete_ban_tx(tx, subject):
            raise ApiError(404, "not_banned", f"{subject} is not banned on this instance.")
        await audit.record_tx(tx, now, operator_did, "person.unban", subject, via=via)
    return {"subject": subject, "status": "unbanned"}


# ------------------------------------------------------------------ communities


async def _known(app: Any, community_did: Any) -> Any:
    if not isinstance(community_did, str) or not is_did(community_did):
        raise ApiError(400, "invalid_request", "community: a community's DID")
    row = await app.communities.community_row(community_did)
    if row is None:
        raise ApiError(404, "community_not_found", f"{community_did} is not a community of this instance.")
    return row


async def suspend(app: Any, operator_did: str, community_did: Any, *, reason: Any,
                  via: str = "web") -> dict[str, Any]:
    """Suspend (again: the new reason replaces the old). The reason is public."""
    await _known(app, community_did)
    reason = reason_text(reason, required=True)
    now = app.clock.iso_now()
    async with app.db.transaction("instance.suspend") as tx:
        await store.suspend_tx(tx, community_did, reason, operator_did, now)
        await audit.record_tx(tx, now, operator_did, "community.suspend", community_did, {"reason": reason}, via=via)
    return {"community": community_did, "status": "suspended", "reason": reason, "since": now}


async def lift(app: Any, operator_did: str, community_did: Any, *, via: str = "web") -> dict[str, Any]:
    if not isinstance(community_did, str) or not is_did(community_did):
        raise ApiError(400, "invalid_request", "community: a community's DID")
    now = app.clock.iso_now()
    async with app.db.transaction("instance.lift") as tx:
        if not await store.lift_tx(tx, community_did):
            raise ApiError(404, "not_suspended", f"{community_did} is not suspended.")
        await audit.record_tx(tx, now, operator_did, "community.lift", community_did, via=via)
    return {"community": community_did, "status": "active"}


async def remove(app: Any, operator_did: str, community_did: Any, *, reason: Any,
                 via: str = "web") -> dict[str, Any]:
    """Remove from the index (the account is not deleted); the audit entry is written once
    the index is gone (a removal that failed before leaves nothing to audit and may be run
    again)."""
    await _known(app, community_did)
    reason = reason_text(reason, required=True)
    answer = await app.communities.remove_from_index(community_did, by=operator_did, reason=reason)
    now = app.clock.iso_now()
    async with app.db.transaction("instance.remove") as tx:
        await store.lift_tx(tx, community_did)  # nothing left to suspend
        await audit.record_tx(tx, now, operator_did, "community.remove", community_did, {"reason": reason}, via=via)
    return answer
