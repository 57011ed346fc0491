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

_STORE_OTHER = "another component's tables (issue 23 item 2: ask that plugin's service instead)"
_INTERNAL = "a core part not (yet) in the public API"

#: plugin -> {internal module it still imports: why}. Shrinks; never grows without a reason.
ALLOWED: dict[str, dict[str, str]] = {
    "apikeys": {
        "store.apps": "the apps table, created by the core's migrations (0001_core.sql): " + _INTERNAL,
        "store.db": "VersionedCache, the API-key cache's invalidation counter " + _INTERNAL,
    },
    "oauth": {
        "daemon.atproto.identity": "resolving the signing-in user's DID and PDS: " + _INTERNAL,
        "daemon.atproto.pds": "the user's profile after login: " + _INTERNAL,
        "daemon.http.base": "same_site_path, log_failure for the login redirects: " + _INTERNAL,
        "daemon.http.openapi": "html/redirect responses with error pages: " + _INTERNAL,
        "daemon.security.netguard": "the OAuth client's own guarded transport: " + _INTERNAL,
        "daemon.security.sessions": "browser sessions are made by this plugin: " + _INTERNAL,
    },
    "web": {
        "store.apps": _STORE_OTHER,
        "daemon.atproto.pds": "image URLs of community pictures: " + _INTERNAL,
        "daemon.security.sessions": "sign-out ends the browser session: " + _INTERNAL,
    },
    "events": {
        "daemon.runtime.events": "the events outbox's queries, the core table plugins may read (docs/plugins.md)",
    },
    "webhooks": {
        "store.apps": _STORE_OTHER,
        "daemon.security.netguard": "delivery through the outbound guard: " + _INTERNAL,
    },
    "communities": {
        "store.apps": _STORE_OTHER,
        "store.sync": "the network sync's cursor and gaps: " + _INTERNAL,
        "store.db": "Database, the network sync's batch reads: " + _INTERNAL,
        "daemon.atproto.accounts": "creating and adopting community accounts (CommunityAccount, bring_own_account, forget_account): " + _INTERNAL,
        "daemon.atproto.identity": "resolving members' DIDs and handles: " + _INTERNAL,
        "daemon.atproto.pds": "profiles, blobs and image URLs on a PDS: " + _INTERNAL,
        "daemon.runtime.cli": "`from daemon.runtime import cli` (fail, progress: exported; a mechanical change left)",
        "daemon.sync": "the network sync's Interest and events: " + _INTERNAL,
    },
}

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
