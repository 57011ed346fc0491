#!/usr/bin/env python3
"""Benchmark webhook delivery: deliveries per second and the delay from a change's
commit to its delivery (median, p99), against a receiver on loopback.

The service runs in this process (a real Application on a temporary SQLite file, the
real delivery loop); the receiver runs in a separate process so the two do not share an
event loop. Usage:

    .venv/bin/python scripts/bench_webhooks.py [--events 5000] [--webhooks 1] [--rate 200] [--concurrency 1]

`--concurrency` is each webhook's setting: 1 (the default) is strict event order, one
request at a time; N lets up to N requests to the webhook be in flight at once.

Phase 1 (throughput): `--events` events committed in transactions of 100 (a) while the
delivery loop is stopped, then drained; (b) while it runs, as fast as possible. The time
until the receiver has every one gives deliveries per second.
Phase 2 (delay): events are committed one per transaction at `--rate` per second; the
receiver stamps each arrival, the delay is arrival time minus commit time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RECEIVER = r"""
import sys, time, json
import tornado.web, tornado.ioloop, tornado.httpserver
arrivals = []
class Hook(tornado.web.RequestHandler):
    def post(self):
        arrivals.append((self.request.headers.get("webhook-id"), time.time()))
        self.finish("ok")
class Count(tornado.web.RequestHandler):
    def get(self):
        self.finish(str(len(arrivals)))
class Dump(tornado.web.RequestHandler):
    def get(self):
        self.finish(json.dumps(arrivals))
    def delete(self):
        arrivals.clear()
        self.finish("ok")
app = tornado.web.Application([(r"/hook", Hook), (r"/count", Count), (r"/dump", Dump)])
server = tornado.httpserver.HTTPServer(app)
server.listen(int(sys.argv[1]), "127.0.0.1")
print("ready", flush=True)
tornado.ioloop.IOLoop.current().start()
"""

# The default receiver: a plain HTTP/1.1 server on asyncio (keep-alive, Content-Length bodies,
# pipelining) that stamps each hook's arrival and answers 200. The Tornado receiver above
# costs ~170 µs of CPU per request, as much as the sender's whole delivery: sharing the
# machine with the sender, it, not Commonroom, set the rate. This one costs ~30 µs, so the
# rate is the sender's (`--receiver tornado` measures with the other).
LEAN_RECEIVER = r"""
import asyncio, json, sys, time
arrivals = []
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"

def answer(body):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

