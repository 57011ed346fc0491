"""Creation requests (`instance.creation: approval`): a person's creation, from the site's
form or an app, is held (`cr_hold_action`) as a request the operators approve or decline in
the console or on the command line. An approved request is created by the service for the
person, who is its primary admin, with the fields they gave; the instance audit log says
which operator decided. The person sees each request's state on their home page
(`cr_page_notes`), never who decided.

Approving is retried safely: the request is marked approved (and audited) first, then the
community is created; a creation that fails leaves the request approved with the error, and
approving it again finishes the same creation (the communities plugin finishes an unfinished
account of the same person and name)."""

from __future__ import annotations

import contextvars
from typing import Any

from daemon.plugin import Actor, ApiError, Application, CommunitiesService, Row, invalid, iso
from daemon.plugin.storage import AppsTable
from plugins.instance import audit
from plugins.instance import requests_store as store

#: Requests one person may have waiting at once.
MAX_WAITING = 3
#: Characters of a decline's reason.
MAX_REASON = 500
#: Days a decided request is still told on the person's home page.
SHOWN_DAYS = 30

#: The request being created by an operator's approval, in this task: let it through.
_approving: contextvars.ContextVar[int | None] = contextvars.ContextVar("instance_approving", default=None)

STATE_WORDS = {"pending": "Waiting for approval", "approved": "Approved, being created", "created": "Created",
               "declined": "Declined"}


def approving() -> int | None:
    """The request an approval in this task is creating, if any."""
    return _approving.get()


def request_json(row: Row, *, for_operator: bool = False) -> dict[str, Any]:
    """A request as the person sees it (no operator), or as operators do."""
    out = {"id": str(row["id"]), "state": row["state"], "displayName": row["display_name"],
           "description": row["description"], "type": row["type"], "handle": row["handle"],
           "reason": row["reason"], "communityDid": row["community_did"], "createdAt": row["created_at"],
           "decidedAt": row["decided_at"]}
    if for_operator:
        out.update(requesterDid=row["requester_did"], decidedBy=row["decided_by"], error=row["error"],
                   appId=row["app_id"])
    return out


async def hold(app: Application, actor_did: str | None, app_id: str | None, data: dict[str, Any]) -> dict | None:
    """`cr_hold_action` for community.create under `approval`: keep a request and answer it."""
    config = app.config.plugin("instance")
    if config.creation != "approval" or not actor_did or config.is_operator(actor_did) or approving() is not None:
        return None
    if data.get("identifier") is not None:
        raise ApiError(403, "creation_not_allowed",
                       "This instance's creation policy is 'approval': a creation request makes a new account for "
                       "the community. To bring an account you have, ask the instance's operators.",
                       details=[{"policy": "approval"}])
    now = app.clock.iso_now()
    async with app.db.transaction("instance.creation_request") as tx:
        if len(await store.waiting_of(tx, actor_did)) >= MAX_WAITING:
            raise ApiError(409, "creation_requests_waiting",
                           f"You have {MAX_WAITING} creation requests waiting: wait for the operators' answer "
                           "before asking for another.")
        request_id = await store.insert_tx(tx, requester_did=actor_did, fields=data, app_id=app_id, now=now)
    return {"id": str(request_id), "state": "pending",
            "message": "This instance's creation policy is 'approval': your community waits for an operator to "
                       "approve it, and is then created with you as its primary admin."}


