"""Identity resolution against the devnet's real PLC directory and PDS."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from daemon.atproto.identity import resolve_did, resolve_handle, resolve_identity, resolve_many
from daemon.atproto.pds import read_user_profile
from daemon.http.base import ApiError
from tests.fixtures_atproto import make_png

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(pds_config_overrides: dict[str, Any]) -> dict[str, Any]:
    return pds_config_overrides


async def test_a_handle_and_its_did_resolve_both_ways(app: Any, devnet: Any, new_handle: Any) -> None:
    alice = devnet.create_account(new_handle("alice"))
    assert await resolve_handle(app, alice["handle"].upper()) == alice["did"]

    by_handle = await resolve_identity(app, "@" + alice["handle"])
    by_did = await resolve_identity(app, alice["did"])
    assert by_handle == by_did
    assert (by_did.did, by_did.handle, by_did.pds_url) == (alice["did"], alice["handle"], devnet.pds_url)
    assert by_did.doc["id"] == alice["did"]


async def test_resolution_is_cached_until_the_ttl_passes(app: Any, devnet: Any, new_handle: Any,
                                                        http_log: Any, clock: Any) -> None:
    alice = devnet.create_account(new_handle("alice"))
    started = time.perf_counter()
    await resolve_identity(app, alice["handle"])
    cold = time.perf_counter() - started
    network = len(http_log.urls)
    assert network >= 2  # resolveHandle + the PLC document

    started = time.perf_counter()
    for _ in range(20):
        info = await resolve_identity(app, alice["handle"])
    cached = (time.perf_counter() - started) / 20
    assert len(http_log.urls) == network and info.handle == alice["handle"]
    print(f"\nresolve_identity: cold {cold * 1000:.1f} ms, cached {cached * 1000:.2f} ms")

    clock.advance(app.config.atproto.identity_cache_seconds + 1)
    await resolve_identity(app, alice["handle"])
    assert len(http_log.urls) > network


async def test_an_unknown_handle_is_a_clear_400(app: Any) -> None:
    with pytest.raises(ApiError) as err:
        await resolve_identity(app, "nobody-here.test")
    assert err.value.status == 400 and err.value.code == "unknown_handle"
    assert "nobody-here.test" in err.value.message


async def test_an_unknown_or_unsupported_did_is_a_400(app: Any) -> None:
    with pytest.raises(ApiError) as err:
        await resolve_did(app, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
    assert (err.value.status, err.value.code) == (400, "unknown_did")
    with pytest.raises(ApiError) as err:
        await resolve_did(app, "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK")
    assert (err.value.status, err.value.code) == (400, "unsupported_did")
    with pytest.raises(ApiError) as err:
        await resolve_identity(app, "not a handle")
    assert err.value.status == 400


async def test_a_handle_change_is_noticed_and_the_old_handle_stops_resolving(
        app: Any, devnet: Any, new_handle: Any) -> None:
    bob = devnet.create_account(new_handle("bob"))
    assert (await resolve_identity(app, bob["handle"])).handle == bob["handle"]
    renamed = new_handle("bobby")
    devnet.xrpc("com.atproto.identity.updateHandle", {"handle": renamed}, token=bob["accessJwt"])

    # The cached document still names the old handle: asking for the new one re-reads it.
    info = await resolve_identity(app, renamed)
    assert (info.did, info.handle) == (bob["did"], renamed)
    # The old handle's cached DID no longer confirms it.
    with pytest.raises(ApiError) as err:
        await resolve_identity(app, bob["handle"])
    assert err.value.code == "unknown_handle"


async def test_resolve_many_is_concurrent_bounded_and_tolerant(app: Any, devnet: Any, new_handle: Any,
                                                              http_log: Any) -> None:
    people = [devnet.create_account(new_handle("m")) for _ in range(12)]
    dids = [p["did"] for p in people]
    await resolve_did(app, dids[0])  # one already cached
    http_log.clear()
    asked = dids + [dids[1], "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "garbage"]
    result = await resolve_many(app, asked)
    assert set(result) == set(asked)
    assert result["did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"] is None and result["garbage"] is None
    assert [result[p["did"]].handle for p in people] == [p["handle"] for p in people]  # type: ignore[union-attr]
    assert http_log.count(dids[0]) == 0  # served from the cache
    assert 1 < http_log.max_in_flight <= app.config.atproto.resolve_concurrency
    http_log.clear()
    await resolve_many(app, dids)
    assert http_log.urls == []


async def test_a_users_profile_is_read_from_their_own_repo(app: Any, devnet: Any, new_handle: Any) -> None:
    carol = devnet.create_account(new_handle("carol"))
    png = make_png(3, 3, (10, 200, 30))
    async with httpx.AsyncClient(base_url=devnet.pds_url) as pds:
        up = await pds.post("/xrpc/com.atproto.repo.uploadBlob", content=png, headers={
            "Content-Type": "image/png", "Authorization": f"Bearer {carol['accessJwt']}"})
        assert up.status_code == 200, up.text
        blob = up.json()["blob"]
        put = await pds.post("/xrpc/com.atproto.repo.putRecord", json={
            "repo": carol["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
            "record": {"$type": "app.bsky.actor.profile", "displayName": "Carol C.",
                       "description": "Gardener", "avatar": blob}},
            headers={"Authorization": f"Bearer {carol['accessJwt']}"})
        assert put.status_code == 200, put.text

    profile = await read_user_profile(app, carol["did"])
    assert profile is not None
    assert profile["displayName"] == "Carol C." and profile["description"] == "Gardener"
    assert profile["banner"] is None
    assert profile["avatar"].startswith(f"{devnet.pds_url}/xrpc/com.atproto.sync.getBlob?")
    image = await app.http.get(profile["avatar"])
    assert image.status_code == 200 and image.content == png

    dave = devnet.create_account(new_handle("dave"))
    assert await read_user_profile(app, dave["did"]) is None
