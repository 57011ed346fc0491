"""What the reports plugin does, once for the API and the pages: a member reports a member
or a record (limits checked, recorded with its event and audit entry in one transaction),
a reviewer reads the queue and resolves a subject's open reports through the platform's
moderation commands, a reporter reads the status of their own reports.

Who sees what: the queue (reviewers) shows reporters, texts, notes and reviewers; a
reporter's own list shows status and outcome, never the reviewer or the note; the reported
person is told nothing here. Events go only to the apps that act for the admins
(`EventKind.audience`), with the reporter's DID and never the reviewer's."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from daemon.plugin import (Actor, ApiError, Application, CommunitiesService, Community, Row, emit_tx, invalid,
                           is_did, iso)
from daemon.plugin.atproto import is_at_uri, is_datetime, is_handle, normalize_handle, resolve_identity
from daemon.plugin.services import RecordsService

from plugins.reports import store
from plugins.reports.declarations import DAY, MAX_NOTE, MAX_TEXT, OUTCOMES, PER_DAY, REASONS

CAPABILITY = "reports.review"


def communities(app: Application) -> CommunitiesService:
    service = app.service(CommunitiesService)
    assert service is not None  # cr_plugin_requires: communities
    return service


def records(app: Application) -> RecordsService:
    service = app.service(RecordsService)
    assert service is not None  # cr_plugin_requires: records
    return service


async def visible_community(app: Application, ident: str, actor: Actor) -> Community:
    """The community `ident` (DID or handle) if `actor` may see it; else 404, as if unknown."""
    community = await communities(app).community(ident)
    if community is None or not await communities(app).may_see(actor, community.did):
        raise ApiError(404, "community_not_found", f"No community {ident[:200]} here.")
    return community


# ------------------------------------------------------------------ shapes


def own_json(row: Row) -> dict[str, Any]:
    """A report as its reporter sees it: no reviewer, no note."""
    return {"id": str(row["id"]), "communityDid": row["community_did"], "subject": row["subject"],
            "subjectKind": row["subject_kind"], "reason": row["reason"], "text": row["body"],
            "status": row["status"], "outcome": row["outcome"], "createdAt": row["created_at"],
            "resolvedAt": row["resolved_at"]}


def review_json(row: Row) -> dict[str, Any]:
    """A report as reviewers see it: who reported, and for a resolved one who did what."""
    return {**own_json(row), "reporterDid": row["reporter_did"], "subjectDid": row["subject_did"],
            "reviewerDid": row["reviewer_did"], "note": row["note"]}


def event_data(row: Row, status: str, outcome: str | None) -> dict[str, Any]:
    return {"reportId": str(row["id"]), "subject": row["subject"], "subjectKind": row["subject_kind"],
            "reason": row["reason"], "status": status, "outcome": outcome, "reporterDid": row["reporter_did"]}


def split_uri(uri: str) -> tuple[str, str, str]:
    """``at://<did>/<collection>/<rkey>`` → its three parts."""
    did, collection, rkey = uri[len("at://"):].split("/", 2)
    return did, collection, rkey


# ------------------------------------------------------------------ reporting


SUBJECT_WORDS = ("a member's handle (@alice.example.com) or DID, a link to a post of the community "
                 "(https://bsky.app/profile/…/post/…), or a record's at:// URI")
#: A post's web address on a Bluesky-style client: /profile/<handle or DID>/post/<rkey>
_POST_URL = re.compile(r"https://[A-Za-z0-9.-]+/profile/([^/?#]+)/post/([A-Za-z0-9._:~-]{1,512})/?(?:[?#].*)?")
_PROFILE_URL = re.compile(r"https://[A-Za-z0-9.-]+/profile/([^/?#]+)/?(?:[?#].*)?")


