"""What grows without bound is pruned (issue 26): denied-action audit entries after
`communities.denied_audit_retention_days`, settled webhook deliveries after
`webhooks.delivery_log_retention_days`, each in batches of bounded size; everything else
in the audit log, and pending deliveries, stay."""

from __future__ import annotations

from typing import Any

from daemon.runtime import retention
from daemon.base import iso
from plugins.communities.retention import DeniedAuditPruner

DAY = 86400.0


async def _audit(app: Any, entries: list[tuple[float, bool]]) -> None:
    async with app.db.transaction("test.audit") as tx:
        await tx.executemany(
            "INSERT INTO audit_log (community_did, action, actor_did, metadata, created_at) VALUES (?, ?, ?, ?, ?)",
            [("did:plc:auditedcommunity", "membership.ban", "did:plc:someone",
              '{"outcome":"denied","code":"not_admin"}' if denied else "{}", iso(at))
             for at, denied in entries])


async def test_old_denied_audit_entries_go_in_batches_and_everything_else_stays(app: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr("plugins.communities.retention.BATCH", 7)
    monkeypatch.setattr("plugins.communities.retention.PAUSE_SECONDS", 0)
    now = app.clock.time()
    old = [(now - 200 * DAY + i, i % 3 == 0) for i in range(40)]          # 14 denied among them
    recent = [(now - 10 * DAY + i, i % 2 == 0) for i in range(6)]        # 3 denied, kept
    await _audit(app, old + recent)
    pruner = DeniedAuditPruner(app)
    assert await pruner.prune() == 14
    rows = await app.db.fetchall("SELECT metadata, created_at FROM audit_log ORDER BY id")
    assert len(rows) == 46 - 14
    assert not any('"denied"' in r["metadata"] and r["created_at"] < iso(now - 90 * DAY) for r in rows)
    assert sum('"denied"' in r["metadata"] for r in rows) == 3
    # The next pass starts where this one stopped: nothing more to do until time passes.
    assert await pruner.prune() == 0
    app.clock.advance(100 * DAY)
    assert await pruner.prune() == 3


async def test_settled_deliveries_are_pruned_batch_by_batch_and_pending_ones_stay(app: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(retention, "PAUSE_SECONDS", 0)
    batches: list[int] = []
    real = retention.prune_in_batches

    async def counting(name: str, batch: Any, **kw: Any) -> int:
        async def counted(limit: int) -> int:
            removed = await batch(limit)
            batches.append(removed)
            return removed
        return await real(name, counted, limit=1000)

    monkeypatch.setattr(retention, "prune_in_batches", counting)
    import daemon.plugin.storage  # plugins reach it through the public API
    monkeypatch.setattr(daemon.plugin.storage, "prune_in_batches", counting)
    old = iso(app.clock.time() - 60 * DAY)
    async with app.db.transaction("test.deliveries") as tx:
        await tx.execute("INSERT INTO apps (id, owner_did, name, domain, key_hash, created_at, updated_at) "
                         "VALUES ('app_0000000000000001', 'did:plc:o', 'a', 'a.example', x'00', ?, ?)", (old, old))
        await tx.execute("INSERT INTO webhooks (id, app_id, url, secret_sealed, created_at, updated_at) "
                         "VALUES ('wh_0000000000000001', 'app_0000000000000001', 'https://h.example', 'x', ?, ?)",
                         (old, old))
        await tx.executemany(
            "INSERT INTO webhook_deliveries (webhook_id, event_id, status, next_attempt_at, created_at, completed_at) "
            "VALUES ('wh_0000000000000001', ?, ?, 0, ?, ?)",
            [(f"evt_{i}", "pending" if i % 500 == 0 else "delivered", old, None if i % 500 == 0 else old)
             for i in range(2500)])
    from plugins.webhooks.delivery import Dispatcher
    await Dispatcher(app).prune(iso(app.clock.time() - 30 * DAY))
    # (the app's own dispatcher may prune beside us: count what every batch removed)
    assert sum(batches) == 2495 and max(batches) == 1000 and len([b for b in batches if b]) == 3, batches
    left = await app.db.fetchall("SELECT status FROM webhook_deliveries")
    assert [r["status"] for r in left] == ["pending"] * 5


def test_vacuum_gives_freed_pages_back_and_refuses_while_the_daemon_runs(tmp_path: Any) -> None:
    import os
    import sqlite3
    import subprocess
    import sys

    from daemon.runtime.backup import state_lock
    from tests.conftest import REPO, TEST_SECRET_KEY

    state = tmp_path / "state"
    state.mkdir()
    conn = sqlite3.connect(state / "commonroom.sqlite3")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,) for _ in range(3000)])
    conn.commit()
    conn.execute("DELETE FROM t")
    conn.commit()
    conn.close()
    config = tmp_path / "config.yaml"
    config.write_text(f"storage: {{state_dir: {state}}}\nsecret_key: '{TEST_SECRET_KEY}'\n")

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "daemon.runtime.main", "-c", str(config), "vacuum"],
                              capture_output=True, text=True, timeout=60, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})

    before = (state / "commonroom.sqlite3").stat().st_size
    with state_lock(state, "testing"):
        busy = run()
    assert busy.returncode == 1 and "stop it before vacuuming" in busy.stderr, busy.stderr
    done = run()
    assert done.returncode == 0, done.stderr
    assert (state / "commonroom.sqlite3").stat().st_size < before / 10
