"""Fixtures and helpers for the communities tests (loaded by tests/conftest.py).

A test module against the devnet::

    config_overrides, extra_plugins = devnet_module_fixtures()

    @pytest.mark.pds
    async def test_x(app, client, devnet, recorder, people):
        api = await Api.make(app, client)
        alice = people("alice")            # a real account on the devnet
        created = await api.create(alice, "Garden club")
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

from daemon import hookimpl
from tests.helpers import Client, Response, login_as, register_app


class EventRecorder:
    """A plugin object that keeps every event observed after commit (`cr_event`)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    @hookimpl
    def cr_event(self, app: Any, event: Any) -> None:
        self.events.append(event)

    def of(self, type: str, community_did: str | None = None) -> list[Any]:
        return [e for e in self.events
                if e.type == type and (community_did is None or e.community_did == community_did)]


def devnet_module_fixtures() -> tuple[Any, Any]:
    """The two fixture overrides of a module that runs communities on the devnet (the
    devnet config, and an `EventRecorder` plugin). Assign them at module level::

        config_overrides, extra_plugins = devnet_module_fixtures()
    """

    @pytest.fixture
    def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
        return communities_config

    @pytest.fixture
    def extra_plugins(recorder: EventRecorder) -> tuple:
        return (recorder,)

    return config_overrides, extra_plugins


@pytest.fixture
def recorder() -> EventRecorder:
    return EventRecorder()


@pytest.fixture
def communities_config(pds_config_overrides: dict[str, Any]) -> dict[str, Any]:
    """The devnet settings, short timeouts, and a rate limit tests do not hit."""
    out = dict(pds_config_overrides)
    out["atproto"] = {**out["atproto"], "request_timeout_seconds": 3.0, "max_retries": 0}
    out["rate_limits"] = {"api": {"requests": 100000, "window_seconds": 60}}
    return out


@pytest.fixture
def people(devnet: Any) -> Callable[[str], dict[str, str]]:
    """``people("alice")`` -> a fresh devnet account (did, handle, password, ...)."""
    def make(name: str) -> dict[str, str]:
        return devnet.create_account(f"{name[:8]}{os.urandom(3).hex()}.test")
    return make


class Api:
    """The API-key routes as one app sees them."""

    def __init__(self, client: Client, key: str, app_id: str) -> None:
        self.client = client
        self.key = key
        self.app_id = app_id

    @classmethod
    async def make(cls, app: Any, client: Client, owner: str = "did:plc:appowner",
                   domain: str | None = None) -> "Api":
        session = await login_as(app, owner, None)
        registered = await register_app(client, session, domain=domain or f"app{os.urandom(3).hex()}.example.com")
        return cls(client, registered["apiKey"], registered["appId"])

    def path(self, did: str, tail: str = "") -> str:
        return f"/api/v1/communities/{did}{tail}"

    async def post(self, path: str, body: dict[str, Any]) -> Response:
        return await self.client.post(path, json=body, api_key=self.key)

    async def get(self, path: str, **params: Any) -> Response:
        return await self.client.get(path, params=params, api_key=self.key)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> Response:
        return await self.client.delete(path, json=body, api_key=self.key)

    async def create(self, creator: dict[str, str] | str, name: str, type: str = "open",
                     **extra: Any) -> dict[str, Any]:
        did = creator if isinstance(creator, str) else creator["did"]
        resp = await self.post("/api/v1/communities", {"creatorDid": did, "displayName": name,
                                                       "type": type, **extra})
        assert resp.status == 201, resp.text
        return resp.json()["community"]

    async def join(self, community: str, user: str, **extra: Any) -> Response:
        return await self.post(self.path(community, "/members/join"), {"userDid": user, **extra})

    async def leave(self, community: str, user: str) -> Response:
        return await self.post(self.path(community, "/members/leave"), {"userDid": user})

    async def check(self, community: str, user: str) -> dict[str, bool]:
        resp = await self.post(self.path(community, "/membership/check"), {"userDid": user})
        assert resp.status == 200, resp.text
        return resp.json()

    async def decide(self, community: str, decision: str, admin: str, member: str, **extra: Any) -> Response:
        return await self.post(self.path(community, f"/members/{decision}"),
                               {"adminDid": admin, "memberDid": member, **extra})

    async def admins(self, community: str, action: str, body: dict[str, Any]) -> Response:
        return await self.post(self.path(community, f"/admins/{action}"), body)

    async def audit(self, community: str, admin: str, **params: Any) -> list[dict[str, Any]]:
        resp = await self.get(self.path(community, "/audit-log"), adminDid=admin, **params)
        assert resp.status == 200, resp.text
        return resp.json()["entries"]


async def proofs_on_pds(app: Any, community_did: str) -> dict[str, dict[str, Any]]:
    """memberDid -> membershipProof record, read from the community's repo on the PDS."""
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, community_did)
    out: dict[str, dict[str, Any]] = {}
    cursor = None
    while True:
        records, cursor = await repo.list_records(f"{app.config.atproto.namespace}.membershipProof",
                                                  limit=100, cursor=cursor)
        for r in records:
            out[r["value"]["memberDid"]] = r
        if not cursor:
            return out


async def pds_record(app: Any, community_did: str, name: str, rkey: str = "self") -> dict[str, Any] | None:
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, community_did)
    got = await repo.get_record(f"{app.config.atproto.namespace}.{name}", rkey)
    return got["value"] if got else None


async def seed_community(app: Any, admin_did: str, *, type: str = "open", creator_app_id: str | None = None,
                         members: tuple[str, ...] = ()) -> str:
    """A community written straight into the local index (no PDS): for tests of routes that
    never reach a PDS (refusals, cursors, limits). Returns its DID."""
    from store import communities as communities_store
    from store import members as members_store

    did = f"did:plc:seed{os.urandom(8).hex()}"
    now = app.clock.iso_now()
    async with app.db.transaction("tests.seed_community") as tx:
        await communities_store.insert_community_tx(
            tx, did=did, handle=f"{did[8:20]}.test", display_name="Seeded", description="", type=type,
            pds_url="http://pds.invalid", account_kind="provisioned", creator_did=admin_did,
            creator_app_id=creator_app_id, proof_rkey="3seed", now=now, state="active")
        for rank, member in enumerate((admin_did, *members)):
            await members_store.insert_member_tx(
                tx, community_did=did, member_did=member, now=now, proof_rkey=f"3seed{rank}",
                proof_cid=None, membership_uri=None, membership_cid=None, app_id=creator_app_id,
                admin_rank=0 if rank == 0 else None)
        await communities_store.set_counts_tx(tx, did, 1 + len(members), 0)
    return did


class FailIndexOnce:
    """Aborts the next local transaction that emits the event type `armed`, as a crash
    between the PDS write and the index commit would (the real PDS cannot fail there)."""

    def __init__(self) -> None:
        self.armed: str | None = None

    @hookimpl
    def cr_event_tx(self, app: Any, tx: Any, event: Any) -> None:
        if event.type == self.armed:
            self.armed = None
            raise RuntimeError("simulated crash before the index commit")


@pytest.fixture
def failer() -> FailIndexOnce:
    return FailIndexOnce()
