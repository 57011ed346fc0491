"""Each component owns its tables (issue 23, item 2; docs/plugins.md, "Storage"): the
component whose migrations create a table is the only one whose code runs SQL on it.
The core (`store/`, `daemon/`) queries only the tables of store/migrations; a plugin only
its own, and reads of the core tables listed in `PLUGINS_MAY_READ` (named in the plugin
API's docs as such). Whatever else a component needs of another's data, it asks that
component's service (`app.service(CommunitiesService)`, ...).

Owners are read from the ``CREATE TABLE`` statements of every migrations folder; the SQL
of each component is every string in its Python files (literals and the text of
f-strings), scanned for the tables after ``FROM``, ``JOIN``, ``INTO``, ``UPDATE`` and
``TABLE`` (SQL keywords are written in capitals in this code base)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

#: Core tables any plugin may read (never write), named in docs/plugins.md ("Storage"): the
#: events outbox (the events plugin's stream reads it back), the apps (whether one is
#: active: webhook fan-out joins it) and the accounts the network reports deactivated or
#: taken down (the member lists leave them out in their query).
PLUGINS_MAY_READ = {"events": "the events outbox", "apps": "the registered apps",
                    "account_status": "accounts gone from the network"}

_CREATE = re.compile(r"\bCREATE\s+(?:VIRTUAL\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_USE = re.compile(r"\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+(\w+)")
_READS = {"FROM", "JOIN"}


def _migration_folders(root: Path) -> dict[str, list[Path]]:
    """component -> its migrations folders ("core", "plugins/<name>", "examples/<dist>")."""
    out: dict[str, list[Path]] = {"core": sorted(p for p in root.glob("store/migrations*") if p.is_dir())}
    for folder in sorted(root.glob("plugins/*/migrations")):
        out[f"plugins/{folder.parent.name}"] = [folder]
    for folder in sorted(root.glob("examples/*/*/migrations")):
        out[f"examples/{folder.parent.parent.name}"] = [folder]
    return out


def table_owners(root: Path = REPO) -> dict[str, str]:
    owners: dict[str, str] = {}
    twice = []
    for component, folders in _migration_folders(root).items():
        for folder in folders:
            for sql in sorted(folder.glob("*.sql")):
                for table in _CREATE.findall(sql.read_text()):
                    if owners.setdefault(table, component) != component:
                        twice.append(f"{table}: {owners[table]} and {component}")
    assert twice == [], f"tables created by two components: {twice}"
    return owners


def component_files(root: Path = REPO) -> dict[str, list[Path]]:
    """component -> its Python files (tests aside)."""
    out = {"core": sorted([*root.glob("store/*.py"), *root.glob("daemon/**/*.py")])}
    for package in sorted(p for p in root.glob("plugins/*") if (p / "__init__.py").is_file()):
        out[f"plugins/{package.name}"] = sorted(package.rglob("*.py"))
    for dist in sorted(p for p in root.glob("examples/*") if (p / "pyproject.toml").is_file()):
        out[f"examples/{dist.name}"] = sorted(f for pkg in dist.iterdir() if (pkg / "__init__.py").is_file()
                                              for f in pkg.rglob("*.py"))
    return out


def _strings(path: Path) -> list[str]:
    texts = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
        elif isinstance(node, ast.JoinedStr):  # the f-string's text around its holes, as one
            texts.append(" ".join(v.value for v in node.values if isinstance(v, ast.Constant)))
    return texts


def foreign_queries(root: Path = REPO) -> list[str]:
    """"<file>: <table> (owned by <component>)" for each table a file's SQL names that its
    component does not own (reads of `PLUGINS_MAY_READ` by plugins aside)."""
    owners = table_owners(root)
    found = []
    for component, files in component_files(root).items():
        for path in files:
            seen = set()
            for text in _strings(path):
                for keyword, table in _USE.findall(text):
                    owner = owners.get(table)
                    if owner is None or owner == component:
                        continue
                    if owner == "core" and table in PLUGINS_MAY_READ and keyword in _READS:
                        continue
                    seen.add(f"{path.relative_to(root).as_posix()}: {table} (owned by {owner})")
            found += sorted(seen)
    return found


def test_every_module_queries_only_its_own_components_tables():
    assert foreign_queries() == [], (
        "a module runs SQL on another component's table: move the query to the owner and ask its "
        "service (docs/plugins.md, 'Storage')")


def test_the_core_owns_its_tables_and_each_plugin_its_own():
    owners = table_owners()
    assert owners["events"] == owners["write_intents"] == owners["apps"] == "core"
    assert owners["members"] == owners["audit_log"] == owners["communities"] == "plugins/communities"
    assert owners["records"] == "plugins/records" and owners["webhook_deliveries"] == "plugins/webhooks"
    assert owners["notices"] == "examples/commonroom-noticeboard"


def test_the_tables_plugins_may_read_are_named_in_the_plugin_docs():
    docs = (REPO / "docs" / "plugins.md").read_text()
    for table in PLUGINS_MAY_READ:
        assert f"`{table}`" in docs and "may read" in docs, table


def _layout(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_rule_finds_a_plugin_reading_another_plugins_table_and_the_core_reading_a_plugins(tmp_path: Path):
    root = _layout(tmp_path, {
        "store/migrations/0001_core.sql": "CREATE TABLE events (seq INTEGER);\nCREATE TABLE apps (id TEXT);",
        "store/db.py": "",
        "store/members.py": 'SQL = "SELECT * FROM members WHERE id = ?"\n',
        "plugins/a/__init__.py": "",
        "plugins/a/migrations/0001.sql": "CREATE TABLE IF NOT EXISTS members (id INTEGER);",
        "plugins/a/store.py": 'async def f(db):\n    return await db.fetchall("SELECT * FROM members")\n',
        "plugins/b/__init__.py": "",
        "plugins/b/migrations/0001.sql": "CREATE TABLE notes (id INTEGER);",
        "plugins/b/queries.py": ('def g(t):\n    return f"SELECT n.id FROM notes n JOIN members m ON m.id = n.id '
                                 'WHERE {t}"\nOUTBOX = "SELECT seq FROM events"\nW = "INSERT INTO apps VALUES (?)"\n'
                                 'PROSE = "members can update members of the notes"\n'),
    })
    assert foreign_queries(root) == [
        "store/members.py: members (owned by plugins/a)",
        "plugins/b/queries.py: apps (owned by core)",
        "plugins/b/queries.py: members (owned by plugins/a)",
    ]
