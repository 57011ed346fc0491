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
    add_json_flag(actions.add_parser("apps", help="every app: owner, state, rate limit (as the console's Apps page)"))
    deactivate = actions.add_parser("app-deactivate", help="deactivate any app for good: its key is refused")
    deactivate.add_argument("app_id")
    _add_as(deactivate)
    limit = actions.add_parser("app-rate-limit", help="set any app's rate limit, also above the default "
                                                      "(0 requests: back to the default)")
    limit.add_argument("app_id")
    limit.add_argument("max_requests", type=int)
    limit.add_argument("window_seconds", type=float, nargs="?", default=60.0)
    _add_as(limit)

    def acting(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        _add_as(parser)
        return parser

    ban = acting(actions.add_parser("ban", help="ban a DID or a handle domain (*.spam.example) on the instance"))
    ban.add_argument("subject", help="did:… or *.domain")
    ban.add_argument("--reason", required=True, help="why (kept in the instance audit log)")
    ban.add_argument("--expires", help="30d (days from now) or a date (2027-01-31); default: until lifted")
    ban.add_argument("--end-memberships", action="store_true",
                     help="also end every membership of the DID and decline its pending join requests (member.removed, member.rejected events)")
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


def _add_as(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--as", dest="operator", metavar="DID",
                        help="the operator acting (one of instance.operators), named in the audit log; "
                             "optional when config.yaml names one operator")
    add_json_flag(parser)


def operator_of(app: Any, args: argparse.Namespace) -> str | None:
    """The operator acting: `--as` (which must be one of instance.operators), or the only one
    config.yaml names; None after saying why not."""
    operators = app.config.plugin("instance").operators
    if args.operator:
        if not app.config.plugin("instance").is_operator(args.operator):
            fail(f"{args.operator} is not one of instance.operators", 2)
            return None
        return str(args.operator)
    if len(operators) == 1:
        return str(operators[0])
    fail("name the operator acting with --as DID (one of instance.operators in config.yaml)", 2)
    return None

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


async def _apps(app: Any, args: argparse.Namespace) -> int:
    from daemon.plugin.services import AppsService
    service = app.service(AppsService)
    if service is None:
        return fail("the apikeys plugin is disabled: there are no apps")
    default = service.default_limit()
    rows = [{**service.app_json(r, default), "owner": r["owner_did"]} for r in await service.all_apps()]
    if args.json:
        return print_rows(rows, (), True)
    return print_rows([{"appId": r["appId"], "name": r["name"], "owner": r["owner"], "active": r["active"],
                        "rateLimit": f"{r['rateLimit']['maxRequests']}/{r['rateLimit']['windowMs'] / 1000:g}s"
                        + ("" if r["rateLimit"]["custom"] else " (default)")} for r in rows],
                      ("appId", "name", "owner", "active", "rateLimit"), False)


async def _app_action(app: Any, args: argparse.Namespace) -> int:
    from daemon.plugin.services import AppsService
    operator = operator_of(app, args)
    if operator is None:
        return 2
    service = app.service(AppsService)
    if service is None:
        return fail("the apikeys plugin is disabled: there are no apps")
    try:
        if args.action == "app-deactivate":
            row = await service.operator_deactivate(args.app_id)
            action, detail = "app.deactivate", {}
        else:
            if args.max_requests < 0 or args.window_seconds <= 0:
                return fail("max_requests must be >= 0 and window_seconds > 0", 2)
            requests = args.max_requests or None
            window = args.window_seconds if requests else None
            row = await service.operator_rate_limit(args.app_id, requests, window)
            action, detail = "app.rate_limit", {"limit": f"{requests} per {window:g} s" if requests else "the default"}
    except ApiError as exc:
        return fail(f"{exc.code}: {exc.message}")
    async with app.db.transaction("instance.app_action") as tx:
        await audit.record_tx(tx, app.clock.iso_now(), operator, action, args.app_id, detail, via="cli")
    return print_rows([service.app_json(row, service.default_limit())], ("appId", "active", "rateLimit"), args.json)


async def _acting(app: Any, args: argparse.Namespace) -> int:
    operator = operator_of(app, args)
    if operator is None:
        return 2
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
    from plugins.instance.community_reports import cli_actions
    run = {"operators": _operators, "audit": _audit, "bans": _bans, "requests": _requests,
           "approve": _decide_request, "decline": _decide_request, "apps": _apps, "app-deactivate": _app_action,
           "app-rate-limit": _app_action, **cli_actions()}.get(args.action, _acting)
    return await run(app, args)


def cli_commands() -> dict[str, Any]:
    return {"instance": ("the instance's operators, bans, suspensions, creation requests, reports, apps and audit "
                         "log: instance operators | audit | ban | unban | bans | suspend | lift | remove | requests | "
                         "approve | decline | reports | decide | apps | app-deactivate | app-rate-limit",
                         _add_instance,
                         _instance)}
