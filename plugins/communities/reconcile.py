"""How the core's reconciler settles this plugin's writes (docs/communities.md,
"Consistency"): the kinds registered through ``cr_write_kinds``.

An intent older than ``communities.reconcile_after_seconds`` (any age at start-up: no
request can own one yet) belongs to a command that wrote to the PDS, or may have, and
then never committed locally: the daemon crashed, or the local transaction failed, and
the client did not retry. From the client's point of view that command never happened,
so settling **rolls back** what it may have written, unless the local index already
reflects it:

* ``communities.create``: a community still ``creating`` gets its ``profile``, ``admins``
  and creator's proof deleted from its repo (the same request can still finish it);
* ``communities.proof`` (join, approve): the proof at the intent's record key is deleted
  unless the local member row points at that key;
* ``communities.remove`` (leave, remove): if the member is still in the index, their proof
  is put back from the member row (and, for an admin, the ``admins`` record from the
  index; for a role holder, the ``roles`` record from the index); if they are not, the
  proof at that key is deleted (again), and the ``roles`` record put without them;
* ``communities.admins`` (promote, demote, transfer): the ``admins`` record is put from
  the index;
* ``communities.profile`` (profile and image changes): the ``profile`` record is put from
  the index;
* ``communities.delete`` (a deletion that did not commit): the ``profile`` and ``admins``
  records are put back from the index (the community is still there);
* ``communities.membership`` (browser join and leave: the user's own record): unless the user's
  member row or join request refers to it, the record is deleted from the user's repo
  with the grant of the session that wrote it; if that session or grant is gone the
  record is left (harmless: no community proof backs it).

Then, in one transaction, the intent is deleted (only if no request picked it up
meanwhile) and an audit entry ``reconciled`` is written; no event (nothing completed).
A PDS that fails keeps the intent for a later pass (the core's backoff). Each kind holds
the community's lock while it settles, so no command of that community runs meanwhile.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError, Principal
from daemon.plugin.atproto import Intent, WriteKind
from plugins.communities import roles
from plugins.communities.steps import (ADMINS, CREATE, DELETE, MEMBERSHIP, PROFILE, PROOF, REMOVE,
                                       admins_list, admins_record, audit_tx, community_lock_key,
                                       membership_proof, nsid, profile_record)
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities")


async def _active(app: "Application", did: str | None) -> bool:
    community = await store.get_community(app.db, did or "")
    return community is not None and community["state"] == "active"


async def _repo(app: "Application", did: str) -> Any:
    from daemon.plugin.atproto import community_repo
    return await community_repo(app, did)


async def _put_admins(app: "Application", repo: Any, did: str) -> str:
    admins_nsid = nsid(app, "admins")
    await repo.put_record(admins_nsid, "self", admins_record(await admins_list(app.db, did),
                                                                  app.clock.iso_now()))
    return f"put {admins_nsid}/self"


async def _undo_proof(app: "Application", intent: Intent) -> list[str]:
    did, rkey = intent.community_did or "", intent.rkey or ""
    member = await store.get_member(app.db, did, intent.payload.get("memberDid", ""))
    if member is not None and member["proof_rkey"] == rkey:
        return []
    proof_nsid = nsid(app, "membershipProof")
    await (await _repo(app, did)).delete_record(proof_nsid, rkey)
    return [f"deleted {proof_nsid}/{rkey}"]


async def _undo_remove(app: "Application", intent: Intent) -> list[str]:
    did, rkey = intent.community_did or "", intent.rkey
    proof_nsid = nsid(app, "membershipProof")
    repo = await _repo(app, did)
    done: list[str] = []
    member = await store.get_member(app.db, did, intent.payload.get("memberDid", ""))
    if member is not None:
        await repo.put_record(proof_nsid, member["proof_rkey"], membership_proof(
            member["member_did"], member["confirmed_at"], member["membership_uri"],
            member["membership_cid"]))
        done.append(f"put {proof_nsid}/{member['proof_rkey']}")
    elif rkey:
        await repo.delete_record(proof_nsid, rkey)
        done.append(f"deleted {proof_nsid}/{rkey}")
    if intent.payload.get("wasAdmin"):
        done.append(await _put_admins(app, repo, did))
    if intent.payload.get("heldRoles"):
        done.append(await roles.put_from_index(app, repo, did))
    return done


async def _undo_admins(app: "Application", intent: Intent) -> list[str]:
    did = intent.community_did or ""
    return [await _put_admins(app, await _repo(app, did), did)]


async def _undo_profile(app: "Application", intent: Intent) -> list[str]:
    did = intent.community_did or ""
    row = await store.get_community(app.db, did)
    profile_nsid = nsid(app, "profile")
    await (await _repo(app, did)).put_record(profile_nsid, "self", profile_record(
        dict(row), created_at=row["created_at"], updated_at=row["updated_at"]))
    return [f"put {profile_nsid}/self"]


async def _undo_create(app: "Application", intent: Intent) -> list[str]:
    """A creation that never finished: its records are taken off the repo (the invisible
    'creating' row stays, so the same request can still finish it)."""
    did = intent.community_did or ""
    community = await store.get_community(app.db, did)
    if community is None or community["state"] != "creating":
        return []
    repo = await _repo(app, did)
    done = []
    for name, rkey in (("membershipProof", intent.rkey or community["proof_rkey"]), ("admins", "self"),
                       ("profile", "self")):
        await repo.delete_record(nsid(app, name), rkey)
        done.append(f"deleted {nsid(app, name)}/{rkey}")
    return done


async def _undo_delete(app: "Application", intent: Intent) -> list[str]:
    did = intent.community_did or ""
    done = await _undo_profile(app, intent)
    return done + [await _put_admins(app, await _repo(app, did), did)]


async def _undo_membership(app: "Application", intent: Intent) -> list[str]:
    """The user's own record: kept if the index refers to it, else deleted with the grant
    of the session that wrote it (left, if that grant is gone)."""
    did, user, rkey = intent.community_did or "", intent.payload.get("userDid", ""), intent.rkey or ""
    suffix = "/" + rkey
    for row in (await store.get_member(app.db, did, user),
                await store.get_request(app.db, did, user)):
        if row is not None and (row["membership_uri"] or "").endswith(suffix):
            return []
    collection = nsid(app, "membership")
    session_id = intent.payload.get("sessionId")
    try:
        if not session_id:
            raise ApiError(403, "user_session_required", "no session recorded")
        repo = await app.writes.user_repo(Principal("session", did=user, session_id=session_id))
        await repo.delete_record(collection, rkey)
    except ApiError as exc:
        if exc.status not in (401, 403):
            raise  # the user's PDS failed: try again later
        log.info("cannot delete the membership record %s of %s (%s); left in their repo",
                 rkey, user, exc.code)
        return ["left the user's membership record"]
    return [f"deleted {collection}/{rkey} in {user}'s repo"]


_UNDO = {CREATE: _undo_create, PROOF: _undo_proof, REMOVE: _undo_remove, ADMINS: _undo_admins, PROFILE: _undo_profile,
         DELETE: _undo_delete, MEMBERSHIP: _undo_membership}


async def settle(app: "Application", intent: Intent) -> str | None:
    """Make the repo match the index for what `intent` may have written, then drop it with
    an audit entry. Raises if the PDS fails (the core postpones it)."""
    active = intent.kind == CREATE or await _active(app, intent.community_did)
    done = await _UNDO[intent.kind](app, intent) if active else []
    async with app.db.transaction("communities.reconcile") as tx:
        if not await app.writes.finish_tx(tx, intent, settling=True):
            return None  # a request took it over meanwhile
        if await store.get_community(tx, intent.community_did or "") is not None:
            await audit_tx(app, tx, intent.community_did or "", "reconciled", None,
                           intent.payload.get("memberDid") or intent.payload.get("userDid"),
                           metadata={"operation": intent.operation, "key": intent.key, "rkey": intent.rkey,
                                     "startedAt": intent.created_at, "attempts": intent.tries,
                                     "undone": done})
    log.info("settled the unfinished %s (%s) in %s: %s", intent.operation, intent.key,
             intent.community_did, done or "nothing to undo")
    return "reconciled"


def write_kinds(app: "Application") -> list[WriteKind]:
    def after(app: "Application") -> float:
        return app.config.plugin("communities").reconcile_after_seconds

    def locks(intent: Intent) -> list[str]:
        return [community_lock_key(intent.community_did or "")]

    return [WriteKind(name, settle, after, locks=locks, outcomes=("reconciled",)) for name in _UNDO]


async def reconcile(app: "Application", *, any_age: bool = False) -> dict[str, int]:
    """Settle this plugin's intents now (the core's reconciler does so periodically):
    counts of ``reconciled``, ``postponed`` and ``busy``."""
    return await app.writes.reconcile(kinds=list(_UNDO), any_age=any_age)
