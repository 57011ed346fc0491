"""Per-key asyncio locks (one community, one record, one account, one OAuth session), for
work that spans a network call and a transaction. They live in this process: one daemon
per database. This is the one keyed-lock registry: the write path (``app.writes``), the
community accounts' sessions (``app.accounts``) and the OAuth grants each hold one."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator


class KeyedLocks:
    """asyncio locks by key, forgotten when nobody holds or waits for them (each key counts
    its users, so no private attribute of :class:`asyncio.Lock` is read). A task that
    already holds a key holds it again without waiting (a request that holds a record's
    lock around its checks, then runs the command that names the same lock)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._owners: dict[str, "asyncio.Task[object] | None"] = {}

    def __len__(self) -> int:
        return len(self._locks)

    def busy(self, key: str) -> bool:
        entry = self._locks.get(key)
        return entry is not None and entry[0].locked()

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        me = asyncio.current_task()
        if me is not None and self._owners.get(key) is me:
            yield  # held by this task already
            return
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                self._owners[key] = me
                try:
                    yield
                finally:
                    self._owners.pop(key, None)
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
