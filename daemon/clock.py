"""Time, passed in, so tests step a fake clock instead of sleeping."""

from __future__ import annotations

import datetime as dt
import time


class Clock:
    """Wall-clock and monotonic time for the daemon."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.time(), tz=dt.timezone.utc)

    def iso_now(self) -> str:
        return iso(self.time())


class FakeClock(Clock):
    """A clock that moves only when told to (tests)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._wall = start
        self._mono = 1000.0

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds


def iso(ts: float) -> str:
    """ISO 8601 UTC with milliseconds and a Z, the shape atproto records use."""
    d = dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"
