"""Token-bucket rate limiting inside the event loop.

A bucket holds up to `limit` tokens and refills at `limit / window` tokens a second, so
`limit` requests may arrive at once and the full allowance is back one window later.
A bucket that has refilled completely is indistinguishable from a new one, so it is
dropped: memory stays bounded by the keys active within one window. A hard cap on the
number of keys evicts the least recently used beyond it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from daemon.base import Clock


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float
    limit: int
    window: float


class Decision:
    """The outcome of one `RateLimiter.hit` (a plain slotted class: one is made per request)."""

    __slots__ = ("allowed", "limit", "remaining", "reset_seconds", "retry_after_seconds")

    def __init__(self, allowed: bool, limit: int, remaining: int, reset_seconds: int,
                 retry_after_seconds: int) -> None:
        self.allowed = allowed
        self.limit = limit
        self.remaining = remaining
        self.reset_seconds = reset_seconds            # until the bucket is full again
        self.retry_after_seconds = retry_after_seconds  # until the next request would pass

    def headers(self) -> dict[str, str]:
        out = {"RateLimit-Limit": str(self.limit), "RateLimit-Remaining": str(self.remaining),
               "RateLimit-Reset": str(self.reset_seconds)}
        if not self.allowed:
            out["Retry-After"] = str(self.retry_after_seconds)
        return out


#: Every this many hits, buckets that have refilled are dropped (`RateLimiter.sweep`).
SWEEP_EVERY = 1024


class RateLimiter:
    def __init__(self, clock: Clock, max_keys: int = 100_000) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._until_sweep = SWEEP_EVERY

    def __len__(self) -> int:
        return len(self._buckets)

    def hit(self, key: str, limit: int, window: float) -> Decision:
        """Take one token from `key`'s bucket if there is one."""
        now = self._clock.monotonic()
        rate = limit / window
        buckets = self._buckets
        bucket = buckets.get(key)
        if bucket is not None and bucket.limit == limit and bucket.window == window:
            tokens = bucket.tokens + (now - bucket.updated) * rate
            if tokens > limit:
                tokens = float(limit)
            bucket.updated = now
            buckets.move_to_end(key)
        else:   # a new key, or its budget changed: a full bucket
            tokens = float(limit)
            bucket = buckets[key] = _Bucket(tokens, now, limit, window)
            if len(buckets) > self._max_keys:
                buckets.popitem(last=False)   # the least recently used makes room: O(1) at the cap
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        bucket.tokens = tokens
        self._until_sweep -= 1
        if not self._until_sweep:
            self._until_sweep = SWEEP_EVERY
            self.sweep()
        return Decision(allowed, limit, int(tokens), math.ceil((limit - tokens) / rate) if tokens < limit else 0,
                        0 if allowed else max(1, math.ceil((1.0 - tokens) / rate)))

    def sweep(self) -> int:
        """Drop buckets that have refilled completely, then the oldest beyond the cap."""
        now = self._clock.monotonic()
        full = [k for k, b in self._buckets.items()
                if b.tokens + (now - b.updated) * (b.limit / b.window) >= b.limit]
        for k in full:
            del self._buckets[k]
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return len(full)
