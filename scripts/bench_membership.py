#!/usr/bin/env python3
"""Benchmark the membership reads over loopback HTTP.

Seeds (directly through the store) one community with 100k members and 1k more
communities, starts the daemon's application in a server process, and drives it from a
second process with a small keep-alive HTTP/1.1 load generator (raw asyncio sockets; `wrk`
is not installed here). The service is served by the daemon's own server (`build_server`, as
`commonroom serve` builds it). Measured in the same run, against the same server process:

* ``bare``: a plain Tornado handler answering a small JSON object (the ceiling). It is sent
  the very requests ``check`` gets (same path, API-key header and body), so both servers
  parse the same bytes and the difference is what the service does with them;
* ``floor``: a `daemon.http.base.BaseHandler` route with API-key auth that parses the JSON body
  and answers a constant: the core's per-request cost, without any membership work
  (same headers and bodies, a path of the same shape, served from the route table through
  `cr_routes` as every route of the service is);
* ``check``: POST /api/v1/communities/:did/membership/check (API key, JSON body),
  alternating members and non-members of the 100k community: 200 distinct requests, so
  after the first round every check's row comes from the database's cache of point reads
  (`Database.fetchone_now(cached=True)`), as a person's repeated page views do;
* ``check-miss``: the same route, each request for another of 20,000 users, more than that
  cache holds (1,024 rows): (nearly) every check misses it and runs its SQLite query;
* ``check-nometrics``: the same, served by a second application in the same process with
  ``metrics.enabled: false``: ``check / check-nometrics`` is what recording metrics costs;
* ``page1`` / ``page900``: GET .../members?limit=100, first page and the 900th page
  (keyset cursor of the 89,900th member). Between two commits a page is answered from the
  application's cache of member pages (`Communities.member_pages`), as an app's repeated
  views of a community are;
* ``page-miss``: pages of 100 after 2,000 different cursors, more than that cache holds
  (64 pages): (nearly) every page is read from SQLite, as after a change.

For every scenario served by the service it also prints which code path answered
(``commonroom_http_serving_path_total`` read from ``/metrics`` before and after: ``lean``
answered at once, ``lean_task`` a lean route that had to wait, ``handler`` a Tornado
RequestHandler), so a lost fast path shows in the output, not only in a ratio; with
``--stages`` (needs ``py-spy`` on the PATH or in the venv, a dev tool, not a dependency) an
extra pass per scenario samples the server and splits its CPU per request into stages
(Tornado's HTTP parsing and I/O, the event loop, routing, handler set-up, authentication,
rate limit, JSON body, SQLite read, the route's own work, the response, metrics and access
log).

    .venv/bin/python scripts/bench_membership.py [--seconds 3] [--rounds 9] [--connections 16] [--stages]
                                                 [--mmap-mb 0]

Rates on a shared machine spread by ±5 % from run to run: for a change of a few per cent,
`scripts/bytecodes_per_request.py` counts the Python bytecodes these scenarios cost the
server, run after run within about half a per cent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MEMBERS = 100_000
COMMUNITIES = 1_000
#: The 900th page's first member (its keyset cursor): 899 pages of 100 in.
DEEP_OFFSET = 899 * 100 - 1


def smoke() -> None:
    """Tiny data for `--smoke` (this script's and those that seed as it does)."""
    global MEMBERS, COMMUNITIES, DEEP_OFFSET
    MEMBERS, COMMUNITIES, DEEP_OFFSET = 1_000, 10, 899
BIG = "did:plc:benchbigcommunity0000000"


def member_did(i: int) -> str:
    return f"did:plc:bench{i:019d}"


# ------------------------------------------------------------------ server process


def pin(cpu: int) -> None:
    """Keep this process on one CPU (when the machine has two or more): the server on CPU 0,
    the load generator on CPU 1, so neither steals the other's core mid-measurement."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {cpu})


def database_mapped_mb(pid: int, database: Path | None) -> float:
    """How much of the process's RSS is the SQLite file mapped by its read connections
    (`storage.mmap_mb`): pages of the kernel's page cache, shared and reclaimable, that a
    read through ``pread`` would have filled as well, but that `ps` counts as the process's
    (Linux /proc/<pid>/smaps, MB; 0 without `database`)."""
    if database is None:
        return 0.0
    target, total, inside = str(database.resolve()), 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            inside = len(head) == 6 and head[5].strip() == target
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total / 1024


def server_memory(pid: int, database: Path | None = None) -> dict[str, float]:
    """The server process's resident memory now and at its peak (Linux /proc, MB):
    ``own_mb`` is the RSS without the database file's mapped pages (`database_mapped_mb`),
    the figure comparable to runs before the reads were mapped (storage.mmap_mb)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    kb = lambda name: float(fields[name].split()[0])  # noqa: E731
    mapped = database_mapped_mb(pid, database)
    return {"rss_mb": kb("VmRSS") / 1024, "peak_mb": kb("VmHWM") / 1024,
            "anon_mb": kb("RssAnon") / 1024, "file_mb": kb("RssFile") / 1024,
            "database_mapped_mb": mapped, "own_mb": kb("VmRSS") / 1024 - mapped}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build(state: Path, port: int, bare_port: int, plain_port: int, ready: Any, mmap_mb: int | None = None) -> None:
    pin(0)
    import tornado.web
    from tornado.httpserver import HTTPServer

    from daemon.runtime.app import create_app, plugin_sections
    from daemon.runtime.config import Config
    from daemon.runtime.main import build_server
    from daemon.runtime.plugins import build_plugin_manager

    raw = {"storage": {"state_dir": str(state)}, "secret_key": "00" * 31 + "01",
           "rate_limits": {"api": {"requests": 10_000_000, "window_seconds": 60}},
           "metrics": {"allow_from": ["127.0.0.1/32"]},   # the bench reads the path counters
           "log_level": "warning"}
    if mmap_mb is not None:  # --mmap-mb: the reads' mapping of the file (storage.mmap_mb)
        raw["storage"]["mmap_mb"] = mmap_mb

    class Bare(tornado.web.RequestHandler):
        def get(self) -> None:
            self.set_header("Content-Type", "application/json; charset=utf-8")
            self.finish(b'{"isMember":true,"isAdmin":false,"isPending":false}')

        post = get

    from daemon import hookimpl
    from daemon.http.base import BaseHandler
    from daemon.http.openapi import obj, operation

    class Floor(BaseHandler):
        """The core's per-request cost: API-key auth, rate limit, JSON in and out."""
        auth = "app"

        @operation("benchmark: the per-request cost of a BaseHandler route", responses={200: obj({})})
        async def post(self, did: str) -> None:
            self.json_body()
            self.send_json({"isMember": True, "isAdmin": False, "isPending": False})

    class FloorRoute:
        """Serves `Floor` as every route of the service is served: through `cr_routes`, so
        it is found in the route table (the check's pattern shape, a DID group and all)."""

        @hookimpl
        def cr_routes(self, app: Any) -> list[tuple]:
            return [(r"/bench/floor/comm/(did(?::|%3[Aa])[^/?#]+)/membership/check", Floor)]

    pm = build_plugin_manager((), (FloorRoute(),), load_entry_points=False)
    config = Config.from_mapping(raw, base_dir=state, plugin_sections=plugin_sections(pm))

    # The same service with metrics off, to measure what recording them costs.
    pm_plain = build_plugin_manager((), (), load_entry_points=False)
    config_plain = Config.from_mapping({**raw, "metrics": {"enabled": False}}, base_dir=state,
                                       plugin_sections=plugin_sections(pm_plain))

    async def main() -> None:
        import logging
        logging.basicConfig(level=logging.WARNING)
        app = await create_app(config, pm)
        plain = await create_app(config_plain, pm_plain)
        # The service's own HTTP server, as `commonroom serve` builds it (connection caps,
        # limits, its read size); `bare` gets Tornado's HTTPServer with its defaults.
        build_server(plain).listen(plain_port, "127.0.0.1")
        build_server(app).listen(port, "127.0.0.1")
        HTTPServer(tornado.web.Application([(r"/.*", Bare)])).listen(bare_port, "127.0.0.1")
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


async def seed(state: Path) -> dict[str, Any]:
    from daemon.runtime.app import migration_components
    from daemon.runtime.plugins import build_plugin_manager
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from store import apps as apps_store
    from plugins.communities import store as communities_store
    from store.db import Database
    from store.migrate import migrate

    pm = build_plugin_manager((), (), load_entry_points=False)
    db = Database(state / "commonroom.sqlite3")
    await db.open()
    await migrate(db, migration_components(pm))
    now = "2026-01-01T00:00:00.000Z"
    key, app_id = new_key(), new_app_id()
    async with db.transaction("bench.seed") as tx:
        await apps_store.insert_app_tx(tx, app_id=app_id, owner_did="did:plc:benchowner", name="bench",
                                       domain="bench.example.com", key_hash=hash_key(key), now=now)
        for i in range(COMMUNITIES):
            await communities_store.insert_community_tx(
                tx, did=f"did:plc:benchc{i:018d}", handle=f"c{i}.bench.test",
                display_name=f"Community {i}", description=f"Bench community number {i}", type="open",
                pds_url="http://127.0.0.1:9", account_kind="provisioned", creator_did=member_did(0),
                creator_app_id=app_id, proof_rkey="3kbench", now=now, state="active")
        await communities_store.insert_community_tx(
            tx, did=BIG, handle="big.bench.test", display_name="Big", description="", type="open",
            pds_url="http://127.0.0.1:9", account_kind="provisioned", creator_did=member_did(0),
            creator_app_id=app_id, proof_rkey="3kbench", now=now, state="active")
        await tx.executemany(
            "INSERT INTO members (community_did, member_did, admin_rank, admin_since, confirmed_at, "
            "proof_rkey) VALUES (?, ?, ?, ?, ?, ?)",
            ((BIG, member_did(i), 0 if i == 0 else None, now if i == 0 else None, now, f"3kb{i:010d}")
             for i in range(MEMBERS)))
        await tx.executemany(
            "INSERT INTO user_profiles (did, handle, display_name, avatar_url, fetched_at) VALUES (?, ?, ?, ?, ?)",
            ((member_did(i), f"user{i}.bench.test", f"User {i}", None, now) for i in range(MEMBERS)))
        await communities_store.set_counts_tx(tx, BIG, MEMBERS, 0)
        await tx.execute("ANALYZE")
    ids = await db.fetchall("SELECT id FROM members WHERE community_did = ? ORDER BY id LIMIT 1 OFFSET ?",
                            (BIG, DEEP_OFFSET))
    await db.close()
    return {"key": key, "cursor_after_id": ids[0]["id"]}


def seed_and_report(state: Path) -> dict[str, Any]:
    """`seed`, saying how long it took (bench_pages.py and bench_startup.py seed this way too)."""
    t0 = time.perf_counter()
    seeded = asyncio.run(seed(state))
    print(f"seeded {MEMBERS} members + {COMMUNITIES + 1} communities in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return seeded


# ------------------------------------------------------------------ load generator


async def _connection(host: str, port: int, requests: list[bytes], deadline: float,
                      stats: dict[str, Any]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = random.randrange(len(requests))
    try:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(requests[i % len(requests)])
            i += 1
            status_line = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            status = int(status_line.split()[1])
            stats["latencies"].append(time.perf_counter() - started)
            stats["statuses"][status] = stats["statuses"].get(status, 0) + 1
    finally:
        writer.close()


def load(args: tuple[str, int, list[bytes], float, int]) -> dict[str, Any]:
    host, port, requests, seconds, connections = args
    pin(1)
    stats: dict[str, Any] = {"latencies": [], "statuses": {}}

    async def run() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(_connection(host, port, requests, deadline, stats) for _ in range(connections)))

    asyncio.run(run())
    return stats


PATH_METRIC = "commonroom_http_serving_path_total"
SCENARIO_NAMES = ("bare", "floor", "check", "check-miss", "check-nometrics", "page1", "page900", "page-miss")
#: Which server answers a scenario: the service (None), plain Tornado ("bare") or the service
#: with metrics off ("plain"); neither of the last two counts serving paths.
SCENARIO_SERVER: dict[str, str | None] = {"bare": "bare", "check-nometrics": "plain"}


def scenario_requests(seeded: dict[str, Any]) -> dict[str, list[bytes]]:
    """The request bytes each scenario sends, cycled (module doc), for the state `seed` made."""
    from daemon.http.base import encode_cursor
    auth = {"X-Api-Key": seeded["key"]}
    base = f"/api/v1/communities/{BIG}"
    checks = [http_post(f"{base}/membership/check", auth,
                        {"userDid": member_did(random.randrange(MEMBERS)) if i % 2 else f"did:plc:nobody{i:018d}"})
              for i in range(200)]
    misses = [http_post(f"{base}/membership/check", auth,
                        {"userDid": member_did(i * 5) if i % 2 else f"did:plc:nobody{i:018d}"})
              for i in range(20_000)]
    random.shuffle(misses)
    return {"bare": checks, "check": checks, "check-nometrics": checks, "check-miss": misses,
            "floor": [r.replace(b"POST /api/v1/communities/", b"POST /bench/floor/comm/", 1) for r in checks],
            "page1": [http_get(f"{base}/members?limit=100", auth)],
            "page900": [http_get(f"{base}/members?limit=100&cursor={encode_cursor([seeded['cursor_after_id']])}",
                                 auth)],
            "page-miss": [http_get(f"{base}/members?limit=100&cursor={encode_cursor([after])}", auth)
                          for after in (random.randrange(1, max(2, MEMBERS - 100)) for _ in range(2_000))]}


def serving_paths(port: int) -> dict[str, float]:
    """The service's request counts by serving path (`PATH_METRIC`, summed over routes
    other than /metrics itself), read from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(PATH_METRIC + "{") and 'route="/metrics"' not in line:
            labels, _, number = line.rpartition(" ")
            path = labels.split('path="', 1)[1].split('"', 1)[0]
            out[path] = out.get(path, 0.0) + float(number)
    return out


def paths_text(paths: dict[str, float] | None) -> str:
    if paths is None:
        return "paths n/a"
    total = sum(paths.values())
    if not total:
        return "paths none counted"
    return "paths " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(paths.items()) if v)


def measure(name: str, port: int, requests: list[bytes], seconds: float, connections: int,
            workers: int, server_pid: int | None = None, metrics_port: int | None = None) -> dict[str, Any]:
    """Run the load from `workers` client processes; requests/s, latency percentiles,
    (with `server_pid`) how busy the server was and its CPU time per request, and (with
    `metrics_port`) how many requests each serving path answered."""
    per = max(1, connections // workers)
    paths0 = serving_paths(metrics_port) if metrics_port else None
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        cpu0 = cpu_seconds(server_pid) if server_pid else 0.0
        started = time.perf_counter()
        results = pool.map(load, [("127.0.0.1", port, requests, seconds, per)] * workers)
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(server_pid) - cpu0 if server_pid else None
    paths = None
    if paths0 is not None and metrics_port:
        paths1 = serving_paths(metrics_port)
        paths = {k: paths1.get(k, 0.0) - paths0.get(k, 0.0) for k in set(paths0) | set(paths1)}
        paths = {k: v for k, v in paths.items() if v}
    latencies = sorted(l for r in results for l in r["latencies"])
    statuses: dict[int, int] = {}
    for r in results:
        for k, v in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
    n = len(latencies)
    out = {"name": name, "requests": n, "rps": n / seconds, "statuses": statuses,
           "p50_ms": 1000 * latencies[n // 2] if n else None,
           "p99_ms": 1000 * latencies[int(n * 0.99)] if n else None, "wall_s": elapsed,
           "server_busy": cpu / elapsed if cpu is not None else None,
           "server_us_per_request": 1e6 * cpu / n if cpu is not None and n else None, "paths": paths}
    busy = (f"  server busy {100 * out['server_busy']:.0f}%, {out['server_us_per_request']:.0f} µs CPU/req"
            if cpu is not None else "")
    print(f"{name:>8}: {out['rps']:8.0f} req/s  p50 {out['p50_ms']:.2f} ms  p99 {out['p99_ms']:.2f} ms  "
          f"statuses {statuses}{busy}  {paths_text(paths)}", flush=True)
    return out


# ------------------------------------------------------------------ CPU by stage (--stages)

#: Where a sample of the server's stack is counted: the innermost frame (function name as
#: py-spy prints it) that names one of these stages ...
STAGES = {
    "Application.find_handler": "routing",
    "LeanDelegate.__init__": "handler set-up", "LeanHandler.__init__": "handler set-up",
    "RequestHandler.__init__": "handler set-up", "RequestLogic.start_request": "handler set-up",
    "RequestLogic.authenticate_throttled": "authentication", "RequestLogic.claim_credentials": "authentication",
    "RequestLogic.apply_rate_limit": "rate limit",
    "RequestLogic.json_body": "JSON body",
    "Database.fetchone_now": "SQLite read", "Database.fetchone": "SQLite read",
    "LeanHandler._respond": "response", "RequestHandler.finish": "response", "RequestHandler.flush": "response",
    "Application.log_request": "metrics + access log",
}
#: ... or else the innermost frame of these modules, or else "other".
STAGE_MODULES = (("tornado/", "Tornado HTTP (parse, I/O)"), ("asyncio/", "event loop"),
                 ("selectors.py", "event loop"))
STAGE_ORDER = ["Tornado HTTP (parse, I/O)", "event loop", "routing", "handler set-up", "authentication",
               "rate limit", "JSON body", "SQLite read", "route's own work", "response",
               "metrics + access log", "other"]


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        stage = STAGES.get(frame.split(" (", 1)[0])
        if stage:
            return stage
    for frame in reversed(frames):
        name = frame.split(" (", 1)[0]
        if name.endswith((".get", ".post")) and "(" in frame and "/tornado/" not in frame:
            return "route's own work"
        for module, stage in STAGE_MODULES:
            if f"{module}" in frame:
                return stage
    return "other"


def py_spy() -> str | None:
    """py-spy (a sampling profiler from PyPI, a dev tool, not a dependency), if installed."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def stage_split(spy: str, server_pid: int, name: str, port: int, requests: list[bytes], seconds: float,
                connections: int, workers: int) -> dict[str, float]:
    """One extra pass of a scenario with py-spy sampling the server: its CPU µs per request
    split by `stage_of` (the share of samples times the pass's CPU per request)."""
    import subprocess
    out = Path(tempfile.mkdtemp(prefix="cr-spy-")) / "raw.txt"
    proc = subprocess.Popen([spy, "record", "--nonblocking", "-r", "400", "-f", "raw", "-o", str(out),
                             "-d", str(int(seconds + 2)), "-p", str(server_pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    result = measure(f"{name}*", port, requests, seconds, connections, workers, server_pid)
    proc.wait(60)
    counts: dict[str, int] = {}
    for line in out.read_text().splitlines() if out.exists() else []:
        stack, _, n = line.rpartition(" ")
        stage = stage_of(stack.split(";"))
        counts[stage] = counts.get(stage, 0) + int(n)
    shutil.rmtree(out.parent, ignore_errors=True)
    total = sum(counts.values())
    per_request = result["server_us_per_request"] or 0.0
    return {stage: per_request * n / total for stage, n in counts.items()} if total else {}


def http_get(path: str, headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode()


def http_post(path: str, headers: dict[str, str], body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n").encode() + raw


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="load generator processes")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--mmap-mb", type=int, default=None,
                        help="storage.mmap_mb for the service (default: the configuration's default); 0 reads "
                             "without mapping the file, to compare")
    parser.add_argument("--only", help="run only these scenarios (comma-separated names, e.g. bare,floor,check)")
    parser.add_argument("--stages", action="store_true",
                        help="after the rounds, one pass per scenario sampled with py-spy: CPU µs per "
                             "request by stage (routing, authentication, SQLite, response ...)")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        smoke()
        args.seconds, args.rounds, args.connections = 0.2, 1, 2
    unknown = set(args.only.split(",")) - set(SCENARIO_NAMES) if args.only else set()
    if unknown:
        parser.error(f"--only: no scenario {', '.join(sorted(unknown))} (there are {', '.join(SCENARIO_NAMES)})")

    from plugins.communities.common import DID  # noqa: F401  (fail early outside the repo)

    state = Path(tempfile.mkdtemp(prefix="cr-bench-"))
    try:
        seeded = seed_and_report(state)
        port, bare_port, plain_port = free_port(), free_port(), free_port()
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        server = ctx.Process(target=build, args=(state, port, bare_port, plain_port, ready, args.mmap_mb),
                             daemon=True)
        server.start()
        if not ready.wait(60):
            raise SystemExit("the server did not start")
        requests_of = scenario_requests(seeded)
        # (name, port, requests, the port whose /metrics counts its serving paths)
        ports = {None: port, "bare": bare_port, "plain": plain_port}
        scenarios = [(name, ports[SCENARIO_SERVER.get(name)], requests_of[name],
                      port if SCENARIO_SERVER.get(name) is None else None) for name in SCENARIO_NAMES]
        if args.only:
            scenarios = [s for s in scenarios if s[0] in args.only.split(",")]
        measure("warmup", port, requests_of["check"], 2, 4, 1)
        # Interleaved rounds, so that a burst of load from elsewhere on the machine hits
        # every scenario alike; each scenario's figure is the median of its rounds.
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _, _ in scenarios}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for name, p, reqs, mp in scenarios:
                rounds[name].append(measure(name, p, reqs, args.seconds, args.connections, args.workers,
                                            server.pid, mp))
        # The machine's speed drifts between rounds (shared host), so ratios are taken
        # within each round (the scenarios of one round run seconds apart), then the median.
        def ratio(a: str, b: str) -> float:
            per_round = sorted(x["rps"] / y["rps"] for x, y in zip(rounds[a], rounds[b]))
            return per_round[len(per_round) // 2]

        pairs = [("check", "bare"), ("floor", "bare"), ("check-miss", "bare"), ("check", "check-nometrics"),
                 ("page1", "page900"), ("page1", "bare"), ("page900", "bare"), ("page-miss", "bare")]
        paired = {f"{a}/{b}": ratio(a, b) for a, b in pairs if rounds.get(a) and rounds.get(b)}
        results = []
        for name, runs in rounds.items():
            runs.sort(key=lambda x: x["rps"])
            results.append({**runs[len(runs) // 2], "all_rps": [round(x["rps"]) for x in runs]})
        by = {r["name"]: r for r in results}
        for name, runs in rounds.items():
            cpu = sorted(x["server_us_per_request"] for x in runs)
            by_name = next(r for r in results if r["name"] == name)
            by_name["server_us_per_request_median"] = cpu[len(cpu) // 2]
            by_name["server_busy_min"] = min(x["server_busy"] for x in runs)
            counted = [x["paths"] for x in runs if x["paths"] is not None]
            by_name["paths_all_rounds"] = ({k: sum(p.get(k, 0) for p in counted) for p in counted for k in p}
                                           if counted else None)
        print("\nmedians:")
        for r in results:
            print(f"{r['name']:>15}: {r['rps']:8.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
                  f"server {r['server_us_per_request_median']:.0f} µs CPU/req, busy ≥{100 * r['server_busy_min']:.0f}%  "
                  f"(rounds: {r['all_rps']})")
        print("serving paths, all rounds: " + "; ".join(
            f"{r['name']} {paths_text(r['paths_all_rounds'])} of {sum((r['paths_all_rounds'] or {}).values()):.0f}"
            for r in results if r["paths_all_rounds"] is not None))
        lost = {r["name"]: r["paths_all_rounds"] for r in results
                if r["name"] in ("check", "check-miss", "page1", "page900", "page-miss")
                and r["paths_all_rounds"] and set(r["paths_all_rounds"]) - {"lean"}}
        if lost:
            print(f"FAST PATH LOST: not every request of {', '.join(lost)} was answered at once by its lean "
                  f"route: {lost}")
        if len(by) == len(SCENARIO_NAMES):   # all of them ran (no --only)
            print(f"check / bare = {by['check']['rps'] / by['bare']['rps']:.2f}; "
                  f"floor / bare = {by['floor']['rps'] / by['bare']['rps']:.2f}; "
                  f"check / floor = {by['check']['rps'] / by['floor']['rps']:.2f}; "
                  f"page900 p50 / page1 p50 = {by['page900']['p50_ms'] / by['page1']['p50_ms']:.2f}; "
                  f"page1 rps / page900 rps = {by['page1']['rps'] / by['page900']['rps']:.2f}")
            print(f"server CPU per request: bare / check = "
                  f"{by['bare']['server_us_per_request_median'] / by['check']['server_us_per_request_median']:.2f} "
                  f"(the throughput ratio when the server is the bottleneck, i.e. busy near 100%)")
        print("per-round ratios (median): " + "; ".join(f"{k} = {v:.2f}" for k, v in paired.items()))
        stages: dict[str, dict[str, float]] = {}
        if args.stages:
            spy = py_spy()
            if spy is None:
                print("--stages: py-spy not found (`.venv/bin/pip install py-spy`: a dev tool, not a dependency)")
            else:
                print("\nCPU per request by stage (one more pass per scenario, sampled by py-spy at 400 Hz; "
                      "the sampling itself costs the server a little):")
                for name, p, reqs, _ in scenarios:
                    if name != "check-nometrics":
                        stages[name] = stage_split(spy, server.pid, name, p, reqs, args.seconds,
                                                   args.connections, args.workers)
                names = list(stages)
                print(f"{'µs/request':>26}" + "".join(f"{n:>9}" for n in names))
                for stage in STAGE_ORDER:
                    if any(stage in stages[n] for n in names):
                        print(f"{stage:>26}" + "".join(f"{stages[n].get(stage, 0.0):9.1f}" for n in names))
                print(f"{'total':>26}" + "".join(f"{sum(stages[n].values()):9.1f}" for n in names))
        memory = server_memory(server.pid, state / "commonroom.sqlite3")
        print(f"server memory: RSS without the mapped database {memory['own_mb']:.1f} MB (anonymous "
              f"{memory['anon_mb']:.1f}, other files mapped {memory['file_mb'] - memory['database_mapped_mb']:.1f}); "
              f"the database file's pages mapped by the read connections {memory['database_mapped_mb']:.1f} MB "
              f"(page cache, storage.mmap_mb); RSS in all {memory['rss_mb']:.1f} MB, peak {memory['peak_mb']:.1f} MB "
              f"({MEMBERS} members in one community, {COMMUNITIES + 1} communities; two applications "
              f"in the process, see check-nometrics)")
        if args.json:
            Path(args.json).write_text(json.dumps({"scenarios": results, "paired_ratios": paired,
                                                   "memory": memory, "stages": stages}, indent=2))
        server.terminate()
        server.join(5)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
