"""``commonroom notices <community>``: the latest notices of a community, for operators."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.plugin import ApiError
from daemon.plugin.cli import add_json_flag, fail, print_rows

from commonroom_noticeboard import board


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("community", help="the community's handle or DID")
    parser.add_argument("--limit", type=int, default=20, help="how many (1 to 100, default 20)")
    add_json_flag(parser)


async def run(app: Any, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 100:
        return fail("--limit must be from 1 to 100", 2)
    community = await board.communities(app).community(args.community)
    if community is None:
        return fail(f"no community {args.community}")
    try:  # the operator reads as the service itself: no app, and private boards too
        notices = await board.latest(app, community, limit=args.limit)
    except ApiError as exc:  # pragma: no cover  (nothing above refuses)
        return fail(exc.message)
    return print_rows(notices, ["id", "createdAt", "authorDid", "text"], args.json)


COMMANDS = {"notices": ("list the latest notices of a community's noticeboard", add_arguments, run)}
