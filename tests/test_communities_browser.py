"""Browser admin routes: avatar/banner uploads (checked by content and size), profile
update, members, promote/demote/remove, all with an admin session and CSRF."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.fixtures_atproto import make_png
from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record
from tests.helpers import login_as

pytestmark = pytest.mark.pds


config_overrides, extra_plugins = devnet_module_fixtures()


def same_picture(a: bytes, b: bytes) -> bool:
    """Two encoded images show the same pixels."""
    import io

    from PIL import Image, ImageChops
    first, second = (Image.open(io.BytesIO(x)).convert("RGBA") for x in (a, b))
    return first.size == second.size and ImageChops.difference(first, second).getbbox() is None


async def admin_setup(app: Any, client: Any, people: Any) -> tuple[Api, dict, Any, str]:
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Picture club"))["did"]
    return api, alice, await login_as(app, alice["did"], alice["handle"]), did


async def test_avatar_png_upload_appears_in_the_profile(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    png = make_png(64, 64)
    resp = await client.post(f"/communities/{did}/avatar", body=png, session=session,
                             headers={"Content-Type": "image/png"})
    assert resp.status == 200, resp.text
    avatar_url = resp.json()["community"]["avatar"]
    assert avatar_url and "getBlob" in avatar_url
    profile = await pds_record(app, did, "profile")
    assert profile["avatar"]["mimeType"] == "image/png"
    assert profile["avatar"]["ref"]["$link"] in avatar_url
    assert profile["displayName"] == "Picture club"
    fetched = await app.http.get(avatar_url)
    # re-encoded (tests/test_uploads.py), so the same picture rather than the same bytes
    assert fetched.status_code == 200 and profile["avatar"]["size"] == len(fetched.content)
    assert same_picture(fetched.content, png)
    listed = (await api.get(api.path(did))).json()["community"]
    assert listed["avatar"] == avatar_url


async def test_upload_as_multipart_form_works_for_the_banner(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    png = make_png(300, 100)
    boundary = "----cr" + os.urandom(4).hex()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.png\"\r\n"
            f"Content-Type: image/png\r\n\r\n").encode() + png + f"\r\n--{boundary}--\r\n".encode()
    resp = await client.post(f"/communities/{did}/banner", body=body, session=session,
                             headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert resp.status == 200, resp.text
    assert resp.json()["community"]["banner"]
    banner = (await pds_record(app, did, "profile"))["banner"]
    fetched = await app.http.get(resp.json()["community"]["banner"])
    assert banner["size"] == len(fetched.content) and same_picture(fetched.content, png)


async def test_text_file_named_png_is_415_and_2mb_image_is_413(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    resp = await client.post(f"/communities/{did}/avatar", body=b"just some text, not an image\n" * 10,
                             session=session, headers={"Content-Type": "image/png"})
    assert resp.status == 415, resp.text
    boundary = "b0undary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cat.png\"\r\n"
            f"Content-Type: image/png\r\n\r\nhello\r\n--{boundary}--\r\n").encode()
    resp = await client.post(f"/communities/{did}/avatar", body=body, session=session,
                             headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert resp.status == 415, resp.text
    big = make_png(4, 4)
    big = big + b"\x00" * (2 * 1024 * 1024 - len(big))
    resp = await client.post(f"/communities/{did}/avatar", body=big, session=session,
                             headers={"Content-Type": "image/png"})
    assert resp.status == 413, resp.text
    assert "avatar" not in (await pds_record(app, did, "profile"))


async def test_admin_routes_need_an_admin_session_and_csrf(app, client, people):
    api, alice, session, did = await admin_setup(app, client, people)
    bob = people("bob")
    assert (await api.join(did, bob["did"])).status == 201
    bob_session = await login_as(app, bob["did"], bob["handle"])

    resp = await client.put(f"/communities/{did}/profile", json={"description": "x"}, session=bob_session)
    assert resp.status == 403
    resp = await client.put(f"/communities/{did}/profile", json={"description": "x"}, session=session, csrf=False)
    assert resp.status == 403 and resp.json()["error"] == "csrf_failed"
    resp = await client.post(f"/communities/{did}/avatar", body=make_png(), session=bob_session,
                             headers={"Content-Type": "image/png"})
    assert resp.status == 403

    resp = await client.put(f"/communities/{did}/profile", json={"description": "Photos", "type": "admin-approved"},
                            session=session)
    assert resp.status == 200, resp.text
    profile = await pds_record(app, did, "profile")
    assert profile["description"] == "Photos" and profile["type"] == "admin-approved"

    resp = await client.post(f"/communities/{did}/members/{bob['did']}/admin", session=session)
    assert resp.status == 200, resp.text
    assert (await api.check(did, bob["did"]))["isAdmin"] is True
    resp = await client.delete(f"/communities/{did}/members/{bob['did']}/admin", session=session)
    assert resp.status == 200, resp.text
    members = (await client.get(f"/communities/{did}/members", session=session)).json()["members"]
    assert {m["did"]: m["isAdmin"] for m in members} == {alice["did"]: True, bob["did"]: False}
    resp = await client.delete(f"/communities/{did}/members/{bob['did']}", session=session)
    assert resp.status == 200, resp.text
    assert (await api.check(did, bob["did"]))["isMember"] is False
    log = (await client.get(f"/communities/{did}/audit-log", session=session)).json()["entries"]
    assert [e["action"] for e in log[:4]] == ["member.removed", "admin.demoted", "admin.promoted",
                                              "community.profile_updated"]
    assert all(e["appId"] is None for e in log[:4])


async def test_browser_create_and_memberships(app, client, people, recorder):
    alice = people("alice")
    session = await login_as(app, alice["did"], alice["handle"])
    resp = await client.post("/users/me/communities", json={"displayName": "From the browser"}, session=session)
    assert resp.status == 201, resp.text
    did = resp.json()["community"]["did"]
    mine = (await client.get("/users/me/memberships", session=session)).json()["memberships"]
    assert [(m["communityDid"], m["role"]) for m in mine] == [(did, "admin")]
    created = recorder.of("member.joined", did)
    assert len(created) == 1 and created[0].app_id is None


async def test_banner_can_reuse_the_admins_own_profile_banner(app, client, people, devnet):
    import httpx

    api, alice, session, did = await admin_setup(app, client, people)
    png = make_png(120, 40, rgb=(10, 200, 30))
    auth = {"Authorization": f"Bearer {alice['accessJwt']}"}
    async with httpx.AsyncClient(base_url=devnet.pds_url) as http:
        blob = (await http.post("/xrpc/com.atproto.repo.uploadBlob", content=png,
                                headers={**auth, "Content-Type": "image/png"})).json()["blob"]
        put = await http.post("/xrpc/com.atproto.repo.putRecord", headers=auth, json={
            "repo": alice["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
            "record": {"$type": "app.bsky.actor.profile", "displayName": "Alice", "banner": blob}})
        assert put.status_code == 200, put.text

    resp = await client.post(f"/communities/{did}/banner", json={"fromProfile": True}, session=session)
    assert resp.status == 200, resp.text
    banner = (await pds_record(app, did, "profile"))["banner"]
    fetched = await app.http.get(resp.json()["community"]["banner"])
    assert banner["size"] == len(fetched.content) and banner["mimeType"] == "image/png"
    assert same_picture(fetched.content, png)

    bob = people("bob")
    assert (await api.join(did, bob["did"])).status == 201
    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    bob_session = await login_as(app, bob["did"], bob["handle"])
    resp = await client.post(f"/communities/{did}/banner", json={"fromProfile": True}, session=bob_session)
    assert resp.status == 404 and resp.json()["error"] == "no_profile_banner"
