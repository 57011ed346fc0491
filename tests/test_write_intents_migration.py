"""Upgrading a database whose plugins kept their own pending-write tables: the rows move
to the core's one `write_intents` table, as kinds the plugins register, and the old
tables are gone (issue 12)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from daemon.runtime.app import migration_components
from daemon.atproto.writes import Intent
from daemon.runtime.plugins import build_plugin_manager
from plugins.communities.reconcile import _UNDO
from plugins.records.writes import KIND, Write
from store.db import Database
from store.migrate import migrate

COMMUNITY = "did:plc:upgradedcommunity"
NOW = "2026-11-20T10:00:00.000Z"


async def test_pending_writes_of_an_older_database_move_to_the_intents_table(tmp_path: Path) -> None:
    components = migration_components(build_plugin_manager(load_entry_points=False))
    before = []  # every component as it was before the intents table
    for component, directory in components:
        older = tmp_path / "before" / component
        older.mkdir(parents=True)
        for sql in Path(directory).glob("*.sql"):
            if not sql.name.endswith("_write_intents.sql"):
                shutil.copy(sql, older)
        before.append((component, older))
    db = Database(tmp_path / "commonroom.sqlite3")
    await db.open()
    try:
        await migrate(db, before)
        async with db.transaction("tests.old_rows") as tx:
            await tx.execute(
                "INSERT INTO communities (did, handle, display_name, type, pds_url, account_kind, state, "
                "creator_did, proof_rkey, created_at, updated_at) VALUES (?, 'c.test', 'C', 'open', "
                "'http://pds.invalid', 'provisioned', 'active', 'did:plc:alice', '3kproof', ?, ?)",
                (COMMUNITY, NOW, NOW))
            await tx.execute(
                "INSERT INTO community_pending_writes (key, community_did, operation, rkey, payload, created_at, "
                "attempts) VALUES (?, ?, 'member.joined', '3kbob', ?, ?, 2)",
                (f"proof:{COMMUNITY}:did:plc:bob", COMMUNITY, json.dumps({"memberDid": "did:plc:bob"}), NOW))
            await tx.execute(
                "INSERT INTO community_pending_writes (key, community_did, operation, rkey, payload, created_at) "
                "VALUES (?, ?, 'admin.promoted', 'self', '{}', ?)", (f"admins:{COMMUNITY}", COMMUNITY, NOW))
            await tx.execute(
                "INSERT INTO record_pending_writes (op, community_did, collection, rkey, value, cid, author_did, "
                "user_did, app_id, created_at, attempts, last_error) VALUES ('update', ?, 'org.example.note', "
                "'n1', ?, 'bafyold', 'did:plc:bob', 'did:plc:carol', 'app_0123456789abcdef', ?, 3, 'down')",
                (COMMUNITY, json.dumps({"text": "v2"}), NOW))

        await migrate(db, components)

        tables = {r["name"] for r in await db.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "write_intents" in tables
        assert not {"community_pending_writes", "record_pending_writes"} & tables
        rows = {r["key"]: r for r in await db.fetchall("SELECT * FROM write_intents")}
        proof = Intent.from_row(rows[f"proof:{COMMUNITY}:did:plc:bob"])
        assert (proof.kind, proof.community_did, proof.operation, proof.rkey, proof.payload, proof.tries) == \
            ("communities.proof", COMMUNITY, "member.joined", "3kbob", {"memberDid": "did:plc:bob"}, 2)
        assert Intent.from_row(rows[f"admins:{COMMUNITY}"]).kind == "communities.admins"
        assert {i.kind for i in map(Intent.from_row, rows.values())} <= {*_UNDO, KIND}
        record = Intent.from_row(rows[f"record:{COMMUNITY} org.example.note n1"])
        assert (record.kind, record.attempts) == (KIND, 3)
        write = Write.from_intent(record)
        assert (write.op, write.collection, write.rkey, write.value, write.cid, write.author_did,
                write.user_did, write.app_id) == ("update", "org.example.note", "n1", {"text": "v2"},
                                                  "bafyold", "did:plc:bob", "did:plc:carol",
                                                  "app_0123456789abcdef")
    finally:
        await db.close()
