"""Holes found by a review of the issue-10 fixes: many-scan JPEGs, 16-bit images, non-ASCII
Content-Length digits, non-finite numbers, untrusted profile text from another PDS, line
breaks in NSIDs and record keys, oversized DID documents, and more secret forms in logs."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import httpx
import pytest
from PIL import Image

from daemon.atproto import pds
from daemon.atproto.identity import resolve_did
from daemon.atproto.syntax import is_nsid, is_rkey
from daemon.http.base import ApiError, parse_json_object
from daemon.security.redact import redact
from plugins.communities import images
from tests.fixtures_communities import seed_community
from tests.helpers import login_as, register_app
from tests.test_http_connections import RawConnection


def many_scan_jpeg(scans: int, side: int = 256) -> bytes:
    """A progressive greyscale JPEG followed by `scans` extra scans that each skip every
    block: small on disk, and libjpeg walks the whole image once per scan."""
    base = io.BytesIO()
    Image.new("L", (side, side), 128).save(base, "JPEG", progressive=True, quality=50)
    data = base.getvalue()
    i, segments = 2, []
    while data[i + 1] != 0xDA:
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        segments.append(data[i:i + 2 + length])
        i += 2 + length
    head = b"\xff\xd8" + b"".join(s for s in segments if s[1] != 0xC4)

    def dht(table: int, symbols: list[int]) -> bytes:
        body = bytes([table]) + bytes([len(symbols)] + [0] * 15) + bytes(symbols)
        return b"\xff\xc4" + struct.pack(">H", 2 + len(body)) + body

    head += dht(0x00, [0]) + dht(0x10, [0xE0])
    dc_scan = b"\xff\xda" + struct.pack(">H", 8) + bytes([1, 1, 0x00, 0, 0, 0]) + b"\x00" * 4
    ac_scan = b"\xff\xda" + struct.pack(">H", 8) + bytes([1, 1, 0x00, 1, 63, 0]) + b"\x00"
    return head + dc_scan + ac_scan * scans + b"\xff\xd9"


def test_a_jpeg_with_too_many_scans_is_refused_before_it_is_decoded() -> None:
    bomb = many_scan_jpeg(500)
    assert images.jpeg_scans(bomb) > images.MAX_JPEG_SCANS
    with pytest.raises(ApiError) as err:
        images.reencode(bomb, "avatar", 1_000_000)
    assert err.value.status == 415 and "scans" in err.value.message
    normal = io.BytesIO()
    Image.new("RGB", (300, 200), (200, 30, 30)).save(normal, "JPEG", progressive=True)
    assert 1 < images.jpeg_scans(normal.getvalue()) <= images.MAX_JPEG_SCANS
    assert images.reencode(normal.getvalue(), "avatar", 1_000_000).mime == "image/jpeg"


def test_a_16_bit_png_keeps_its_contrast() -> None:
    im = Image.new("I;16", (30, 30), 0)
    for x in range(30):
        for y in range(10):
            im.putpixel((x, y), 40000)
            im.putpixel((x, y + 10), 20000)
    raw = io.BytesIO()
    im.save(raw, "PNG")
    out = Image.open(io.BytesIO(images.reencode(raw.getvalue(), "avatar", 1_000_000).data))
    assert out.mode == "L"
    # black, mid grey and white stay apart (clipping to 8 bits made both greys white)
    assert out.getpixel((0, 0)) == 255 and 100 < out.getpixel((0, 15)) < 160 and out.getpixel((0, 25)) == 0


def test_a_cmyk_jpeg_drops_its_profile_when_its_pixels_become_rgb() -> None:
    raw = io.BytesIO()
    Image.new("CMYK", (20, 20), (0, 255, 255, 0)).save(raw, "JPEG", icc_profile=b"not really a CMYK profile")
    out = Image.open(io.BytesIO(images.reencode(raw.getvalue(), "avatar", 1_000_000).data))
    assert out.mode == "RGB" and "icc_profile" not in out.info


def test_numbers_that_are_not_finite_are_not_json() -> None:
    for body in (b'{"a": 1e999}', b'{"a": -1e400}', b'{"record": {"n": 1E309}}'):
        with pytest.raises(ApiError) as err:
            parse_json_object(body, "application/json")
        assert err.value.status == 400 and err.value.code == "invalid_json"
    assert parse_json_object(b'{"a": 1.5e10}', "application/json") == {"a": 1.5e10}


def test_nsids_and_record_keys_end_without_a_line_break() -> None:
    assert is_nsid("app.bsky.actor.profile") and is_rkey("self")
    assert not is_nsid("app.bsky.actor.profile\n") and not is_rkey("self\n")


def test_more_secret_forms_are_redacted() -> None:
    lines = {
        '{"accessJwt": "eyJhbGciOiJFUzI1NksifQ.x.y", "refreshJwt": "r1"}': ("eyJhbGciOiJFUzI1NksifQ", "r1"),
        "invite inviteCode=devnet-abcde-12345": ("devnet-abcde-12345",),
        "{'access_token': 'at-123456', 'expires_in': 60}": ("at-123456",),
        "authorization: bearer abcdefghijklmnop": ("abcdefghijklmnop",),
        "Authorization: Basic dXNlcjpwYXNzd29yZA==": ("dXNlcjpwYXNzd29yZA",),
        "got eyJhbGciOiJFUzI1NksifQ.eyJpc3MiOiJkaWQ6cGxjOngifQ.c2lnbmF0dXJl back": ("c2lnbmF0dXJl",),
        '{"kty": "EC", "crv": "P-256", "d": "c2VjcmV0LWQ"}': ("c2VjcmV0LWQ",),
        "redirect to /c/x?return_to=%2Foauth%2Fcallback%3Fcode%3Dthe-code%26state%3Dthe-state": ("the-code", "the-state"),
    }
    for line, secrets in lines.items():
        cleaned = redact(line)
        assert all(s not in cleaned for s in secrets), cleaned
        assert "[redacted]" in cleaned
    assert redact("GET /health 200 status_code=200 limit=5") == "GET /health 200 status_code=200 limit=5"


async def test_profile_text_from_another_pds_is_made_safe(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for a hostile PDS (one the devnet cannot play: it validates its records):
    a display name with a lone surrogate and a huge description."""
    from daemon.atproto import identity

    async def fake_resolve(app: Any, did: str, **_: Any) -> Any:
        return identity.DidInfo(did, None, "https://pds.example.net", {})

    async def fake_get_record(app: Any, pds_url: str, did: str, collection: str, rkey: str) -> Any:
        return {"value": {"displayName": "Eve\ud800", "description": "x" * 100_000}}

    monkeypatch.setattr(identity, "resolve_did", fake_resolve)
    monkeypatch.setattr(pds, "get_record", fake_get_record)
    profile = await pds.read_user_profile(app, "did:plc:eveeveeveeveeveeveeveeve")
    assert profile is not None
    profile["displayName"].encode("utf-8")  # storable: no lone surrogate left
    assert profile["displayName"].startswith("Eve")
    assert len(profile["description"].encode("utf-8")) <= 2560


