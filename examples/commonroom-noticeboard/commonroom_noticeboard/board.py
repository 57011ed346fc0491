"""What the noticeboard does, once for the API and the page: post a notice (a member,
within the rate limit, recorded with its event in one transaction), remove one (a member
holding `notices.remove`, audited in the plugin's own words), list them, and find the
community a request is about (only one the actor may see)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.plugin import (Actor, ApiError, Application, CommunitiesService, Community, Row, Visibility, emit_tx,
                           invalid, iso)

from commonroom_noticeboard import store


@dataclass
class NoticeboardState:
    """The plugin's running parts, ``app.extensions["noticeboard"]``: its metric (cr_metrics)."""

    posted: Any = None


def communities(app: Application) -> CommunitiesService:
    service = app.service(CommunitiesService)
    assert service is not None  # cr_plugin_requires: communities
    return service


def notice_json(row: Row, *, author: bool = True) -> dict[str, Any]:
    """A notice; without `authorDid` for a reader who may not see the community's members."""
    out = {"id": str(row["id"]), "communityDid": row["community_did"], "authorDid": row["author_did"],
           "text": row["body"], "createdAt": row["created_at"]}
    if not author:
        del out["authorDid"]
    return out


async def visible_community(app: Application, ident: str, actor: Actor) -> tuple[Community, Visibility]:
    """The community `ident` (DID or handle) if `actor` may read its board (its records),
    else 404 as if unknown; with what `actor` may see of it (`Visibility.members`: who wrote
    each notice). The communities service decides both, as for its own pages."""
    community = await communities(app).community(ident)
    seen = None if community is None else await communities(app).visibility(
        community.did, actor.did or None, app_id=actor.app_id, proven=actor.proven)
    if community is None or seen is None or not seen.records:
        raise ApiError(404, "community_not_found", f"No community {ident[:200]} here.")
    return community, seen


async def post_notice(app: Application, community: Community, author_did: str, text: Any, *,
                      app_id: str | None) -> dict[str, Any]:
    settings = app.config.plugin("noticeboard")
    if not isinstance(text, str) or not text.strip():
        raise invalid("text", "must be a non-empty string")
    text = text.strip()
    if len(text) > settings.max_length:
        raise invalid("text", f"must be at most {settings.max_length} characters")
    if not (await communities(app).membership(community.did, author_did)).is_member:
        raise ApiError(403, "not_member", "Only members of the community may post notices.")
    decision = app.ratelimiter.hit(f"noticeboard:{community.did}:{author_did}", settings.posts_per_minute, 60.0)
    if not decision.allowed:
        raise ApiError(429, "rate_limited", f"At most {settings.posts_per_minute} notices a minute.",
                       headers=decision.headers())
    now = iso(app.clock.time())
    async with app.db.transaction("noticeboard.post") as tx:
        notice_id = await store.insert_notice_tx(tx, community_did=community.did, author_did=author_did,
                                                 body=text, app_id=app_id, now=now)
        row = await store.get_notice(tx, community.did, notice_id)
        assert row is not None
        await emit_tx(app, tx, "notice.posted", community_did=community.did, app_id=app_id, actor_did=author_did,
                      data={"noticeId": str(notice_id), "authorDid": author_did, "text": text})
        counter = app.extensions["noticeboard"].posted
        if counter is not None:
            tx.after_commit(counter.inc)
    return notice_json(row)


async def remove_notice(app: Application, community: Community, notice_id: str, actor: Actor) -> None:
    if not await communities(app).holds(actor, community.did, "notices.remove"):
        raise ApiError(403, "not_allowed", "Only admins, moderators and roles granting notices.remove "
                                           "may remove notices.")
    row = await store.get_notice(app.db, community.did, int(notice_id)) if notice_id.isdigit() else None
    if row is None:
        raise ApiError(404, "notice_not_found", "No such notice on this board.")
    async with app.db.transaction("noticeboard.remove") as tx:
        await store.delete_notice_tx(tx, row["id"])
        await communities(app).audit_tx(tx, community.did, actor, "notice.removed", "removed a notice by",
                                        target_did=row["author_did"], details={"noticeId": str(row["id"])})


async def latest(app: Application, community: Community, *, limit: int, before_id: int | None = None,
                 authors: bool = True) -> list[dict[str, Any]]:
    """The newest notices; `authors` False: without who wrote them (`notice_json`)."""
    return [notice_json(r, author=authors)
            for r in await store.latest(app.db, community.did, limit=limit, before_id=before_id)]
