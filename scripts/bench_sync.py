#!/usr/bin/env python3
"""Benchmark the network sync's consumer: frames per second filtered, and filtered plus
applied, on one core; and the lag at a paced rate. Usage:

    .venv/bin/python scripts/bench_sync.py [--accounts 100] [--commits 3000] [--replay 200000]
                                           [--rate 2000] [--seconds 10] [--frames PATH] [--only-read]

1. **Generate** (skipped with an existing ``--frames`` file): a devnet (PLC + PDS on
   loopback) gets `--accounts` accounts and `--commits` commits (posts and likes) spread
   over them; 1 % of the commits are relevant to the index: profile edits of the accounts
   that are members of a community, and membership records. Then the PDS's firehose is
   read from cursor 0 and every frame is recorded (length-prefixed) into ``--frames``.
2. **Filter**: the recorded frames, cycled up to `--replay` frames, through the firehose
   filter alone (`daemon.sync.filters.FirehoseFilter`): frames per second.
3. **Filter + apply**: the same frames through the whole consumer of a real Application on
   a temporary SQLite file (the communities plugin following the members): ``receive``,
   the batches, the transaction with the plugin's ``cr_sync_events_tx`` and the cursor.
   The work after the commit (re-reading a profile over the network) is left out.
4. **Lag**: frames fed at `--rate` per second for `--seconds`; lag is the time from a
   relevant frame's arrival to the commit of its batch (median, p99, max).
5. **Read**: the same frames, cycled up to `--replay`, sent over a loopback WebSocket by a
   server in another process, read by the started sync (``app.sync.start()``: its reader,
   filter, queue and applier) until every frame is read and every relevant event applied.
   Only public entry points are used, so the same stage measures an older reader too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NAMESPACE = "community.commonroom"


# ------------------------------------------------------------------ 1. generate and record


def generate(path: Path, accounts: int, commits: int) -> dict[str, Any]:
    import json

    from commonroom_testing.localnet import Devnet

    net = Devnet().start()
    try:
        people = [net.create_account(f"b{i}{os.urandom(3).hex()}.test") for i in range(accounts)]
        members = people[:2]  # followed by the index
        rng = random.Random(1)
        relevant = max(1, commits // 100)
        plan = ["relevant"] * relevant + ["noise"] * (commits - relevant)
        rng.shuffle(plan)
        lock = threading.Lock()
        work = list(enumerate(plan))

        def worker() -> None:
            while True:
                with lock:
                    if not work:
                        return
                    i, kind = work.pop()
                if kind == "relevant":
                    who = members[i % 2]
                    if i % 3:
                        body = {"repo": who["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
                                "record": {"$type": "app.bsky.actor.profile", "displayName": f"name {i}"}}
                        net.xrpc("com.atproto.repo.putRecord", body, token=who["accessJwt"])
                    else:
                        stranger = people[2 + i % (len(people) - 2)]
                        body = {"repo": stranger["did"], "collection": f"{NAMESPACE}.membership", "validate": False,
                                "record": {"$type": f"{NAMESPACE}.membership", "community": "did:plc:benchclub",
                                           "joinedAt": "2026-11-23T00:00:00.000Z"}}
                        net.xrpc("com.atproto.repo.createRecord", body, token=stranger["accessJwt"])
                else:
                    who = people[2 + i % (len(people) - 2)]
                    body = {"repo": who["did"], "collection": "app.bsky.feed.post",
                            "record": {"$type": "app.bsky.feed.post", "text": f"post {i} " + "x" * (i % 200),
                                       "createdAt": "2026-11-23T00:00:00.000Z"}}
                    net.xrpc("com.atproto.repo.createRecord", body, token=who["accessJwt"])

        started = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"generated {commits} commits over {accounts} accounts in {time.perf_counter() - started:.1f} s",
              flush=True)
        frames = asyncio.run(record(net.pds_url))
        with open(path, "wb") as f:
            for frame in frames:
                f.write(len(frame).to_bytes(4, "big") + frame)
        meta = {"members": [m["did"] for m in members], "frames": len(frames)}
        path.with_suffix(".json").write_text(json.dumps(meta))
        return meta
    finally:
        net.stop()


async def record(pds_url: str) -> list[bytes]:
    import websockets
    frames: list[bytes] = []
    url = pds_url.replace("http://", "ws://") + "/xrpc/com.atproto.sync.subscribeRepos?cursor=0"
    async with websockets.connect(url, max_size=None) as ws:
        while True:
            try:
                frames.append(await asyncio.wait_for(ws.recv(), 3.0))
            except asyncio.TimeoutError:
                return frames


def load_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


# ------------------------------------------------------------------ 2. filter alone


def bench_filter(frames: list[bytes], members: list[str], replay: int) -> tuple[float, int]:
    from daemon.sync.filters import FilterState, FirehoseFilter
    f = FirehoseFilter(FilterState(dids=set(members), prefixes=(f"{NAMESPACE}.membership/",),
                                   decode=frozenset({f"{NAMESPACE}.membership"})))
    cycled = [frames[i % len(frames)] for i in range(replay)]
    started = time.perf_counter()
    relevant = sum(1 for frame in cycled if not isinstance(f(frame), (int, type(None))))
    return replay / (time.perf_counter() - started), relevant


# ------------------------------------------------------------------ 3, 4. the whole consumer


async def make_app(tmp: Path, members: list[str], url: str = "http://127.0.0.1:9") -> Any:
    import yaml

    import plugins.communities.sync as communities_sync
    from daemon.runtime.app import create_app, load_config
    from plugins.communities import store as communities_store
    from plugins.communities import store as members_store

    async def no_network(app: Any) -> dict[str, int]:
        return {}
    communities_sync.run = no_network  # the work after the commit is network I/O: not measured

    config_path = tmp / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "storage": {"state_dir": str(tmp / "state")}, "secret_key": "ab" * 32, "log_level": "error",
        "sync": {"source": "firehose", "url": url}}))
    config, pm = load_config(config_path, load_entry_points=False)
    app = await create_app(config, pm, start=False)
    now = app.clock.iso_now()
    async with app.db.transaction("bench.seed") as tx:
        await communities_store.insert_community_tx(
            tx, did="did:plc:benchclub", handle="club.test", display_name="Bench", description="", type="open",
            pds_url="http://pds.invalid", account_kind="provisioned", creator_did=members[0],
            creator_app_id=None, proof_rkey="3seed", now=now, state="active")
        for rank, member in enumerate(members):
            await members_store.insert_member_tx(
                tx, community_did="did:plc:benchclub", member_did=member, now=now, proof_rkey=f"3seed{rank}",
                proof_cid=None, membership_uri=None, membership_cid=None, app_id=None,
                admin_rank=0 if rank == 0 else None)
    await app.sync.load_interest(full=True)
    app.sync._queue = asyncio.Queue(maxsize=app.config.sync.queue_size)
    return app


async def bench_consumer(frames: list[bytes], members: list[str], replay: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        app = await make_app(Path(tmp), members)
        sync = app.sync
        applier = asyncio.get_running_loop().create_task(sync._apply_loop())
        started = time.perf_counter()
        for i in range(replay):
            item = sync.receive(frames[i % len(frames)])
            if item is not None:
                await sync._queue.put(item)
            if i % 1000 == 999:
                await asyncio.sleep(0)  # let the applier run, as the socket's reads would
        while not sync._queue.empty():
            await asyncio.sleep(0.001)
        while sync.counts["applied"] < sync.counts["relevant"]:
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - started
        applier.cancel()
        applied = sync.counts["applied"]
        await app.shutdown()
    return replay / elapsed, applied


async def bench_lag(frames: list[bytes], members: list[str], rate: int, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        app = await make_app(Path(tmp), members)
        sync = app.sync
        arrived: dict[int, float] = {}
        lags: list[float] = []
        original = sync._apply

        async def timed_apply(batch: list[Any]) -> None:
            await original(batch)
            done = time.perf_counter()
            for item in batch:  # an event, or a frame filtered again after a change of interest
                if id(item) in arrived:
                    lags.append(done - arrived.pop(id(item)))

        sync._apply = timed_apply  # type: ignore[method-assign]
        applier = asyncio.get_running_loop().create_task(sync._apply_loop())
        total = int(rate * seconds)
        started = time.perf_counter()
        for i in range(total):
            due = started + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            item = sync.receive(frames[i % len(frames)])
            if item is not None:
                arrived[id(item)] = time.perf_counter()
                await sync._queue.put(item)
        while arrived:
            await asyncio.sleep(0.005)
        applier.cancel()
        await app.shutdown()
    lags.sort()
    return {"events": len(lags), "median": statistics.median(lags) if lags else 0.0,
            "p99": lags[int(len(lags) * 0.99) - 1] if lags else 0.0, "max": lags[-1] if lags else 0.0}


# ------------------------------------------------------------------ 5. read over a WebSocket

_SERVER = """
import sys
from websockets.sync.server import serve
path, replay = sys.argv[1], int(sys.argv[2])
data, frames, i = open(path, "rb").read(), [], 0
while i < len(data):
    n = int.from_bytes(data[i:i + 4], "big"); frames.append(data[i + 4:i + 4 + n]); i += 4 + n
