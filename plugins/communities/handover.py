"""Handing a community over to another Commonroom: what of a community is not in its repo.

`local_state` reads the local-only part of a community (its settings, bans with reasons and
expiry, invites, the audit log) as a JSON-serialisable dict, the payload's `local` part of a
handover bundle (see `bundle.py` for the sealed format, docs/communities.md "Handing a
community over"). `restore_local_state_tx` writes it into another instance's index, for a
community whose row exists there (the import creates it and rebuilds members, admins and
roles from the repo with `reindex`): settings are set, bans and invites inserted with their
original times, and the audit log gets instance 1's entries as imported history
(`metadata.imported: true`, their original id and time kept) after a `community.imported`
entry. Nothing of a kind is dropped silently: `restore_local_state_tx` answers what it did
not restore and why.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from daemon.plugin import ApiError
from daemon.plugin.atproto import (bring_own_account, delete_account_tx, forget_account, handover_credential, move_of,
                                   new_tid, pds)
from plugins.communities import bundle, store
from plugins.communities.bundle import BundleError, open_bundle
from plugins.communities.common import destination
from plugins.communities.reindex import reindex
from plugins.communities.steps import (community_lock, fetch_profile, gone, member_status, require_manager,
                                       require_role, store_profile_tx)

STATE_VERSION = 1
SETTINGS = ("type", "roster_visibility", "listed", "require_user_proof", "description")
BAN_FIELDS = ("member_did", "reason", "expires_at", "banned_by", "created_at")
INVITE_FIELDS = ("code_hash", "max_uses", "uses", "expires_at", "note", "created_by",
                 "created_at", "revoked_at", "revoked_by")
AUDIT_FIELDS = ("id", "action", "actor_did", "target_did", "reason", "metadata", "created_at")


async def local_state(db: Any, did: str) -> dict[str, Any]:
    """The local-only part of the community `did` (which must exist)."""
    row = await db.fetchone("SELECT * FROM communities WHERE did = ?", (did,))
    if row is None:
        raise LookupError(f"{did} is not a community of this service")
    bans = await db.fetchall("SELECT * FROM community_bans WHERE community_did = ? ORDER BY id", (did,))
    invites = await db.fetchall("SELECT * FROM community_invites WHERE community_did = ? ORDER BY id", (did,))
    audit = await db.fetchall("SELECT * FROM audit_log WHERE community_did = ? ORDER BY id", (did,))
    return {
        "version": STATE_VERSION,
        "settings": {name: row[name] for name in SETTINGS},
        "bans": [{k: b[k] for k in BAN_FIELDS} for b in bans],
        "invites": [{k: i[k] for k in INVITE_FIELDS} for i in invites],
        "audit": [{**{k: a[k] for k in AUDIT_FIELDS}, "metadata": json.loads(a["metadata"] or "{}")}
                  for a in audit],
    }


async def restore_local_state_tx(tx: Any, did: str, state: dict[str, Any], *, now: str,
                                 source: str, actor_did: str | None = None,
                                 app_id: str | None = None) -> list[str]:
    """Writes `state` (from `local_state`) for the community `did` in the transaction `tx`;
    `source` names where it came from (the old instance), `actor_did` who imported (None:
    an operator). Answers what was not restored."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"the bundle's local state has version {state.get('version')!r}; "
                         f"this service reads {STATE_VERSION}")
    not_restored: list[str] = []
    settings = state["settings"]
    await tx.execute(
        "UPDATE communities SET type = ?, roster_visibility = ?, listed = ?, require_user_proof = ?, "
        "description = ?, updated_at = ? WHERE did = ?",
        (settings["type"], settings["roster_visibility"], int(settings["listed"]),
         int(settings["require_user_proof"]), settings["description"], now, did))
    for ban in state["bans"]:
        await tx.execute(
            "INSERT INTO community_bans (community_did, member_did, reason, expires_at, banned_by, "
            "app_id, created_at) VALUES (?, ?, ?, ?, ?, NULL, ?) "
            "ON CONFLICT (community_did, member_did) DO UPDATE SET reason = excluded.reason, "
            "expires_at = excluded.expires_at, banned_by = excluded.banned_by, created_at = excluded.created_at",
            (did, ban["member_did"], ban["reason"], ban["expires_at"], ban["banned_by"], ban["created_at"]))
    for inv in state["invites"]:
        cursor = await tx.execute(
            "INSERT INTO community_invites (community_did, code_hash, max_uses, uses, expires_at, note, "
            "created_by, app_id, created_at, revoked_at, revoked_by) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?) ON CONFLICT (code_hash) DO NOTHING",
            (did, inv["code_hash"], inv["max_uses"], inv["uses"], inv["expires_at"], inv["note"],
             inv["created_by"], inv["created_at"], inv["revoked_at"], inv["revoked_by"]))
        if cursor.rowcount == 0:
            not_restored.append(f"an invite created {inv['created_at']} (its code is already "
                                "used by another community here)")
    await tx.execute(
        "INSERT INTO audit_log (community_did, action, actor_did, target_did, reason, metadata, "
        "app_id, created_at) VALUES (?, 'community.imported', ?, NULL, NULL, ?, ?, ?)",
        (did, actor_did, json.dumps({"from": source, "importedEntries": len(state["audit"]),
                                     "byOperator": actor_did is None}), app_id, now))
    for entry in state["audit"]:
        metadata = {**entry["metadata"], "imported": True, "importedFrom": source,
                    "originalId": entry["id"]}
        await tx.execute(
            "INSERT INTO audit_log (community_did, action, actor_did, target_did, reason, metadata, "
            "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
            (did, entry["action"], entry["actor_did"], entry["target_did"], entry["reason"],
             json.dumps(metadata), entry["created_at"]))
    return not_restored


