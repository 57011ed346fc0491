"""The plugin observes the domain events of real communities, on the devnet (a local PLC
directory and PDS that `commonroom_testing` starts once per session)."""

from __future__ import annotations

import pytest

from commonroom_testing.communities import Api, devnet_module_fixtures

# Point the app at the devnet, and record every event (the `recorder` fixture).
config_overrides, extra_plugins = devnet_module_fixtures()

pytestmark = pytest.mark.pds


async def test_hello_lists_the_events_of_a_community_as_people_join_and_leave(app, client, people, recorder):
    api = await Api.make(app, client)                   # a registered app and its API key
    alice, bob = people("alice"), people("bob")         # real accounts on the devnet
    community = await api.create(alice, "Hello club")   # alice joins as its creator
    assert (await api.join(community["did"], bob["did"])).status == 201
    assert (await api.leave(community["did"], bob["did"])).status == 200

    seen = (await client.get("/hello")).json()["events"]
    assert seen == ["member.joined", "member.joined", "member.left"]
    assert seen == [e.type for e in recorder.events]