def handle(ws):
    for k in range(replay):
        ws.send(frames[k % len(frames)])
    for _ in ws:
        pass
with serve(handle, "127.0.0.1", 0, max_size=None, compression=None) as server:
    print(server.socket.getsockname()[1], flush=True)
    server.serve_forever()
"""


async def bench_read(path: Path, members: list[str], replay: int) -> tuple[float, int]:
    import subprocess
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(path), str(replay)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with tempfile.TemporaryDirectory() as tmp:
            app = await make_app(Path(tmp), members, f"http://127.0.0.1:{port}")
            sync = app.sync
            await sync.start()
            while sync.counts["frames"] == 0:
                await asyncio.sleep(0.001)
            started = time.perf_counter()
            while sync.counts["frames"] < replay or sync.counts["applied"] < sync.counts["relevant"]:
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - started
            applied = sync.counts["applied"]
            await sync.stop()
            await app.shutdown()
    finally:
        server.terminate()
        server.wait(5)
    return (replay - 1) / elapsed, applied


def main() -> int:
    import json
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=100)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--replay", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--frames", type=Path, default=Path(tempfile.gettempdir()) / "commonroom-sync-frames.bin")
    parser.add_argument("--only-read", action="store_true", help="measure stage 5 only (for an A/B of readers)")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.accounts, args.commits, args.replay, args.rate, args.seconds = 3, 30, 300, 200, 0.5
        args.frames = Path(tempfile.mkdtemp(prefix="cr-sync-smoke-")) / "frames.bin"
    if args.frames.exists() and args.frames.with_suffix(".json").exists():
        meta = json.loads(args.frames.with_suffix(".json").read_text())
        print(f"using the {meta['frames']} recorded frames in {args.frames}")
    else:
        meta = generate(args.frames, args.accounts, args.commits)
        print(f"recorded {meta['frames']} frames into {args.frames}")
    frames = load_frames(args.frames)
    members = meta["members"]
    sizes = sorted(len(f) for f in frames)
    print(f"frames: {len(frames)}, median {statistics.median(sizes):.0f} bytes", flush=True)

    if args.only_read:
        per_second, applied = asyncio.run(bench_read(args.frames, members, args.replay))
        print(f"read over loopback: {per_second:9,.0f} frames/s  ({applied} events applied)")
        return 0

    per_second, relevant = bench_filter(frames, members, args.replay)
    print(f"filter alone:      {per_second:10,.0f} frames/s  ({relevant} of {args.replay} relevant, "
          f"{100 * relevant / args.replay:.1f} %)", flush=True)
    per_second, applied = asyncio.run(bench_consumer(frames, members, args.replay))
    print(f"filter + apply:    {per_second:10,.0f} frames/s  ({applied} events applied)", flush=True)
    lag = asyncio.run(bench_lag(frames, members, args.rate, args.seconds))
    print(f"lag at {args.rate}/s for {args.seconds:.0f} s: median {lag['median'] * 1000:.1f} ms, "
          f"p99 {lag['p99'] * 1000:.1f} ms, max {lag['max'] * 1000:.1f} ms ({lag['events']} relevant events)")
    per_second, applied = asyncio.run(bench_read(args.frames, members, args.replay))
    print(f"read over loopback: {per_second:9,.0f} frames/s  ({applied} events applied)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
