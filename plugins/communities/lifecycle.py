"""The community's lifecycle: create (provision or bring the account, write profile,
admins and the creator's proof, then index it), profile and image changes, delete: one
command each (see steps.py)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from daemon.plugin.atproto import delete_account_tx
from daemon.plugin import ApiError, Row, Transaction, emit_tx
from daemon.plugin.atproto import ROLL_BACK, Plan, Run, new_tid, pds
from daemon.plugin.http import NOT_FOUND
from plugins.communities.steps import (CREATE, DELETE, PROFILE, Actor, CommunityCommand, active_tx, admins_record,
                                       audit_tx, fetch_profile, let_finish, member_status, membership_proof, nsid,
                                       profile_record, require_manager, require_person, require_role, store_profile_tx)
from plugins.communities import store

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
                 listed: bool | None = None, recovery_key: str | None = None) -> dict[str, Any]:
    """Provision (or bring) the account, write profile, admins and the creator's proof,
    then index it; or, when a plugin holds the creation for approval (`cr_hold_action`),
    make nothing and answer ``{"held": <the holder's answer>}``. A failure after the account exists leaves an invisible 'creating'
    row; the same request again finishes the job.

    A provisioned account's DID gets `recovery_key` (a did:key the creator holds) as its
    first rotation key, or, without one, a key made here whose private half the answer's
    ``recoveryKey`` carries once (docs/communities.md, "Who owns a community")."""
    from daemon.plugin.atproto import (CommunityAccount, RotationKey, bring_own_account, fetch_handle_domain,
                                       provision_account)

    cfg = app.config.plugin("communities")
    await require_person(app, actor.did, "creatorDid")
    # an instance-wide policy (cr_check_action) may refuse before any account is made
    await app.check_action("community.create", actor.did, app_id=actor.app_id)
    # ... or hold it for approval (cr_hold_action): nothing is made, the caller answers 202
    held = await app.hold_action("community.create", actor.did, app_id=actor.app_id, data={
        "display_name": display_name, "description": description, "type": type, "handle": handle,
        "identifier": identifier, "roster_visibility": roster_visibility, "listed": listed,
        "recovery_key": recovery_key})
    if held is not None:
        return {"held": held}
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
        unfinished = await store.creating_community(app.db, handle=wanted)
        key: RotationKey | str | None = None
        if unfinished is not None and unfinished["creator_did"] == actor.did:
            # An earlier attempt provisioned the account and failed later: finish it.
            account = CommunityAccount(unfinished["did"], unfinished["handle"], unfinished["pds_url"])
        else:
            key = recovery_key or RotationKey.generate()
            account = await pds(provision_account(app, wanted, recovery_key=key))
        kind = "provisioned"
    result = await app.writes.run(CreateCommunity(
        app, account, actor, kind, display_name=display_name, description=description, type=type,
        visibility={"roster_visibility": roster_visibility, "listed": listed}))
    answer = _recovery_key_answer(account.recovery_key, key) if kind == "provisioned" else None
    if answer is not None:
        result["recoveryKey"] = answer
    return result


def _recovery_key_answer(did_key: str | None, made: Any) -> dict[str, Any] | None:
    """What the creator is told of the new account's recovery key (`did_key`, the one the
    account was made with): its private half only when this request made it, never again."""
    from daemon.plugin.atproto import RotationKey
    if isinstance(made, RotationKey) and made.did_key == did_key:
        return {"didKey": did_key, "privateKeyHex": made.hex, "generated": True,
                "note": "This is the community's recovery key: with it alone you can move the community's "
                        "identity to any PDS, whatever becomes of this service. Keep the private key offline "
                        "(a password manager, or printed). It is shown only now: Commonroom does not keep it."}
    if did_key and did_key == made:
        return {"didKey": did_key, "privateKeyHex": None, "generated": False,
                "note": "Your key is the first rotation key of the community's DID."}
    return None  # a creation that finished an earlier attempt: its answer named the key


class CreateCommunity(CommunityCommand):
    """Index the account as a 'creating' community with the intent, put profile, admins and
    the creator's proof, then make it active. A failed PDS write rolls back what it wrote
    (the reconciler deletes what a failed roll-back left); the same request again finishes
    the job."""

    kind, name, on_pds_error = CREATE, "communities.create", ROLL_BACK

    def __init__(self, app: "Application", account: Any, actor: Actor, account_kind: str, *,
                 display_name: str, description: str, type: str, visibility: dict[str, Any]) -> None:
        super().__init__(app, account.did, actor)
        self.account, self.account_kind, self.visibility = account, account_kind, visibility
        self.display_name, self.description, self.type = display_name, description, type
        self.profile_task: "asyncio.Future[Any] | None" = None

    def locks(self) -> list[str]:
        return [f"create:{self.did}"]

    async def check(self, tx: Transaction) -> Plan:
        app, account, actor = self.app, self.account, self.actor
        self.now = now = app.clock.iso_now()
        row = await store.get_community(tx, account.did)
        if row is not None and (row["state"] == "active" or row["creator_did"] != actor.did):
            raise ApiError(409, "community_exists", f"{account.handle} is already a community here.")
        if row is None:
            await store.insert_community_tx(
                tx, did=account.did, handle=account.handle, display_name=self.display_name,
                description=self.description, type=self.type, pds_url=account.pds_url,
                account_kind=self.account_kind, creator_did=actor.did, creator_app_id=actor.app_id,
                proof_rkey=new_tid(app.clock), now=now)
        else:
            await store.update_community_tx(
                tx, account.did, now, display_name=self.display_name, description=self.description,
                type=self.type, handle=account.handle, pds_url=account.pds_url)
        await store.set_visibility_tx(tx, account.did, None, **self.visibility)
        self.row = row = await store.get_community(tx, account.did)
        return Plan(key=f"create:{account.did}", operation="community.created", rkey=row["proof_rkey"],
                    community_did=account.did, payload={"creatorDid": actor.did})

    async def write(self, run: Run) -> None:
        app, row, now = self.app, self.row, self.now
        self.profile_task = asyncio.ensure_future(fetch_profile(app, self.actor.did))
        await run.put(nsid(app, "profile"), "self", profile_record(dict(row), created_at=row["created_at"]))
        await run.put(nsid(app, "admins"), "self", admins_record([(self.actor.did, now)], now))
        self.proof = await run.put(nsid(app, "membershipProof"), row["proof_rkey"],
                                   membership_proof(self.actor.did, now))
        self.profile = await self.profile_task

    def failed(self, answer: ApiError, run: Run, maybe_written: bool) -> ApiError:
        if self.profile_task is not None:
            let_finish(self.profile_task)
        return ApiError(answer.status, answer.code,
                        f"{answer.message} The community is not created; send the same request again "
                        "to finish creating it.")

    async def commit(self, tx: Transaction, run: Run) -> dict[str, Any]:
        app, did, actor, now = self.app, self.did, self.actor, self.now
        await store.update_community_tx(tx, did, app.clock.iso_now(), state="active")
        await store.insert_member_tx(
            tx, community_did=did, member_did=actor.did, now=now, proof_rkey=self.row["proof_rkey"],
            proof_cid=self.proof.get("cid"), membership_uri=None, membership_cid=None,
            app_id=actor.app_id, admin_rank=0)
        await store.set_counts_tx(tx, did, 1, 0)
        await store_profile_tx(app, tx, actor.did, self.profile)
        await emit_tx(app, tx, "member.joined", community_did=did, data={"memberDid": actor.did},
                      app_id=actor.app_id, actor_did=actor.did)
        await audit_tx(app, tx, did, "community.created", actor, actor.did,
                       metadata={"type": self.type, "handle": self.account.handle, "account": self.account_kind})
        return {"did": did}


async def _refuse_existing(app: "Application", did: str) -> None:
    row = await store.get_community(app.db, did)
    if row is not None and row["state"] == "active":
        raise ApiError(409, "community_exists", f"{did} is already a community here.")


# ------------------------------------------------------------------ profile and images


class UpdateProfile(CommunityCommand):
    """Change display_name / description / type / avatar / banner: put the profile, then
    the index. A crash between the PDS and the index is settled by putting the profile
    back from the index (reconcile.py)."""

    kind, name = PROFILE, "communities.profile"

    def __init__(self, app: "Application", did: str, actor: Actor, changes: dict[str, Any]) -> None:
        super().__init__(app, did, actor)
        self.changes = changes

    async def check(self, tx: Transaction) -> Plan:
        did, changes = self.did, self.changes
        row = await active_tx(tx, did)
        await require_manager(tx, row, self.actor.app_id)
        require_role(await member_status(tx, did, self.actor.did), admin=True)
        fields: dict[str, Any] = {}
        for key in ("display_name", "description", "type"):
            if changes.get(key) is not None:
                fields[key] = changes[key]
        for image in ("avatar", "banner"):
            if changes.get(image) is not None:
                fields[f"{image}_cid"], fields[f"{image}_mime"], fields[f"{image}_size"] = changes[image]
        self.row, self.fields = row, fields
        self.changed = sorted(k for k in changes if changes[k] is not None)
        return Plan(key=f"profile:{did}", operation="community.profile_updated", rkey="self",
                    community_did=did, payload={"fields": self.changed})

    async def write(self, run: Run) -> None:
        merged = dict(self.row) | self.fields
        await run.put(nsid(self.app, "profile"), "self",
                      profile_record(merged, created_at=self.row["created_at"], updated_at=self.app.clock.iso_now()))

    async def commit(self, tx: Transaction, run: Run) -> None:
        await active_tx(tx, self.did)
        await store.update_community_tx(tx, self.did, self.app.clock.iso_now(), **self.fields)
        await audit_tx(self.app, tx, self.did, "community.profile_updated", self.actor, None,
                       metadata={"fields": self.changed})


async def update_profile(app: "Application", community: Row, actor: Actor, **changes: Any) -> None:
    """Run :class:`UpdateProfile`; `avatar`/`banner` are (cid, mime, size)."""
    await app.check_action("community.update", actor.did, community_did=community["did"], app_id=actor.app_id)
    await app.writes.run(UpdateProfile(app, community["did"], actor, changes))


# ------------------------------------------------------------------ delete


class DeleteCommunity(CommunityCommand):
    """Primary admin only (checked again under the lock: a transfer may have finished
    while it waited). Deletes the profile and admins records from the repo (with
    ``communities.delete_pds_records``), then, in one transaction, the local index and the
    stored credentials (the deletion drops every intent of the community, its own too)."""

    kind, name = DELETE, "communities.delete"

    async def check(self, tx: Transaction) -> Plan | None:
        require_role(await member_status(tx, self.did, self.actor.did), primary=True)
        if not self.app.config.plugin("communities").delete_pds_records:
            return None
        return Plan(key=f"delete:{self.did}", operation="community.deleted", rkey="self",
                    community_did=self.did)

    async def write(self, run: Run) -> None:
        await run.delete(nsid(self.app, "admins"), "self")
        await run.delete(nsid(self.app, "profile"), "self")

    async def commit(self, tx: Transaction, run: Run) -> None:
        did, actor = self.did, self.actor
        row = await active_tx(tx, did)
        await require_manager(tx, row, actor.app_id)
        require_role(await member_status(tx, did, actor.did), primary=True)
        await audit_tx(self.app, tx, did, "community.deleted", actor, None,
                       metadata={"handle": row["handle"], "memberCount": row["member_count"],
                                 "account": row["account_kind"]})
        await self.app.writes.forget_community_tx(tx, did)
        await store.delete_community_tx(tx, did)
        await delete_account_tx(tx, did)


async def remove_from_index(app: "Application", did: str, *, by: str, reason: str | None) -> dict[str, Any]:
    """Forget a community on the instance's behalf (an operator): its index, intents and
    stored credentials go, in one transaction with a ``community.removed_from_index`` audit
    entry; nothing is written to its repo and its account is not deleted (the answer's
    ``account`` says what is left, as a deletion's does)."""
    from daemon.plugin.atproto import forget_account, move_of, moving_error
    from plugins.communities.handover import account_after_delete
    from plugins.communities.steps import community_lock
    async with community_lock(app, did):
        if await move_of(app.db, did) is not None:
            raise moving_error(did)
        async with app.db.transaction("communities.remove_from_index") as tx:
            row = await store.get_community(tx, did)
            if row is None:
                raise NOT_FOUND(did)
            await store.insert_entry_tx(
                tx, community_did=did, action="community.removed_from_index", actor_did=by, target_did=None,
                reason=reason, metadata={"handle": row["handle"], "memberCount": row["member_count"]},
                app_id=None, now=app.clock.iso_now())
            await app.writes.forget_community_tx(tx, did)
            await store.delete_community_tx(tx, did)
            await delete_account_tx(tx, did)
    try:
        await forget_account(app, did)
    except Exception as exc:  # noqa: BLE001 (removed already; the session cache is best effort)
        log.warning("removed %s from the index, but could not drop its cached PDS session: %r", did, exc)
    return {"status": "removed", "did": did, "account": account_after_delete(row, records_deleted=False)}


async def delete(app: "Application", community: Row, actor: Actor) -> dict[str, Any]:
    """Primary admin only (:class:`DeleteCommunity`). Membership proofs stay in the repo
    (history); the account itself is not deleted: its owner keeps it (brought) or it stays
    idle (provisioned). Once the index is gone the answer is 200, whatever happens after."""
    from daemon.plugin.atproto import forget_account

    from daemon.plugin.atproto import move_of, moving_error
    did = community["did"]
    await require_manager(app.db, community, actor.app_id)
    require_role(await member_status(app.db, did, actor.did), primary=True)
    if await move_of(app.db, did) is not None:
        raise moving_error(did)  # its credentials are what the move finishes with
    await app.writes.run(DeleteCommunity(app, did, actor))
    try:
        # Drops the cached PDS session (the stored row is already gone: idempotent).
        await forget_account(app, did)
    except Exception as exc:  # noqa: BLE001 (the community is deleted; never a 502 now)
        log.warning("deleted %s, but could not drop its cached PDS session: %r", did, exc)
    from plugins.communities.handover import account_after_delete
    records = bool(app.config.plugin("communities").delete_pds_records)
    return {"status": "deleted", "did": did,
            "account": account_after_delete(community, records_deleted=records)}
