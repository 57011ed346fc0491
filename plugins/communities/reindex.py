"""`commonroom reindex <did>`: rebuild a community's local index from its repo.

The repo is the source of truth for the profile, the admins list, the members (one
`membershipProof` per member) and the roles (the `roles` record: custom roles, and who
holds which, current members only). Members keep their local row (join order, membership
record) when their proof is still there; members without a proof are dropped; proofs
without a local row become members. Write intents of the community are cleared (the
repo now says what happened). Join requests and app grants are local-only and stay.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Callable

from daemon.plugin.atproto import blob_cid
from daemon.plugin.cli import add_json_flag, fail, print_rows, progress as show_progress
from plugins.communities import handover_cli
from plugins.communities.steps import audit_tx, community_lock, community_repo_for, nsid
from plugins.communities import roles
from plugins.communities.capabilities import plugin_capabilities
from plugins.communities import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application


async def reindex(app: "Application", did: str,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    row = await store.get_community(app.db, did)
    if row is None:
        raise LookupError(f"{did} is not a community of this service")
    async with community_lock(app, did):
        repo = await community_repo_for(app, did)
        profile = await repo.get_record(nsid(app, "profile"), "self")
        admins = await repo.get_record(nsid(app, "admins"), "self")
        roles_record = await repo.get_record(nsid(app, "roles"), "self")
        proofs: dict[str, tuple[str, dict[str, Any]]] = {}
        cursor = None
        while True:
            records, cursor = await repo.list_records(nsid(app, "membershipProof"), limit=100,
                                                      cursor=cursor)
            if progress is not None:
                progress(f"read {len(proofs) + len(records)} membership proof(s) so far")
            for r in records:
                member = r["value"].get("memberDid")
                if isinstance(member, str):
                    # newest first: keep the oldest proof per member (the later ones are duplicates)
                    proofs[member] = (r["uri"].rsplit("/", 1)[-1], {**r["value"], "_cid": r["cid"]})
            if not cursor:
                break
        now = app.clock.iso_now()
        async with app.db.transaction("communities.reindex") as tx:
            fields = profile_fields(row, profile["value"]) if profile is not None else {}
            await store.update_community_tx(tx, did, now, state="active", **fields)
            local = {m["member_did"]: m for m in await store.all_members_tx(tx, did)}
            added = removed = 0
            for member_did in set(local) - set(proofs):
                await store.delete_member_tx(tx, did, member_did)
                removed += 1
            # oldest proof first (rkeys are TIDs): members added keep the order they joined in
            for member_did, (rkey, value) in sorted(proofs.items(), key=lambda item: item[1][0]):
                if member_did not in local:
                    await store.insert_member_tx(
                        tx, community_did=did, member_did=member_did,
                        now=value.get("confirmedAt") or now, proof_rkey=rkey, proof_cid=value["_cid"],
                        membership_uri=value.get("membershipUri"), membership_cid=value.get("cid"),
                        app_id=None)
                    added += 1
                await store.delete_request_tx(tx, did, member_did)
            ordered = []
            for entry in (admins["value"].get("admins") or []) if admins else []:
                if isinstance(entry, dict) and entry.get("did") in proofs:
                    ordered.append((entry["did"], entry.get("addedAt") or now))
            await store.set_admins_tx(tx, did, ordered)
            rebuilt = await roles.rebuild_tx(tx, did, roles_record["value"] if roles_record else None,
                                             {d: v.get("confirmedAt") or now for d, (_, v) in proofs.items()},
                                             now, plugin_capabilities(app))
            counts = await store.count_tx(tx, did)
            await store.set_counts_tx(tx, did, *counts)
            await app.writes.forget_community_tx(tx, did)
            summary = {"members": counts[0], "pending": counts[1], "added": added, "removed": removed,
                       "admins": [d for d, _ in ordered], **rebuilt}
            await audit_tx(app, tx, did, "community.reindexed", None, None, metadata=summary)
    return summary


def profile_fields(row: Any, value: dict[str, Any]) -> dict[str, Any]:
    """The index columns of a community's ``profile`` record as read from its repo (a
    missing or unknown name or type keeps the index's)."""
    fields = {"display_name": value.get("displayName") or row["display_name"],
              "description": value.get("description") or "",
              "type": value.get("type") if value.get("type") in ("open", "admin-approved", "private")
              else row["type"]}
    for image in ("avatar", "banner"):
        blob = value.get(image)
        fields[f"{image}_cid"] = blob_cid(blob)
        fields[f"{image}_mime"] = blob.get("mimeType") if isinstance(blob, dict) else None
        fields[f"{image}_size"] = blob.get("size") if isinstance(blob, dict) else None
    return fields


