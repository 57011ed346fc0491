"""Sync with the AT Protocol network: follow the event stream (firehose or Jetstream),
keep what concerns the index, and hand it to plugins (docs/sync.md)."""

from daemon.sync.events import Interest, RecordOp, SyncEvent
from daemon.sync.service import Sync

__all__ = ["Interest", "RecordOp", "Sync", "SyncEvent"]
