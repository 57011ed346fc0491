"""Helpers for operator commands (`cr_cli_commands`): the `--json` flag, rows as a table or JSON,
progress and failure messages.

    from daemon.plugin.cli import add_json_flag, fail, print_rows

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.runtime.cli import add_json_flag, fail, print_rows, progress

__all__ = [
    "fail", "progress", "add_json_flag", "print_rows",
]
