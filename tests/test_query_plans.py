"""Every query the service runs is planned by SQLite without a full scan of a table that
grows with members, events, audit entries or deliveries (issue 26: at a million members a
scan is what turns a 1 ms page into a 1 s one).

The queries are found in the source, not listed by hand: every SQL string in `store/`,
`daemon/` and `plugins/` (a literal, or an f-string whose holes are module constants or
filled from `FILL` below) is planned with ``EXPLAIN QUERY PLAN`` against the migrated
schema, with `ANALYZE` statistics of a large community so the planner chooses as it would
in production. Work that is not on a request path (migrations, clean-up passes, operator
commands, background loops) may scan; it is named in `OFF_REQUEST_PATH` with the reason,
and an entry there that no longer names a function holding SQL fails the test too.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

#: Tables whose rows grow with the service's use, not with its configuration.
GROWING = ("members", "user_profiles", "audit_log", "events", "webhook_deliveries", "join_requests",
           "sessions", "records", "write_intents", "community_bans", "community_invites", "oauth_flows",
           "oauth_grants", "identity_dids", "identity_handles", "account_status")

SQL_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|REPLACE)\s")

#: Functions that hold SQL but run off the request path, and why a scan is acceptable there.
OFF_REQUEST_PATH = {
    "store/migrate.py::_apply": "migrations, at start-up",
    "store/migrate.py::_plan": "migrations, at start-up",
    "store/migrate.py::pending": "migrations, at start-up",
    "store/migrate.py::unapplied": "a follower's start-up check",
    "daemon/runtime/backup.py::schema_versions": "backup and restore (operator commands)",
    "store/sessions.py::delete_expired_tx": "the hourly session clean-up (sessions.janitor)",
    "daemon/atproto/writes.py::pending_intents": "the reconciler's pass over pending write intents (start-up, then periodic)",
    "daemon/atproto/identity.py::forget_tx": "no caller on a request path (daemon.atproto.identity.forget_identity)",
    "plugins/communities/store.py::index_listing": "the operators' console (/admin/communities): every "
                                                   "community in the chosen order, LIMIT-bounded",
    "plugins/communities/store.py::instance_counts": "the operators' console overview (/admin): the count of "
                                                     "distinct members reads the members-by-user index once",
    "daemon/runtime/events.py::prune_tx": "the events retention pass (plugins/events/retention.py): the oldest rows "
                                 "in seq (rowid) order, LIMIT-bounded",
}

#: Samples for f-string holes that are not module constants, by "file::function" and the
#: hole's source text. Each sample is the widest form the code builds.
FILL: dict[str, dict[str, str]] = {
    "store/apps.py::update_app_tx": {"assignments": "name = ?, domain = ?"},
    "plugins/communities/store.py::update_community_tx": {"assignments": "display_name = ?, description = ?"},
    "plugins/webhooks/store.py::update_webhook_tx": {"assignments": "url = ?, active = ?"},
    "plugins/communities/store.py::audit_page": {
        "' AND '.join(where)": "community_did = ? AND json_extract(metadata, '$.outcome') IS NULL "
                               "AND action IN (?, ?) AND (actor_did = ? OR target_did = ?) "
                               "AND created_at >= ? AND created_at < ? AND id < ?"},
    "plugins/communities/store.py::list_entries": {"' AND '.join(where)": "community_did = ? AND id < ? AND action = ?"},
    "plugins/communities/store.py::list_bans": {"extra": "AND b.id < ? "},
    "plugins/communities/store.py::list_invites": {"extra": "AND id < ? "},
    "plugins/communities/store.py::list_requests": {"extra": "AND r.id > ? "},
    "plugins/communities/store.py::memberships_of": {"extra": "AND m.id < ? "},
    "plugins/communities/store.py::list_members": {"' AND '.join(where)": "m.community_did = ? AND m.id > ? AND NOT EXISTS "
                                       "(SELECT 1 FROM account_status s WHERE s.did = m.member_did)"},
    "plugins/communities/store.py::list_communities": {
        "member_join": "LEFT JOIN members m ON m.community_did = c.did AND m.member_did = ?",
        "' AND '.join(where)": "c.state = 'active' AND c.id < ? AND c.id IN "
                               "(SELECT rowid FROM communities_fts WHERE communities_fts MATCH ?)"},
    "daemon/atproto/identity.py::get_dids": {"marks": "?, ?, ?"},
    "plugins/communities/store.py::profiles": {"marks": "?, ?, ?"},
    "plugins/instance/store.py::suspensions": {"marks": "?, ?, ?"},
    "plugins/instance/requests_store.py::listing": {"marks": "?, ?, ?", "order": "ASC"},
    "plugins/records/store.py::community_state": {
        "', '.join(RECORD_FIELDS)": "collection, rkey, uri, cid, author_did, value, created_at, updated_at, updated_by",
        "', '.join(PERMISSION_FIELDS)": "collection, create_rule, update_rule, delete_rule"},
    "plugins/communities/store.py::communities_by_dids_tx": {"marks": "?, ?, ?"},
    "plugins/webhooks/store.py::all_webhooks": {"where": "WHERE w.app_id = ?"},
}

#: Functions that build SQL by concatenation, planned from what they return for each
#: argument tuple (their pieces are not whole statements).
BUILDERS: dict[str, list[tuple[Any, ...]]] = {
    "plugins/communities/store.py::_member_page_sql": [(False,), (True,)],
}


def _sql_sites() -> list[tuple[str, str, str]]:
    """(file::function, SQL text, kind) for every SQL string in the source tree."""
    sites = []
    files = [*sorted((REPO / "store").glob("*.py")), *sorted((REPO / "daemon").rglob("*.py")),
             *sorted((REPO / "plugins").rglob("*.py"))]
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        module_name = rel.removesuffix(".py").replace("/", ".")
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            where = f"{rel}::{fn.name}"
            pieces = {id(v) for n in ast.walk(fn) if isinstance(n, ast.JoinedStr) for v in n.values}
            for node in ast.walk(fn):
                if id(node) in pieces:
                    continue  # the text of an f-string: checked as part of it
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_START.match(node.value):
                    sites.append((where, node.value, "literal"))
                elif isinstance(node, ast.JoinedStr):
                    text = _fill(node, where, module_name)
                    if text is not None and SQL_START.match(text):
                        sites.append((where, text, "f-string"))
    return list(dict.fromkeys(sites))


def _fill(node: ast.JoinedStr, where: str, module_name: str) -> str | None:
    out = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            out.append(str(value.value))
            continue
        assert isinstance(value, ast.FormattedValue)
        hole = ast.unparse(value.value)
        sample = FILL.get(where, {}).get(hole)
        if sample is None and isinstance(value.value, ast.Name):
            constant = getattr(importlib.import_module(module_name), value.value.id, None)
            sample = constant if isinstance(constant, str) else None
        if sample is None:
            out.append("\0" + hole + "\0")  # unknown: reported if the string is SQL
        else:
            out.append(sample)
    return "".join(out)


@pytest.fixture(scope="module")
def planner(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    """The migrated schema, with statistics of a large instance (as ANALYZE would write them
    for 1M members), so the planner decides as it would there."""
    from daemon.runtime.app import migration_components
    from daemon.runtime.plugins import build_plugin_manager
    from store.db import Database
    from store.migrate import migrate

    path = tmp_path_factory.mktemp("plans") / "plans.sqlite3"

    async def build() -> None:
        db = Database(path)
        await db.open()
        await migrate(db, migration_components(build_plugin_manager((), (), load_entry_points=False)))
        await db.close()

    asyncio.run(build())
    conn = sqlite3.connect(path)
    conn.execute("ANALYZE")  # creates sqlite_stat1
    indexes = conn.execute("SELECT tbl_name, name, sql FROM sqlite_master WHERE type = 'index'").fetchall()
    conn.execute("DELETE FROM sqlite_stat1")
    for table in GROWING:
        conn.execute("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, NULL, '1000000')", (table,))
    for table, index, sql in indexes:
        if table in GROWING:
            # A partial index holds few rows (pending deliveries, admins): what is in flight.
            rows = 1000 if sql and " WHERE " in sql.upper() else 1000000
            conn.execute("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)",
                         (table, index, f"{rows} 100 1 1 1"))
    conn.commit()
    conn.close()
    conn = sqlite3.connect(path)  # reads the statistics afresh
    yield conn
    conn.close()


def _plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params: Any = ()
    for _ in range(50):
        try:
            return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        except sqlite3.ProgrammingError as exc:
            message = str(exc)
            count = re.search(r"uses (\d+), and there are", message)
            named = re.search(r"binding parameter :(\w+)", message)
            if count:
                params = (None,) * int(count.group(1))
            elif named:
                params = {**(params if isinstance(params, dict) else {}), named.group(1): None}
            else:
                raise
    raise AssertionError(f"could not bind the parameters of {sql}")


def _full_scans(plan: list[str], partial: set[str]) -> list[str]:
    """The steps that read a growing table whole. A scan of a partial index reads only
    the rows in it (pending deliveries, admins), which do not grow with the table."""
    scans = []
    for step in plan:
        m = re.match(r"SCAN (\w+)(?: AS \w+)?(?: USING (?:COVERING )?INDEX (\w+))?", step)
        if m and m.group(1) in GROWING and m.group(2) not in partial:
            scans.append(step)
    return scans


def test_every_request_path_query_uses_an_index(planner: sqlite3.Connection) -> None:
    sites = _sql_sites()
    assert len(sites) > 150, "the SQL scan found too little: has the store moved?"
    partial = {name for name, sql in planner.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'")
               if sql and " WHERE " in sql.upper()}
    problems = []
    for where, args_list in BUILDERS.items():
        path, name = where.split("::")
        builder = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), name)
        sites = [s for s in sites if s[0] != where] + [(where, builder(*args), "built") for args in args_list]
    for where, sql, kind in sites:
        if where in OFF_REQUEST_PATH:
            continue
        if "\0" in sql:
            holes = re.findall(r"\0(.*?)\0", sql)
            problems.append(f"{where}: an f-string with holes {holes}: add samples to FILL")
            continue
        if ";" in sql.strip().rstrip(";"):
            continue  # a script (migrations' bookkeeping)
        try:
            plan = _plan(planner, sql)
        except sqlite3.OperationalError as exc:
            problems.append(f"{where}: cannot plan ({exc}): {sql[:120]}")
            continue
        scans = _full_scans(plan, partial)
        if scans:
            problems.append(f"{where}: {scans} in {' '.join(sql.split())[:200]}")
    assert not problems, "\n".join(problems)


def test_the_off_path_list_names_only_functions_that_hold_sql() -> None:
    holders = {where for where, _, _ in _sql_sites()}
    stale = sorted(set(OFF_REQUEST_PATH) - holders)
    assert not stale, f"OFF_REQUEST_PATH names functions without SQL (renamed or gone?): {stale}"
    unused = sorted(where for where in [*FILL, *BUILDERS] if where not in holders)
    assert not unused, f"FILL or BUILDERS name functions without SQL: {unused}"


def test_a_scan_of_a_growing_table_is_caught(planner: sqlite3.Connection) -> None:
    partial = {"webhook_deliveries_pending"}
    assert _full_scans(_plan(planner, "SELECT * FROM members WHERE proof_rkey = ?"), partial)
    assert _full_scans(_plan(planner, "SELECT count(*) FROM audit_log"), partial)
    assert not _full_scans(_plan(planner, "SELECT * FROM members WHERE community_did = ? AND member_did = ?"),
                           partial)
    assert not _full_scans(_plan(planner, "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'"),
                           partial)
