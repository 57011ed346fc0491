"""The public plugin API (docs/plugins.md, "The plugin API"): a plugin imports from the core
only `daemon.plugin` and its documented submodules (`PUBLIC_MODULES`). The built-in plugins
and the examples are held to the same rule; what a built-in still imports from the core's
internals is listed below, each entry a debt that a later change removes (and the test then
asks for the entry to go). `PUBLIC_NAMES` is the promise as a snapshot: any change to it
shows in review."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import importlib

import daemon.plugin as api

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DOC = (ROOT / "docs" / "plugins.md").read_text()


#: plugin -> {internal module it still imports: why}. Empty: a built-in imports only daemon.plugin, as an
#: outside plugin does; an entry here needs a reason and an issue that removes it.
ALLOWED: dict[str, dict[str, str]] = {}

_PACKAGES = ("daemon", "daemon.http", "daemon.runtime", "daemon.atproto", "daemon.security", "store")

#: The promise, name by name: a change here is a change to the public plugin API, and needs its
#: changelog entry (plugin API section). `daemon.plugin` keeps at most 60 names.
PUBLIC_NAMES: dict[str, list[str]] = {
    "daemon.plugin": [
        "hookimpl", "declared", "Application", "BaseHandler", "ApiError", "Principal", "operation", "query",
        "obj", "arr", "nullable", "page", "STRING", "STRING_OR_NULL", "INTEGER", "BOOLEAN", "DATETIME",
        "DID", "NO_CONTENT", "encode_cursor", "DID_PATTERN", "validate", "invalid", "is_did", "require_did",
        "PageHandler", "WebFolders", "Link", "when", "moment", "EventKind", "emit_tx", "Capability",
        "CommunitiesService", "Community", "Visibility", "Actor", "MemberStatus", "UserMethod",
        "prove_acting_user", "ConfigError", "check_range", "Reader", "Row", "Transaction", "Alarm", "iso",
        "API_VERSION"],
    "daemon.plugin.http": [
        "RequestLogic", "SERVER_HEADER", "encode_json", "error_for", "LeanHandler", "decode_cursor",
        "header", "Response", "html", "redirect", "CURSOR", "ANY", "EVENT_KIND", "enum_of", "error_or_page",
        "DATETIME_OR_NULL", "strip_spoofing", "NOT_FOUND", "APP_NOT_TRUSTED", "ROSTER_HIDDEN"],
    "daemon.plugin.pages": [
        "PageNameError", "SignInRequired", "CSRF_FIELD", "FORM_TYPE", "safe_next", "SLOTS"],
    "daemon.plugin.atproto": [
        "DidInfo", "resolve_identity", "resolve_did", "require_known_did", "read_user_profile",
        "get_record", "blob_cid", "blob_url", "is_handle", "is_nsid", "is_tid", "is_rkey", "is_at_uri",
        "is_cid", "is_datetime", "require_handle", "require_nsid", "require_rkey", "require_at_uri",
        "normalize_handle", "new_tid", "nsid_problem", "pds", "roll_back", "WriteKind", "Intent",
        "KeyedLocks", "Command", "Plan", "Run", "KEEP", "DROP_UNWRITTEN", "ROLL_BACK", "community_repo",
        "delete_account_tx", "CommunityAccount", "provision_account", "bring_own_account",
        "fetch_handle_domain", "forget_account", "handover_credential", "Interest", "SyncEvent", "RecordOp",
        "record_account_status_tx", "account_status", "RotationKey", "require_did_key", "plc_data", "begin_move_tx",
        "resume_move", "abandon_move", "move_of", "unfinished_moves", "writes_settled", "moving_error",
        "MOVE_STEPS", "service_key_listed", "require_pds_url", "add_recovery_key", "request_plc_token"],
    "daemon.plugin.events": [
        "EVENT_TYPES", "Event", "AppSet", "Audience", "decide_audience", "event_data_for", "Outbox"],
    "daemon.plugin.storage": [
        "narrowed", "VersionedCache", "AppsTable", "prune_in_batches", "PRUNE_BATCH", "PRUNE_PAUSE_SECONDS"],
    "daemon.plugin.services": [
        "AppsService", "WebhooksService", "OAuthService", "WebService", "RecordsService"],
    "daemon.plugin.security": [
        "SID_COOKIE", "NewSession", "create_session", "authenticate_session", "end_session", "end_sessions_of",
        "set_session_cookies", "clear_session_cookies", "Guard", "Target", "GuardedTransport",
        "TargetRefused", "AddressRefused", "RequestRefused"],
    "daemon.plugin.cli": [
        "fail", "progress", "add_json_flag", "print_rows"],
    "daemon.plugin.testing": [
        "TESTING_PLUGIN", "FakeClock", "Clock"],
}

#: The documented public modules: `daemon.plugin` and its submodules by purpose.
PUBLIC_MODULES = tuple(PUBLIC_NAMES)


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
        found |= {n for n in names if n.split(".")[0] in ("daemon", "store") and n not in PUBLIC_MODULES}
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


def test_the_public_names_are_the_snapshot_and_daemon_plugin_keeps_at_most_sixty():
    """Adding, moving or removing a public name changes this snapshot in the same commit,
    with its changelog entry."""
    found = {m: list(importlib.import_module(m).__all__) for m in PUBLIC_MODULES}
    assert found == PUBLIC_NAMES
    assert len(api.__all__) <= 60
    # each name has one home
    homes = [n for names in PUBLIC_NAMES.values() for n in names]
    again = {n for n in homes if homes.count(n) > 1}
    assert again == set(), f"promised in two modules: {sorted(again)}"
    # and no public module holds a public-looking name it does not promise
    for m in PUBLIC_MODULES:
        module = importlib.import_module(m)
        extra = [n for n in vars(module) if not n.startswith("_") and n not in module.__all__
                 and not isinstance(vars(module)[n], type(importlib)) and n != "annotations"]
        assert extra == [], f"{m} holds unpromised names: {extra}"


def test_every_public_name_is_documented_in_the_reference():
    reference = PLUGIN_DOC.split("\n## The plugin API", 1)[1].split("\n## ", 1)[0]
    missing = [f"{m}.{name}" for m in PUBLIC_MODULES for name in importlib.import_module(m).__all__
               if f"`{name}`" not in reference]
    assert missing == [], f"document these in docs/plugins.md, 'The plugin API': {missing}"
    for m in PUBLIC_MODULES[1:]:
        assert f"### `{m}`" in reference, f"docs/plugins.md, 'The plugin API': no section for {m}"


def test_the_docs_open_with_the_ten_names_you_need_first():
    first = PLUGIN_DOC.split("\n## ", 2)[1]   # the first section after the introduction
    assert first.startswith("The ten names you need first")
    table = [line.split("|")[1].strip() for line in first.splitlines() if line.startswith("| `")]
    assert len(table) == 10 and all(n.strip("`") in PUBLIC_NAMES["daemon.plugin"] for n in table), table


def test_every_public_name_exists_and_nothing_else_is_promised():
    for m in PUBLIC_MODULES:
        module = importlib.import_module(m)
        assert all(hasattr(module, name) for name in module.__all__), m
        assert len(set(module.__all__)) == len(module.__all__), m


def test_every_method_of_the_core_tables_read_api_is_documented():
    # AppsTable and Outbox are how plugins reach the core tables they may read: each method
    # is part of the promise, so its row in the reference names it
    reference = PLUGIN_DOC.split("\n## The plugin API", 1)[1].split("\n## ", 1)[0]
    from daemon.plugin.events import Outbox
    from daemon.plugin.storage import AppsTable
    for table in (AppsTable, Outbox):
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{table.__name__}` |"))
        methods = [name for name in vars(table) if not name.startswith("_")]
        assert methods and all(re.search(rf"[`.]{name}\b", row) for name in methods), table.__name__


def test_the_core_never_imports_the_plugin_api():
    # the public module sits above the layers: importing it from inside would tie a layer to all
    importers = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "daemon").rglob("*.py"))
                 if (ROOT / "daemon" / "plugin") not in path.parents and re.search(r"^\s*from daemon\.plugin import|^\s*import daemon\.plugin",
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


def test_the_migration_script_moves_each_name_to_its_home(tmp_path: Path):
    """scripts/migrate_plugin_imports.py, for plugins written against the flat daemon.plugin."""
    import subprocess
    import sys
    module = tmp_path / "old_plugin.py"
    module.write_text("from daemon.plugin import ApiError, resolve_did, fail, hookimpl  # why\n"
                      "def f():\n    from daemon.plugin import Outbox, Row\n")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "migrate_plugin_imports.py"), str(module)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert module.read_text() == (
        "from daemon.plugin import ApiError, hookimpl\nfrom daemon.plugin.atproto import resolve_did\n"
        "from daemon.plugin.cli import fail  # why\ndef f():\n    from daemon.plugin import Row\n"
        "    from daemon.plugin.events import Outbox\n")