async def _did_of(app: Application, actor: str, typed: str) -> str:
    """The DID of a handle or DID someone typed (the site's profile cache first, then the
    network); 400 naming what was typed when it names nobody."""
    if is_did(actor):
        return actor
    handle = normalize_handle(actor)
    if not is_handle(handle):
        raise invalid("subject", f"{typed[:200]!r} is not a handle, a DID, a post's link or an at:// URI: "
                                 f"give {SUBJECT_WORDS}")
    did = await communities(app).person_did(handle)
    if did is None:
        try:
            did = (await resolve_identity(app, handle)).did
        except ApiError:
            raise ApiError(400, "unknown_handle", f"Nobody has the handle @{handle}: check its spelling.",
                           details=[{"field": "subject", "message": f"nobody has the handle @{handle}"}]) from None
    return did


async def subject_of(app: Application, community: Community, subject: Any) -> tuple[str, str, str]:
    """(subject, kind, the reported person's DID) of what a reporter gives: a member's handle
    (with or without @) or DID, a record's at:// URI (its authority a DID or a handle), or a
    post's web address on a Bluesky-style client (``/profile/<h>/post/<rkey>``, the record
    ``app.bsky.feed.post/<rkey>``); 400 naming what was understood, 404 for a record the
    community does not have."""
    if not isinstance(subject, str) or not subject.strip():
        raise invalid("subject", f"must be {SUBJECT_WORDS}")
    typed = subject.strip()
    text = typed.lstrip("@")
    post = _POST_URL.fullmatch(text)
    profile = _PROFILE_URL.fullmatch(text) if post is None else None
    if post is not None:
        owner = await _did_of(app, unquote(post.group(1)), typed)
        text = f"at://{owner}/app.bsky.feed.post/{post.group(2)}"
    elif profile is not None:
        text = unquote(profile.group(1))
    if text.startswith("at://"):
        parts = text[len("at://"):].split("/")
        if len(parts) == 3 and not is_did(parts[0]):
            parts[0] = await _did_of(app, parts[0], typed)
            text = "at://" + "/".join(parts)
        if not is_at_uri(text) or text.count("/") != 4:
            raise invalid("subject", f"{typed[:200]!r} is not the at:// URI of a record: give {SUBJECT_WORDS}")
        did, collection, rkey = split_uri(text)
        if did != community.did:
            raise ApiError(400, "subject_outside_community",
                           f"{typed[:200]} is a record of another account, not of this community's repository.")
        record = await records(app).record(community.did, collection, rkey)
        if record is None and post is not None:  # an app shows a community record as a post
            record = await records(app).record_by_rkey(community.did, rkey)
        if record is None:
            raise ApiError(404, "record_not_found", f"No record {collection}/{rkey} in this community.")
        return record["uri"], "record", record["authorDid"] or ""
    person = await _did_of(app, text, typed)
    if not (await communities(app).membership(community.did, person)).is_member:
        who = f"@{normalize_handle(text)} ({person})" if not is_did(text) else person
        raise ApiError(400, "subject_not_member", f"{who} is not a member of this community: only its members "
                                                  "and their records can be reported here.")
    return person, "member", person


