#!/usr/bin/env python3
"""Benchmark the web app's pages of a 100k-member community over loopback HTTP.

Seeds the store like scripts/bench_membership.py (one community with 100k members and
profiles, 1k more communities), starts the daemon's application in a server process, and
drives it from a second process with the same keep-alive HTTP/1.1 load generator.
Measured in the same run, against the same server process:

* ``bare``: a plain Tornado handler answering the bytes of the community page, rendered
  once at start (the ceiling: same request, same answer size, no work);
* ``page``: GET /c/big.bench.test, signed in as a member (session cookie): the profile,
  the first 50 members, the viewer's action;
* ``page-anon``: the same page signed out;
* ``members900``: GET /c/big.bench.test?cursor=... signed in: a members page deep in the
  list (the keyset cursor of the ~45,000th member).

Server time is the p50 latency with one connection (one request at a time, so nothing
queues: the time the server takes plus loopback); throughput is with `--connections`.

    .venv/bin/python scripts/bench_pages.py [--seconds 3] [--rounds 5] [--connections 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_membership as bm  # noqa: E402  (the seed, the load generator, the measurements)

BIG_HANDLE = "big.bench.test"


def build(state: Path, port: int, bare_port: int, ready: Any, out: Any) -> None:
    bm.pin(0)
    import tornado.web
    from tornado.httpserver import HTTPServer

    from daemon.runtime.app import create_app, plugin_sections
    from daemon.runtime.config import Config
    from daemon.runtime.plugins import build_plugin_manager
    from daemon.security.sessions import create_session

    raw = {"storage": {"state_dir": str(state)}, "secret_key": "00" * 31 + "01",
           "rate_limits": {"api": {"requests": 10_000_000, "window_seconds": 60},
                           "session": {"requests": 10_000_000, "window_seconds": 60}},
           "log_level": "warning"}
    pm = build_plugin_manager((), (), load_entry_points=False)
    config = Config.from_mapping(raw, base_dir=state, plugin_sections=plugin_sections(pm))
    page_bytes: dict[str, bytes] = {}

    class Bare(tornado.web.RequestHandler):
        def get(self, *args: Any) -> None:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(page_bytes["page"])

    async def main() -> None:
        import logging
        logging.basicConfig(level=logging.WARNING)
        app = await create_app(config, pm)  # runs cr_startup (the web plugin's assets)
        sid, _, _ = await create_session(app, bm.member_did(1), "user1.bench.test")
        HTTPServer(app).listen(port, "127.0.0.1")
        from tornado.httpclient import AsyncHTTPClient
        resp = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}/c/{BIG_HANDLE}",
                                             headers={"Cookie": f"sid={sid}"})
        page_bytes["page"] = resp.body
        HTTPServer(tornado.web.Application([(r"/(.*)", Bare)])).listen(bare_port, "127.0.0.1")
        out.put({"sid": sid, "page_bytes": len(resp.body)})
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        bm.smoke()
        args.seconds, args.rounds, args.connections = 0.2, 1, 2

    from daemon.http.base import encode_cursor

    state = Path(tempfile.mkdtemp(prefix="cr-bench-pages-"))
    try:
        bm.seed_and_report(state)
        seeded = asyncio.run(_deep_cursor(state))
        port, bare_port = bm.free_port(), bm.free_port()
        ctx = multiprocessing.get_context("spawn")
        ready, out = ctx.Event(), ctx.Queue()
        server = ctx.Process(target=build, args=(state, port, bare_port, ready, out), daemon=True)
        server.start()
        if not ready.wait(120):
            raise SystemExit("the server did not start")
        info = out.get(timeout=5)
        print(f"community page: {info['page_bytes']} bytes", flush=True)
        cookie = {"Cookie": f"sid={info['sid']}", "Accept": "text/html"}
        page = [bm.http_get(f"/c/{BIG_HANDLE}", cookie)]
        anon = [bm.http_get(f"/c/{BIG_HANDLE}", {"Accept": "text/html"})]
        deep = [bm.http_get(f"/c/{BIG_HANDLE}?cursor={encode_cursor([seeded])}", cookie)]
        scenarios = [("bare", bare_port, page), ("page", port, page), ("page-anon", port, anon),
                     ("members900", port, deep)]
        bm.measure("warmup", port, page, 2, 4, 1)
        rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {"load": [], "single": []} for name, _, _ in scenarios}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", flush=True)
            for name, p, reqs in scenarios:
                rounds[name]["single"].append(bm.measure(name + "/1", p, reqs, args.seconds / 2, 1, 1, server.pid))
                rounds[name]["load"].append(bm.measure(name, p, reqs, args.seconds, args.connections, 1, server.pid))

        def median(values: list[float]) -> float:
            values = sorted(values)
            return values[len(values) // 2]

        results = {}
        for name, runs in rounds.items():
            results[name] = {
                "server_time_p50_ms": median([x["p50_ms"] for x in runs["single"]]),
                "rps": median([x["rps"] for x in runs["load"]]),
                "p50_ms_under_load": median([x["p50_ms"] for x in runs["load"]]),
                "server_us_per_request": median([x["server_us_per_request"] for x in runs["load"]]),
                "statuses": runs["load"][0]["statuses"],
                "all_rps": [round(x["rps"]) for x in runs["load"]],
            }
        # ratios within each round (the machine's speed drifts), then the median
        ratios = {f"{n}/bare": median([x["rps"] / y["rps"] for x, y in
                                       zip(rounds[n]["load"], rounds["bare"]["load"])])
                  for n in ("page", "page-anon", "members900")}
        # When the load generator, not the server, limits `bare` (it reads as many bytes per
        # answer as for a page, and the server then idles), its req/s is no ceiling: the
        # cost ratio is the server CPU per request, bare / page, per round.
        cpu_ratios = {f"{n}/bare (CPU)": median([y["server_us_per_request"] / x["server_us_per_request"]
                                                 for x, y in zip(rounds[n]["load"], rounds["bare"]["load"])])
                      for n in ("page", "page-anon", "members900")}
        print("\nmedians:")
        for name, r in results.items():
            print(f"{name:>11}: server time p50 {r['server_time_p50_ms']:.2f} ms; {r['rps']:7.0f} req/s "
                  f"(p50 {r['p50_ms_under_load']:.2f} ms at {args.connections} connections), "
                  f"{r['server_us_per_request']:.0f} µs CPU/req, statuses {r['statuses']}, rounds {r['all_rps']}")
        print("throughput vs bare (per-round median): " + "; ".join(f"{k} = {v:.2f}" for k, v in ratios.items()))
        print("server CPU per request, bare / page (per-round median): "
              + "; ".join(f"{k} = {v:.2f}" for k, v in cpu_ratios.items()))
        print(f"bare's server busy (min over rounds): {100 * min(x['server_busy'] for x in rounds['bare']['load']):.0f}% "
              "(well under 100%: the load generator limits bare, use the CPU ratio)")
        if args.json:
            Path(args.json).write_text(json.dumps({"scenarios": results, "ratios": ratios, "cpu_ratios": cpu_ratios,
                                                   "page_bytes": info["page_bytes"]}, indent=2))
        server.terminate()
        server.join(5)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


async def _deep_cursor(state: Path) -> int:
    """The members' keyset cursor ~45,000 members in (the 900th page of 50)."""
    from store.db import Database
    db = Database(state / "commonroom.sqlite3")
    await db.open()
    row = await db.fetchall("SELECT id FROM members WHERE community_did = ? ORDER BY id LIMIT 1 OFFSET ?",
                            (bm.BIG, min(899 * 50, bm.MEMBERS) - 1))
    await db.close()
    return row[0]["id"]


if __name__ == "__main__":
    sys.exit(main())
