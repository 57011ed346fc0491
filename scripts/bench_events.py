#!/usr/bin/env python3
"""Benchmark the event stream (docs/events.md): replaying a backlog over the WebSocket, the
delay from a commit to a live subscriber, and the memory 1,000 idle subscribers take.

The service runs in this process (a real Application on a temporary SQLite file, served on
loopback, pinned to CPU 0); the subscribers run in a child process (the `websockets`
client, pinned to CPU 1), so the two do not share an event loop (`--pin 0,1`, the default:
the service's CPU and the clients', as `taskset` would; `--pin none` lets the kernel place
them). Usage:

    .venv/bin/python scripts/bench_events.py [--backlog 100000] [--rate 200] [--live-events 1000] [--idle 1000] [--pin 0,1]

1. replay: `--backlog` events are committed (transactions of 1,000), then one subscriber
   connects with the cursor from before them and counts messages until it has them all:
   events per second from the upgrade to the last message.
2. live: one subscriber, live; events are committed one per transaction at `--rate` per
   second; the delay is the arrival time (subscriber) minus the commit time (service).
3. idle: the service's RSS before and after `--idle` subscribers connect and sit idle (and
   after 100 events reach all of them).
4. membership/check requests per second (bench_membership.py's load generator, 16
   connections) in `--check-pairs` pairs of rounds, without and with `--idle` idle
   subscribers (the order alternates: ABBA, so a drift of the machine's speed hits both
   alike). Per round: the rate, the service's CPU time per request and how busy it was
   (its CPU time / the round's length: near 100 % the service is the bottleneck, well
   below it the load generator or the machine is), and its garbage collector's passes and time (what 1,000
   more connections on the heap may cost). Each figure is the median of its rounds, like
   bench_membership.py; the change is taken within each pair, then the median. Each
   condition runs two loads: as fast as the service answers (the rate; on a shared machine
   it is often the load generator's), and paced at `--paced-rate` requests per second on a
   fixed schedule (the same work with and without subscribers: the service's CPU time per
   request then says what the idle subscribers cost it, pings included; at saturation the
   rate falls by about as much as that rises). Before each round, one full collection runs on both
   sides (`--no-settle` leaves it out), so the garbage of connecting 1,000 subscribers a
   second earlier is not counted as the cost of idle ones.

`--phases idle,check` runs only the last two (no backlog in the database).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CLIENT = r"""
import asyncio, json, os, sys, time
import websockets

mode, port, key = sys.argv[1], sys.argv[2], sys.argv[3]

def pin_client(*_):
    # --pin: the CPU the clients run on ("" when the benchmark pins nothing)
    cpu = os.environ.get("CR_CLIENT_CPU", "")
    if cpu and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(cpu)})

pin_client()
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

def check(did, member, seconds, rate):
    # bench_membership's load generator (raw keep-alive HTTP/1.1, 16 connections, CPU 1), as
    # fast as the service answers; or, with a rate, 16 connections sending on a fixed schedule
    sys.path.insert(0, os.path.join(os.environ["CR_REPO"], "scripts"))
    import bench_membership
    from bench_membership import http_post, load
    bench_membership.pin = pin_client  # the CPU --pin gives the clients, not bench_membership's
    auth = {"X-Api-Key": key}
    path = f"/api/v1/communities/{did}/membership/check"
    requests = [http_post(path, auth, {"userDid": member if i % 2 else f"did:plc:nobody{i:06d}"})
                for i in range(200)]
    if rate:
        stats = {"latencies": [], "statuses": {}}
        asyncio.run(paced(requests, seconds, rate, 16, stats))
    else:
        stats = load(("127.0.0.1", int(port), requests, seconds, 16))
    print(json.dumps({"requests": len(stats["latencies"]), "statuses": stats["statuses"]}), flush=True)