async def create(app: Application, community: Community, reporter_did: str, body: dict[str, Any], *,
                 app_id: str | None) -> Row:
    await app.check_action("report.create", reporter_did, community_did=community.did, app_id=app_id)
    reason = body.get("reason")
    if reason not in REASONS:
        raise invalid("reason", f"must be one of: {', '.join(REASONS)}")
    text = body.get("text")
    if text is not None and not isinstance(text, str):
        raise invalid("text", "must be a string")
    text = (text or "").strip() or None
    if text is not None and len(text) > MAX_TEXT:
        raise invalid("text", f"must be at most {MAX_TEXT:,} characters")
    if not (await communities(app).membership(community.did, reporter_did)).is_member:
        raise ApiError(403, "not_member", "Only members of the community may report.")
    subject, kind, subject_did = await subject_of(app, community, body.get("subject"))
    if subject_did == reporter_did:
        raise ApiError(400, "cannot_report_self", "You cannot report yourself or your own records.")
    now = app.clock.time()
    async with app.db.transaction("reports.create") as tx:
        if await store.open_of(tx, community.did, reporter_did, subject) is not None:
            raise ApiError(409, "already_reported", "You already have an open report of this; a reviewer will "
                                                    "look at it.")
        recent = await store.made_since(tx, community.did, reporter_did, iso(now - DAY))
        if len(recent) >= PER_DAY:
            oldest = datetime.fromisoformat(recent[-PER_DAY]["created_at"].replace("Z", "+00:00")).timestamp()
            wait = max(1, math.ceil(oldest + DAY - now))
            raise ApiError(429, "rate_limited", f"At most {PER_DAY} reports a day in one community.",
                           headers={"Retry-After": str(wait)})
        report_id = await store.insert_tx(tx, community_did=community.did, reporter_did=reporter_did,
                                          subject=subject, subject_kind=kind, subject_did=subject_did,
                                          reason=reason, body=text, app_id=app_id, now=iso(now))
        row = await store.get(tx, community.did, report_id)
        assert row is not None
        await emit_tx(app, tx, "report.created", community_did=community.did, app_id=app_id,
                      actor_did=reporter_did, data=event_data(row, "open", None))
        await communities(app).audit_tx(tx, community.did, Actor(reporter_did, app_id), "report.created",
                                        f"reported ({reason})", target_did=subject_did,
                                        details={"reportId": str(report_id), "subject": subject})
    return row


# ------------------------------------------------------------------ reviewing


async def require_reviewer(app: Application, community: Community, actor: Actor) -> None:
    if actor.app_id is not None and not await communities(app).acts_for_admins(community.did, actor.app_id):
        raise ApiError(403, "app_not_trusted", f"App {actor.app_id} may not act for the admins of "
                                               f"{community.did}, so it may not review reports.")
    if not await communities(app).holds(actor, community.did, CAPABILITY):
        raise ApiError(403, "not_allowed", "Reviewing reports needs the capability reports.review "
                                           "(admins, moderators, or a role granting it).")


async def queue(app: Application, community: Community, *, limit: int = 500) -> list[dict[str, Any]]:
    """Open reports grouped by subject, the subject with the oldest report first."""
    groups: dict[str, dict[str, Any]] = {}
    for row in await store.open_reports(app.db, community.did, limit=limit):
        group = groups.setdefault(row["subject"], {
            "subject": row["subject"], "subjectKind": row["subject_kind"], "subjectDid": row["subject_did"],
            "count": 0, "oldestAt": row["created_at"], "firstReportId": str(row["id"]), "reasons": {},
            "reports": []})
        group["count"] += 1
        group["reasons"][row["reason"]] = group["reasons"].get(row["reason"], 0) + 1
        group["reports"].append(review_json(row))
    return list(groups.values())


def collection_words(collection: str) -> str:
    """A collection in words for reviewers: ``app.bsky.feed.post`` → "post"."""
    known = {"app.bsky.feed.post": "post", "app.bsky.feed.like": "like", "app.bsky.feed.repost": "repost",
             "app.bsky.graph.follow": "follow"}
    if collection in known:
        return known[collection]
    *authority, name = collection.split(".")
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).lower()
    return f"{words} ({'.'.join(authority)})"


async def record_previews(app: Application, community: Community, groups: list[dict[str, Any]]) -> None:
    """Give each record group of the queue what a reviewer needs to decide: ``preview`` with
    the collection in words, the record's text fields (as the index holds them), and a link to
    it on a Bluesky-style client (which shows a community's records by their key)."""
    for group in groups:
        if group["subjectKind"] != "record":
            continue
        _, collection, rkey = split_uri(group["subject"])
        record = await records(app).record(community.did, collection, rkey)
        value = (record or {}).get("value") or {}
        group["preview"] = {
            "collection": collection, "words": collection_words(collection), "missing": record is None,
            "link": f"https://bsky.app/profile/{community.handle}/post/{rkey}"
            if collection == "app.bsky.feed.post" else None,
            "fields": [(k, v[:1000]) for k, v in value.items()
                       if isinstance(v, str) and k not in ("$type", "createdAt") and v.strip()][:6]}


