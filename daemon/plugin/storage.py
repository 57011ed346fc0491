"""More of the store than `Reader`, `Row` and `Transaction`: keyset query building, a cache of rarely
changing rows, the core tables plugins may read, and clean-up in bounded batches.

    from daemon.plugin.storage import narrowed, prune_in_batches

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.runtime.retention import BATCH as PRUNE_BATCH, PAUSE_SECONDS as PRUNE_PAUSE_SECONDS, prune_in_batches
from store.apps import AppsTable
from store.db import narrowed, VersionedCache

__all__ = [
    "narrowed", "VersionedCache", "AppsTable", "prune_in_batches", "PRUNE_BATCH", "PRUNE_PAUSE_SECONDS",
]
