#!/usr/bin/env python3
"""Benchmark a follower beside its primary (issue 26, docs/scaling.md): the real daemons and
the real Litestream, replicating through a file:// replica on this machine.

* ``membership/check`` rate on the primary and on the follower (the same requests,
  interleaved rounds, medians): a follower should be within 10 % of its primary;
* replication lag under writes: memberships committed on the primary at `--joins` per second
  (the local transaction of a join, through the test route of tests/plugin_replication.py),
  each timed until the follower's membership/check sees it.

Seeds as bench_membership.py does (100k members). Run it from the repository:

    .venv/bin/python scripts/bench_replication.py [--seconds 3] [--rounds 5] [--joins 15] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_membership as bm  # noqa: E402

BIN = REPO / ".venv" / "bin"
SECRET = "00" * 31 + "01"


def call(port: int, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    headers = {"Content-Type": "application/json", **({"X-Api-Key": key} if key else {})}
    conn.request(method, path, None if body is None else json.dumps(body), headers)
    r = conn.getresponse()
    raw = r.read()
    return r.status, json.loads(raw) if raw else None


def wait(what: str, predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--joins", type=float, default=15.0, help="joins per second on the primary")
    parser.add_argument("--join-seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.1,
                        help="replication.sync_interval_seconds and follow_interval_seconds")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        bm.smoke()
        args.seconds, args.rounds, args.connections, args.join_seconds = 0.2, 1, 2, 1.0

    tmp = Path(tempfile.mkdtemp(prefix="cr-repl-"))
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMMONROOM_EXTRA_PLUGINS": "tests.plugin_replication:plugin"}
    try:
        primary_state = tmp / "primary"
        primary_state.mkdir()
        seeded = bm.seed_and_report(primary_state)
        replica = (tmp / "replica").as_uri()
        ports = {"primary": bm.free_port(), "follower": bm.free_port()}
        for name, port in ports.items():
            role = ", role: follower" if name == "follower" else ""
            (tmp / f"{name}.yaml").write_text(
                f"server: {{port: {port}, base_url: 'http://127.0.0.1:{port}'{role}}}\n"
                f"storage: {{state_dir: {tmp / name}}}\nsecret_key: '{SECRET}'\nlog_level: warning\n"
                "rate_limits: {api: {requests: 10000000, window_seconds: 60}}\n"
                f"replication: {{url: '{replica}', sync_interval_seconds: {args.interval},"
                f" follow_interval_seconds: {args.interval}}}\n"
                + (f"follower: {{primary_url: 'http://127.0.0.1:{ports['primary']}'}}\n" if role else ""))

        def start(name: str, *argv: str) -> subprocess.Popen[bytes]:
            p = subprocess.Popen([str(BIN / "commonroom"), "-c", str(tmp / f"{name.split('-')[0]}.yaml"), *argv],
                                 env=env, stdout=(tmp / f"{name}.log").open("w"), stderr=subprocess.STDOUT)
            procs.append(p)
            return p

        primary = start("primary", "serve")
        wait("the primary", lambda: call(ports["primary"], "GET", "/health")[0] == 200)
        start("primary-litestream", "litestream")
        wait("the replica", lambda: any((tmp / "replica").rglob("*.ltx")))
        start("follower-litestream", "litestream")
        wait("the follower's copy", lambda: (tmp / "follower" / "replica.sqlite3-txid").exists(), 120)
        follower = start("follower", "serve")
        wait("the follower", lambda: call(ports["follower"], "GET", "/health")[0] == 200)

        auth = {"X-Api-Key": seeded["key"]}
        checks = [bm.http_post(f"/api/v1/communities/{bm.BIG}/membership/check", auth,
                               {"userDid": bm.member_did(i * 37 % bm.MEMBERS) if i % 2 else f"did:plc:nobody{i:018d}"})
                  for i in range(200)]
        bm.measure("warmup", ports["primary"], checks, 1, 4, 1)
        bm.measure("warmup", ports["follower"], checks, 1, 4, 1)
        rounds: dict[str, list[float]] = {"primary": [], "follower": []}
        for r in range(args.rounds):
            for name, pid in (("primary", primary.pid), ("follower", follower.pid)):
                out = bm.measure(name, ports[name], checks, args.seconds, args.connections, 1, pid)
                if set(out["statuses"]) != {200}:
                    raise SystemExit(f"{name}: {out['statuses']}")
                rounds[name].append(out["rps"])
        ratios = sorted(f / p for f, p in zip(rounds["follower"], rounds["primary"]))

        # Lag: joins at a steady rate on the primary, each timed until the follower sees it.
        seen: dict[str, float] = {}
        sent: dict[str, float] = {}
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                for did, at in list(sent.items()):
                    if did in seen:
                        continue
                    status, body = call(ports["follower"], "POST", f"/api/v1/communities/{bm.BIG}/membership/check",
                                        {"userDid": did}, seeded["key"])
                    if status == 200 and body["isMember"]:
                        seen[did] = time.monotonic() - at
                time.sleep(0.01)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        n = int(args.joins * args.join_seconds)
        began = time.monotonic()
        for i in range(n):
            due = began + i / args.joins
            time.sleep(max(0.0, due - time.monotonic()))
            did = f"did:plc:lagjoiner{i:016d}"
            at = time.monotonic()
            status, _ = call(ports["primary"], "POST", "/test/join-locally", {"communityDid": bm.BIG, "userDid": did})
            if status != 200:
                raise SystemExit(f"join {i}: {status}")
            sent[did] = at
        wait("the last join on the follower", lambda: len(seen) == n, 30)
        stop.set()
        lags = sorted(seen.values())
        health = call(ports["follower"], "GET", "/health")[1]
        result = {
            "load": os.getloadavg(), "interval_s": args.interval,
            "primary_check_rps": round(statistics.median(rounds["primary"])),
            "follower_check_rps": round(statistics.median(rounds["follower"])),
            "follower/primary": round(ratios[len(ratios) // 2], 3),
            "joins_per_s": args.joins, "joins": n,
            "lag_p50_s": round(lags[len(lags) // 2], 3), "lag_p90_s": round(lags[int(len(lags) * 0.9)], 3),
            "lag_max_s": round(lags[-1], 3), "follower_health_lag_s": health["replicaLagSeconds"],
        }
        print(json.dumps(result, indent=1))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
