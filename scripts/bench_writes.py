#!/usr/bin/env python3
"""Benchmark writes: joins and record creates per second through the API, each of which
writes to the community's repo on a PDS (the local devnet: the pinned @atproto/pds on
loopback) before the local index commits.

    .venv/bin/python scripts/bench_writes.py [--writes 60] [--concurrency 1 8]

Starts a devnet and the service in this process (a real Application on a temporary
SQLite file, served on loopback), creates one open community and `--writes` accounts, then
for each concurrency level: joins (a membership proof written to the community's repo),
and record creates (`POST /records`). Prints writes/s and latency p50/p99. Writes are
bounded by the PDS: compare "pds" CPU with the service's in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(args: argparse.Namespace, net: Any, state: Path) -> None:
    import httpx
    from tornado.httpserver import HTTPServer
    from tornado.testing import bind_unused_port

    from daemon.runtime.app import create_app, plugin_sections
    from daemon.runtime.config import Config
    from daemon.runtime.plugins import build_plugin_manager
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from store import apps as apps_store

    raw = {"storage": {"state_dir": str(state)}, "secret_key": "00" * 31 + "01", "log_level": "warning",
           "rate_limits": {"api": {"requests": 10_000_000, "window_seconds": 60}},
           "atproto": {"plc_url": net.plc_url, "pds_url": net.pds_url, "resolve_handles_via_pds": net.pds_url,
                       "allow_insecure_http": True,
                       "allowed_private_targets": ["127.0.0.0/8", "::1", "localhost"]}}
    pm = build_plugin_manager((), (), load_entry_points=False)
    config = Config.from_mapping(raw, base_dir=state, plugin_sections=plugin_sections(pm))
    app = await create_app(config, pm)
    key, app_id = new_key(), new_app_id()
    async with app.db.transaction("bench.app") as tx:
        await apps_store.insert_app_tx(tx, app_id=app_id, owner_did="did:plc:benchowner", name="bench",
                                       domain="bench.example.com", key_hash=hash_key(key), now=app.clock.iso_now())
    sock, port = bind_unused_port()
    server = HTTPServer(app)
    server.add_sockets([sock])
    base = f"http://127.0.0.1:{port}"
    headers = {"X-Api-Key": key}
    levels = args.concurrency
    people_needed = args.writes * len(levels) + 1
    t0 = time.perf_counter()
    people = await asyncio.gather(*(asyncio.to_thread(net.create_account, f"w{i}{os.urandom(3).hex()}.test")
                                    for i in range(people_needed)))
    print(f"created {people_needed} accounts in {time.perf_counter() - t0:.1f} s", flush=True)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        created = await client.post("/api/v1/communities", json={
            "creatorDid": people[0]["did"], "displayName": "Bench club", "type": "open"})
        created.raise_for_status()
        community = created.json()["community"]["did"]
        pool = iter(people[1:])

        async def measure(name: str, concurrency: int, one: Any) -> None:
            latencies: list[float] = []
            queue = list(range(args.writes))
            pds_cpu0, own_cpu0 = cpu_seconds(net.pid), time.process_time()

            async def worker() -> None:
                while queue:
                    i = queue.pop()
                    started = time.perf_counter()
                    resp = await one(i)
                    if resp.status_code >= 300:
                        raise SystemExit(f"{name}: {resp.status_code} {resp.text}")
                    latencies.append(time.perf_counter() - started)

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            wall = time.perf_counter() - started
            latencies.sort()
            pds_cpu, own_cpu = cpu_seconds(net.pid) - pds_cpu0, time.process_time() - own_cpu0
            print(f"{name:>14} x{concurrency:<3} {args.writes / wall:7.1f} writes/s  "
                  f"p50 {1000 * statistics.median(latencies):7.1f} ms  "
                  f"p99 {1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]:7.1f} ms  "
                  f"CPU per write: pds {1000 * pds_cpu / args.writes:.1f} ms, "
                  f"this process (service + client) {1000 * own_cpu / args.writes:.1f} ms", flush=True)

        for concurrency in levels:
            joiners = [next(pool) for _ in range(args.writes)]
            await measure("join", concurrency, lambda i, j=joiners: client.post(
                f"/api/v1/communities/{community}/members/join", json={"userDid": j[i]["did"]}))
            await measure("record create", concurrency, lambda i, j=joiners: client.post(
                f"/api/v1/communities/{community}/records", json={
                    "userDid": j[i]["did"], "collection": "org.example.bench.note",
                    "record": {"$type": "org.example.bench.note", "text": f"note {i}",
                               "createdAt": "2026-01-01T00:00:00.000Z"}}))
    server.stop()
    await app.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=60, help="writes per scenario")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.writes, args.concurrency = 3, [1]
    from commonroom_testing.localnet import Devnet
    net = Devnet()
    net.start()
    state = Path(tempfile.mkdtemp(prefix="cr-bench-writes-"))
    try:
        asyncio.run(run(args, net, state))
    finally:
        net.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