PAYLOAD_KIND = "commonroom-community-handover"


class ImportRefused(Exception):
    """An import refused before anything changed: `status` and `code` for the API's
    answer, the message for people."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def handover_payload(*, did: str, handle: str, pds_url: str, app_password: str,
                     source: str, state: dict[str, Any], community: Any = None) -> dict[str, Any]:
    """What a handover bundle seals: the account (DID, handle, PDS, an app password created
    for the handover), the instance it comes from, the local state and, from the index row
    `community`, what the importing side needs to make its own (name, creator, kind)."""
    payload = {"kind": PAYLOAD_KIND, "did": did, "handle": handle, "pds": pds_url,
               "appPassword": app_password, "from": source, "local": state}
    if community is not None:
        payload["community"] = {"displayName": community["display_name"],
                                "creatorDid": community["creator_did"],
                                "proofRkey": community["proof_rkey"],
                                "accountKind": community["account_kind"],
                                "createdAt": community["created_at"]}
    return payload


async def open_for_import(db: Any, data: bytes, passphrase: str) -> dict[str, Any]:
    """The payload of a handover bundle this instance may import, or ImportRefused with
    nothing read into the index: a bundle that does not open (a wrong passphrase, a changed
    bundle, not a bundle), a payload of another kind, or a DID this instance already has."""

    try:
        payload = open_bundle(data, passphrase)
    except BundleError as exc:
        status = 413 if exc.code == "bundle_too_large" else 400
        raise ImportRefused(status, exc.code, str(exc)) from None
    if not isinstance(payload, dict) or payload.get("kind") != PAYLOAD_KIND:
        raise ImportRefused(400, "bundle_malformed", "the bundle does not hold a community handover")
    for key in ("did", "pds", "appPassword"):
        if not isinstance(payload.get(key), str) or not payload[key]:
            raise ImportRefused(400, "bundle_malformed", f"the bundle's handover lacks {key}")
    if not isinstance(payload.get("local"), dict) or payload["local"].get("version") != STATE_VERSION:
        raise ImportRefused(400, "bundle_unsupported",
                            "the bundle's local state is of a version this service does not read")
    existing = await db.fetchone("SELECT state FROM communities WHERE did = ?", (payload["did"],))
    if existing is not None:
        raise ImportRefused(409, "community_exists",
                            f"{payload['did']} is already a community here; nothing was imported")
    return payload


def account_after_delete(community: Any, *, records_deleted: bool) -> dict[str, Any]:
    """What became of a deleted community's account, for the answer and the page: this
    service never deletes or deactivates the account (that needs its owner), so it is left
    as is on its PDS, without credentials held here."""
    provisioned = community["account_kind"] == "provisioned"
    records = ("its profile and admins records were removed, so no client shows it as a "
               "community; the membership proofs stay as history" if records_deleted
               else "its records were left in place (communities.delete_pds_records is off)")
    if provisioned:
        detail = (f"The account {community['handle']} stays on {community['pds_url']}, not "
                  "deactivated and not deleted: this service no longer holds its credentials, "
                  f"and {records}. Its handle stays taken. Whoever holds its recovery key still "
                  "controls it (they can sign in again, move it or have it deleted); the PDS "
                  "operator can delete it.")
    else:
        detail = (f"The account {community['handle']} returns to its owner on "
                  f"{community['pds_url']}, not deactivated and not deleted; {records}. The "
                  "app password this service used can be revoked in the account's settings.")
    return {"did": community["did"], "handle": community["handle"], "pds": community["pds_url"],
            "kind": community["account_kind"], "status": "left_as_is", "deactivated": False,
            "recordsDeleted": records_deleted, "detail": detail}


#: What a handover does not carry (the answer and the page list it; docs/communities.md).
NOT_CARRIED = [
    "App grants, API keys and webhooks: apps are registered per instance; on the new instance the "
    "admins allow the apps they use again, and apps register their webhooks there.",
    "Join requests waiting for a decision: the people who asked ask again there.",
    "Sign-in sessions of this instance: people sign in on the new instance.",
    "The event cursor of subscribers: apps subscribe to the new instance's events afresh.",
    "The account's own password and the rotation key this service held: forgotten here. The "
    "community's recovery key (its owner's) still controls the identity.",
    "Reports already settled: their decisions are in the audit log, which travels (open reports "
    "travel, for the moderators there).",
]

APP_PASSWORD_NAME = "commonroom-handover"


def source_url(app: Any) -> str:
    """This instance as the bundle names it (`from`)."""
    return app.config.server.base_url.rstrip("/")


async def export(app: Any, community: Any, actor: Any, *, to: str | None = None,
                 operator: bool = False) -> dict[str, Any]:
    """Hand the community over: its primary admin (through a managing app, or the web app)
    or an operator at the command line. Under the community's lock: check, read the local
    state, make an app password on the community's PDS, seal the bundle under a new
    passphrase, then in one transaction forget the community here (`mark_handed_over`'s
    transaction). A failure before that transaction leaves the community as it was (an app
    password made for a failed try stays on the PDS unused: the owner can revoke it).
    Answers the bundle's bytes, the passphrase (shown once) and what does not travel."""
    did = community["did"]
    to = destination(to)
    if not operator:
        await require_manager(app.db, community, actor.app_id)
        require_role(await member_status(app.db, did, actor.did), primary=True)
    async with community_lock(app, did):
        row = await store.get_community(app.db, did)
        if row is None or row["state"] != "active":
            raise await gone(app.db, did)  # a handover that finished meanwhile: 410, where it went
        if not operator:
            # a transfer may just have finished: the role is checked again under the lock
            require_role(await member_status(app.db, did, actor.did), primary=True)
        if await move_of(app.db, did) is not None:
            raise ApiError(409, "community_moving", "The community is moving to another PDS: hand it over "
                                                    "once the move has finished.")
        state = await local_state(app.db, did)
        plugin_states = dict(await app.call_hook(app.pm.hook.cr_handover_state, app=app, community_did=did))
        password = await pds(handover_credential(app, did, f"{APP_PASSWORD_NAME}-{app.clock.iso_now()[:10]}"))
        payload = handover_payload(did=did, handle=row["handle"], pds_url=row["pds_url"], app_password=password,
                                   source=source_url(app), state=state, community=row)
        payload["plugins"] = plugin_states
        passphrase = bundle.new_passphrase()
        sealed = bundle.seal(payload, passphrase)
        del payload, password
        await _forget_tx_locked(app, did, moved_to=to or "", actor_did=actor.did if actor else "operator",
                                operator=operator)
    await _drop_session(app, did)
    return {"did": did, "handle": row["handle"], "displayName": row["display_name"], "pds": row["pds_url"],
            "movedTo": to or None, "bundle": sealed, "filename": bundle_filename(row["handle"]),
            "passphrase": passphrase,
            "passphraseNote": "This passphrase opens the bundle. It is shown only now: this service keeps no "
                              "copy. Give it to the new instance's operator apart from the bundle (the bundle "
                              "holds a password to the community's account).",
            "carried": {"bans": len(state["bans"]), "invites": len(state["invites"]),
                        "auditEntries": len(state["audit"])},
            "notCarried": NOT_CARRIED}


