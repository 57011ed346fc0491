"""What the sync hands to plugins: events of the network, already filtered, and the
interest that filters them (docs/sync.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from store.db import Database


@dataclass(frozen=True, slots=True)
class RecordOp:
    """One record operation of a commit."""

    action: str                 # create | update | delete
    collection: str
    rkey: str
    cid: str | None = None      # the new record's CID (None for a delete)
    #: The record, decoded from the commit's blocks, for the collections a plugin asked to
    #: have decoded (`Interest.decode`); None otherwise and for deletes.
    record: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SyncEvent:
    """One relevant event of the stream.

    ``kind`` is ``commit`` (``rev``, ``since``, ``ops``), ``identity`` (``handle``, as the
    stream says: re-resolve before trusting it), ``account`` (``active``, ``status``:
    deactivated, suspended, takendown, deleted, ...), or ``gap``: events of ``did`` may have
    been missed (a ``#sync`` event, a commit too big to carry its ops, a commit that does
    not follow the last one seen), or, with ``did == ""``, of every repo (an outdated
    cursor): rebuild what depends on them from the repos."""

    kind: str
    did: str
    seq: int
    time: str | None = None
    rev: str | None = None
    since: str | None = None
    ops: tuple[RecordOp, ...] = ()
    handle: str | None = None
    active: bool | None = None
    status: str | None = None
    #: The service itself made this commit (recognised by its rev): leave it alone.
    own: bool = False


#: Loads the DIDs a plugin follows: ``load(db, mark)`` returns the DIDs added since `mark`
#: (None: all of them) and the mark to pass next time.
InterestLoader = Callable[["Database", Any], Awaitable[tuple[Iterable[str], Any]]]


@dataclass(frozen=True)
class Interest:
    """What a plugin wants from the stream (hook ``cr_sync_interest``).

    :param name: the plugin's name (keeps its loader's mark apart).
    :param load: the DIDs to follow: every event of those repos is relevant.
    :param collections: collections that make *any* repo's commit relevant when one of
        its operations touches them (seen in the op paths, without decoding blocks).
    :param decode: collections whose records the plugin needs decoded in a relevant
        commit (``RecordOp.record``); records of other collections stay undecoded.
    """

    name: str
    load: InterestLoader
    collections: frozenset[str] = field(default_factory=frozenset)
    decode: frozenset[str] = field(default_factory=frozenset)
