#!/usr/bin/env python3
"""Benchmark one box at the size of a popular instance (issue 26, docs/scaling.md).

Seeds, with bulk SQL on a migrated database: 1,000,000 memberships over 10,000 communities
(one with 500,000 members, the rest ~50 each, users shared between them), a profile per
user, 1,000,000 audit entries, 1,000,000 events and 200,000 webhook deliveries (settled, as
after months of traffic). Then measures:

* start-up to ready: the real `commonroom serve`, launch to first 200 on /health (median);
* RSS of that process: idle after start-up, and its peak under the check load;
* rates over loopback, with `bench_membership`'s load generator and server (the service
  and a bare Tornado handler in one process, interleaved rounds, medians): check, the
  first and the last (5,000th) member page of the 500k community, search, the audit page;
* a join's local part: the transaction a join ends with (member row, counts, audit entry,
  event and its webhook fan-out), timed in-process on the seeded file;
* the database's size per table (`dbstat`).

    .venv/bin/python scripts/bench_scale.py [--seconds 3] [--rounds 3] [--keep DIR]

Prints a JSON summary last. Load on the machine matters: run `uptime` beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_membership as bm  # noqa: E402  (its load generator, server and helpers)

COMMUNITIES = 10_000
MEMBERSHIPS = 1_000_000
BIG_MEMBERS = 500_000
AUDIT = 1_000_000
EVENTS = 1_000_000
DELIVERIES = 200_000
WEBHOOKS = 20


def smoke() -> None:
    """Tiny data for `--smoke`."""
    global COMMUNITIES, MEMBERSHIPS, BIG_MEMBERS, AUDIT, EVENTS, DELIVERIES, WEBHOOKS
    COMMUNITIES, MEMBERSHIPS, BIG_MEMBERS, AUDIT, EVENTS, DELIVERIES, WEBHOOKS = 20, 2_000, 1_000, 500, 500, 100, 2
BIG = bm.BIG
NOW = "2026-01-01T00:00:00.000Z"
SECRET = "00" * 31 + "01"


def community_did(i: int) -> str:
    return BIG if i == 0 else f"did:plc:scalec{i:018d}"


def user_did(i: int) -> str:
    return bm.member_did(i)


def other_memberships() -> Any:
    """(community, user) for the 500,000 memberships outside the big community: ~50 per
    community, users spread over the whole million by a bijection (so half of them are
    also members of the big community)."""
    per = (MEMBERSHIPS - BIG_MEMBERS) // (COMMUNITIES - 1)
    extra = (MEMBERSHIPS - BIG_MEMBERS) - per * (COMMUNITIES - 1)
    k = 0
    for c in range(1, COMMUNITIES):
        for _ in range(per + (extra if c == 1 else 0)):
            yield community_did(c), user_did((k * 7919) % MEMBERSHIPS)
            k += 1


def seed(state: Path) -> dict[str, Any]:
    from daemon.runtime.app import migration_components
    from daemon.runtime.plugins import build_plugin_manager
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from store.db import Database
    from store.migrate import migrate

    db_path = state / "commonroom.sqlite3"

    async def migrated() -> None:
        pm = build_plugin_manager((), (), load_entry_points=False)
        db = Database(db_path)
        await db.open()
        await migrate(db, migration_components(pm))
        await db.close()

    asyncio.run(migrated())
    key, app_id = new_key(), new_app_id()
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -262144")
    conn.execute("BEGIN")
    t0 = time.perf_counter()
    conn.execute("INSERT INTO apps (id, owner_did, name, domain, key_hash, created_at, updated_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (app_id, "did:plc:scaleowner", "scale", "scale.example.com", hash_key(key), NOW, NOW))
    conn.executemany(
        "INSERT INTO communities (did, handle, display_name, description, type, pds_url, account_kind, "
        "creator_did, creator_app_id, proof_rkey, created_at, updated_at, state) "
        "VALUES (?, ?, ?, ?, 'open', 'http://127.0.0.1:9', 'provisioned', ?, ?, '3kscale', ?, ?, 'active')",
        ((community_did(i), f"c{i}.scale.test", "Big" if i == 0 else f"Community {i} about topic {i % 97}",
          f"Scale community number {i}", user_did(0), app_id, NOW, NOW) for i in range(COMMUNITIES)))
    # Profiles first: a member row's page_json (a trigger) reads its profile.
    conn.executemany(
        "INSERT INTO user_profiles (did, handle, display_name, avatar_url, fetched_at) VALUES (?, ?, ?, NULL, ?)",
        ((user_did(i), f"user{i}.scale.test", f"User {i}", NOW) for i in range(MEMBERSHIPS)))
    conn.executemany(
        "INSERT INTO members (community_did, member_did, admin_rank, admin_since, confirmed_at, proof_rkey) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        ((BIG, user_did(i), 0 if i == 0 else None, NOW if i == 0 else None, NOW, f"3kb{i:010d}")
         for i in range(BIG_MEMBERS)))
    conn.executemany(
        "INSERT INTO members (community_did, member_did, confirmed_at, proof_rkey) VALUES (?, ?, ?, '3kother')",
        ((c, u, NOW) for c, u in other_memberships()))
    conn.execute("UPDATE communities SET member_count = (SELECT COUNT(*) FROM members m "
                 "WHERE m.community_did = communities.did)")
    print(f"  members and profiles: {time.perf_counter() - t0:.0f} s", flush=True)
    # Months of history: a fifth of everything in the big community, the rest spread out.
    def spread(i: int) -> str:
        return BIG if i % 5 == 0 else community_did(1 + i % (COMMUNITIES - 1))

    from daemon.base import iso
    now = time.time()

    def stamp(i: int, n: int, days: float = 180) -> str:
        """Spread over the last `days` (six months; deliveries: within their 30-day retention)."""
        return iso(now - days * 86400 * (1 - i / n))

    conn.executemany(
        "INSERT INTO audit_log (community_did, action, actor_did, target_did, reason, metadata, app_id, created_at) "
        "VALUES (?, ?, ?, ?, NULL, ?, ?, ?)",
        ((spread(i), "member.joined" if i % 10 else "admin.promote", user_did(i % MEMBERSHIPS),
          user_did((i * 31) % MEMBERSHIPS),
          '{"outcome":"denied","code":"not_admin"}' if i % 50 == 7 else "{}", app_id, stamp(i, AUDIT))
         for i in range(AUDIT)))
    conn.executemany(
        "INSERT INTO events (id, type, community_did, app_id, actor_did, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        ((f"evt_{i:024x}", "member.joined", spread(i), app_id, user_did(i % MEMBERSHIPS),
          json.dumps({"userDid": user_did(i % MEMBERSHIPS)}), stamp(i, EVENTS)) for i in range(EVENTS)))
    conn.executemany(
        "INSERT INTO webhooks (id, app_id, url, secret_sealed, created_at, updated_at) VALUES (?, ?, ?, 'x', ?, ?)",
        ((f"wh_{w:016x}", app_id, f"https://hooks{w}.example.com/in", NOW, NOW) for w in range(WEBHOOKS)))
    conn.executemany("INSERT INTO webhook_events (event_type, webhook_id) VALUES ('member.joined', ?)",
                     ((f"wh_{w:016x}",) for w in range(WEBHOOKS)))
    conn.executemany(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, status, attempts, next_attempt_at, status_code, "
        "created_at, first_attempt_at, last_attempt_at, completed_at) VALUES (?, ?, ?, 1, 0, ?, ?, ?, ?, ?)",
        ((f"wh_{i % WEBHOOKS:016x}", f"evt_{EVENTS - DELIVERIES + i:024x}", "failed" if i % 100 == 0 else "delivered",
          500 if i % 100 == 0 else 200, *(stamp(i, DELIVERIES, 25),) * 4) for i in range(DELIVERIES)))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cursor_id = conn.execute("SELECT id FROM members WHERE community_did = ? ORDER BY id LIMIT 1 OFFSET ?",
                             (BIG, BIG_MEMBERS - 100 - 1)).fetchone()[0]
    conn.close()
    return {"key": key, "app_id": app_id, "last_page_after_id": cursor_id}


# ------------------------------------------------------------------ the real daemon


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def start_daemon(config: Path, port: int) -> tuple[subprocess.Popen[bytes], float]:
    started = time.perf_counter()
    proc = subprocess.Popen([str(REPO / ".venv/bin/commonroom"), "-c", str(config), "serve"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not healthy(port):
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited with {proc.returncode} before it was ready")
        if time.perf_counter() - started > 120:
            raise SystemExit("not ready after 120 s")
        time.sleep(0.002)
    return proc, time.perf_counter() - started


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def daemon_figures(state: Path, seeded: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    port = bm.free_port()
    config = state / "config.yaml"
    config.write_text(f"server: {{port: {port}, base_url: 'http://127.0.0.1:{port}'}}\n"
                      f"storage: {{state_dir: {state}}}\nsecret_key: '{SECRET}'\nlog_level: warning\n"
                      "rate_limits: {api: {requests: 10000000, window_seconds: 60}}\n")
    # A first start does the first passes of the clean-ups (denied audit entries past their
    # retention go): the timed starts are restarts, as in production.
    proc, first = start_daemon(config, port)
    time.sleep(5)
    stop(proc)
    print(f"first start: {1000 * first:.0f} ms", flush=True)
    startups = []
    for _ in range(args.startups):
        proc, took = start_daemon(config, port)
        startups.append(took)
        stop(proc)
    proc, _ = start_daemon(config, port)
    try:
        time.sleep(2)
        database = state / "commonroom.sqlite3"
        # The RSS without the database file's pages mapped by the reads (storage.mmap_mb):
        # those are the kernel's page cache, reported apart.
        idle = rss_mb(proc.pid) - bm.database_mapped_mb(proc.pid, database)
        auth = {"X-Api-Key": seeded["key"]}
        checks = [bm.http_post(f"/api/v1/communities/{BIG}/membership/check", auth,
                               {"userDid": user_did(random.randrange(BIG_MEMBERS)) if i % 2 else
                                f"did:plc:nobody{i:018d}"}) for i in range(200)]
        pages = [bm.http_get(f"/api/v1/communities/{community_did(random.randrange(1, COMMUNITIES))}"
                             "/members?limit=100", auth) for _ in range(200)]
        bm.measure("daemon-check", port, checks, args.seconds, 16, 1, proc.pid)
        bm.measure("daemon-pages", port, pages, args.seconds, 16, 1, proc.pid)
        mapped = bm.database_mapped_mb(proc.pid, database)
        loaded = rss_mb(proc.pid) - mapped
        peak = rss_mb(proc.pid, "VmHWM")
    finally:
        stop(proc)
    return {"startup_ms_median": round(1000 * statistics.median(startups)),
            "startup_ms_all": [round(1000 * s) for s in startups],
            "rss_idle_mb": round(idle, 1), "rss_after_load_mb": round(loaded, 1), "rss_peak_mb": round(peak, 1),
            "database_mapped_after_load_mb": round(mapped, 1)}


# ------------------------------------------------------------------ rates (bench_membership's server)


def rates(state: Path, seeded: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from daemon.http.base import encode_cursor
    port, bare_port, plain_port = bm.free_port(), bm.free_port(), bm.free_port()
    # bench_membership.build opens state/commonroom.sqlite3 with the same settings.
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    server = ctx.Process(target=bm.build, args=(state, port, bare_port, plain_port, ready), daemon=True)
    server.start()
    try:
        if not ready.wait(120):
            raise SystemExit("the server did not start")
        auth = {"X-Api-Key": seeded["key"]}
        base = f"/api/v1/communities/{BIG}"
        checks = [bm.http_post(f"{base}/membership/check", auth,
                               {"userDid": user_did(random.randrange(BIG_MEMBERS)) if i % 2 else
                                f"did:plc:nobody{i:018d}"}) for i in range(200)]
        last = encode_cursor([seeded["last_page_after_id"]])
        scenarios = [
            ("bare", bare_port, checks),
            ("check", port, checks),
            ("page1", port, [bm.http_get(f"{base}/members?limit=100", auth)]),
            ("page5000", port, [bm.http_get(f"{base}/members?limit=100&cursor={last}", auth)]),
            ("search", port, [bm.http_get(f"/api/v1/communities?q=topic+{t}&limit=20", auth) for t in range(97)]),
            ("audit", port, [bm.http_get(f"{base}/audit-log?adminDid={user_did(0)}&limit=50", auth)]),
        ]
        bm.measure("warmup", port, checks, 2, 4, 1)
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in scenarios}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for name, p, reqs in scenarios:
                rounds[name].append(bm.measure(name, p, reqs, args.seconds, args.connections, 1, server.pid))
        for name, runs in rounds.items():
            bad = {s: n for run in runs for s, n in run["statuses"].items() if s != 200}
            if bad:
                raise SystemExit(f"{name}: answers other than 200: {bad}")

        def ratio(a: str, b: str) -> float:
            per = sorted(x["rps"] / y["rps"] for x, y in zip(rounds[a], rounds[b]))
            return round(per[len(per) // 2], 3)

        out: dict[str, Any] = {name: round(statistics.median(r["rps"] for r in runs))
                               for name, runs in rounds.items()}
        # The server's CPU per request: what a loaded machine disturbs least.
        cpu = {name: statistics.median(r["server_us_per_request"] for r in runs) for name, runs in rounds.items()}
        out["cpu_us_per_request"] = {name: round(v) for name, v in cpu.items()}
        out.update({"cpu bare/check": round(cpu["bare"] / cpu["check"], 3),
                    "cpu bare/page1": round(cpu["bare"] / cpu["page1"], 3),
                    "cpu page5000/page1": round(cpu["page5000"] / cpu["page1"], 3)})
        out.update({"check/bare": ratio("check", "bare"), "page1/bare": ratio("page1", "bare"),
                    "page5000/page1": ratio("page5000", "page1")})
        return out
    finally:
        server.terminate()
        server.join(10)


# ------------------------------------------------------------------ a join's local part


def join_local(state: Path, seeded: dict[str, Any], n: int = 200) -> dict[str, Any]:
    """The local transaction a join ends with, on the seeded file: member row, counts, an
    audit entry, the event and its webhook fan-out (one delivery per subscribed webhook)."""
    from store.db import Database

    async def run() -> list[float]:
        db = Database(state / "commonroom.sqlite3")
        await db.open()
        times = []
        try:
            run = os.urandom(3).hex()
            for i in range(n):
                did = f"did:plc:joiner{run}{i:012d}"
                t0 = time.perf_counter()
                async with db.transaction("bench.join") as tx:
                    await tx.execute(
                        "INSERT INTO members (community_did, member_did, confirmed_at, proof_rkey) VALUES (?, ?, ?, ?)",
                        (BIG, did, NOW, "3kjoin"))
                    await tx.execute("UPDATE communities SET member_count = member_count + 1 WHERE did = ?", (BIG,))
                    await tx.execute(
                        "INSERT INTO audit_log (community_did, action, actor_did, target_did, metadata, created_at) "
                        "VALUES (?, 'member.joined', ?, ?, '{}', ?)", (BIG, did, did, NOW))
                    cur = await tx.execute(
                        "INSERT INTO events (id, type, community_did, data, created_at) VALUES (?, 'member.joined', ?, ?, ?)",
                        (f"evt_join{run}{i:014x}", BIG, json.dumps({"userDid": did}), NOW))
                    hooks = await tx.fetchall("SELECT webhook_id FROM webhook_events WHERE event_type = 'member.joined'")
                    await tx.executemany(
                        "INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at) "
                        "VALUES (?, ?, 0, ?)", [(h[0], f"evt_join{run}{i:014x}", NOW) for h in hooks])
                    del cur
                times.append(time.perf_counter() - t0)
            async with db.transaction("bench.join.undo") as tx:  # the seed stays as it was
                await tx.execute("DELETE FROM webhook_deliveries WHERE event_id LIKE 'evt_join%'")
                await tx.execute("DELETE FROM events WHERE id LIKE 'evt_join%'")
                await tx.execute("DELETE FROM audit_log WHERE community_did = ? AND actor_did LIKE 'did:plc:joiner%'",
                                 (BIG,))
                await tx.execute("DELETE FROM members WHERE community_did = ? AND member_did LIKE 'did:plc:joiner%'",
                                 (BIG,))
                await tx.execute("UPDATE communities SET member_count = ? WHERE did = ?", (BIG_MEMBERS, BIG))
        finally:
            await db.close()
        return times

    times = sorted(asyncio.run(run()))
    return {"join_local_ms_p50": round(1000 * times[len(times) // 2], 2),
            "join_local_ms_p99": round(1000 * times[int(len(times) * 0.99)], 2)}


def table_sizes(db_path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.OperationalError:
        rows = []  # SQLite built without dbstat
    conn.close()
    mb = {name: round(size / 1e6, 1) for name, size in rows}
    return {"file_mb": round(db_path.stat().st_size / 1e6, 1), "per_object_mb": dict(list(mb.items())[:20])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--startups", type=int, default=5)
    parser.add_argument("--keep", help="seed into this directory and keep it (reused when it holds a seed)")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        smoke()
        args.seconds, args.rounds, args.connections, args.startups = 0.2, 1, 2, 1

    began = time.perf_counter()
    state = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cr-scale-"))
    try:
        marker = state / "seed.json"
        if marker.exists():
            seeded = json.loads(marker.read_text())
            print(f"reusing the seed in {state}")
        else:
            state.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            seeded = seed(state)
            seeded["seed_s"] = round(time.perf_counter() - t0, 1)
            marker.write_text(json.dumps(seeded))
            print(f"seeded in {seeded['seed_s']} s", flush=True)
        result: dict[str, Any] = {"seed_s": seeded.get("seed_s"), "load": os.getloadavg()}
        result.update(table_sizes(state / "commonroom.sqlite3"))
        print(json.dumps(result["per_object_mb"]), flush=True)
        result.update(daemon_figures(state, seeded, args))
        print({k: result[k] for k in ("startup_ms_median", "rss_idle_mb", "rss_after_load_mb", "rss_peak_mb",
                                "database_mapped_after_load_mb")},
              flush=True)
        result.update(rates(state, seeded, args))
        print(json.dumps({k: v for k, v in result.items() if k != "per_object_mb"}), flush=True)
        result.update(join_local(state, seeded))
        result["load_after"] = os.getloadavg()
        result["total_s"] = round(time.perf_counter() - began)
        print(json.dumps(result, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
