"""Per-key asyncio locks (one community, one record), for work that spans a PDS call and
a transaction. They live in this process: one daemon per database."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator


class KeyedLocks:
    """asyncio locks by key, forgotten when nobody holds or waits for them."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    def __len__(self) -> int:
        return len(self._locks)

    def busy(self, key: str) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            yield
        if not lock.locked() and not getattr(lock, "_waiters", None):
            self._locks.pop(key, None)
