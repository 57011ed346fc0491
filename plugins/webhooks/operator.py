"""Operator commands for webhooks: `commonroom webhooks list` and `webhooks redeliver`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.plugin.cli import add_json_flag, fail, print_rows
from plugins.webhooks.delivery import redeliver_tx
from plugins.webhooks import store as store


def _add(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every webhook: id, app, url, events, state, pending deliveries")
    listing.add_argument("--app", metavar="APP_ID", help="only this app's")
    add_json_flag(listing)
    again = actions.add_parser("redeliver", help="send a delivery again (a new delivery of the same event)")
    again.add_argument("webhook_id")
    again.add_argument("delivery_id", type=int)


async def _list(app: Any, args: argparse.Namespace) -> int:
    rows = [{"webhookId": r["id"], "appId": r["app_id"], "url": r["url"],
             "events": json.loads(r["events_json"] or "[]"), "community": r["community_did"],
             "active": bool(r["active"]) and bool(r["app_active"]), "pending": r["pending"],
             "disabledReason": r["disabled_reason"]}
            for r in await store.all_webhooks(app.db, args.app)]
    return print_rows(rows, ("webhookId", "appId", "url", "events", "community", "active", "pending"), args.json)


async def _redeliver(app: Any, args: argparse.Namespace) -> int:
    async with app.db.transaction("webhooks.operator_redeliver") as tx:
        delivery = await store.get_delivery(tx, args.webhook_id, args.delivery_id)
        if delivery is None:
            return fail(f"webhook {args.webhook_id} has no delivery {args.delivery_id}")
        new_id = await redeliver_tx(tx, delivery, app.clock.time(), app.clock.iso_now())
    print(f"queued delivery {new_id} (a redelivery of {args.delivery_id}); a running daemon sends it "
          "at its next queue poll")
    return 0


async def _run(app: Any, args: argparse.Namespace) -> int:
    return await {"list": _list, "redeliver": _redeliver}[args.action](app, args)


def cli_commands() -> dict[str, Any]:
    return {"webhooks": ("list webhooks and redeliver (operator): webhooks list | redeliver", _add, _run)}
