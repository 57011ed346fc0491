"""The settings page's picture forms without a PDS: a multipart form carrying the hidden
CSRF field, refusals shown next to the file field (nothing changed), the preview's
`blob:` images allowed only on that page. The upload itself, through the devnet PDS, is
in tests/test_web_browser_apps.py."""

from __future__ import annotations

import uuid

from tests.fixtures_communities import seed_community
from tests.helpers import login_as


def multipart(session, fields: dict[str, str], files: dict[str, tuple[str, bytes, str]], *,
              token: bool = True) -> dict:
    boundary = uuid.uuid4().hex
    parts = []
    if token:
        fields = {**fields, "_csrf": session.csrf}
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data, ctype) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f"Content-Type: {ctype}\r\n\r\n".encode() + data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return {"body": body, "headers": {"Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
                                      "Content-Type": f"multipart/form-data; boundary={boundary}"}}


async def test_picture_forms_are_multipart_with_the_csrf_field_and_a_preview_csp(client, app):
    did = await seed_community(app, "did:plc:picadmin", type="open")
    admin = await login_as(app, "did:plc:picadmin", "picadmin.test")
    resp = await client.get(f"/c/{did}/settings/pictures", headers={"Cookie": f"sid={admin.sid}"})
    page = resp.text
    assert resp.status == 200
    for kind in ("avatar", "banner"):
        assert f'action="/c/' in page and f'/settings/{kind}" enctype="multipart/form-data"' in page
        assert f'<input id="{kind}" name="image" type="file" accept="image/png,image/jpeg"' in page
    assert "Use my own Bluesky banner" in page
    assert "blob:" in resp.headers["Content-Security-Policy"]
    assert "blob:" not in (await client.get("/discover")).headers["Content-Security-Policy"]


async def test_a_file_that_is_not_an_image_is_refused_next_to_its_field(client, app):
    from plugins.communities import store as communities_store
    did = await seed_community(app, "did:plc:picadmin2", type="open")
    admin = await login_as(app, "did:plc:picadmin2", "picadmin2.test")
    resp = await client.post(f"/c/{did}/settings/avatar",
                             **multipart(admin, {}, {"image": ("me.png", b"GIF89a not a png", "image/png")}))
    assert resp.status == 415
    assert 'href="#avatar"' in resp.text and "must be a PNG or JPEG" in resp.text
    assert 'id="avatar-error"' in resp.text
    # no file chosen
    resp = await client.post(f"/c/{did}/settings/banner", **multipart(admin, {}, {"image": ("", b"", "application/octet-stream")}))
    assert resp.status == 400 and "Choose an image file for the banner" in resp.text
    # without the hidden token: refused, nothing read
    resp = await client.post(f"/c/{did}/settings/avatar",
                             **multipart(admin, {}, {"image": ("me.png", b"x", "image/png")}, token=False))
    assert resp.status == 403
    row = await communities_store.get_community(app.db, did)
    assert row["avatar_cid"] is None and row["banner_cid"] is None


async def test_only_admins_may_change_the_pictures(client, app):
    did = await seed_community(app, "did:plc:picadmin3", type="open", members=("did:plc:picmember",))
    member = await login_as(app, "did:plc:picmember", "picmember.test")
    resp = await client.post(f"/c/{did}/settings/avatar",
                             **multipart(member, {}, {"image": ("me.png", b"x", "image/png")}))
    assert resp.status == 403 and "to be an admin of this community" in resp.text
