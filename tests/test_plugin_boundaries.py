"""Plugins talk through the core: a built-in plugin imports another plugin's modules only
where it declares that plugin in `cr_plugin_requires` (or, for one it can do without, in
its package's `OPTIONAL_PLUGINS`) and the module is one the other plugin lists in its
`PUBLIC_MODULES` (issue 12; docs/plugins.md, "Plugin boundaries"). What
several need lives in the core (daemon/access.py, app.writes) or behind a hook
(cr_user_repo, cr_write_kinds)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from daemon.plugins import build_plugin_manager

PLUGINS = Path(__file__).resolve().parent.parent / "plugins"


def imported_modules(path: Path) -> set[tuple[str, str]]:
    """(plugin, module) for each ``plugins.<plugin>[.<module>]`` a module imports; the
    module is "" for the package itself."""
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from plugins.x import y`: y may be a module of x
            if node.module.count(".") == 1:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "plugins" and len(parts) > 1:
                found.add((parts[1], parts[2] if len(parts) > 2 else ""))
    return found


def requirements() -> dict[str, set[str]]:
    pm = build_plugin_manager((), (), load_entry_points=False)
    out: dict[str, set[str]] = {}
    for name, plugin in pm.list_name_plugin():
        impl = getattr(plugin, "cr_plugin_requires", None)
        out[name] = set(impl() or []) if impl else set()
    return out


def test_plugins_import_only_the_public_modules_of_plugins_they_require():
    required = requirements()
    crossings = []
    for package in sorted(p for p in PLUGINS.iterdir() if (p / "__init__.py").is_file()):
        for module in sorted(package.rglob("*.py")):
            for other, name in sorted(imported_modules(module)):
                if other == package.name:
                    continue
                public = getattr(importlib.import_module(f"plugins.{other}"), "PUBLIC_MODULES", ())
                optional = set(getattr(importlib.import_module(f"plugins.{package.name}"), "OPTIONAL_PLUGINS", ()))
                if other not in required.get(package.name, set()) | optional or name not in public:
                    crossings.append(f"{module.relative_to(PLUGINS.parent)} imports plugins.{other}.{name}")
    assert crossings == []


def test_the_rule_catches_an_undeclared_or_private_import(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from plugins.communities import access\nimport plugins.oauth.client\n")
    assert imported_modules(module) == {("communities", "access"), ("oauth", "client")}
    assert "access" not in importlib.import_module("plugins.communities").PUBLIC_MODULES
