"""Avatar and banner uploads are decoded, capped and re-encoded before they reach the
community's public repo (checked by fetching the blob back from the devnet PDS), malformed
forms are 400, and a lone surrogate in a JSON body never reaches a PDS."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

import httpx
import pytest
from PIL import Image, PngImagePlugin

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record, seed_community
from tests.helpers import login_as

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()

GPS_IFD = 0x8825
ORIENTATION = 0x0112


def photo_with_gps(width: int = 60, height: int = 30) -> bytes:
    """A JPEG as a phone writes it: sensor-oriented pixels (left third blue, the rest red),
    EXIF orientation 6 (show rotated 90° clockwise), camera make, GPS position, a comment."""
    im = Image.new("RGB", (width, height), (220, 0, 0))
    im.paste((0, 0, 220), (0, 0, width // 3, height))
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    exif[0x010F] = "SpyPhone"
    exif[GPS_IFD] = {1: "N", 2: (51.0, 30.0, 26.0), 3: "W", 4: (0.0, 7.0, 39.0)}
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=exif, comment=b"home address", quality=95)
    return buf.getvalue()


def png_declaring(width: int, height: int, pixels: bool = True) -> bytes:
    """A small PNG whose header declares `width`×`height` (a decompression bomb), with a
    megabyte of zeros compressed to about 1 kB as its pixels (or none)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + (chunk(b"IDAT", zlib.compress(b"\x00" * 1_000_000, 9)) if pixels else b"")
            + chunk(b"IEND", b""))


async def admin_setup(app: Any, client: Any, people: Any) -> tuple[Api, dict, Any, str]:
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Picture club"))["did"]
    return api, alice, await login_as(app, alice["did"], alice["handle"]), did


async def stored_image(app: Any, resp: Any, did: str, kind: str) -> tuple[dict[str, Any], bytes]:
    """The profile's blob reference for `kind` (read from the PDS) and the blob's bytes,
    fetched back from the PDS through the getBlob URL the upload's answer shows."""
    ref = (await pds_record(app, did, "profile"))[kind]
    url = resp.json()["community"][kind]
    assert ref["ref"]["$link"] in url
    fetched = await app.http.get(url)
    assert fetched.status_code == 200
    return ref, fetched.content


# ------------------------------------------------------------------ what reaches the PDS


