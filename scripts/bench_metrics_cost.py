#!/usr/bin/env python3
"""What recording a request's metrics costs on the hot path: CPU time of
`Metrics.record_request` (the one call every request makes: a counter and a histogram
of its route), per request, median of 5 runs of 200,000 calls.

    .venv/bin/python scripts/bench_metrics_cost.py

Set the figure against the server CPU per `membership/check` request that
`scripts/bench_membership.py` prints (its `check` vs `check-nometrics` scenarios measure
the same thing end to end, but within the noise of a shared machine).
"""

from __future__ import annotations

import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.http.metrics import Metrics  # noqa: E402


def main() -> int:
    # --smoke: a second or two, to check that the benchmark still runs (the test suite runs it)
    calls_per_run = 2_000 if "--smoke" in sys.argv[1:] else 200_000
    app = types.SimpleNamespace(config=types.SimpleNamespace(
        metrics=types.SimpleNamespace(enabled=True), database_path="unused"))
    metrics = Metrics(app)  # type: ignore[arg-type]

    class Check:
        request = types.SimpleNamespace(method="POST")

    metrics.name_routes([(r"/api/v1/communities/(did(?::|%3[Aa])[^/?#]+)/membership/check", Check)])
    handler, calls, runs = Check(), calls_per_run, []
    for _ in range(5):
        started = time.process_time()
        for _ in range(calls):
            metrics.record_request(handler, 200, 0.0021)
        runs.append((time.process_time() - started) / calls * 1e6)
    print(f"record_request: {statistics.median(runs):.2f} µs CPU per request "
          f"(runs: {', '.join(f'{r:.2f}' for r in runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
