"""Command-line mirror of the operator's tools (docs/operations.md, "Running a public
instance"): for when the web is down. Each command that changes something names the
operator it acts as (`--as DID`, one of `instance.operators`) and is audited."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.plugin import ApiError
from daemon.plugin.atproto import resolve_did
from daemon.plugin.cli import add_json_flag, fail, print_rows
from plugins.instance import audit


def _add_instance(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add_json_flag(actions.add_parser(
        "operators", help="the operators config.yaml names, each resolved: handle and PDS, or why not "
                          "(exit status 1 when one does not resolve)"))
    log = actions.add_parser("audit", help="the instance audit log, newest first, in sentences")
    log.add_argument("--limit", type=int, default=50)
    add_json_flag(log)
    listing = actions.add_parser("requests", help="creation requests (instance.creation: approval): the waiting "
                                                  "ones oldest first, or --all newest first")
    listing.add_argument("--all", action="store_true", help="decided ones too")
    listing.add_argument("--limit", type=int, default=100)
    add_json_flag(listing)
    approve = actions.add_parser("approve", help="approve a creation request: the community is created for the "
                                                 "person (run again to retry a creation that failed)")
    approve.add_argument("id", type=int)
    _add_as(approve)
    decline = actions.add_parser("decline", help="decline a creation request, with a reason the person reads")
    decline.add_argument("id", type=int)
    decline.add_argument("--reason", required=True)
    _add_as(decline)
    from plugins.instance.community_reports import add_cli
    add_cli(actions, _add_as)


def _add_as(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--as", dest="operator", required=True, metavar="DID",
                        help="the operator acting (one of instance.operators), named in the audit log")
    add_json_flag(parser)


def operator_of(app: Any, args: argparse.Namespace) -> str | None:
    """The `--as` DID if it is an operator's; None after saying why not."""
    if not app.config.plugin("instance").is_operator(args.operator):
        fail(f"{args.operator} is not one of instance.operators", 2)
        return None
    return str(args.operator)


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


async def _requests(app: Any, args: argparse.Namespace) -> int:
    from plugins.instance import requests_store
    from plugins.instance.requests import request_json
    if not 1 <= args.limit <= 10_000:
        return fail("--limit must be between 1 and 10000", 2)
    states = ("pending", "approved", "created", "declined") if args.all else requests_store.WAITING
    rows = [request_json(r, for_operator=True)
            for r in await requests_store.listing(app.db, states=states, limit=args.limit)]
    return print_rows(rows, ("id", "state", "requesterDid", "displayName", "createdAt", "error"), args.json)


async def _decide_request(app: Any, args: argparse.Namespace) -> int:
    from plugins.instance import requests
    operator = operator_of(app, args)
    if operator is None:
        return 2
    try:
        if args.action == "approve":
            row = await requests.approve(app, args.id, operator, via="cli")
        else:
            row = await requests.decline(app, args.id, operator, args.reason, via="cli")
    except ApiError as exc:
        return fail(f"{exc.code}: {exc.message}")
    return print_rows([row], ("id", "state", "requesterDid", "displayName", "communityDid"), args.json)


async def _instance(app: Any, args: argparse.Namespace) -> int:
    from plugins.instance.community_reports import cli_actions
    return await {"operators": _operators, "audit": _audit, "requests": _requests, "approve": _decide_request,
                  "decline": _decide_request, **cli_actions()}[args.action](app, args)


def cli_commands() -> dict[str, Any]:
    return {"instance": ("the instance's operators, audit log, creation requests and reports: instance operators | "
                         "audit | requests | approve | decline | reports | decide", _add_instance,
                         _instance)}
