"""Moving a community to another PDS: its primary admin asks (API, web, or an operator's CLI),
the core's account migration runs (daemon/atproto/moves.py), and the index follows it.

`start` checks who asks, records the move under the community's lock (from then on every write
to the community is refused with 503 ``community_moving``), waits for writes already under way,
and makes the account on the new PDS at once, so a PDS that refuses it (an invite code needed,
the handle taken) is answered as a 400 with nothing changed. The rest (repo, blobs, identity,
activation) runs in the background (`run`), resumes by itself at start-up after a crash, and
ends in one transaction that points the index at the new PDS and writes the audit entry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from daemon.plugin import Actor, ApiError
from daemon.plugin.atproto import (abandon_move, begin_move_tx, move_of, MOVE_STEPS, resume_move, service_key_listed,
                                   unfinished_moves, writes_settled)
from plugins.communities import store
from plugins.communities.steps import audit_tx, community_lock_key, member_status, require_manager, require_role

if TYPE_CHECKING:
    from daemon.plugin import Application, Row, Transaction

log = logging.getLogger(__name__)

STEP_WORDS = {
    "account": "Making the account on the new PDS",
    "repo": "Copying the repository",
    "blobs": "Copying pictures and files",
    "identity": "Pointing the identity at the new PDS",
    "activate": "Switching the accounts over",
    "finish": "Finishing",
}


def progress(row: "Row | None", community: "Row") -> dict[str, Any]:
    """The move's progress as the API and the page show it."""
    if row is None:
        return {"state": "none", "pdsUrl": community["pds_url"]}
    done = MOVE_STEPS.index(row["step"])
    return {"state": "moving", "fromPds": row["from_pds"], "toPds": row["to_pds"], "step": row["step"],
            "stepWords": STEP_WORDS[row["step"]], "stepsDone": done, "stepsTotal": len(MOVE_STEPS),
            "error": row["error"], "startedAt": row["started_at"], "updatedAt": row["updated_at"]}


async def start(app: "Application", community: "Row", actor: Actor | None, to_pds: str, *,
                invite_code: str | None = None, operator: bool = False) -> dict[str, Any]:
    """Begin moving `community` to `to_pds` (its primary admin, through a managing app, or an
    operator at the command line); the account on the new PDS is made before this answers."""
    did = community["did"]
    if not operator:
        assert actor is not None
        await require_manager(app.db, community, actor.app_id)
        require_role(await member_status(app.db, did, actor.did), primary=True)
    if community["account_kind"] == "provisioned" and await move_of(app.db, did) is None \
            and not await service_key_listed(app, did):
        raise ApiError(400, "move_not_possible",
                       "This service holds no rotation key in the community's identity (it was created before "
                       "recovery keys, adding the key failed, or its owner removed it): the owner can move it with "
                       "the recovery key.")
    async with app.writes.lock(community_lock_key(did)):
        async with app.db.transaction("communities.move_begin") as tx:
            if community["account_kind"] != "provisioned":
                raise ApiError(400, "move_not_possible",
                               "This community's account was brought with an app password: only its owner "
                               "can move it, from their own PDS.")
            await begin_move_tx(app, tx, did, to_pds, invite_code=invite_code)
            await audit_tx(app, tx, did, "community.move_started", actor, None,
                           metadata={"toPds": to_pds, "byOperator": operator})
    if not await writes_settled(app, did):
        await abandon_move(app, did)
        raise ApiError(503, "writes_in_progress", "Writes to the community are still under way: try again shortly.",
                       headers={"Retry-After": "30"})
    try:
        async with app.writes.lock(_move_lock(did)):
            await resume_move(app, did, finished(app), until="repo")
    except ApiError as exc:
        await _abandon(app, did, actor, exc)
        raise
    except Exception as exc:  # noqa: BLE001 (nothing of the old account was touched: give it back)
        await _abandon(app, did, actor, exc)
        raise ApiError(502, "pds_error", f"The new PDS could not be reached to make the account: {exc}. "
                                         "Nothing changed; try again later.") from None
    return progress(await move_of(app.db, did), community)


def _move_lock(did: str) -> str:
    return f"communities.move:{did}"


async def _abandon(app: "Application", did: str, actor: Actor | None, exc: Exception) -> None:
    if await abandon_move(app, did):
        async with app.db.transaction("communities.move_abandoned") as tx:
            await audit_tx(app, tx, did, "community.move_abandoned", actor, None,
                           metadata={"reason": str(exc)[:300]})


async def run(app: "Application", did: str) -> None:
    """The rest of a move, in the background: on a refusal before the identity moved, the
    move is abandoned (the community stays where it was); on a PDS failure it stays
    recorded and `resume_all` (start-up) or the next request to move takes it up again."""
    try:
        async with app.writes.lock(_move_lock(did)):
            await resume_move(app, did, finished(app))
    except Exception as exc:  # noqa: BLE001 (recorded on the move)
        transient = bool(getattr(exc, "transient", False)) or getattr(exc, "status", 0) in (502, 503, 504)
        log.warning("the move of %s stopped: %r; %s", did, exc,
                    "it is tried again in a minute" if transient else "it is given up if it may still be")
        if not transient:
            # Before the directory names the new PDS the old account is untouched: give the move
            # up, so the community is writable again. After, it can only go forward (retried).
            await _abandon(app, did, None, exc)


async def step_once(app: "Application", did: str) -> None:
    """Run the move's next step only (the command line shows each); errors as `resume_move`'s."""
    from daemon.plugin.atproto import MOVE_STEPS
    row = await move_of(app.db, did)
    if row is None:
        return
    index = MOVE_STEPS.index(row["step"])
    until = MOVE_STEPS[index + 1] if index + 1 < len(MOVE_STEPS) else None
    try:
        await resume_move(app, did, finished(app), until=until)
    except ApiError as exc:
        if exc.status < 500:
            await _abandon(app, did, None, exc)
        raise


async def resume_all(app: "Application", first: bool = True) -> None:
    """At start-up and every minute: take up every move a crash or a failure interrupted."""
    for row in await unfinished_moves(app.db):
        if await store.get_community(app.db, row["did"]) is not None:
            await run(app, row["did"])


def finished(app: "Application") -> Any:
    """The transaction that ends a move: the index points at the new PDS, and the audit log says so."""
    async def moved_tx(tx: "Transaction", did: str, to_pds: str) -> None:
        row = await store.get_community(tx, did)
        await store.update_community_tx(tx, did, app.clock.iso_now(), pds_url=to_pds)
        await audit_tx(app, tx, did, "community.moved", None, None,
                       metadata={"fromPds": row["pds_url"] if row else None, "toPds": to_pds})
    return moved_tx
