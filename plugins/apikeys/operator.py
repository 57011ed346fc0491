"""Operator commands: what only the person running the service may do to any app."""

from __future__ import annotations

import argparse
from typing import Any

from store import apps as apps_store


def _add_app_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app_id")


def _add_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app_id")
    parser.add_argument("max_requests", type=int, help="requests per window (0: back to the default)")
    parser.add_argument("window_seconds", type=float, nargs="?", default=60.0)


async def _deactivate(app: Any, args: argparse.Namespace) -> int:
    async with app.db.transaction("apps.operator_deactivate") as tx:
        if await apps_store.get_app_tx(tx, args.app_id) is None:
            print(f"no app {args.app_id}")
            return 1
        await apps_store.deactivate_tx(tx, args.app_id, app.clock.iso_now())
    print(f"deactivated {args.app_id}: its API key is refused from now on")
    return 0


async def _rate_limit(app: Any, args: argparse.Namespace) -> int:
    if args.max_requests < 0 or args.window_seconds <= 0:
        print("max_requests must be >= 0 and window_seconds > 0")
        return 2
    requests = args.max_requests or None
    window = args.window_seconds if requests else None
    async with app.db.transaction("apps.operator_rate_limit") as tx:
        if await apps_store.get_app_tx(tx, args.app_id) is None:
            print(f"no app {args.app_id}")
            return 1
        await apps_store.update_app_tx(tx, args.app_id, app.clock.iso_now(),
                                       rate_limit_requests=requests, rate_limit_window_seconds=window)
    print(f"{args.app_id}: " + (f"{requests} requests per {window:g} s" if requests else "default limit"))
    return 0


def cli_commands() -> dict[str, Any]:
    return {
        "app-deactivate": ("deactivate any app (operator)", _add_app_id, _deactivate),
        "app-rate-limit": ("set any app's rate limit, also above the default (operator)", _add_limit,
                           _rate_limit),
    }
