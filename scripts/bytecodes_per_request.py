#!/usr/bin/env python3
"""Count the Python bytecodes the server executes per request, by function: a measure of
per-request work that does not depend on how busy the machine is.

`scripts/bench_membership.py` times its scenarios, and on a shared 2-vCPU machine the
median of a run moves by ±5 % from one run to the next (single rounds by far more): a
change of a few per cent in the floor's cost cannot be seen there. This script serves the
same scenarios from the same server (`bench_membership.build`, the same seeded state, the
same request bytes) and counts, with `sys.settrace` and ``f_trace_opcodes``, every bytecode
the server's event-loop thread runs for 1,000 requests on one keep-alive connection after a
warm-up. Repeated runs agree within about half a per cent; the interpreter's time per
request follows it closely (docs/performance.md, "Bytecodes per request"), though not
exactly: a C call (a regular expression, the JSON codec, a dict lookup) counts as one
bytecode, other threads are not traced (aiosqlite's, which runs the SQLite reads of
``page1``), and the server's timers and background tasks that fire during the counted
requests (tracing makes them ~50× slower) are counted with them.

    .venv/bin/python scripts/bytecodes_per_request.py [--scenarios bare,floor,check] [--requests 1000] [--top 40]

It prints each scenario's total per request, then the functions where each scenario
differs most from the first (``bare`` by default).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import random
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_membership as bm  # noqa: E402  (the benchmark's server, seed and requests)


def _serve(state: Path, ports: tuple[int, int, int], out: str, ready: Any) -> None:
    """`bench_membership.build`, with counting switched on by SIGUSR1 and off (the counts
    written to `out` as JSON) by SIGUSR2."""
    counts: collections.Counter[str] = collections.Counter()

    def trace(frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        key = f"{Path(code.co_filename).name}:{code.co_qualname}"
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local
        return local

    def on(*_: Any) -> None:
        counts.clear()
        sys.settrace(trace)

    def off(*_: Any) -> None:
        sys.settrace(None)
        Path(out).write_text(json.dumps(counts))

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    bm.build(state, *ports, ready)


def _send(port: int, requests: list[bytes], n: int) -> None:
    """`n` requests, cycling through `requests`, on one keep-alive connection; each must be answered 200."""
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as f:
        for i in range(n):
            sock.sendall(requests[i % len(requests)])
            status = f.readline()
            length = 0
            while (line := f.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            f.read(length)
            if b" 200 " not in status:
                raise SystemExit(f"unexpected answer: {status!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="bare,floor,check")
    parser.add_argument("--requests", type=int, default=1000, help="counted per scenario (after as many / 3 of warm-up)")
    parser.add_argument("--top", type=int, default=40, help="functions listed per scenario")
    parser.add_argument("--smoke", action="store_true", help="a second or two on tiny data: checks that the benchmark still runs (the test suite runs it; its figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        bm.smoke()
        args.requests = 30
    with tempfile.TemporaryDirectory(prefix="cr-bytecodes-") as tmp:
        state = Path(tmp)
        names = [s for s in args.scenarios.split(",") if s]
        unknown = [s for s in names if s not in bm.SCENARIO_NAMES]
        if unknown:
            raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(bm.SCENARIO_NAMES)}")
        random.seed(1)   # the same requests every time
        requests_of = bm.scenario_requests(bm.seed_and_report(state))
        ports = (bm.free_port(), bm.free_port(), bm.free_port())   # service, bare, plain
        port_of = {None: ports[0], "bare": ports[1], "plain": ports[2]}
        out = str(state / "counts.json")
        ctx = multiprocessing.get_context("fork")
        ready = ctx.Event()
        server = ctx.Process(target=_serve, args=(state, ports, out, ready), daemon=True)
        server.start()
        if not ready.wait(120):
            raise SystemExit("the server did not start")
        results: dict[str, collections.Counter[str]] = {}
        try:
            for name in names:
                requests, port = requests_of[name], port_of[bm.SCENARIO_SERVER.get(name)]
                _send(port, requests, max(1, args.requests // 3))
                os.kill(server.pid, signal.SIGUSR1)
                time.sleep(0.3)
                _send(port, requests, args.requests)
                os.kill(server.pid, signal.SIGUSR2)
                for _ in range(100):
                    time.sleep(0.1)
                    if Path(out).exists():
                        break
                time.sleep(0.2)
                results[name] = collections.Counter(json.loads(Path(out).read_text()))
                Path(out).unlink()
        finally:
            server.kill()
    n = args.requests
    print("\nbytecodes per request: " + ", ".join(f"{k} {sum(v.values()) / n:,.0f}" for k, v in results.items()))
    first = names[0]
    for name in names[1:]:
        a, b = results[first], results[name]
        print(f"\n{name} - {first}: {(sum(b.values()) - sum(a.values())) / n:+,.0f} a request; "
              f"the functions that differ most (per request: difference, {first}, {name})")
        keys = sorted(set(a) | set(b), key=lambda k: -abs(b[k] - a[k]))
        for k in keys[:args.top]:
            print(f"  {(b[k] - a[k]) / n:+8.1f} {a[k] / n:8.1f} {b[k] / n:8.1f}  {k}")


if __name__ == "__main__":
    main()
