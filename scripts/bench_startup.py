#!/usr/bin/env python3
"""Benchmark start-up: from launching `commonroom serve` to its first `200` on /health,
on a database seeded as `bench_membership.py` seeds it (100k members, 1,001 communities).

    .venv/bin/python scripts/bench_startup.py [--runs 7]

Each run starts the real command (`.venv/bin/commonroom -c <config> serve`) in a new
process, polls GET /health every 2 ms, and stops the daemon with SIGTERM once it answers.
The seed migrates the file, so every run opens an up-to-date database, as a restart does
(start-up migrations are timed in docs/operations.md's terms only when a release adds
one). Prints each run and the median.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_membership  # noqa: E402  (the same seed)


def healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False


def one_run(config: Path, port: int) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen([str(REPO / ".venv/bin/commonroom"), "-c", str(config), "serve"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not healthy(port):
            if proc.poll() is not None:
                raise SystemExit(f"the daemon exited with {proc.returncode} before it was ready")
            if time.perf_counter() - started > 30:
                raise SystemExit("not ready after 30 s")
            time.sleep(0.002)
        return time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        bench_membership.smoke()
        args.runs = 1
    state = Path(tempfile.mkdtemp(prefix="cr-startup-"))
    try:
        bench_membership.seed_and_report(state)
        port = bench_membership.free_port()
        config = state / "config.yaml"
        config.write_text(
            f"server: {{host: 127.0.0.1, port: {port}, base_url: 'http://127.0.0.1:{port}'}}\n"
            f"storage: {{state_dir: '{state}'}}\n"
            f"secret_key: '{'00' * 31 + '01'}'\n"
            "atproto: {pds_url: 'http://127.0.0.1:9'}\n"
            "log_level: warning\n")
        times = []
        for run in range(args.runs):
            seconds = one_run(config, port)
            times.append(seconds)
            print(f"run {run + 1}: ready in {seconds * 1000:.0f} ms")
        print(f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
              f"(first run {times[0] * 1000:.0f} ms)")
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