async def test_an_oversized_did_document_is_refused_without_reading_it_all(app: Any) -> None:
    did = "did:web:big.example.com"
    sent = {"bytes": 0}

    async def endless() -> Any:
        for _ in range(1000):
            chunk = b" " * 65536
            sent["bytes"] += len(chunk)
            yield chunk

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=endless(), headers={"Content-Type": "application/json"})

    app._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    with pytest.raises(ApiError) as err:
        await resolve_did(app, did)
    assert err.value.status == 502 and "more than" in err.value.message
    assert sent["bytes"] < 2 * 1024 * 1024  # it stopped reading soon after the cap (256 KiB)


async def test_a_content_length_of_non_ascii_digits_is_a_400_on_both_route_kinds(app: Any, client: Any,
                                                                                 server: Any) -> None:
    alice = await login_as(app, "did:plc:alice")
    key = (await register_app(client, alice))["apiKey"]
    did = await seed_community(app, "did:plc:admin")
    for path in ("/api/v1/apps/verify", f"/api/v1/communities/{did}/membership/check"):
        conn = await RawConnection.open(server.port)
        try:
            conn.writer.write((f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Api-Key: {key}\r\n"
                               "Content-Type: application/json\r\nContent-Length: ").encode()
                              + b"\xb2\r\n\r\n{}")
            await conn.writer.drain()
            answer = await conn.response()
        finally:
            conn.close()
        assert answer is not None and 400 <= answer.status < 500, (path, answer)
        if answer.body:
            assert json.loads(answer.body).get("error")
