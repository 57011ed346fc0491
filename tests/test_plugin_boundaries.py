"""Plugins talk through the core: no built-in plugin imports another plugin's modules
(issue 12; docs/plugins.md, "Plugin boundaries"). What several need lives in the core
(app.writes), behind a hook (cr_user_repo, cr_write_kinds), or is a
service a plugin registers on the Application (cr_services; the interfaces in
daemon/runtime/services.py), reached as ``app.communities``, ``app.apps``, ``app.webhooks``..."""

from __future__ import annotations

import ast
from pathlib import Path

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


def test_no_plugin_imports_another_plugins_modules():
    crossings = []
    for package in sorted(p for p in PLUGINS.iterdir() if (p / "__init__.py").is_file()):
        for module in sorted(package.rglob("*.py")):
            for other, name in sorted(imported_modules(module)):
                if other != package.name:
                    crossings.append(f"{module.relative_to(PLUGINS.parent)} imports plugins.{other}.{name}")
    assert crossings == []


def test_the_services_a_plugin_offers_are_typed_attributes_of_the_application():
    from daemon.runtime.app import Application
    from daemon.runtime.services import SERVICE_NAMES
    declared = Application.__annotations__
    assert all(name in declared for name in SERVICE_NAMES)


def test_the_rule_catches_an_undeclared_or_private_import(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from plugins.communities import steps\nimport plugins.oauth.client\n")
    assert imported_modules(module) == {("communities", "steps"), ("oauth", "client")}
