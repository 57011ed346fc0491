"""Filter before decoding: turn a raw frame of the stream into a `SyncEvent` if it matters,
else into just its sequence number, at the cost of a frame decode, a set lookup and a look
at the op paths. Blocks are decoded (a CAR) only for a relevant commit that carries a record
of a collection some plugin asked to have decoded.

`FirehoseFilter` reads ``com.atproto.sync.subscribeRepos`` frames (DAG-CBOR);
`JetstreamFilter` reads Jetstream's ``xrpc.v1.json`` frames (``network.bsky.jetstream.
subscribeEvents``). Both are plain functions of the frame and the interest, so the
benchmark (scripts/bench_sync.py) and the tests feed them recorded frames."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

# libipld and pydantic-core (~3 MB resident, mostly pydantic-core's native library) are
# imported when a filter is made, i.e. when the service follows a stream: an instance with
# `sync.source: off` never loads them.

from daemon.sync.events import RecordOp, SyncEvent

#: What a frame turned into: a relevant event, or the sequence number of one that is not
#: (the cursor may move past it), or None (a frame without a sequence number).
Filtered = SyncEvent | int | None


def cid_text(cid: Any) -> str | None:
    """A CID as its usual base32 text (the stream carries binary CIDs)."""
    if cid is None:
        return None
    if isinstance(cid, str):
        return cid
    import libipld
    return libipld.encode_multibase("b", bytes(cid))


@dataclass
class FilterState:
    """What the filters consult: the DIDs followed, the collections that make any commit
    relevant (as op-path prefixes), the collections to decode, and what the service
    wrote itself (repo and commit rev, most recent last)."""

    dids: set[str] = field(default_factory=set)
    prefixes: tuple[str, ...] = ()
    decode: frozenset[str] = frozenset()
    own: "OrderedDict[tuple[str, str], None]" = field(default_factory=OrderedDict)
    own_limit: int = 10_000

    def note_own(self, did: str, rev: str) -> None:
        self.own[(did, rev)] = None
        while len(self.own) > self.own_limit:
            self.own.popitem(last=False)

    def touches(self, paths: Any) -> bool:
        prefixes = self.prefixes
        return bool(prefixes) and any(p.startswith(prefixes) for p in paths)


class FirehoseFilter:
    """``com.atproto.sync.subscribeRepos`` frames."""

    def __init__(self, state: FilterState) -> None:
        import libipld
        self.state = state
        self._decode_multi = libipld.decode_dag_cbor_multi
        self._decode_car = libipld.decode_car

    def __call__(self, data: bytes) -> Filtered:
        parts = self._decode_multi(data)
        if len(parts) != 2:
            return None
        header, body = parts
        if header.get("op") != 1:
            error = body.get("error") if isinstance(body, dict) else None
            raise StreamError(str(error or "error frame"), body.get("message") if isinstance(body, dict) else None)
        kind = header.get("t")
        seq = body.get("seq")
        state = self.state
        if kind == "#commit":
            repo = body.get("repo")
            ops = body.get("ops") or ()
            if repo not in state.dids and not state.touches(op.get("path", "") for op in ops):
                return seq
            return self._commit(body, repo, ops)
        if kind in ("#identity", "#account", "#sync"):
            did = body.get("did")
            if did not in state.dids:
                return seq
            if kind == "#identity":
                return SyncEvent("identity", did, seq, body.get("time"), handle=body.get("handle"))
            if kind == "#account":
                return SyncEvent("account", did, seq, body.get("time"), active=bool(body.get("active")),
                                 status=body.get("status"))
            return SyncEvent("gap", did, seq, body.get("time"), rev=body.get("rev"))
        if kind == "#info":
            if body.get("name") == "OutdatedCursor":
                return SyncEvent("gap", "", -1)
            return None
        return seq if isinstance(seq, int) else None

    def _commit(self, body: dict[str, Any], repo: str, ops: Any) -> SyncEvent:
        state = self.state
        rev, since, seq, time = body.get("rev"), body.get("since"), body.get("seq"), body.get("time")
        if body.get("tooBig") and repo in state.dids:
            return SyncEvent("gap", repo, seq, time, rev=rev)  # its ops are not in the frame
        own = (repo, rev) in state.own
        blocks: dict[bytes, Any] | None = None
        out = []
        for op in ops:
            collection, _, rkey = op.get("path", "").partition("/")
            cid = op.get("cid")
            record = None
            if cid is not None and collection in state.decode and not own:
                if blocks is None:
                    blocks = self._decode_car(body.get("blocks") or b"")[1] if body.get("blocks") else {}
                value = blocks.get(bytes(cid))
                record = value if isinstance(value, dict) else None
            out.append(RecordOp(op.get("action", ""), collection, rkey, cid_text(cid), record))
        return SyncEvent("commit", repo, seq, time, rev=rev, since=since, ops=tuple(out), own=own)


class StreamError(Exception):
    """The stream sent an error frame (``FutureCursor``, ``ConsumerTooSlow``, ...)."""

    def __init__(self, error: str, message: str | None = None) -> None:
        super().__init__(f"{error}: {message}" if message else error)
        self.error = error


_JS = "network.bsky.jetstream.subscribeEvents#"


class JetstreamFilter:
    """Jetstream v2 ``xrpc.v1.json`` frames (``{"$type": "message", "payload": {...}}``).

    Jetstream's ``seq`` is the cursor. A commit event carries one record operation with
    the record already decoded (JSON), so nothing else is decoded."""

    def __init__(self, state: FilterState) -> None:
        from pydantic_core import from_json
        self.state = state
        self._from_json = from_json

    def __call__(self, data: bytes | str) -> Filtered:
        frame = self._from_json(data)
        if not isinstance(frame, dict):
            return None
        if frame.get("$type") == "error":
            raise StreamError(str(frame.get("error") or "error frame"), frame.get("message"))
        payload = frame.get("payload")
        if not isinstance(payload, dict):
            return None
        kind = str(payload.get("$type", "")).removeprefix(_JS)
        seq = payload.get("seq")
        did = payload.get("did")
        state = self.state
        if kind == "commit":
            collection = payload.get("collection") or ""
            if did not in state.dids and not (state.prefixes and (collection + "/").startswith(state.prefixes)):
                return seq
            rev = payload.get("rev")
            own = (did, rev) in state.own
            record = payload.get("record") if collection in state.decode and not own else None
            op = RecordOp(payload.get("operation", ""), collection, payload.get("rkey") or "",
                          payload.get("cid"), record if isinstance(record, dict) else None)
            return SyncEvent("commit", did, seq, payload.get("time"), rev=rev, ops=(op,), own=own)
        if kind in ("identity", "account", "sync"):
            if did not in state.dids:
                return seq
            inner = payload.get(kind) if isinstance(payload.get(kind), dict) else {}
            if kind == "identity":
                return SyncEvent("identity", did, seq, payload.get("time"), handle=inner.get("handle"))
            if kind == "account":
                return SyncEvent("account", did, seq, payload.get("time"), active=bool(inner.get("active")),
                                 status=inner.get("status"))
            return SyncEvent("gap", did, seq, payload.get("time"), rev=inner.get("rev"))
        if kind == "info":
            return SyncEvent("gap", "", -1) if payload.get("name") == "OutdatedCursor" else None
        return seq if isinstance(seq, int) else None
