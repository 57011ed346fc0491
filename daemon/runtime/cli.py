"""Helpers for operator commands (`cr_cli_commands`): errors to stderr with a non-zero
exit status, listings as aligned columns or, with ``--json``, one JSON object a line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def fail(message: str, status: int = 1) -> int:
    """Print `message` to stderr; return the exit status for the command to return."""
    print(f"commonroom: {message}", file=sys.stderr)
    return status


def progress(message: str) -> None:
    """A progress line for a long operation (stderr, so stdout stays the result)."""
    print(message, file=sys.stderr, flush=True)


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object a line instead of a table")


def print_rows(rows: Iterable[dict[str, Any]], columns: Sequence[str], as_json: bool) -> int:
    """Print `rows` (dicts) as a table of `columns`, or as JSON lines; return 0."""
    rows = list(rows)
    if as_json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return 0
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    if not rows:
        print("(none)")
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)