async def approve(app: Application, request_id: int, operator_did: str, *, via: str = "web") -> dict[str, Any]:
    """Approve a waiting request (or retry an approved one whose creation failed) and create
    the community for the person; the request as operators see it."""
    row = await store.get(app.db, request_id)
    if row is None:
        raise ApiError(404, "request_not_found", f"No creation request {request_id}.")
    if row["state"] not in ("pending", "approved"):
        raise ApiError(409, "request_decided", f"Creation request {request_id} is already {row['state']}.")
    if row["state"] == "pending":
        async with app.db.transaction("instance.creation_approve") as tx:
            if await store.approve_tx(tx, request_id, operator_did=operator_did, now=app.clock.iso_now()):
                await audit.record_tx(tx, app.clock.iso_now(), operator_did, "creation.approve", row["requester_did"],
                                      {"request": str(request_id), "community": row["display_name"]}, via=via)
    service = app.service(CommunitiesService)
    assert service is not None  # the creation goes through the communities plugin
    app_id = row["app_id"]
    if app_id is not None:   # an app deactivated since does not become the creator app
        asked_through = await AppsTable.get(app.db, app_id)
        app_id = app_id if asked_through is not None and asked_through["active"] else None
    token = _approving.set(request_id)
    try:
        created = await service.create(
            # the app the person asked through becomes the creator app, as without approval
            Actor(row["requester_did"], app_id, proven=True), display_name=row["display_name"],
            description=row["description"], type=row["type"], handle=row["handle"], identifier=None,
            app_password=None, roster_visibility=row["roster_visibility"],
            listed=None if row["listed"] is None else bool(row["listed"]), recovery_key=row["recovery_key"])
    except ApiError as exc:
        async with app.db.transaction("instance.creation_failed") as tx:
            await store.failed_tx(tx, request_id, error=f"{exc.code}: {exc.message}"[:1000])
        raise
    finally:
        _approving.reset(token)
    async with app.db.transaction("instance.creation_created") as tx:
        await store.created_tx(tx, request_id, community_did=created["did"])
    done = await store.get(app.db, request_id)
    assert done is not None
    return request_json(done, for_operator=True)


async def decline(app: Application, request_id: int, operator_did: str, reason: Any, *,
                  via: str = "web") -> dict[str, Any]:
    """Decline a waiting request with a reason the person reads."""
    if not isinstance(reason, str) or not reason.strip():
        raise invalid("reason", "say why, in words the person will read")
    reason = reason.strip()
    if len(reason) > MAX_REASON:
        raise invalid("reason", f"must be at most {MAX_REASON} characters")
    row = await store.get(app.db, request_id)
    if row is None:
        raise ApiError(404, "request_not_found", f"No creation request {request_id}.")
    now = app.clock.iso_now()
    async with app.db.transaction("instance.creation_decline") as tx:
        if not await store.decline_tx(tx, request_id, operator_did=operator_did, reason=reason, now=now):
            raise ApiError(409, "request_decided", f"Creation request {request_id} is already {row['state']}.")
        await audit.record_tx(tx, now, operator_did, "creation.refuse", row["requester_did"],
                              {"request": str(request_id), "community": row["display_name"], "reason": reason},
                              via=via)
    done = await store.get(app.db, request_id)
    assert done is not None
    return request_json(done, for_operator=True)


async def waiting_count(app: Application, person_did: str) -> int:
    """The person's requests waiting, less the one being created now (for the per-person limit)."""
    return len([r for r in await store.waiting_of(app.db, person_did) if r["id"] != approving()])


async def page_notes(app: Application, page: str, person_did: str) -> list[dict[str, Any]]:
    """`cr_page_notes`: on the creation form, that it waits for approval; on the home page,
    the state of the person's recent requests, in sentences."""
    config = app.config.plugin("instance")
    if page == "new":
        if config.creation != "approval" or config.is_operator(person_did):
            return []
        return [{"text": "This instance's operators approve each new community: when you send this form, your "
                         "community waits for their approval, and is then created with you as its primary admin. "
                         "Your home page shows where it stands. A new account is made for it (an account you already have "
                         "cannot be brought this way), and no recovery key is shown to you afterwards: to hold one, "
                         "paste your own below.", "href": None}]
    if page != "home":
        return []
    notes = []
    since = iso(app.clock.time() - SHOWN_DAYS * 86400)
    for row in await store.of_person(app.db, person_did, since=since):
        name = row["display_name"]
        if row["state"] == "pending":
            text = f"Your community “{name}” is waiting for the instance's operators to approve it."
        elif row["state"] == "approved":
            text = f"Your community “{name}” is approved and being created."
        elif row["state"] == "declined":
            text = f"Your request to create “{name}” was declined: {row['reason']}"
        else:
            continue   # created: the community itself is on the page
        notes.append({"text": text, "href": None})
    return notes