class Receiver(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buf = transport, b""
    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            fields = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
            length = int(fields.get("content-length", "0"))
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            method, path = head[0].split(" ")[:2]
            if method == "POST" and path == "/hook":
                arrivals.append((fields.get("webhook-id"), time.time()))
                self.transport.write(OK)
            elif path == "/count":
                self.transport.write(answer(str(len(arrivals)).encode()))
            elif path == "/dump" and method == "DELETE":
                arrivals.clear()
                self.transport.write(OK)
            elif path == "/dump":
                self.transport.write(answer(json.dumps(arrivals).encode()))
            else:
                self.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

async def main():
    server = await asyncio.get_running_loop().create_server(Receiver, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def fetch_json(url: str, method: str = "GET") -> object:
    from tornado.httpclient import AsyncHTTPClient
    resp = await AsyncHTTPClient().fetch(url, method=method)
    return json.loads(resp.body) if method == "GET" else None


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--webhooks", type=int, default=1)
    parser.add_argument("--rate", type=float, default=200.0, help="events/s in the delay phase")
    parser.add_argument("--delay-events", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="each webhook's concurrency (1: strict order)")
    parser.add_argument("--receiver", choices=("lean", "tornado"), default="lean",
                        help="the receiving server: a plain asyncio one (default) or a Tornado app")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.events, args.delay_events = 20, 5

    import yaml

    from daemon.runtime.app import create_app, load_config
    from daemon.runtime.events import emit_tx
    from plugins.apikeys.keys import hash_key, new_app_id, new_key
    from plugins.webhooks import signing
    from plugins.webhooks.delivery import Dispatcher, secret_context
    from plugins.webhooks.service import webhooks_of
    from store import apps as apps_store
    from plugins.communities import store as communities
    from plugins.webhooks import store as webhooks_store

    rport = free_port()
    receiver = subprocess.Popen(
        [sys.executable, "-c", LEAN_RECEIVER if args.receiver == "lean" else RECEIVER, str(rport)], stdout=subprocess.PIPE)
    assert receiver.stdout is not None and receiver.stdout.readline().strip() == b"ready"
    base = f"http://127.0.0.1:{rport}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-webhooks-"))
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["storage"] = {"state_dir": str(tmp)}
    raw["secret_key"] = "11" * 32
    raw["log_level"] = "warning"
    raw["webhooks"] = {"allow_http": True, "allowed_targets": ["127.0.0.0/8"]}
    (tmp / "config.yaml").write_text(yaml.safe_dump(raw))
    os.environ.pop("COMMONROOM_EXTRA_PLUGINS", None)
    config, pm = load_config(tmp / "config.yaml")
    app = await create_app(config, pm)
    community = "did:plc:bench"
    try:
        now = app.clock.iso_now()
        async with app.db.transaction("bench.setup") as tx:
            app_id = new_app_id()
            await apps_store.insert_app_tx(tx, app_id=app_id, owner_did="did:plc:bench-owner",
                                           name="bench", domain="bench.example.com",
                                           key_hash=hash_key(new_key()), now=now)
            await communities.insert_community_tx(
                tx, did=community, handle="bench.test", display_name="Bench", description="",
                type="open", pds_url="http://127.0.0.1:1", account_kind="brought",
                creator_did="did:plc:bench-owner", creator_app_id=app_id, proof_rkey="3kbench",
                now=now, state="active")
            for i in range(args.webhooks):
                wid = f"wh_{i:016x}"
                await webhooks_store.insert_webhook_tx(
                    tx, webhook_id=wid, app_id=app_id, url=f"{base}/hook", community_did=None,
                    secret_sealed=app.secrets.seal(signing.new_secret(), secret_context(wid)),
                    events=["member.joined"], now=now, concurrency=args.concurrency)

        async def arrivals() -> list[tuple[str, float]]:
            return [tuple(a) for a in await fetch_json(f"{base}/dump")]  # type: ignore[union-attr]

        async def wait_for(count: int, timeout: float = 300) -> list[tuple[str, float]]:
            deadline = time.monotonic() + timeout
            while True:
                have = int(await fetch_json(f"{base}/count"))  # type: ignore[arg-type]
                if have >= count or time.monotonic() > deadline:
                    return await arrivals()
                await asyncio.sleep(0.05)

        async def emit_batches(count: int, prefix: str) -> None:
            for start in range(0, count, 100):
                async with app.db.transaction("bench.emit") as tx:
                    for i in range(start, min(count, start + 100)):
                        await emit_tx(app, tx, "member.joined", community_did=community,
                                      data={"memberDid": f"did:plc:{prefix}{i}"})

        expected = args.events * args.webhooks
        # Phase 1a: drain a backlog (events committed while the delivery loop was stopped).
        await webhooks_of(app).running.stop()
        await emit_batches(args.events, "b")
        app.webhooks.dispatcher = Dispatcher(app)
        started = time.time()
        cpu = cpu_seconds(os.getpid()), cpu_seconds(receiver.pid)
        app.webhooks.dispatcher.start()
        got = await wait_for(expected)
        cpu = cpu_seconds(os.getpid()) - cpu[0], cpu_seconds(receiver.pid) - cpu[1]
        finished = max(t for _, t in got)
        # CPU per delivery (this process, every thread: the sender and SQLite; the receiver
        # apart): unlike the rate, it does not move much with what else runs on the machine.
        print(f"backlog: {len(got)}/{expected} deliveries to {args.webhooks} webhook(s) "
              f"(concurrency {args.concurrency}) in "
              f"{finished - started:.2f} s = {len(got) / (finished - started):.0f} deliveries/s; "
              f"CPU per delivery: sender {cpu[0] / len(got) * 1e6:.0f} µs, receiver "
              f"{cpu[1] / len(got) * 1e6:.0f} µs (load average {os.getloadavg()[0]:.2f})")
        await asyncio.sleep(0.5)  # let the last results be written
        await fetch_json(f"{base}/dump", "DELETE")

        # Phase 1b: commit and deliver at the same time, as fast as possible.
        started = time.time()
        await emit_batches(args.events, "c")
        committed = time.time()
        got = await wait_for(expected)
        finished = max(t for _, t in got)
        print(f"concurrent: {len(got)}/{expected} deliveries in {finished - started:.2f} s = "
              f"{len(got) / (finished - started):.0f} deliveries/s (the commits took "
              f"{committed - started:.2f} s of it)")

        # Phase 2: delay from commit to arrival at a steady rate.
        await asyncio.sleep(0.5)
        await fetch_json(f"{base}/dump", "DELETE")
        commit_times: dict[str, float] = {}
        interval = 1.0 / args.rate
        t0 = time.monotonic()
        for i in range(args.delay_events):
            async with app.db.transaction("bench.emit_one") as tx:
                event = await emit_tx(app, tx, "member.joined", community_did=community,
                                      data={"memberDid": f"did:plc:d{i}"})
            commit_times[event.id] = time.time()
            sleep = t0 + (i + 1) * interval - time.monotonic()
            if sleep > 0:
                await asyncio.sleep(sleep)
        got = await wait_for(args.delay_events * args.webhooks)
        delays = [(t - commit_times[i]) * 1000 for i, t in got if i in commit_times]
        print(f"delay at {args.rate:.0f} events/s over {len(delays)} deliveries: "
              f"median {statistics.median(delays):.1f} ms, p99 {percentile(delays, 99):.1f} ms, "
              f"max {max(delays):.1f} ms")
        await asyncio.sleep(0.5)
        stats = await app.db.fetchall(
            "SELECT status, attempts, error, COUNT(*) AS n FROM webhook_deliveries "
            "GROUP BY status, attempts, error")
        print("delivery log:", ", ".join(f"{r['n']} {r['status']} after {r['attempts']} attempt(s)"
                                         + (f" ({r['error']})" if r["error"] else "") for r in stats))
    finally:
        await app.shutdown()
        receiver.terminate()
        receiver.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
