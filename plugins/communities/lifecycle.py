"""The community's lifecycle: create (provision or bring the account, write profile,
admins and the creator's proof, then index it), profile and image changes, delete. Each
reads check → intent → PDS → one transaction (see steps.py)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from plugins.communities.access import member_status, require_manager
from daemon.plugin import ApiError, Row, emit_tx, new_tid, pds, roll_back
from plugins.communities.steps import (CREATE, DELETE, PROFILE, Actor, active_tx, admins_record, audit_tx,
                                       community_lock, community_repo_for, fetch_profile, let_finish,
                                       membership_proof, nsid, profile_record, require_person, require_role,
                                       store_profile_tx)
from store import accounts as accounts_store
from plugins.communities import store as communities_store
from plugins.communities import store as members_store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.communities")


# ------------------------------------------------------------------ create


def default_handle(display_name: str, creator_did: str) -> str:
    """A handle label from the display name plus a short hash of (creator, name), so a
    retried request lands on the same handle (and finishes the same creation)."""
    ascii_name = unicodedata.normalize("NFKD", display_name).encode("ascii", "ignore").decode()
    # the reference PDS allows 18 characters in the first label
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:11].strip("-") or "community"[:11]
    digest = hashlib.sha256(f"{creator_did}\n{display_name}".encode()).hexdigest()[:6]
    return f"{slug}-{digest}"


async def create(app: "Application", actor: Actor, *, display_name: str, description: str,
                 type: str, handle: str | None, identifier: str | None,
                 app_password: str | None, roster_visibility: str | None = None,
                 listed: bool | None = None) -> dict[str, Any]:
    """Provision (or bring) the account, write profile, admins and the creator's proof,
    then index it. A failure after the account exists leaves an invisible 'creating'
    row; the same request again finishes the job."""
    from daemon.atproto.accounts import (CommunityAccount, bring_own_account, fetch_handle_domain,
                                         provision_account)

    cfg = app.config.plugin("communities")
    await require_person(app, actor.did, "creatorDid")
    if identifier is not None:
        if not cfg.allow_bring_own:
            raise ApiError(403, "bring_own_disabled", "This service does not accept existing accounts.")
        if identifier.startswith("did:"):
            await _refuse_existing(app, identifier)
        account = await pds(bring_own_account(app, identifier, app_password or ""))
        kind = "brought"
    else:
        if not cfg.allow_provision:
            raise ApiError(403, "provisioning_disabled",
                           "This service does not create accounts: bring one (identifier + appPassword).")
        wanted = (handle or default_handle(display_name, actor.did)).strip().lower().lstrip("@")
        if "." not in wanted:
            wanted += await pds(fetch_handle_domain(app))
        unfinished = await communities_store.creating_community(app.db, handle=wanted)
        if unfinished is not None and unfinished["creator_did"] == actor.did:
            # An earlier attempt provisioned the account and failed later: finish it.
            account = CommunityAccount(unfinished["did"], unfinished["handle"], unfinished["pds_url"])
        else:
            account = await pds(provision_account(app, wanted))
        kind = "provisioned"
    async with app.writes.lock(f"create:{account.did}"):
        return await _create_locked(app, actor, account, kind, display_name=display_name,
                                    description=description, type=type,
                                    visibility={"roster_visibility": roster_visibility, "listed": listed})


async def _create_locked(app: "Application", actor: Actor, account: Any, kind: str, *, display_name: str,
                         description: str, type: str, visibility: dict[str, Any] | None = None) -> dict[str, Any]:
    now = app.clock.iso_now()
    async with app.db.transaction("communities.create_begin") as tx:
        row = await communities_store.get_community(tx, account.did)
        if row is not None and (row["state"] == "active" or row["creator_did"] != actor.did):
            raise ApiError(409, "community_exists", f"{account.handle} is already a community here.")
        if row is None:
            await communities_store.insert_community_tx(
                tx, did=account.did, handle=account.handle, display_name=display_name,
                description=description, type=type, pds_url=account.pds_url, account_kind=kind,
                creator_did=actor.did, creator_app_id=actor.app_id, proof_rkey=new_tid(app.clock),
                now=now)
        else:
            await communities_store.update_community_tx(
                tx, account.did, now, display_name=display_name, description=description, type=type,
                handle=account.handle, pds_url=account.pds_url)
        await communities_store.set_visibility_tx(tx, account.did, None, **(visibility or {}))
        row = await communities_store.get_community(tx, account.did)
        intent = await app.writes.begin_tx(tx, kind=CREATE, key=f"create:{account.did}", community_did=account.did,
                                           operation="community.created", rkey=row["proof_rkey"],
                                           payload={"creatorDid": actor.did})
    did, proof_rkey = row["did"], row["proof_rkey"]
    profile_task = asyncio.ensure_future(fetch_profile(app, actor.did))
    repo = await community_repo_for(app, did)
    written: list[tuple[str, str]] = []
    try:
        profile_nsid, admins_nsid, proof_nsid = (nsid(app, n) for n in ("profile", "admins", "membershipProof"))
        await pds(repo.put_record(profile_nsid, "self", profile_record(dict(row), created_at=row["created_at"])))
        written.append((profile_nsid, "self"))
        await pds(repo.put_record(admins_nsid, "self", admins_record([(actor.did, now)], now)))
        written.append((admins_nsid, "self"))
        proof = await pds(repo.put_record(proof_nsid, proof_rkey, membership_proof(actor.did, now)))
    except ApiError as exc:
        let_finish(profile_task)
        if await roll_back(repo, written):
            await app.writes.drop(intent)  # else the reconciler deletes what is left
        raise ApiError(exc.status, exc.code,
                       f"{exc.message} The community is not created; send the same request again "
                       "to finish creating it.") from None
    profile = await profile_task
    async with app.db.transaction("communities.create") as tx:
        await communities_store.update_community_tx(tx, did, app.clock.iso_now(), state="active")
        await members_store.insert_member_tx(
            tx, community_did=did, member_did=actor.did, now=now, proof_rkey=proof_rkey,
            proof_cid=proof.get("cid"), membership_uri=None, membership_cid=None,
            app_id=actor.app_id, admin_rank=0)
        await communities_store.set_counts_tx(tx, did, 1, 0)
        await app.writes.finish_tx(tx, intent)
        await store_profile_tx(app, tx, actor.did, profile)
        await emit_tx(app, tx, "member.joined", community_did=did, data={"memberDid": actor.did},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, "community.created", actor, actor.did,
                       metadata={"type": type, "handle": account.handle, "account": kind})
    return {"did": did}


async def _refuse_existing(app: "Application", did: str) -> None:
    row = await communities_store.get_community(app.db, did)
    if row is not None and row["state"] == "active":
        raise ApiError(409, "community_exists", f"{did} is already a community here.")


# ------------------------------------------------------------------ profile and images


async def update_profile(app: "Application", community: Row, actor: Actor, **changes: Any) -> None:
    """Change display_name / description / type / avatar / banner (intent, put the profile,
    then the index). `avatar`/`banner` are (cid, mime, size). A crash between the PDS and
    the index is settled by putting the profile back from the index (reconcile.py)."""
    did = community["did"]
    async with community_lock(app, did):
        async with app.db.transaction("communities.profile_check") as tx:
            row = await active_tx(tx, did)
            await require_manager(tx, row, actor.app_id)
            require_role(await member_status(tx, did, actor.did), admin=True)
        fields: dict[str, Any] = {}
        for key in ("display_name", "description", "type"):
            if changes.get(key) is not None:
                fields[key] = changes[key]
        for image in ("avatar", "banner"):
            if changes.get(image) is not None:
                fields[f"{image}_cid"], fields[f"{image}_mime"], fields[f"{image}_size"] = changes[image]
        merged = dict(row) | fields
        changed = sorted(k for k in changes if changes[k] is not None)
        intent = await app.writes.begin(kind=PROFILE, key=f"profile:{did}", community_did=did,
                                        operation="community.profile_updated", rkey="self",
                                        payload={"fields": changed})
        repo = await community_repo_for(app, did)
        await pds(repo.put_record(nsid(app, "profile"), "self",
                                  profile_record(merged, created_at=row["created_at"],
                                                     updated_at=app.clock.iso_now())))
        async with app.db.transaction("communities.profile") as tx:
            await active_tx(tx, did)
            await communities_store.update_community_tx(tx, did, app.clock.iso_now(), **fields)
            await app.writes.finish_tx(tx, intent)
            await audit_tx(app, tx, did, "community.profile_updated", actor, None,
                           metadata={"fields": changed})


# ------------------------------------------------------------------ delete


async def delete(app: "Application", community: Row, actor: Actor) -> dict[str, Any]:
    """Primary admin only. Deletes the community's profile and admins records from its
    repo (so it no longer presents itself as a community), then, in one transaction, the
    local index and the stored credentials. Membership proofs stay in the repo (history);
    the account itself is not deleted: its owner keeps it (brought) or it stays idle
    (provisioned). Once the index is gone the answer is 200, whatever happens after."""
    from daemon.atproto.accounts import forget_account

    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    require_role(await member_status(app.db, did, actor.did), primary=True)
    async with community_lock(app, did):
        # Re-checked under the lock: a transfer may have finished while we waited.
        require_role(await member_status(app.db, did, actor.did), primary=True)
        if app.config.plugin("communities").delete_pds_records:
            # finished by the deletion below (it drops every intent of the community)
            await app.writes.begin(kind=DELETE, key=f"delete:{did}", community_did=did,
                                   operation="community.deleted", rkey="self")
            repo = await community_repo_for(app, did)
            await pds(repo.delete_record(nsid(app, "admins"), "self"))
            await pds(repo.delete_record(nsid(app, "profile"), "self"))
        async with app.db.transaction("communities.delete") as tx:
            row = await active_tx(tx, did)
            await require_manager(tx, row, actor.app_id)
            require_role(await member_status(tx, did, actor.did), primary=True)
            await audit_tx(app, tx, did, "community.deleted", actor, None,
                           metadata={"handle": row["handle"], "memberCount": row["member_count"],
                                     "account": row["account_kind"]})
            await communities_store.delete_community_tx(tx, did)
            await accounts_store.delete_account_tx(tx, did)
    try:
        # Drops the cached PDS session (the stored row is already gone: idempotent).
        await forget_account(app, did)
    except Exception as exc:  # noqa: BLE001 (the community is deleted; never a 502 now)
        log.warning("deleted %s, but could not drop its cached PDS session: %r", did, exc)
    return {"status": "deleted", "did": did}
