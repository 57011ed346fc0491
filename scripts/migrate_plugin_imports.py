#!/usr/bin/env python3
"""Rewrite `from daemon.plugin import a, b` in the given Python files so that each name is
imported from its home: `daemon.plugin` or one of its documented submodules
(`daemon.plugin.atproto`, `.http`, `.cli`, ...). For plugins written against the earlier,
flat `daemon.plugin` (docs/plugins.md, "The plugin API").

    .venv/bin/python scripts/migrate_plugin_imports.py $(grep -rl "daemon.plugin import" my_plugin/)

The homes are read from the modules' own ``__all__``; a name that is in none of them is
reported and its statement left alone. Prints the files it changed.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def homes() -> dict[str, str]:
    import daemon.plugin as root
    out = {name: "daemon.plugin" for name in root.__all__}
    for info in pkgutil.iter_modules(root.__path__):
        module = importlib.import_module(f"daemon.plugin.{info.name}")
        for name in getattr(module, "__all__", ()):
            out.setdefault(name, module.__name__)
    return out


def render(module: str, names: list[str], indent: str) -> str:
    items = ", ".join(names)
    line = f"{indent}from {module} import {items}"
    if len(line) <= 115:
        return line
    head = f"{indent}from {module} import ("
    return head + ("\n" + " " * len(head)).join(textwrap.wrap(items, 115 - len(head))) + ")"


def rewrite(path: Path, home: dict[str, str]) -> bool:
    src = path.read_text()
    lines = src.splitlines(keepends=True)
    edits = []
    for node in ast.walk(ast.parse(src, str(path))):
        if not (isinstance(node, ast.ImportFrom) and node.module == "daemon.plugin" and node.level == 0):
            continue
        unknown = [a.name for a in node.names if a.name not in home]
        if unknown:
            print(f"{path}:{node.lineno}: not public any more: {', '.join(unknown)}", file=sys.stderr)
            continue
        groups: dict[str, list[str]] = {}
        for a in node.names:
            groups.setdefault(home[a.name], []).append(f"{a.name} as {a.asname}" if a.asname else a.name)
        if list(groups) == ["daemon.plugin"]:
            continue
        first = lines[node.lineno - 1]
        indent = first[:len(first) - len(first.lstrip())]
        tail = lines[node.end_lineno - 1][node.end_col_offset:]
        comment = "  # " + tail.split("#", 1)[1].strip() if "#" in tail else ""
        order = sorted(groups, key=lambda m: (m != "daemon.plugin", m))
        text = "\n".join(render(m, groups[m], indent) for m in order) + comment + "\n"
        edits.append((node.lineno - 1, node.end_lineno, text))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
    if edits:
        path.write_text("".join(lines))
    return bool(edits)


def main(argv: list[str]) -> int:
    home = homes()
    for name in argv:
        if rewrite(Path(name), home):
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
