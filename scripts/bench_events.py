#!/usr/bin/env python3
"""Benchmark the event stream (docs/events.md): replaying a backlog over the WebSocket, the
delay from a commit to a live subscriber, and the memory 1,000 idle subscribers take.

The service runs in this process (a real Application on a temporary SQLite file, served on
loopback, pinned to CPU 0); the subscribers run in a child process (the `websockets`
client, pinned to CPU 1), so the two do not share an event loop. Usage:

    .venv/bin/python scripts/bench_events.py [--backlog 100000] [--rate 200] [--live-events 1000] [--idle 1000]

1. replay: `--backlog` events are committed (transactions of 1,000), then one subscriber
   connects with the cursor from before them and counts messages until it has them all:
   events per second from the upgrade to the last message.
2. live: one subscriber, live; events are committed one per transaction at `--rate` per
   second; the delay is the arrival time (subscriber) minus the commit time (service).
3. idle: the service's RSS before and after `--idle` subscribers connect and sit idle (and
   after 100 events reach all of them).
4. membership/check requests per second (bench_membership.py's load generator, 16
   connections) in `--check-pairs` pairs of rounds: without subscribers, then with `--idle`
   idle ones; the change is taken per pair, then the median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CLIENT = r"""
import asyncio, json, os, sys, time
import websockets

mode, port, key = sys.argv[1], sys.argv[2], sys.argv[3]
if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
    os.sched_setaffinity(0, {1})
URL = f"ws://127.0.0.1:{port}/api/v1/events/subscribe"

def connect(query=""):
    return websockets.connect(URL + query, additional_headers={"X-Api-Key": key}, proxy=None,
                              compression=None, max_size=None, open_timeout=60)

async def replay(cursor, count):
    started = time.time()
    got = 0
    async with connect(f"?cursor={cursor}") as ws:
        opened = time.time()
        async for message in ws:
            got += 1
            if got == count:
                break
    done = time.time()
    print(json.dumps({"count": got, "seconds": done - started, "after_upgrade": done - opened}), flush=True)

async def live(count):
    arrivals = {}
    async with connect() as ws:
        print("ready", flush=True)
        async for message in ws:
            arrivals[json.loads(message)["id"]] = time.time()
            if len(arrivals) == count:
                break
    print(json.dumps(arrivals), flush=True)

async def idle(count):
    conns = []
    for i in range(0, count, 50):
        conns += await asyncio.gather(*(connect().__aenter__() for _ in range(min(50, count - i))))
    print("ready", flush=True)
    received = [0]
    async def drain(ws):
        async for _ in ws:
            received[0] += 1
    tasks = [asyncio.ensure_future(drain(ws)) for ws in conns]
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    print(json.dumps({"received": received[0]}), flush=True)
    for ws in conns:
        await ws.close()
    for t in tasks:
        t.cancel()

def check(did, member, seconds):
    # bench_membership's load generator (raw keep-alive HTTP/1.1, 16 connections, CPU 1)
    sys.path.insert(0, os.path.join(os.environ["CR_REPO"], "scripts"))
    from bench_membership import http_post, load
    auth = {"X-Api-Key": key}
    path = f"/api/v1/communities/{did}/membership/check"
    requests = [http_post(path, auth, {"userDid": member if i % 2 else f"did:plc:nobody{i:06d}"})
                for i in range(200)]
    stats = load(("127.0.0.1", int(port), requests, seconds, 16))
    print(json.dumps({"requests": len(stats["latencies"]), "statuses": stats["statuses"]}), flush=True)

if mode == "replay":
    asyncio.run(replay(sys.argv[4], int(sys.argv[5])))
elif mode == "check":
    check(sys.argv[4], sys.argv[5], float(sys.argv[6]))
elif mode == "live":
    asyncio.run(live(int(sys.argv[4])))
