"""Command-line mirror of the operator's tools (docs/operations.md, "Running a public
instance"): for when the web is down. Each command that changes something names the
operator it acts as (`--as DID`, one of `instance.operators`) and is audited."""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.plugin import ApiError
from daemon.plugin.atproto import resolve_did
from daemon.plugin.cli import add_json_flag, fail, print_rows
from plugins.instance import actions, audit, store


def _add_instance(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add_json_flag(actions.add_parser(
        "operators", help="the operators config.yaml names, each resolved: handle and PDS, or why not "
                          "(exit status 1 when one does not resolve)"))
    log = actions.add_parser("audit", help="the instance audit log, newest first, in sentences")
    log.add_argument("--limit", type=int, default=50)
    add_json_flag(log)

    def acting(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--as", dest="operator", metavar="DID",
                            help="the operator acting (one of instance.operators; optional when there is one)")
        add_json_flag(parser)
        return parser

    ban = acting(actions.add_parser("ban", help="ban a DID or a handle domain (*.spam.example) on the instance"))
    ban.add_argument("subject", help="did:… or *.domain")
    ban.add_argument("--reason", required=True, help="why (kept in the instance audit log)")
    ban.add_argument("--expires", help="30d (days from now) or a date (2027-01-31); default: until lifted")
    ban.add_argument("--end-memberships", action="store_true",
                     help="also end every membership of the DID (member.removed events)")
    unban = acting(actions.add_parser("unban", help="lift an instance ban"))
    unban.add_argument("subject", help="did:… or *.domain")
    add_json_flag(actions.add_parser("bans", help="every instance ban, newest first (in force or expired)"))
    suspend = acting(actions.add_parser("suspend", help="suspend a community (hidden, read-only)"))
    suspend.add_argument("community", help="the community's DID")
    suspend.add_argument("--reason", required=True, help="the public reason, shown on its pages")
    lift = acting(actions.add_parser("lift", help="lift a community's suspension"))
    lift.add_argument("community", help="the community's DID")
    remove = acting(actions.add_parser("remove", help="remove a community from the index (its account is kept)"))
    remove.add_argument("community", help="the community's DID")
    remove.add_argument("--reason", required=True, help="why (kept in the instance audit log)")


async def _operators(app: Any, args: argparse.Namespace) -> int:
    rows, broken = [], 0
    for did in app.config.plugin("instance").operators:
        row: dict[str, Any] = {"did": did, "handle": None, "pds": None, "problem": None}
        try:
            info = await resolve_did(app, did, fresh=True)
            row.update(handle=info.handle, pds=info.pds_url)
            if info.handle is None:
                row["problem"] = "its handle does not resolve back to it"
        except ApiError as exc:
            row["problem"] = f"does not resolve: {exc.code}"
            broken += 1
        rows.append(row)
    print_rows(rows, ("did", "handle", "pds", "problem"), args.json)
    if broken:
        return fail(f"{broken} operator DID(s) in instance.operators do not resolve")
    return 0


async def _audit(app: Any, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 10_000:
        return fail("--limit must be between 1 and 10000", 2)
    rows = await audit.entries(app.db, limit=args.limit)
    if args.json:
        return print_rows(rows, (), True)
    return print_rows([{"at": r["at"], "entry": r["sentence"]} for r in rows], ("at", "entry"), False)


def _operator(app: Any, args: argparse.Namespace) -> str | None:
    operators = app.config.plugin("instance").operators
    if args.operator:
        return args.operator if args.operator in operators else None
    return operators[0] if len(operators) == 1 else None


async def _acting(app: Any, args: argparse.Namespace) -> int:
    operator = _operator(app, args)
    if operator is None:
        return fail("name the operator acting with --as DID (one of instance.operators in config.yaml)", 2)
    try:
        if args.action == "ban":
            out = await actions.ban(app, operator, args.subject, reason=args.reason, expires=args.expires,
                                    end_memberships=args.end_memberships, via="cli")
        elif args.action == "unban":
            out = await actions.unban(app, operator, args.subject, via="cli")
        elif args.action == "suspend":
            out = await actions.suspend(app, operator, args.community, reason=args.reason, via="cli")
        elif args.action == "lift":
            out = await actions.lift(app, operator, args.community, via="cli")
        else:
            out = await actions.remove(app, operator, args.community, reason=args.reason, via="cli")
    except ApiError as exc:
        return fail(f"{exc.code}: {exc.message}")
    if args.json:
        print(json.dumps(out, ensure_ascii=False, sort_keys=True))
    else:
        print(", ".join(f"{k}: {v}" for k, v in out.items() if v not in (None, [], "")))
    if out.get("notEnded"):
        return fail(f"{len(out['notEnded'])} membership(s) did not end; run the ban again to retry")
    return 0


async def _bans(app: Any, args: argparse.Namespace) -> int:
    now = app.clock.iso_now()
    rows = [actions.ban_json(row, now) for row in await store.list_bans(app.db, limit=10_000)]
    return print_rows(rows, ("subject", "reason", "expiresAt", "inForce", "bannedBy", "createdAt"), args.json)


async def _instance(app: Any, args: argparse.Namespace) -> int:
    run = {"operators": _operators, "audit": _audit, "bans": _bans}.get(args.action, _acting)
    return await run(app, args)


def cli_commands() -> dict[str, Any]:
    return {"instance": ("the instance's operators, bans, suspensions and audit log: instance operators | audit | "
                         "ban | unban | bans | suspend | lift | remove", _add_instance,
                         _instance)}
