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


async def _instance(app: Any, args: argparse.Namespace) -> int:
    return await {"operators": _operators, "audit": _audit}[args.action](app, args)


def cli_commands() -> dict[str, Any]:
    return {"instance": ("the instance's operators and audit log: instance operators | audit", _add_instance,
                         _instance)}