def bundle_filename(handle: str) -> str:
    """The bundle file's name: the handle, made safe for a file system."""
    safe = "".join(ch if ch.isalnum() or ch in ".-" else "-" for ch in handle)[:80] or "community"
    return f"{safe}.crhandover"


async def mark_handed_over(app: Any, did: str, *, moved_to: str, actor_did: str) -> None:
    """After the bundle left: in one transaction, this instance forgets the community's index
    and its stored credentials and remembers where it went (`community_handovers`; `moved_to`
    may be empty: not said), with a `community.handed_over` audit entry; its DID then answers
    410 `community_moved`. The cached PDS session is dropped after, best effort."""

    async with community_lock(app, did):
        await _forget_tx_locked(app, did, moved_to=moved_to, actor_did=actor_did)
    await _drop_session(app, did)


async def _forget_tx_locked(app: Any, did: str, *, moved_to: str, actor_did: str,
                            operator: bool = False) -> None:

    async with app.db.transaction("communities.handed_over") as tx:
        row = await store.get_community(tx, did)
        if row is None:
            raise LookupError(f"{did} is not a community of this service")
        now = app.clock.iso_now()
        await store.insert_entry_tx(
            tx, community_did=did, action="community.handed_over", actor_did=actor_did,
            target_did=None, reason=None,
            metadata={"movedTo": moved_to or None, "handle": row["handle"], "byOperator": operator},
            app_id=None, now=now)
        await tx.execute(
            "INSERT INTO community_handovers (did, handle, display_name, moved_to, handed_over_by, "
            "handed_over_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (did) DO UPDATE SET "
            "handle = excluded.handle, display_name = excluded.display_name, moved_to = excluded.moved_to, "
            "handed_over_by = excluded.handed_over_by, handed_over_at = excluded.handed_over_at",
            (did, row["handle"], row["display_name"], moved_to, actor_did, now))
        await app.writes.forget_community_tx(tx, did)
        await store.delete_community_tx(tx, did)
        await delete_account_tx(tx, did)