async def paced(requests, seconds, rate, connections, stats):
    import re
    pin_client()
    interval = connections / rate
    start = time.perf_counter() + 0.2
    async def one(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", int(port))
        due = start + n * interval / connections
        for i in range(n, 10**9, connections):
            if due >= start + seconds:
                break
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            sent = time.perf_counter()
            writer.write(requests[i % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(int(re.search(rb"(?i)content-length: *([0-9]+)", head).group(1)))
            stats["latencies"].append(time.perf_counter() - sent)
            code = head.split(None, 2)[1].decode()
            stats["statuses"][code] = stats["statuses"].get(code, 0) + 1
            due += interval
        writer.close()
    await asyncio.gather(*(one(n) for n in range(connections)))

if mode == "replay":
    asyncio.run(replay(sys.argv[4], int(sys.argv[5])))
elif mode == "check":
    check(sys.argv[4], sys.argv[5], float(sys.argv[6]), float(sys.argv[7]))
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
                                                env={**os.environ, "CR_REPO": str(REPO),
                                                     "CR_CLIENT_CPU": CLIENT_CPU})


#: The CPU the client processes run on (`--pin`; "" for none).
CLIENT_CPU = ""


class GcTimer:
    """The garbage collector's passes and time in this process (`gc.callbacks`)."""

    def __init__(self) -> None:
        self.passes = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.passes[info["generation"]] += 1

    def snapshot(self) -> tuple[list[int], float]:
        return list(self.passes), self.seconds


@dataclass
class Round:
    rate: float           # requests per second
    cpu_us: float         # the service's CPU time per request, µs
    busy: float           # the service's CPU time / wall time
    gc_passes: list[int]  # the collector's passes by generation
    gc_ms: float          # the collector's time in the round, ms


async def check_rate(port: int, key: str, community: str, member: str, seconds: float,
                     gc_timer: GcTimer | None = None, rate: float = 0.0) -> Round:
    """membership/check requests per second from bench_membership's load generator, and the
    service's CPU time per request in µs (this process, all threads: steadier than the rate
    on a shared machine), how busy it was, and its collector's work meanwhile."""
    gc_before = gc_timer.snapshot() if gc_timer else ([0, 0, 0], 0.0)
    proc = await client("check", str(port), key, community, member, str(seconds), str(rate))
    cpu = time.process_time()
    out, _ = await proc.communicate()
    cpu = time.process_time() - cpu
    gc_after = gc_timer.snapshot() if gc_timer else ([0, 0, 0], 0.0)
    result = json.loads(out.splitlines()[-1])
    assert set(result["statuses"]) == {"200"}, result
    if rate:
        seconds = max(seconds, result["requests"] / rate)   # a paced round ran no faster than its schedule
    return Round(result["requests"] / seconds, 1e6 * cpu / max(1, result["requests"]), cpu / seconds,
                 [a - b for a, b in zip(gc_after[0], gc_before[0])], 1000 * (gc_after[1] - gc_before[1]))


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
    parser.add_argument("--check-pairs", type=int, default=6,
                        help="pairs of membership/check rounds, without and with the idle subscribers")
    parser.add_argument("--paced-rate", type=float, default=600.0,
                        help="membership/check requests per second of the paced rounds (0: none)")
    parser.add_argument("--phases", default="replay,live,idle,check",
                        help="which phases to run, of replay,live,idle,check")
    parser.add_argument("--no-settle", dest="settle", action="store_false",
                        help="measure the check rounds right after the subscribers connect, "
                             "without a full collection first (the collector's catching up included)")
    parser.add_argument("--pin", default="0,1",
                        help="SERVICE,CLIENTS: the CPUs the service and the client processes (subscribers, "
                             "load generator) are pinned to, as with taskset; 'none' pins nothing")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.backlog, args.live_events, args.idle, args.check_seconds, args.check_pairs = 200, 20, 5, 0.2, 1
        args.paced_rate = 0
    phases = set(args.phases.split(","))
    if not phases or phases - {"replay", "live", "idle", "check"}:
        parser.error("--phases: a comma-separated list of replay, live, idle, check")

    import yaml
    from tornado.httpserver import HTTPServer

    from daemon.runtime.app import create_app, load_config
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from store import apps as apps_store
    from plugins.communities import store as communities

    global CLIENT_CPU
    if args.pin != "none" and hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        try:
            service_cpu, CLIENT_CPU = (str(int(c)) for c in args.pin.split(","))
        except ValueError:
            parser.error("--pin: SERVICE,CLIENTS (two CPU numbers) or none")
        os.sched_setaffinity(0, {int(service_cpu)})
    print(f"pinned: service to CPU {os.sched_getaffinity(0)}, clients to "
          f"{'CPU {' + CLIENT_CPU + '}' if CLIENT_CPU else 'any CPU'} (load average "
          f"{os.getloadavg()[0]:.2f})", flush=True)
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

        if "replay" in phases:
            await replay_phase(app, args, port, key, community)
        if "live" in phases:
            await live_phase(app, args, port, key, community)
        if "idle" in phases:
            await idle_phase(app, args, port, key, community)
        if "check" in phases:
            await check_phase(app, args, port, key, community, now)
    finally:
        server.stop()
        await app.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


async def replay_phase(app: Any, args: argparse.Namespace, port: int, key: str, community: str) -> None:
    from daemon.http.base import encode_cursor
    from daemon.runtime.events import emit_tx
    from daemon.runtime import events as events_store

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



async def live_phase(app: Any, args: argparse.Namespace, port: int, key: str, community: str) -> None:
    from daemon.runtime.events import emit_tx

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



async def idle_phase(app: Any, args: argparse.Namespace, port: int, key: str, community: str) -> None:
    from daemon.runtime.events import emit_tx

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



async def check_phase(app: Any, args: argparse.Namespace, port: int, key: str, community: str, now: str) -> None:
    # ---- 4. membership/check with and without idle subscribers
    member = "did:plc:benchmember"
    async with app.db.transaction("bench.member") as tx:
        await tx.execute("INSERT INTO members (community_did, member_did, confirmed_at, proof_rkey) "
                         "VALUES (?, ?, ?, ?)", (community, member, now, "3kbenchm"))
    gc_timer = GcTimer()
    await check_rate(port, key, community, member, 1.0)  # warm-up
    loads = [("as fast as it answers", 0.0)] + ([(f"paced at {args.paced_rate:,.0f}/s", args.paced_rate)]
                                                if args.paced_rate else [])
    # rounds[load][which]: the rounds of one load, without and with the idle subscribers
    rounds: dict[str, dict[str, list[Round]]] = {name: {"without": [], "with": []} for name, _ in loads}

    async def measure(which: str) -> None:
        for name, rate in loads:
            rounds[name][which].append(await check_rate(port, key, community, member, args.check_seconds,
                                                        gc_timer, rate))

    def settle() -> None:
        # Before each round, one full collection (outside the round's timing and GC counts):
        # the subscribers were connected a second ago, and promoting their new objects through
        # the collector's generations is the connecting's cost, not the cost of idle ones.
        # Without subscribers the same collection runs, so both sides start alike.
        if args.settle:
            gc.collect()

    for i in range(args.check_pairs):  # ABBA: the machine's speed drifts
        order = ("without", "with") if i % 2 == 0 else ("with", "without")
        for which in order:
            if which == "with":
                proc = await open_idle(port, key, args.idle)
                await asyncio.sleep(1)
                settle()
                await measure(which)
                await close_idle(proc)
            else:
                settle()
                await measure(which)
            await asyncio.sleep(1)
        print(f"pair {i + 1}/{args.check_pairs} ({' then '.join(order)}): " + "; ".join(
            f"{name}: {show(rounds[name]['without'][-1])} | with {args.idle} idle: {show(rounds[name]['with'][-1])}"
            for name, _ in loads), flush=True)
    median = statistics.median
    for name, _ in loads:
        for which, label in (("without", "without subscribers"), ("with", f"with {args.idle} idle")):
            got = rounds[name][which]
            print(f"membership/check {name}, {label}, medians of {len(got)} rounds: "
                  f"{median(r.rate for r in got):,.0f}/s (rounds {min(r.rate for r in got):,.0f}-"
                  f"{max(r.rate for r in got):,.0f}), {median(r.cpu_us for r in got):.0f} µs CPU/req "
                  f"({min(r.cpu_us for r in got):.0f}-{max(r.cpu_us for r in got):.0f}), "
                  f"service busy {100 * median(r.busy for r in got):.0f} %, "
                  f"GC {median(r.gc_ms for r in got):.1f} ms/round (gen2 passes {median(r.gc_passes[2] for r in got):.0f})")
        pairs = list(zip(rounds[name]["without"], rounds[name]["with"]))
        rate = sorted(b.rate / a.rate for a, b in pairs)
        cpu = sorted(b.cpu_us / a.cpu_us for a, b in pairs)
        print(f"membership/check {name}: change with {args.idle} idle subscribers, median of the per-pair "
              f"ratios: rate {100 * (median(rate) - 1):+.1f} % (pairs {100 * (rate[0] - 1):+.1f} to "
              f"{100 * (rate[-1] - 1):+.1f} %), CPU per request {100 * (median(cpu) - 1):+.1f} % "
              f"(pairs {100 * (cpu[0] - 1):+.1f} to {100 * (cpu[-1] - 1):+.1f} %)")


def show(r: Round) -> str:
    return (f"{r.rate:,.0f}/s {r.cpu_us:.0f} µs busy {100 * r.busy:.0f} % "
            f"GC {r.gc_ms:.1f} ms ({'/'.join(map(str, r.gc_passes))})")


if __name__ == "__main__":
    asyncio.run(main())
