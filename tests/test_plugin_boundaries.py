"""Plugins talk through the core: no built-in plugin imports another plugin's modules
(issue 12). What several need lives in the core (daemon/access.py, app.writes) or
behind a hook (cr_user_repo, cr_write_kinds)."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parent.parent / "plugins"


def imported_plugins(path: Path) -> set[str]:
    """The plugin packages a module imports (``plugins.<name>``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "plugins" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_no_plugin_imports_another_plugins_modules():
    crossings = []
    for package in sorted(p for p in PLUGINS.iterdir() if (p / "__init__.py").is_file()):
        for module in sorted(package.rglob("*.py")):
            for other in sorted(imported_plugins(module) - {package.name}):
                crossings.append(f"{module.relative_to(PLUGINS.parent)} imports plugins.{other}")
    assert crossings == []