async def _drop_session(app: Any, did: str) -> None:
    try:
        await forget_account(app, did)
    except Exception:  # noqa: BLE001 (handed over already; the session cache is best effort)
        pass


async def import_bundle(app: Any, data: bytes, passphrase: str, *, importer_did: str | None,
                        app_id: str | None = None) -> dict[str, Any]:
    """Import a handover bundle: open it (refusals as `open_for_import`, nothing changed),
    sign in to the account with its app password (400 `bundle_credentials_refused` when the
    PDS no longer takes it), then in one transaction index the community (invisible while
    it is rebuilt) with its local state and the audit log's `community.imported` entry and
    imported history, then `reindex` from the repo (members, admins, roles, profile,
    pictures). A failure after the sign-in removes what the import wrote and the stored
    credentials: nothing changed, the same bundle can be imported again.
    `importer_did`: who imports (a signed-in person), None for an operator."""

    payload = await open_for_import(app.db, data, passphrase)
    did = payload["did"]
    if importer_did is not None:  # people import through "bring your own account"
        if not app.config.plugin("communities").allow_bring_own:
            raise ApiError(403, "bring_own_disabled", "This service does not accept existing accounts.")
        # an instance-wide policy (cr_check_action) may refuse them; an import brings an account,
        # which a policy that holds creations for approval refuses (cr_hold_action)
        await app.check_action("community.create", importer_did, app_id=app_id)
        if await app.hold_action("community.create", importer_did, app_id=app_id,
                                 data={"identifier": did, "import": True}) is not None:
            raise ApiError(403, "creation_not_allowed", "This instance holds new communities for its operators' "
                                                        "approval: ask them to import the bundle.")
    try:
        account = await pds(bring_own_account(app, did, payload["appPassword"]))
    except ApiError as exc:
        if exc.code in ("invalid_credentials", "account_unavailable", "app_password_required"):
            raise ImportRefused(400, "bundle_credentials_refused",
                                f"The community's PDS no longer accepts the bundle's app password ({exc.message}): "
                                "it was revoked, or the account was deactivated or moved. Nothing was imported; "
                                "ask the community's owner for a new handover.") from None
        raise
    if account.did != did:
        await forget_account(app, account.did)
        raise ImportRefused(400, "bundle_malformed", "the bundle's app password signs in to another account")
    meta = payload.get("community") if isinstance(payload.get("community"), dict) else {}
    now = app.clock.iso_now()
    source = payload.get("from") if isinstance(payload.get("from"), str) else "another instance"
    settings = payload["local"]["settings"]
    last = await app.db.fetchone("SELECT COALESCE(MAX(id), 0) AS id FROM audit_log")
    try:
        async with app.db.transaction("communities.import") as tx:
            await store.insert_community_tx(
                tx, did=did, handle=account.handle, display_name=str(meta.get("displayName") or account.handle)[:64],
                description=settings.get("description") or "", type=settings.get("type") or "open",
                pds_url=account.pds_url, account_kind="brought",
                creator_did=str(meta.get("creatorDid") or importer_did or did), creator_app_id=None,
                proof_rkey=str(meta.get("proofRkey") or new_tid(app.clock)), now=now)
            not_restored = await restore_local_state_tx(tx, did, payload["local"], now=now, source=source,
                                                        actor_did=importer_did, app_id=app_id)
            states = payload.get("plugins") if isinstance(payload.get("plugins"), dict) else {}
            try:
                for said in await app.call_hook(app.pm.hook.cr_handover_restore_tx, app=app, tx=tx,
                                                community_did=did, states=states):
                    not_restored.extend(said)
            except (ValueError, KeyError, TypeError) as exc:
                raise ImportRefused(400, "bundle_unsupported",
                                    f"a plugin could not read its part of the bundle ({exc}); nothing was imported") \
                    from None
            await tx.execute("DELETE FROM community_handovers WHERE did = ?", (did,))  # it came back
    except BaseException:
        await forget_account(app, did)  # the transaction wrote nothing
        raise
    try:
        summary = await reindex(app, did)
    except BaseException:
        # Put things back as they were: the index row, its local state and audit entries,
        # the stored credentials. The same bundle can be imported again.
        async with app.db.transaction("communities.import_undone") as tx:
            await app.writes.forget_community_tx(tx, did)
            await store.delete_community_tx(tx, did)
            await tx.execute("DELETE FROM audit_log WHERE community_did = ? AND id > ?", (did, last["id"]))
            await tx.execute("DELETE FROM community_bans WHERE community_did = ?", (did,))
            await tx.execute("DELETE FROM community_invites WHERE community_did = ?", (did,))
        await forget_account(app, did)
        raise
    await _fetch_profiles(app, did, [b["member_did"] for b in payload["local"]["bans"]])
    return {"did": did, "handle": account.handle, "pds": account.pds_url, "from": source,
            "members": summary["members"], "admins": summary["admins"],
            "restored": {"bans": len(payload["local"]["bans"]), "invites": len(payload["local"]["invites"]),
                         "auditEntries": len(payload["local"]["audit"])},
            "notRestored": not_restored, "notCarried": NOT_CARRIED}


async def _fetch_profiles(app: Any, did: str, others: list[str], concurrency: int = 8) -> None:
    """The handles, names and avatars of the members and of `others` (the banned) for the
    lists (a join fetches them; a rebuilt index has none), best effort, a few at a time."""


    members = list(dict.fromkeys([m["member_did"] for m in await store.all_members_tx(app.db, did)] + others))
    gate = asyncio.Semaphore(concurrency)

    async def one(member: str) -> Any:
        async with gate:
            try:
                return member, await fetch_profile(app, member)
            except Exception:  # noqa: BLE001 (best effort: the list shows the DID)
                return member, None

    found = await asyncio.gather(*(one(m) for m in members))
    async with app.db.transaction("communities.import_profiles") as tx:
        for member, profile in found:
            await store_profile_tx(app, tx, member, profile)
