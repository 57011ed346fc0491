"""Identifier syntax (the atproto SDK's strict validators) and TIDs. No network."""

from __future__ import annotations

import subprocess
import sys

import pytest

from daemon.atproto import syntax
from daemon.base import FakeClock
from daemon.http.base import ApiError


@pytest.mark.parametrize("value", ["did:plc:z72i7hdynmk6r22z27h6tvur", "did:web:example.com",
                                   "did:web:localhost%3A2583"])
def test_valid_dids_are_accepted(value: str) -> None:
    assert syntax.is_did(value)
    assert syntax.require_did(value) == value


@pytest.mark.parametrize("value", ["", "did:", "did:plc:", "DID:plc:abc", "did:PLC:abc", "plc:abc",
                                   "did:plc:abc/def", "did:plc:abc#frag", "did:plc:abc:", 42, None])
def test_invalid_dids_are_a_400_naming_the_field(value: object) -> None:
    assert not syntax.is_did(value)
    with pytest.raises(ApiError) as err:
        syntax.require_did(value, "userDid")
    assert err.value.status == 400
    assert err.value.body()["details"][0]["field"] == "userDid"
    assert "userDid" in err.value.message


def test_handles_are_normalised_and_checked() -> None:
    assert syntax.require_handle("@Alice.Example.COM") == "alice.example.com"
    assert syntax.require_handle("bob.test") == "bob.test"
    for bad in ["alice", "alice..com", "-alice.com", "alice.com-", "al ice.com", "alice.123",
                "ålice.com", "x" * 64 + ".com"]:
        assert not syntax.is_handle(bad), bad
        with pytest.raises(ApiError) as err:
            syntax.require_handle(bad)
        assert err.value.status == 400


def test_nsids_rkeys_and_at_uris() -> None:
    assert syntax.is_nsid("community.commonroom.membershipProof")
    assert syntax.require_nsid("app.bsky.actor.profile", "collection") == "app.bsky.actor.profile"
    for bad in ["community", "community.commonroom", "com.example.", "com..example.x",
                "com.example.1thing", "com.exa_mple.thing"]:
        assert not syntax.is_nsid(bad), bad
    with pytest.raises(ApiError) as err:
        syntax.require_nsid("nope", "collection")
    assert err.value.status == 400 and "collection" in err.value.message

    for good in ["self", "3k2abcdefgh22", "a:b~c_d-e.f"]:
        assert syntax.is_rkey(good), good
    for bad in ["", ".", "..", "a/b", "a b", "x" * 513]:
        assert not syntax.is_rkey(bad), bad
        with pytest.raises(ApiError):
            syntax.require_rkey(bad)

    assert syntax.is_at_uri("at://did:plc:abc123/community.commonroom.membership/3k2abcdefgh22")
    assert syntax.is_at_uri("at://alice.test")
    assert not syntax.is_at_uri("https://example.com/x")
    assert not syntax.is_at_uri("at://did:plc:abc/community.commonroom.membership/..")


def test_datetime_format_is_strict() -> None:
    assert syntax.is_datetime("2026-11-22T00:05:10.123Z")
    assert syntax.is_datetime("2026-11-22T00:05:10+01:00")
    for bad in ["2026-11-22", "2026-11-22 00:05:10Z", "2026-11-22T00:05Z", "2026-11-22T00:05:10",
                "2026-11-22T00:05:10-00:00"]:
        assert not syntax.is_datetime(bad), bad


def test_new_tids_are_valid_increasing_and_carry_the_clock_time() -> None:
    a, b = syntax.new_tid(), syntax.new_tid(FakeClock())
    assert syntax.is_tid(a) and syntax.is_tid(b) and b > a  # never backwards, even if the clock is
    source = syntax._TidSource()  # a fresh source: the process-wide one remembers other tests
    tids = [source.next(1_800_000_000_000_000) for _ in range(500)]  # a frozen clock...
    assert all(syntax.is_tid(t) and syntax.is_rkey(t) for t in tids)
    assert tids == sorted(tids) and len(set(tids)) == len(tids)  # ...still gives new keys
    assert abs(syntax.tid_timestamp(tids[0]) - 1_800_000_000.0) < 0.01
    later = source.next(1_800_000_001_000_000)
    assert later > tids[-1] and abs(syntax.tid_timestamp(later) - 1_800_000_001.0) < 0.01


def test_syntax_checks_do_not_import_the_whole_atproto_sdk() -> None:
    """`import atproto_client` takes about a second: the validators are loaded on their own."""
    code = ("import sys, daemon.atproto.syntax as s; assert s.is_did('did:plc:abc'); "
            "assert s.is_nsid('a.b.c'); print('atproto_client' in sys.modules, "
            "'atproto_client.models' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("value, code", [
    ("did:plc:z72i7hdynmk6r22z27h6tvur", None),
    ("did:web:example.com", None),
    ("did:web:localhost%3A2583", None),
    ("did:plc:Z72I7HDYNMK6R22Z27H6TVUR", "invalid_request"),   # DIDs are case-sensitive
    ("did:plc:z72i7hdynmk6r22z27h6tvu", "invalid_request"),    # 23 characters
    ("did:plc:z72i7hdynmk6r22z27h6tvu0", "invalid_request"),   # 0 is not base32
    ("did:web:Example.com", "invalid_request"),
    ("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "unsupported_did"),
    ("did:web:169.254.169.254", "unsupported_did"),            # an IP address, not a host name
    ("did:web:10.0.0.1%3A8080", "unsupported_did"),
    ("did:web:example.com%3A8443", "unsupported_did"),         # a port, not on localhost
    ("did:web:example.com:users:alice", "unsupported_did"),    # a path
    ("did:web:ex_ample.com", "unsupported_did"),
])
def test_only_strict_did_plc_and_did_web_are_usable(value: str, code: str | None) -> None:
    assert syntax.is_did(value)
    assert syntax.is_atproto_did(value) is (code is None)
    if code is None:
        assert syntax.require_atproto_did(value, "userDid") == value
        return
    with pytest.raises(ApiError) as err:
        syntax.require_atproto_did(value, "userDid")
    assert err.value.status == 400 and err.value.code == code
    assert err.value.body()["details"][0]["field"] == "userDid"
