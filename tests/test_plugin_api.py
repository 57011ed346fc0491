"""The public plugin API (issue 23, item 1; docs/plugins.md, "The plugin API"): a plugin
imports from the core only `daemon.plugin`. The built-in plugins are held to the same
rule; what they still import from the core's internals is listed below, each entry a debt
that a later change removes (and the test then asks for the entry to go)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import daemon.plugin as api

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DOC = (ROOT / "docs" / "plugins.md").read_text()


#: plugin -> {internal module it still imports: why}. Empty: a built-in imports only daemon.plugin, as an
#: outside plugin does; an entry here needs a reason and an issue that removes it.
ALLOWED: dict[str, dict[str, str]] = {}

_PACKAGES = ("daemon", "daemon.http", "daemon.runtime", "daemon.atproto", "daemon.security", "store")


def core_imports(path: Path) -> set[str]:
    """The core modules (``daemon.*``, ``store.*``) a file imports, other than `daemon.plugin`;
    ``from store import members`` counts as ``store.members``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module in _PACKAGES:
                names = [f"{node.module}.{a.name}" if node.module != "daemon" else "daemon" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in ("daemon", "store") and n != "daemon.plugin"}
    return found


def internal_imports(folder: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        for module in core_imports(path):
            out.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return out


def test_built_in_plugins_import_only_the_plugin_api_or_a_listed_exception():
    unlisted, settled = [], []
    for package in sorted(p for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").is_file()):
        used = internal_imports(package)
        allowed = ALLOWED.get(package.name, {})
        unlisted += [f"{', '.join(sorted(files))} import(s) {m}" for m, files in sorted(used.items())
                     if m not in allowed]
        settled += [f"{package.name}: {m}" for m in sorted(allowed) if m not in used]
    assert unlisted == [], "import it from daemon.plugin (or list the exception, with why, in ALLOWED)"
    assert settled == [], "no longer imported: remove these entries from ALLOWED"


def test_the_example_plugins_import_nothing_from_the_core_but_the_plugin_api():
    examples = [p for p in (ROOT / "examples").iterdir() if (p / "pyproject.toml").is_file()]
    assert examples
    for example in examples:
        for folder in (p for p in example.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
            assert internal_imports(folder) == {}, example.name


def test_the_rule_sees_every_way_of_importing(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from store import members as m\nimport daemon.http.base\nfrom daemon import hookimpl\n"
                      "from daemon.plugin import ApiError\nif True:\n    from daemon.runtime.app import Application\n")
    assert core_imports(module) == {"store.members", "daemon.http.base", "daemon", "daemon.runtime.app"}


def test_every_public_name_is_documented_in_the_reference():
    reference = PLUGIN_DOC.split("\n## The plugin API", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in api.__all__ if f"`{name}`" not in reference]
    assert missing == [], f"document these in docs/plugins.md, 'The plugin API': {missing}"


def test_every_public_name_exists_and_nothing_else_is_promised():
    assert all(hasattr(api, name) for name in api.__all__)
    assert len(set(api.__all__)) == len(api.__all__)


def test_every_method_of_the_core_tables_read_api_is_documented():
    # AppsTable and Outbox are how plugins reach the core tables they may read: each method
    # is part of the promise, so its row in the reference names it
    reference = PLUGIN_DOC.split("\n## The plugin API", 1)[1].split("\n## ", 1)[0]
    for table in (api.AppsTable, api.Outbox):
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{table.__name__}` |"))
        methods = [name for name in vars(table) if not name.startswith("_")]
        assert methods and all(re.search(rf"[`.]{name}\b", row) for name in methods), table.__name__


def test_the_core_never_imports_the_plugin_api():
    # the public module sits above the layers: importing it from inside would tie a layer to all
    importers = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "daemon").rglob("*.py"))
                 if path.name != "plugin.py" and re.search(r"^\s*from daemon\.plugin import|^\s*import daemon\.plugin",
                                                           path.read_text(), re.M)]
    assert importers == []


def shipped_fixtures() -> set[str]:
    """The fixtures `commonroom_testing` defines at module level (the ones a plugin's tests get)."""
    names = set()
    for path in (ROOT / "commonroom_testing").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    "fixture" in ast.unparse(d) for d in node.decorator_list):
                names.add(node.name)
    return names


def test_every_shipped_fixture_is_in_the_docs_table():
    table = PLUGIN_DOC.split("| fixture | what it is |", 1)[1].split("\n\n", 1)[0]
    fixtures = shipped_fixtures()
    assert {"app", "client", "clock", "webhook_receiver", "devnet"} <= fixtures
    missing = sorted(name for name in fixtures if f"`{name}`" not in table)
    assert missing == [], f"add these to docs/plugins.md's fixture table: {missing}"


def test_the_examples_pin_the_setuptools_that_builds_them():
    import tomllib
    for example in (ROOT / "examples").iterdir():
        if (example / "pyproject.toml").is_file():
            requires = tomllib.loads((example / "pyproject.toml").read_text())["build-system"]["requires"]
            assert any(re.fullmatch(r"setuptools==[0-9.]+", r) for r in requires), example.name
