"""The sync's filters on frames built here (no network).

Jetstream cannot run in this environment (it is a separate service in front of a relay),
so its parser is tested on frames constructed exactly as Jetstream v2 sends them
(``xrpc.v1.json``: ``{"$type": "message", "payload": {...}}``, the shapes of the SDK's
``network.bsky.jetstream.subscribeEvents`` models). The firehose filter is tested on
DAG-CBOR frames built the way a PDS frames them; tests/test_sync_network.py covers the
real devnet firehose end to end."""

from __future__ import annotations

import json

import libipld
import pytest

from daemon.runtime.config import Config, ConfigError
from daemon.sync.filters import FilterState, FirehoseFilter, JetstreamFilter, StreamError

MEMBERSHIP = "community.commonroom.membership"
ALICE, BOB, CLUB = "did:plc:alice", "did:plc:bob", "did:plc:club"


def state() -> FilterState:
    return FilterState(dids={ALICE, CLUB}, prefixes=(MEMBERSHIP + "/",), decode=frozenset({MEMBERSHIP}))


# ------------------------------------------------------------------ firehose frames

CID = libipld.decode_multibase("bafyreihshmjgvw4kqfnc3tmm5h767taf5haalx4bli3v5dsashpzacly6q")[1]


def car(blocks: dict[bytes, dict]) -> bytes:
    """A CAR file: header, then (varint length, CID, DAG-CBOR block) per block."""
    def varint(n: int) -> bytes:
        out = b""
        while True:
            byte, n = n & 0x7F, n >> 7
            out += bytes([byte | (0x80 if n else 0)])
            if not n:
                return out
    header = libipld.encode_dag_cbor({"version": 1, "roots": [list(blocks)[0]] if blocks else []})
    body = b"".join(varint(len(cid) + len(data)) + cid + data
                    for cid, data in ((c, libipld.encode_dag_cbor(v)) for c, v in blocks.items()))
    return varint(len(header)) + header + body


def frame(t: str, body: dict) -> bytes:
    return libipld.encode_dag_cbor({"op": 1, "t": t}) + libipld.encode_dag_cbor(body)


def commit(repo: str, seq: int, ops: list[dict], blocks: bytes = b"", rev: str = "3rev", since: str | None = None) -> bytes:
    return frame("#commit", {"seq": seq, "repo": repo, "rev": rev, "since": since, "ops": ops, "blocks": blocks,
                             "time": "2026-11-23T00:00:00.000Z", "tooBig": False, "rebase": False, "blobs": []})


def test_firehose_commit_of_an_unknown_repo_outside_the_collection_is_only_its_seq():
    f = FirehoseFilter(state())
    assert f(commit(BOB, 7, [{"action": "create", "path": "app.bsky.feed.post/3k", "cid": CID}])) == 7


def test_firehose_membership_record_of_an_unknown_repo_is_relevant_and_decoded():
    record = {"$type": MEMBERSHIP, "community": CLUB, "joinedAt": "2026-11-23T00:00:00.000Z"}
    f = FirehoseFilter(state())
    got = f(commit(BOB, 8, [{"action": "create", "path": f"{MEMBERSHIP}/3kx", "cid": CID}], car({CID: record})))
    assert got.kind == "commit" and got.did == BOB and got.seq == 8
    op = got.ops[0]
    assert (op.action, op.collection, op.rkey, op.record) == ("create", MEMBERSHIP, "3kx", record)
    assert op.cid == "bafyreihshmjgvw4kqfnc3tmm5h767taf5haalx4bli3v5dsashpzacly6q"


def test_firehose_commit_of_a_followed_repo_is_relevant_without_decoding_other_collections():
    f = FirehoseFilter(state())
    got = f(commit(ALICE, 9, [{"action": "update", "path": "app.bsky.actor.profile/self", "cid": CID}],
                   b"not a CAR: never decoded"))
    assert got.kind == "commit" and got.ops[0].collection == "app.bsky.actor.profile" and got.ops[0].record is None


def test_firehose_recognises_the_services_own_commit_by_its_rev():
    st = state()
    st.note_own(CLUB, "3own")
    got = FirehoseFilter(st)(commit(CLUB, 10, [{"action": "update", "path": "community.commonroom.profile/self",
                                                "cid": CID}], rev="3own"))
    assert got.own
    other = FirehoseFilter(st)(commit(CLUB, 11, [{"action": "update", "path": "community.commonroom.profile/self",
                                                  "cid": CID}], rev="3other"))
    assert not other.own