async def test_a_jpeg_with_gps_is_stored_upright_without_its_metadata(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    sent = photo_with_gps()
    assert Image.open(io.BytesIO(sent)).getexif().get_ifd(GPS_IFD)  # the upload does carry GPS
    resp = await client.post(f"/communities/{did}/avatar", body=sent, session=session,
                             headers={"Content-Type": "image/jpeg"})
    assert resp.status == 200, resp.text

    ref, stored = await stored_image(app, resp, did, "avatar")
    assert ref["mimeType"] == "image/jpeg" and ref["size"] == len(stored)
    im = Image.open(io.BytesIO(stored))
    assert im.format == "JPEG"
    assert not im.getexif() and not im.getexif().get_ifd(GPS_IFD)
    assert "exif" not in im.info and "comment" not in im.info and "xmp" not in im.info
    assert b"SpyPhone" not in stored and b"home address" not in stored
    # turned upright: 60×30 on the sensor becomes 30×60, the blue third now on top
    assert im.size == (30, 60)
    top, bottom = im.convert("RGB").getpixel((15, 5)), im.convert("RGB").getpixel((15, 55))
    assert top[2] > 150 > top[0] and bottom[0] > 150 > bottom[2]


async def test_a_png_with_text_and_exif_is_stored_as_a_clean_png(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    info = PngImagePlugin.PngInfo()
    info.add_text("Location", "51.5074 N, 0.1278 W")
    exif = Image.Exif()
    exif[0x010F] = "SpyPhone"
    buf = io.BytesIO()
    Image.new("RGBA", (300, 100), (10, 200, 30, 128)).save(buf, "PNG", pnginfo=info, exif=exif)
    resp = await client.post(f"/communities/{did}/banner", body=buf.getvalue(), session=session,
                             headers={"Content-Type": "image/png"})
    assert resp.status == 200, resp.text
    ref, stored = await stored_image(app, resp, did, "banner")
    im = Image.open(io.BytesIO(stored))
    assert ref["mimeType"] == "image/png" and im.format == "PNG" and im.mode == "RGBA"
    assert im.size == (300, 100) and im.getpixel((5, 5)) == (10, 200, 30, 128)
    assert not im.getexif() and "Location" not in im.info
    assert b"51.5074" not in stored and b"SpyPhone" not in stored


async def test_the_reused_profile_banner_is_cleaned_too(app, client, people, devnet):
    api, alice, session, did = await admin_setup(app, client, people)
    sent = photo_with_gps(90, 30)
    auth = {"Authorization": f"Bearer {alice['accessJwt']}"}
    async with httpx.AsyncClient(base_url=devnet.pds_url) as http:
        blob = (await http.post("/xrpc/com.atproto.repo.uploadBlob", content=sent,
                                headers={**auth, "Content-Type": "image/jpeg"})).json()["blob"]
        put = await http.post("/xrpc/com.atproto.repo.putRecord", headers=auth, json={
            "repo": alice["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
            "record": {"$type": "app.bsky.actor.profile", "displayName": "Alice", "banner": blob}})
        assert put.status_code == 200, put.text
    resp = await client.post(f"/communities/{did}/banner", json={"fromProfile": True}, session=session)
    assert resp.status == 200, resp.text
    _, stored = await stored_image(app, resp, did, "banner")
    im = Image.open(io.BytesIO(stored))
    assert im.size == (30, 90) and not im.getexif() and b"SpyPhone" not in stored


# ------------------------------------------------------------------ refusals


async def test_images_past_the_caps_or_not_images_are_refused_before_the_pds(app, client, people):
    admin = "did:plc:uploadadmin"
    did = await seed_community(app, admin)  # never reaches a PDS: a refusal comes first
    session = await login_as(app, admin, "admin.test")

    def post(kind: str, body: bytes, ctype: str = "image/png") -> Any:
        return client.post(f"/communities/{did}/{kind}", body=body, session=session,
                           headers={"Content-Type": ctype})

    bomb = await post("avatar", png_declaring(20000, 20000))
    assert bomb.status == 413 and bomb.json()["error"] == "image_too_large", bomb.text
    too_wide = await post("avatar", png_declaring(2001, 10))
    assert too_wide.status == 413 and "2000×2000" in too_wide.json()["message"], too_wide.text
    banner = await post("banner", png_declaring(3000, 1001))
    assert banner.status == 413 and "3,000,000" in banner.json()["message"], banner.text
    for body, ctype in ((b"GIF89a" + b"\x00" * 64, "image/png"),               # a GIF: not accepted
                        (b"%PDF-1.4\n" * 20, "image/jpeg"),
                        (photo_with_gps()[:300], "image/jpeg"),                # cut off
                        (png_declaring(100, 100, pixels=False), "image/png")):               # pixels missing
        resp = await post("avatar", body, ctype)
        assert resp.status == 415 and resp.json()["error"] == "unsupported_image", resp.text


def multipart(boundary: str, *parts: bytes) -> bytes:
    return b"".join(f"--{boundary}\r\n".encode() + p + b"\r\n" for p in parts) + f"--{boundary}--\r\n".encode()


async def test_malformed_multipart_uploads_are_400_invalid_request(app, client, people):
    admin = "did:plc:uploadadmin"
    did = await seed_community(app, admin)
    session = await login_as(app, admin, "admin.test")
    file_part = b'Content-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\nx'
    cases = [
        ("multipart/form-data", multipart("x", file_part)),                          # no boundary
        ("multipart/form-data; boundary=x", b"--x\r\n"),                             # no final boundary
        ("multipart/form-data; boundary=x", multipart("x", b"no headers at all")),
        ("multipart/form-data; boundary=x",
         multipart("x", b'Content-Disposition: attachment; name="file"; filename="a.png"\r\n\r\nx')),
        ("multipart/form-data; boundary=x", multipart("x", b"Content-Disposition: form-data\r\n\r\nx")),
        ("multipart/form-data; boundary=x", multipart("x", *[b'Content-Disposition: form-data; name="f"\r\n\r\n1']
                                                       * 2000)),
        ("multipart/form-data; boundary=x",
         multipart("x", b'Content-Disposition: form-data; name="note"\r\n\r\nonly a field')),  # no file
    ]
    for kind in ("avatar", "banner"):
        for ctype, body in cases:
            resp = await client.post(f"/communities/{did}/{kind}", body=body, session=session,
                                     headers={"Content-Type": ctype})
            assert resp.status == 400, (kind, ctype, body[:60], resp.text)
            assert resp.json()["error"] == "invalid_request"


# ------------------------------------------------------------------ lone surrogates


SURROGATE_NAME = b'"displayName": "Club \\ud800"'


async def test_a_lone_surrogate_on_create_is_invalid_json_and_creates_nothing(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    body = b'{"creatorDid": "' + alice["did"].encode() + b'", ' + SURROGATE_NAME + b"}"
    resp = await client.post("/api/v1/communities", body=body, api_key=api.key,
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400 and resp.json()["error"] == "invalid_json", resp.text
    session = await login_as(app, alice["did"], alice["handle"])
    resp = await client.post("/users/me/communities", body=b"{" + SURROGATE_NAME + b"}", session=session,
                             headers={"Content-Type": "application/json"})
    assert resp.status == 400 and resp.json()["error"] == "invalid_json", resp.text
    assert await app.db.fetchval("SELECT COUNT(*) FROM communities") == 0
    mine = (await client.get("/users/me/memberships", session=session)).json()["memberships"]
    assert mine == []


async def test_a_lone_surrogate_on_profile_update_is_invalid_json_and_writes_nothing(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    before = await pds_record(app, did, "profile")
    resp = await client.put(f"/communities/{did}/profile", body=b"{" + SURROGATE_NAME + b"}", session=session,
                            headers={"Content-Type": "application/json"})
    assert resp.status == 400 and resp.json()["error"] == "invalid_json", resp.text
    assert await pds_record(app, did, "profile") == before
    assert (await api.get(api.path(did))).json()["community"]["displayName"] == "Picture club"
