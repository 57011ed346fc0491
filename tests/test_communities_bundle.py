"""The handover bundle's sealed format (plugins/communities/bundle.py): what the primary
admin's passphrase opens, and what is refused with nothing opened."""

from __future__ import annotations

import base64
import json

import pytest

from plugins.communities import bundle
from plugins.communities.bundle import BundleError, new_passphrase, open_bundle, seal

PAYLOAD = {"did": "did:plc:community", "pds": "http://localhost:2583",
           "appPassword": "abcd-efgh-ijkl-mnop",
           "bans": [{"did": "did:plc:troll", "reason": "spam", "expiresAt": "2027-01-01T00:00:00Z"}]}


def test_the_passphrase_opens_what_was_sealed_and_the_secret_is_not_in_clear() -> None:
    phrase = new_passphrase()
    data = seal(PAYLOAD, phrase)
    assert b"abcd-efgh-ijkl-mnop" not in data and b"did:plc:troll" not in data
    assert open_bundle(data, phrase) == PAYLOAD
    # What copying does to a passphrase (case, spaces instead of dashes) still opens it.
    assert open_bundle(data, phrase.lower().replace("-", " ")) == PAYLOAD
    envelope = json.loads(data)
    assert envelope["format"] == "commonroom-handover" and envelope["version"] == 1


def test_two_passphrases_differ_and_are_long() -> None:
    a, b = new_passphrase(), new_passphrase()
    assert a != b
    assert len(a.replace("-", "")) == 32


def test_a_wrong_passphrase_is_refused() -> None:
    data = seal(PAYLOAD, new_passphrase())
    with pytest.raises(BundleError) as caught:
        open_bundle(data, new_passphrase())
    assert caught.value.code == "bundle_refused"
    assert "passphrase is wrong or the bundle was changed" in str(caught.value)


def _flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("change", ["ciphertext", "nonce", "salt", "extra_header"])
def test_a_changed_bundle_is_refused(change: str) -> None:
    phrase = new_passphrase()
    envelope = json.loads(seal(PAYLOAD, phrase))
    if change == "salt":
        envelope["kdf"]["salt"] = _flip(envelope["kdf"]["salt"])
    elif change == "extra_header":
        envelope["note"] = "added later"
    else:
        envelope[change] = _flip(envelope[change])
    with pytest.raises(BundleError) as caught:
        open_bundle(json.dumps(envelope).encode(), phrase)
    assert caught.value.code == "bundle_refused"


@pytest.mark.parametrize("data,code", [
    (b"not json", "bundle_malformed"),
    (b"[]", "bundle_malformed"),
    (json.dumps({"format": "other"}).encode(), "bundle_malformed"),
    (json.dumps({"format": "commonroom-handover", "version": 2}).encode(), "bundle_unsupported"),
])
def test_what_is_not_a_bundle_says_so(data: bytes, code: str) -> None:
    with pytest.raises(BundleError) as caught:
        open_bundle(data, new_passphrase())
    assert caught.value.code == code


def test_a_bundle_cannot_ask_for_an_unbounded_key_derivation() -> None:
    phrase = new_passphrase()
    envelope = json.loads(seal(PAYLOAD, phrase))
    envelope["kdf"]["n"] = 2 ** 24  # 16 GiB of scrypt memory at r=8
    with pytest.raises(BundleError) as caught:
        open_bundle(json.dumps(envelope).encode(), phrase)
    assert caught.value.code == "bundle_unsupported"


def test_an_oversized_bundle_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_BUNDLE_BYTES", 100)
    with pytest.raises(BundleError) as caught:
        open_bundle(b" " * 101, new_passphrase())
    assert caught.value.code == "bundle_too_large"


def test_a_short_passphrase_is_refused() -> None:
    with pytest.raises(BundleError) as caught:
        seal(PAYLOAD, "short")
    assert caught.value.code == "bad_passphrase"
