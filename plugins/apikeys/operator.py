"""Operator commands: what only the person running the service may do to any app."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.plugin.cli import add_json_flag, fail, print_rows
from daemon.plugin.storage import AppsTable


def _add_app_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app_id")


def _add_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app_id")
    parser.add_argument("max_requests", type=int, help="requests per window (0: back to the default)")
    parser.add_argument("window_seconds", type=float, nargs="?", default=60.0)


async def _deactivate(app: Any, args: argparse.Namespace) -> int:
    async with app.db.transaction("apps.operator_deactivate") as tx:
        if await AppsTable.get(tx, args.app_id) is None:
            return fail(f"no app {args.app_id}")
        await AppsTable.deactivate_tx(tx, args.app_id, app.clock.iso_now())
    print(f"deactivated {args.app_id}: its API key is refused from now on")
    return 0


async def _rate_limit(app: Any, args: argparse.Namespace) -> int:
    if args.max_requests < 0 or args.window_seconds <= 0:
        return fail("max_requests must be >= 0 and window_seconds > 0", 2)
    requests = args.max_requests or None
    window = args.window_seconds if requests else None
    async with app.db.transaction("apps.operator_rate_limit") as tx:
        if await AppsTable.get(tx, args.app_id) is None:
            return fail(f"no app {args.app_id}")
        await AppsTable.update_tx(tx, args.app_id, app.clock.iso_now(),
                                  rate_limit_requests=requests, rate_limit_window_seconds=window)
    print(f"{args.app_id}: " + (f"{requests} requests per {window:g} s" if requests else "default limit"))
    return 0


async def _list(app: Any, args: argparse.Namespace) -> int:
    limits = app.config.rate_limits.api
    rows = []
    for row in await AppsTable.all(app.db):
        custom = row["rate_limit_requests"] is not None
        requests = row["rate_limit_requests"] if custom else limits.requests
        window = row["rate_limit_window_seconds"] if custom else limits.window_seconds
        rows.append({"appId": row["id"], "name": row["name"], "domain": row["domain"],
                     "owner": row["owner_did"], "active": bool(row["active"]),
                     "rateLimit": f"{requests}/{window:g}s" + ("" if custom else " (default)"),
                     "createdAt": row["created_at"]})
    return print_rows(rows, ("appId", "name", "domain", "owner", "active", "rateLimit", "createdAt"), args.json)


def _add_apps(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add_json_flag(actions.add_parser("list", help="every app: id, name, domain, owner, state, rate limit"))
    _add_app_id(actions.add_parser("deactivate", help="deactivate an app: its key is refused from now on"))
    _add_limit(actions.add_parser("rate-limit", help="set an app's rate limit, also above the default"))


async def _apps(app: Any, args: argparse.Namespace) -> int:
    return await {"list": _list, "deactivate": _deactivate, "rate-limit": _rate_limit}[args.action](app, args)


def cli_commands() -> dict[str, Any]:
    return {
        "apps": ("list and act on any app (operator): apps list | deactivate | rate-limit", _add_apps, _apps),
        "app-deactivate": ("deactivate any app (operator)", _add_app_id, _deactivate),
        "app-rate-limit": ("set any app's rate limit, also above the default (operator)", _add_limit,
                           _rate_limit),
    }
