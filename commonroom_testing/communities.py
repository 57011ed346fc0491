"""Fixtures and helpers for tests that use communities on the devnet.

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

from commonroom_testing.http import Client, Response, login_as, register_app
from daemon import hookimpl


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


def devnet_module_fixtures(*plugins: Any, config: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """The two fixture overrides of a module that runs communities on the devnet (the
    devnet config, and an `EventRecorder` plugin). Assign them at module level::

        config_overrides, extra_plugins = devnet_module_fixtures()

    A module extends them: `plugins` are registered after the recorder, and `config` is
    merged over the devnet config (your own section, ``LOOPBACK_TARGETS`` for webhook
    receivers, ``plugins.disabled``)::

        config_overrides, extra_plugins = devnet_module_fixtures(MyTestPlugin(), config={"notices": {...}})
    """
    from commonroom_testing.app import deep_merge

    @pytest.fixture
    def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
        return deep_merge(communities_config, config or {})

    @pytest.fixture
    def extra_plugins(recorder: EventRecorder) -> tuple:
        return (recorder, *plugins)

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