def test_firehose_identity_account_and_outdated_cursor():
    f = FirehoseFilter(state())
    ident = f(frame("#identity", {"seq": 3, "did": ALICE, "time": "t", "handle": "alice2.test"}))
    assert (ident.kind, ident.handle) == ("identity", "alice2.test")
    acct = f(frame("#account", {"seq": 4, "did": ALICE, "time": "t", "active": False, "status": "deactivated"}))
    assert (acct.kind, acct.active, acct.status) == ("account", False, "deactivated")
    assert f(frame("#account", {"seq": 5, "did": BOB, "time": "t", "active": False})) == 5
    gap = f(frame("#info", {"name": "OutdatedCursor", "message": "too old"}))
    assert (gap.kind, gap.did) == ("gap", "")
    with pytest.raises(StreamError):
        f(libipld.encode_dag_cbor({"op": -1}) + libipld.encode_dag_cbor({"error": "FutureCursor"}))


# ------------------------------------------------------------------ Jetstream frames


def js(payload: dict) -> str:
    return json.dumps({"$type": "message", "payload": payload})


def js_commit(did: str, seq: int, collection: str, record: dict | None = None, operation: str = "create") -> str:
    payload = {"$type": "network.bsky.jetstream.subscribeEvents#commit", "did": did, "seq": seq,
               "time": "2026-11-23T00:00:00.000000Z", "rev": "3rev", "collection": collection, "rkey": "3kx",
               "operation": operation}
    if record is not None:
        payload.update(record=record, cid="bafyreihshmjgvw4kqfnc3tmm5h767taf5haalx4bli3v5dsashpzacly6q")
    return js(payload)


def test_jetstream_commit_of_an_unknown_repo_outside_the_collection_is_only_its_seq():
    f = JetstreamFilter(state())
    assert f(js_commit(BOB, 42, "app.bsky.feed.like", {"subject": "x"})) == 42


def test_jetstream_membership_record_of_an_unknown_repo_is_relevant_with_its_record():
    record = {"$type": MEMBERSHIP, "community": CLUB, "joinedAt": "2026-11-23T00:00:00.000Z"}
    got = JetstreamFilter(state())(js_commit(BOB, 43, MEMBERSHIP, record))
    assert (got.kind, got.did, got.seq) == ("commit", BOB, 43)
    assert (got.ops[0].collection, got.ops[0].rkey, got.ops[0].record) == (MEMBERSHIP, "3kx", record)
    deleted = JetstreamFilter(state())(js_commit(BOB, 44, MEMBERSHIP, operation="delete"))
    assert deleted.ops[0].action == "delete" and deleted.ops[0].record is None


def test_jetstream_identity_and_account_wrap_the_upstream_event():
    f = JetstreamFilter(state())
    ident = f(js({"$type": "network.bsky.jetstream.subscribeEvents#identity", "did": ALICE, "seq": 50,
                  "time": "t", "identity": {"did": ALICE, "seq": 9, "time": "t", "handle": "new.test"}}))
    assert (ident.kind, ident.seq, ident.handle) == ("identity", 50, "new.test")
    acct = f(js({"$type": "network.bsky.jetstream.subscribeEvents#account", "did": ALICE, "seq": 51, "time": "t",
                 "account": {"did": ALICE, "seq": 10, "time": "t", "active": False, "status": "deleted"}}))
    assert (acct.kind, acct.active, acct.status) == ("account", False, "deleted")
    other = f(js({"$type": "network.bsky.jetstream.subscribeEvents#account", "did": BOB, "seq": 52, "time": "t",
                  "account": {"did": BOB, "seq": 11, "time": "t", "active": False}}))
    assert other == 52
    gap = f(js({"$type": "network.bsky.jetstream.subscribeEvents#info", "name": "OutdatedCursor"}))
    assert (gap.kind, gap.did) == ("gap", "")
    with pytest.raises(StreamError):
        f(json.dumps({"$type": "error", "error": "ConsumerTooSlow"}))


# ------------------------------------------------------------------ configuration


def test_sync_config_needs_a_url_unless_off():
    assert Config.from_mapping({}).sync.source == "off"
    with pytest.raises(ConfigError) as err:
        Config.from_mapping({"sync": {"source": "firehose"}})
    assert err.value.path == "sync.url"
    with pytest.raises(ConfigError) as err:
        Config.from_mapping({"sync": {"source": "jetstream", "url": "ftp://x"}})
    assert err.value.path == "sync.url"
    with pytest.raises(ConfigError) as err:
        Config.from_mapping({"sync": {"source": "relay", "url": "https://bsky.network"}})
    assert err.value.path == "sync.source"
    ok = Config.from_mapping({"sync": {"source": "firehose", "url": "https://bsky.network"}})
    assert ok.sync.url == "https://bsky.network"
