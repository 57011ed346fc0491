"""The benchmarks that start servers of their own (daemons, Litestream, a devnet), in their
`--smoke` mode: see test_benchmarks_smoke.py."""

from __future__ import annotations

import pytest

from tests.test_benchmarks_smoke import SERVERS, run_smoke

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("script", sorted(SERVERS))
def test_the_benchmark_runs(script: str) -> None:
    run_smoke(script)