else:
    asyncio.run(idle(int(sys.argv[4])))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def client(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, *args, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, limit=64 * 1024 * 1024,
                                                env={**os.environ, "CR_REPO": str(REPO)})


async def check_rate(port: int, key: str, community: str, member: str, seconds: float) -> tuple[float, float]:
    """membership/check requests per second from bench_membership's load generator, and the
    service's CPU time per request in µs (this process, all threads: steadier than the rate
    on a shared machine)."""
    proc = await client("check", str(port), key, community, member, str(seconds))
    cpu = time.process_time()
    out, _ = await proc.communicate()
    cpu = time.process_time() - cpu
    result = json.loads(out.splitlines()[-1])
    assert set(result["statuses"]) == {"200"}, result
    return result["requests"] / seconds, 1e6 * cpu / max(1, result["requests"])


async def open_idle(port: int, key: str, count: int) -> asyncio.subprocess.Process:
    proc = await client("idle", str(port), key, str(count))
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 300)
    assert line.strip() == b"ready", line
    return proc


async def close_idle(proc: asyncio.subprocess.Process) -> int:
    assert proc.stdin is not None
    proc.stdin.write(b"done\n")
    await proc.stdin.drain()
    out, _ = await proc.communicate()
    return int(json.loads(out.splitlines()[-1])["received"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=200.0, help="events/s in the live phase")
    parser.add_argument("--live-events", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--check-seconds", type=float, default=3.0, help="per membership/check round")
    parser.add_argument("--check-pairs", type=int, default=5,
                        help="membership/check rounds without and then with the idle subscribers")
    args = parser.parse_args()

    import yaml
    from tornado.httpserver import HTTPServer

    from daemon.http.base import encode_cursor
    from daemon.runtime.app import create_app, load_config
    from daemon.runtime.events import emit_tx
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from store import apps as apps_store
    from plugins.communities import store as communities
    from daemon.runtime import events as events_store

    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0})
    tmp = Path(tempfile.mkdtemp(prefix="bench-events-"))
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["storage"] = {"state_dir": str(tmp)}
    raw["secret_key"] = "11" * 32
    raw["log_level"] = "warning"
    raw["rate_limits"] = {"api": {"requests": 1_000_000, "window_seconds": 60}}
    raw["events"] = {"max_subscribers_per_app": args.idle + 10}
    (tmp / "config.yaml").write_text(yaml.safe_dump(raw))
    os.environ.pop("COMMONROOM_EXTRA_PLUGINS", None)
    config, pm = load_config(tmp / "config.yaml")
    app = await create_app(config, pm)
    port = free_port()
    server = HTTPServer(app)
    server.listen(port, "127.0.0.1")
    community = "did:plc:bench"
    key = new_key()
    try:
        now = app.clock.iso_now()
        async with app.db.transaction("bench.setup") as tx:
            app_id = new_app_id()
            await apps_store.insert_app_tx(tx, app_id=app_id, owner_did="did:plc:bench-owner", name="bench",
                                           domain="bench.example.com", key_hash=hash_key(key), now=now)
            await communities.insert_community_tx(
                tx, did=community, handle="bench.test", display_name="Bench", description="",
                type="open", pds_url="http://127.0.0.1:1", account_kind="brought",
                creator_did="did:plc:bench-owner", creator_app_id=app_id, proof_rkey="3kbench",
                now=now, state="active")

        # ---- 1. replay a backlog
        start = encode_cursor([(await events_store.bounds(app.db))[1]])
        began = time.time()
        for first in range(0, args.backlog, 1000):
            async with app.db.transaction("bench.emit") as tx:
                for i in range(first, min(args.backlog, first + 1000)):
                    await emit_tx(app, tx, "member.joined", community_did=community,
                                  data={"memberDid": f"did:plc:backlog{i:07d}"})
        print(f"committed a backlog of {args.backlog} events in {time.time() - began:.1f} s")
        proc = await client("replay", str(port), key, start, str(args.backlog))
        out, _ = await proc.communicate()
        result = json.loads(out)
        print(f"replay: {result['count']} events in {result['seconds']:.2f} s = "
              f"{result['count'] / result['seconds']:,.0f} events/s (from the connect; "
              f"{result['count'] / result['after_upgrade']:,.0f} events/s after the upgrade)")

        # ---- 2. live delay at a steady rate
        proc = await client("live", str(port), key, str(args.live_events))
        assert proc.stdout is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
        await asyncio.sleep(0.3)
        commits: dict[str, float] = {}
        interval = 1.0 / args.rate
        t0 = time.monotonic()
        for i in range(args.live_events):
            stamp: list[float] = []
            async with app.db.transaction("bench.emit_one") as tx:
                tx.after_commit(lambda: stamp.append(time.time()))  # runs first: the commit's end
                event = await emit_tx(app, tx, "member.joined", community_did=community,
                                      data={"memberDid": f"did:plc:live{i:07d}"})
            commits[event.id] = stamp[0]
            pause = t0 + (i + 1) * interval - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
        out, _ = await proc.communicate()
        arrivals = json.loads(out)
        delays = [(arrivals[e] - t) * 1000 for e, t in commits.items() if e in arrivals]
        print(f"live at {args.rate:.0f} events/s over {len(delays)}/{len(commits)} events: commit -> received "
              f"median {statistics.median(delays):.2f} ms, p99 {percentile(delays, 99):.2f} ms, "
              f"max {max(delays):.2f} ms")

        # ---- 3. idle subscribers: memory
        await asyncio.sleep(1)
        before = rss_mb()
        proc = await open_idle(port, key, args.idle)
        await asyncio.sleep(2)
        connected = len(app.extensions["events"].subscribers)
        idle_rss = rss_mb()
        for i in range(100):
            async with app.db.transaction("bench.emit_idle") as tx:
                await emit_tx(app, tx, "member.joined", community_did=community,
                              data={"memberDid": f"did:plc:idle{i:07d}"})
        await asyncio.sleep(3)
        after_events = rss_mb()
        received = await close_idle(proc)
        print(f"idle: {connected} subscribers connected; service RSS {before:.1f} MB -> {idle_rss:.1f} MB "
              f"(+{idle_rss - before:.1f} MB), after 100 events to each ({received} messages received) "
              f"{after_events:.1f} MB (+{after_events - before:.1f} MB)")

        # ---- 4. membership/check with and without idle subscribers
        member = "did:plc:benchmember"
        async with app.db.transaction("bench.member") as tx:
            await tx.execute("INSERT INTO members (community_did, member_did, confirmed_at, proof_rkey) "
                             "VALUES (?, ?, ?, ?)", (community, member, now, "3kbenchm"))
        await check_rate(port, key, community, member, 1.0)  # warm-up
        ratios, without, with_idle = [], [], []
        for _ in range(args.check_pairs):  # paired rounds: the machine's speed drifts
            without.append(await check_rate(port, key, community, member, args.check_seconds))
            proc = await open_idle(port, key, args.idle)
            await asyncio.sleep(1)
            with_idle.append(await check_rate(port, key, community, member, args.check_seconds))
            await close_idle(proc)
            await asyncio.sleep(1)
            ratios.append((with_idle[-1][0] / without[-1][0], with_idle[-1][1] / without[-1][1]))
        show = lambda rounds: ", ".join(f"{r:,.0f}/s {c:.0f} µs" for r, c in rounds)  # noqa: E731
        print(f"membership/check (rate, service CPU per request): without subscribers {show(without)}; "
              f"with {args.idle} idle {show(with_idle)}; median change: rate "
              f"{100 * (statistics.median(r for r, _ in ratios) - 1):+.1f} %, CPU per request "
              f"{100 * (statistics.median(c for _, c in ratios) - 1):+.1f} %")
    finally:
        server.stop()
        await app.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