async def recent_resolved(app: Application, community: Community, *, limit: int = 50) -> list[dict[str, Any]]:
    return [review_json(r) for r in await store.resolved(app.db, community.did, limit=limit)]


async def resolve(app: Application, community: Community, report_id: str, actor: Actor, body: dict[str, Any]) -> dict:
    """Resolve every open report of the subject of `report_id` with one action and note."""
    await require_reviewer(app, community, actor)
    action = body.get("action")
    if action not in OUTCOMES:
        raise invalid("action", f"must be one of: {', '.join(OUTCOMES)}")
    note = body.get("note")
    if note is not None and not isinstance(note, str):
        raise invalid("note", "must be a string")
    note = (note or "").strip() or None
    if note is not None and len(note) > MAX_NOTE:
        raise invalid("note", f"must be at most {MAX_NOTE:,} characters")
    expires_at = body.get("expiresAt")
    if expires_at is not None:
        if action != "ban_member" or not is_datetime(expires_at):
            raise invalid("expiresAt", "is only for ban_member, as an ISO 8601 date-time with a time zone")
        # the ban compares instants as UTC strings: normalise (+02:00 and the like)
        expires_at = iso(datetime.fromisoformat(expires_at.replace("Z", "+00:00")).timestamp())
    row = await store.get(app.db, community.did, int(report_id)) if report_id.isdigit() else None
    if row is None:
        raise ApiError(404, "report_not_found", "No such report in this community.")
    if row["status"] != "open":
        raise ApiError(409, "report_resolved", "This report is already resolved.")
    status, outcome = OUTCOMES[action]
    # the moderation command first (each checks its own capability and writes its own audit entry)
    if action == "remove_record":
        if row["subject_kind"] != "record":
            raise invalid("action", "remove_record is for a reported record")
        _, collection, rkey = split_uri(row["subject"])
        try:
            await records(app).delete_record(community.did, collection, rkey, actor, permitted=True)
        except ApiError as exc:
            if exc.code != "record_not_found":
                raise
            # gone already (its author deleted it): the report is settled all the same
    elif action in ("remove_member", "ban_member"):
        target = row["subject_did"]
        if not target:
            raise invalid("action", "the record has no known author to remove or ban")
        if action == "remove_member":
            await communities(app).remove_member(community.did, target, actor, note)
        else:
            await communities(app).ban(community.did, target, actor, reason=note, expires_at=expires_at)
    now = iso(app.clock.time())
    resolved_ids = []
    async with app.db.transaction("reports.resolve") as tx:
        for r in await store.open_for_subject(tx, community.did, row["subject"]):
            if await store.resolve_tx(tx, r["id"], status=status, outcome=outcome, note=note,
                                      reviewer_did=actor.did, now=now):
                resolved_ids.append(str(r["id"]))
                await emit_tx(app, tx, "report.resolved", community_did=community.did, app_id=actor.app_id,
                              actor_did=None, data=event_data(r, status, outcome))
        await communities(app).audit_tx(
            tx, community.did, actor, "report.resolved",
            (f"dismissed {len(resolved_ids)} report(s) about" if action == "dismiss" else
             f"acted on {len(resolved_ids)} report(s) ({outcome.replace('_', ' ')}) about"),
            target_did=row["subject_did"] or None, reason=note,
            details={"reportIds": resolved_ids, "subject": row["subject"], "decision": outcome})
    return {"subject": row["subject"], "status": status, "outcome": outcome, "resolvedReportIds": resolved_ids}


async def mine(app: Application, community: Community, reporter_did: str, *, limit: int = 100) -> list[dict]:
    return [own_json(r) for r in await store.of_reporter(app.db, community.did, reporter_did, limit=limit)]
