"""Pagination cursors a client tampered with, and the management check on API-key admin
reads; neither reaches a PDS."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.fixtures_communities import Api, seed_community
from tests.helpers import login_as

ADMIN = "did:plc:seedadmin"


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}}


def cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


@pytest.mark.parametrize("values", [["abc"], [1e30], [2 ** 70]])
async def test_tampered_cursors_are_400_not_500(app, client, values):
    api = await Api.make(app, client)
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id, members=("did:plc:seedbob",))
    session = await login_as(app, ADMIN, "admin.test")
    for resp in (await api.get("/api/v1/communities", cursor=cursor(values)),
                 await api.get(api.path(did, "/members"), cursor=cursor(values)),
                 await api.get(api.path(did, "/audit-log"), adminDid=ADMIN, cursor=cursor(values)),
                 await client.get(f"/communities/{did}/members", params={"cursor": cursor(values)},
                                  session=session),
                 await client.get("/users/me/memberships", params={"cursor": cursor(values)},
                                  session=session)):
        assert resp.status == 400, resp.text
        assert resp.json()["error"] == "invalid_cursor"
    # a cursor this service issued still works
    first = await api.get(api.path(did, "/members"), limit=1)
    assert first.status == 200 and "cursor" in first.json()
    second = await api.get(api.path(did, "/members"), limit=1, cursor=first.json()["cursor"])
    assert second.status == 200, second.text
    assert [m["did"] for m in second.json()["members"]] == ["did:plc:seedbob"]


async def test_admin_reads_need_a_managing_app(app, client):
    creator = await Api.make(app, client)
    other = await Api.make(app, client, owner="did:plc:otherowner")
    did = await seed_community(app, ADMIN, creator_app_id=creator.app_id)
    for path, params in (("/audit-log", {"adminDid": ADMIN}), ("/members/pending", {"adminDid": ADMIN}),
                         ("/members", {"adminDid": ADMIN})):
        resp = await other.get(other.path(did, path), **params)
        assert resp.status == 403, (path, resp.text)
        assert resp.json()["error"] == "app_not_trusted"
        assert "manage" in resp.json()["message"]
        assert (await creator.get(creator.path(did, path), **params)).status == 200
    # non-admin reads stay open to any app that can see the community
    assert (await other.get(other.path(did, "/members"))).status == 200
    resp = await other.post(other.path(did, "/membership/check"), {"userDid": ADMIN})
    assert resp.status == 200 and resp.json()["isAdmin"] is True