def cli_commands() -> dict[str, Any]:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("did", help="the community's DID")

    async def run(app: "Application", args: argparse.Namespace) -> int:
        try:
            summary = await reindex(app, args.did, progress=show_progress)
        except LookupError as exc:
            return fail(f"reindex: {exc}")
        print(f"reindexed {args.did}: {summary['members']} member(s), {summary['pending']} pending, "
              f"{summary['added']} added, {summary['removed']} removed, admins {summary['admins']}")
        return 0

    def add_communities(parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="every community, any state or type, newest first")
        listing.add_argument("--query", help="only those whose name, handle or description match")
        add_json_flag(listing)
        handover_cli.add_actions(actions)
        moving = actions.add_parser("move", help="move a community's account to another PDS (resumes an "
                                                 "interrupted move); prints each step")
        moving.add_argument("did", help="the community's DID")
        moving.add_argument("--to", dest="to_pds", help="the new PDS's address (https://…); not needed to resume")
        moving.add_argument("--invite-code", help="an invite code, when the new PDS asks for one")
        add_json_flag(moving)
        keying = actions.add_parser(
            "recovery-key", help="give a community made before recovery keys a recovery key (first) and this "
                                 "service's rotation key (second); its PDS signs with an e-mailed token")
        keying.add_argument("did", help="the community's DID")
        keying.add_argument("--request", action="store_true",
                            help="ask the PDS to e-mail the token to the account's address, then stop")
        keying.add_argument("--token", help="the token the PDS e-mailed")
        keying.add_argument("--did-key", help="the owner's key (did:key:…); without it one is made and printed once")
        add_json_flag(keying)

    async def communities(app: "Application", args: argparse.Namespace) -> int:
        if args.action in handover_cli.ACTIONS:
            return await handover_cli.run(app, args)
        if args.action == "move":
            return await move_command(app, args)
        if args.action == "recovery-key":
            return await recovery_key_command(app, args)
        query = store.fts_query(args.query) if args.query else None
        if args.query and query is None:
            return fail("--query needs a word to search for", 2)
        rows = [{"did": r["did"], "handle": r["handle"], "name": r["display_name"], "type": r["type"],
                 "members": r["member_count"], "pending": r["pending_count"], "state": r["state"],
                 "creator": r["creator_did"], "createdAt": r["created_at"]}
                for r in await store.all_communities(app.db, query)]
        return print_rows(rows, ("did", "handle", "name", "type", "members", "pending", "state"), args.json)

    async def move_command(app: "Application", args: argparse.Namespace) -> int:
        import json

        from daemon.plugin import ApiError
        from daemon.plugin.atproto import move_of
        from plugins.communities import move
        row = await store.get_community(app.db, args.did)
        if row is None:
            return fail(f"communities move: no community {args.did} here")
        try:
            if await move_of(app.db, args.did) is None:
                if not args.to_pds:
                    return fail("communities move: --to PDS_URL is needed (no move of it is under way)", 2)
                await move.start(app, row, None, args.to_pds,
                                 invite_code=args.invite_code, operator=True)
            while (step := await move_of(app.db, args.did)) is not None:
                if not args.json:
                    show_progress(f"{move.STEP_WORDS[step['step']]}…")
                await move.step_once(app, args.did)
        except ApiError as exc:
            return fail(f"communities move: {exc.message}")
        done = await store.get_community(app.db, args.did)
        if args.json:
            print(json.dumps({"did": args.did, "pdsUrl": done["pds_url"], "state": "moved"}))
        else:
            print(f"moved {args.did} to {done['pds_url']}")
        return 0

    async def recovery_key_command(app: "Application", args: argparse.Namespace) -> int:
        import json

        from daemon.plugin import ApiError
        from daemon.plugin.atproto import RotationKey, add_recovery_key, request_plc_token, require_did_key
        if await store.get_community(app.db, args.did) is None:
            return fail(f"communities recovery-key: no community {args.did} here")
        try:
            if args.request:
                address = await request_plc_token(app, args.did)
                print(f"the PDS e-mailed a token to {address}; run again with --token TOKEN")
                return 0
            made = None if args.did_key else RotationKey.generate()
            did_key = require_did_key(args.did_key, "--did-key") if args.did_key else made.did_key  # type: ignore[union-attr]
            keys = await add_recovery_key(app, args.did, did_key, token=args.token)
        except ApiError as exc:
            return fail(f"communities recovery-key: {exc.message}")
        if args.json:
            print(json.dumps({"did": args.did, "rotationKeys": keys, "recoveryKey": did_key,
                              **({"privateKeyHex": made.hex} if made else {})}))
            return 0
        print(f"{args.did}: its identity's rotation keys are now {', '.join(keys)}")
        if made is not None:
            print("The recovery key's private half, shown this once (neither stored nor logged): give it to the "
                  "community's owner to keep offline; with it they control the identity without this service:")
            print(made.hex)
        return 0

    return {"reindex": ("rebuild a community's local index from its repo on the PDS", add_arguments, run),
            "communities": ("list every community (operator): communities list", add_communities, communities)}
