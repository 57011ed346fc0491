"""Every benchmark under scripts/ still runs: each one's `--smoke` mode (a second or two on tiny
data, figures that mean nothing) in a process of its own, as an operator would start it. An
import or API change that breaks a benchmark fails here, not months later when someone tries to
reproduce docs/performance.md. The heavier ones (their own daemons, Litestream, a devnet) are in
test_benchmarks_smoke_servers.py, so the two halves run side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

BENCHMARKS = sorted(p.name for p in (REPO / "scripts").glob("bench_*.py")) + ["bytecodes_per_request.py"]
SERVERS = {"bench_events.py", "bench_scale.py", "bench_replication.py", "bench_sync.py", "bench_writes.py"}


def run_smoke(script: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--smoke"], capture_output=True,
                          text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, f"{script} --smoke failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{script} --smoke printed no figures"
    return done


def test_every_benchmark_has_a_smoke_mode_that_a_test_runs() -> None:
    for script in BENCHMARKS:
        assert "--smoke" in (REPO / "scripts" / script).read_text(), f"{script} has no --smoke mode"
    assert SERVERS < set(BENCHMARKS)


@pytest.mark.parametrize("script", [b for b in BENCHMARKS if b not in SERVERS])
def test_the_benchmark_runs(script: str) -> None:
    run_smoke(script)
