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

import json
from typing import Any

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
                                 source: str) -> list[str]:
    """Writes `state` (from `local_state`) for the community `did` in the transaction `tx`;
    `source` names where it came from (the old instance). Answers what was not restored."""
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
        "app_id, created_at) VALUES (?, 'community.imported', NULL, NULL, NULL, ?, NULL, ?)",
        (did, json.dumps({"from": source, "importedEntries": len(state["audit"])}), now))
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
                     source: str, state: dict[str, Any]) -> dict[str, Any]:
    """What a handover bundle seals: the account (DID, handle, PDS, an app password created
    for the handover), the instance it comes from and the local state."""
    return {"kind": PAYLOAD_KIND, "did": did, "handle": handle, "pds": pds_url,
            "appPassword": app_password, "from": source, "local": state}


async def open_for_import(db: Any, data: bytes, passphrase: str) -> dict[str, Any]:
    """The payload of a handover bundle this instance may import, or ImportRefused with
    nothing read into the index: a bundle that does not open (a wrong passphrase, a changed
    bundle, not a bundle), a payload of another kind, or a DID this instance already has."""
    from plugins.communities.bundle import BundleError, open_bundle

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


async def mark_handed_over(app: Any, did: str, *, moved_to: str, actor_did: str) -> None:
    """After the bundle left: in one transaction, this instance forgets the community's index
    and its stored credentials and remembers where it went (`community_handovers`), with a
    `community.handed_over` audit entry; its DID then answers 410 `community_moved`. The
    cached PDS session is dropped after, best effort."""
    from daemon.plugin.atproto import delete_account_tx, forget_account
    from plugins.communities import store
    from plugins.communities.steps import community_lock

    async with community_lock(app, did):
        async with app.db.transaction("communities.handed_over") as tx:
            row = await store.get_community(tx, did)
            if row is None:
                raise LookupError(f"{did} is not a community of this service")
            now = app.clock.iso_now()
            await store.insert_entry_tx(
                tx, community_did=did, action="community.handed_over", actor_did=actor_did,
                target_did=None, reason=None, metadata={"movedTo": moved_to, "handle": row["handle"]},
                app_id=None, now=now)
            await tx.execute(
                "INSERT INTO community_handovers (did, handle, display_name, moved_to, handed_over_by, "
                "handed_over_at) VALUES (?, ?, ?, ?, ?, ?)",
                (did, row["handle"], row["display_name"], moved_to, actor_did, now))
            await app.writes.forget_community_tx(tx, did)
            await store.delete_community_tx(tx, did)
            await delete_account_tx(tx, did)
    try:
        await forget_account(app, did)
    except Exception:  # noqa: BLE001 (handed over already; the session cache is best effort)
        pass
