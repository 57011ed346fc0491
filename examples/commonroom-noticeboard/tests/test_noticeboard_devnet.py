"""The noticeboard against real communities on the devnet (a local PLC directory and PDS
that `commonroom_testing` starts once per session): members post, proven by their
service-auth token; apps receive the event through a signed webhook; the board is a page
in the site's layout, linked from the community page; moderators remove notices, in the
community's history; an operator lists notices from the command line; a metric counts."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from commonroom_testing.communities import Api, devnet_module_fixtures
from commonroom_testing.http import login_as
from commonroom_testing.webhooks import LOOPBACK_TARGETS, subscribe

# The devnet, webhook receivers on loopback, and /metrics open to loopback.
config_overrides, extra_plugins = devnet_module_fixtures(
    config={**LOOPBACK_TARGETS, "metrics": {"allow_from": ["127.0.0.0/8"]}})

pytestmark = pytest.mark.pds
POST, REMOVE = "com.example.noticeboard.post", "com.example.noticeboard.remove"


def proof(client_devnet: Any, service_did: str, person: dict[str, str], method: str) -> dict[str, str]:
    """The person's service-auth token for `method`, from their PDS."""
    got = client_devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": service_did, "lxm": method},
                             token=person["accessJwt"])
    return {"Authorization": f"Bearer {got['token']}"}


async def make_club(app: Any, client: Any, people: Any) -> dict[str, Any]:
    """A community of alice's that bob joined (carol is not a member), and this service's DID."""
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    community = await api.create(alice, "Notice club")
    assert (await api.join(community["did"], bob["did"])).status == 201
    service_did = (await client.get("/api/v1/method-ids")).json()["serviceDid"]
    return {"api": api, "community": community, "alice": alice, "bob": bob, "carol": carol,
            "service": service_did}


async def post(club: dict[str, Any], devnet: Any, who: dict[str, str], text: str, *, prove: bool = True) -> Any:
    api = club["api"]
    headers = proof(devnet, club["service"], who, POST) if prove else {}
    return await api.client.post(api.path(club["community"]["did"], "/notices"), api_key=api.key,
                                 json={"authorDid": who["did"], "text": text}, headers=headers)


async def test_a_proven_member_posts_and_an_app_receives_the_event_signed(app, client, devnet, people,
                                                                           webhook_receiver):
    club = await make_club(app, client, people)
    api, did = club["api"], club["community"]["did"]
    rec = webhook_receiver()
    await subscribe(client, api.key, rec, ["notice.posted"])

    unproven = await post(club, devnet, club["bob"], "Bake sale on Saturday", prove=False)
    assert unproven.status == 401 and unproven.json()["error"] == "user_proof_required", unproven.text
    outsider = await post(club, devnet, club["carol"], "I am not a member")
    assert outsider.status == 403 and outsider.json()["error"] == "not_member"
    too_long = await post(club, devnet, club["bob"], "x" * 501)
    assert too_long.status == 400 and "text" in too_long.json()["message"]

    posted = await post(club, devnet, club["bob"], "Bake sale on Saturday")
    assert posted.status == 201, posted.text
    notice = posted.json()["notice"]
    assert notice["authorDid"] == club["bob"]["did"] and notice["text"] == "Bake sale on Saturday"

    [got] = await rec.wait_for(1)
    assert got.verify_error is None, got.verify_error
    assert got.verified["type"] == "notice.posted"
    assert got.verified["data"] == {"noticeId": notice["id"], "authorDid": club["bob"]["did"],
                                    "text": "Bake sale on Saturday", "communityDid": did}

    listed = await api.get(api.path(did, "/notices"))
    assert listed.status == 200 and [n["id"] for n in listed.json()["notices"]] == [notice["id"]]


async def test_the_board_is_a_page_in_the_site_linked_from_the_community_page(app, client, devnet, people):
    club = await make_club(app, client, people)
    handle = club["community"]["handle"]
    await post(club, devnet, club["bob"], "Choir practice moved to Thursday")
    community_page = (await client.get(f"/c/{handle}")).text
    assert f'<a href="/c/{handle}/notices">Noticeboard</a>' in community_page

    board = await client.get(f"/c/{handle}/notices")        # signed out: reads, no form
    assert board.status == 200 and '<header class="site-header">' in board.text
    assert "Choir practice moved to Thursday" in board.text and "Post the notice" not in board.text
    assert re.search(r'href="/static/noticeboard/board\.[0-9a-f]{12}\.css"', board.text)

    bob = await login_as(app, club["bob"]["did"], club["bob"]["handle"])
    form = await client.get(f"/c/{handle}/notices", headers={"Cookie": f"sid={bob.sid}"})
    assert "Post the notice" in form.text and f'value="{bob.csrf}"' in form.text
    sent = await client.post(f"/c/{handle}/notices", body=f"_csrf={bob.csrf}&text=Tea+after+choir",
                             headers={"Cookie": f"sid={bob.sid}",
                                      "Content-Type": "application/x-www-form-urlencoded"})
    assert sent.status == 303 and sent.headers["Location"] == f"/c/{handle}/notices?done=posted", sent.text
    after = (await client.get(sent.headers["Location"], headers={"Cookie": f"sid={bob.sid}"})).text
    assert "Tea after choir" in after and "Your notice is on the board." in after


async def test_a_board_names_its_authors_only_to_those_who_may_see_the_members(app, client, devnet, people):
    """The communities service decides (`visibility`), for the board's page and its API as
    for the site's own member list: where the members are hidden, a notice's text shows and
    its author does not."""
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    community = await api.create(alice, "Quiet club", rosterVisibility="members")
    assert (await api.join(community["did"], bob["did"])).status == 201
    service = (await client.get("/api/v1/method-ids")).json()["serviceDid"]
    club = {"api": api, "community": community, "service": service}
    assert (await post(club, devnet, bob, "Quiet notice")).status == 201
    handle = community["handle"]

    signed_out = (await client.get(f"/c/{handle}/notices")).text
    assert "Quiet notice" in signed_out and bob["did"] not in signed_out and bob["handle"] not in signed_out
    as_bob = await login_as(app, bob["did"], bob["handle"])
    member_view = (await client.get(f"/c/{handle}/notices", headers={"Cookie": f"sid={as_bob.sid}"})).text
    # named as the site names people (their handle), dated as the site dates things
    assert "Quiet notice" in member_view and f"{bob['handle']} · <time datetime=" in member_view

    other = await Api.make(app, client, owner="did:plc:otherowner")
    [seen] = (await other.get(other.path(community["did"], "/notices"))).json()["notices"]
    assert seen["text"] == "Quiet notice" and "authorDid" not in seen
    # an unproven viewerDid is any DID the app chose: it shows no author either
    [named] = (await other.get(other.path(community["did"], "/notices"), viewerDid=bob["did"])).json()["notices"]
    assert "authorDid" not in named
    [trusted] = (await api.get(api.path(community["did"], "/notices"))).json()["notices"]
    assert trusted["authorDid"] == bob["did"]   # the community's own app sees its members


async def test_a_follower_shows_the_board_and_posts_nothing(app, client, devnet, people, follower_app):
    """On a follower the board reads from its copy; a notice posted there (the API or the
    page's form) goes to the primary, and nothing is written: no SQL on the core's tables,
    only the plugin's own API."""
    club = await make_club(app, client, people)
    api, did, handle = club["api"], club["community"]["did"], club["community"]["handle"]
    assert (await post(club, devnet, club["bob"], "Written on the primary")).status == 201
    follower = await follower_app.start()

    listed = await follower.client.get(api.path(did, "/notices"), api_key=api.key)
    assert [n["text"] for n in listed.json()["notices"]] == ["Written on the primary"]
    moved = await follower.client.post(api.path(did, "/notices"), api_key=api.key,
                                       json={"authorDid": club["bob"]["did"], "text": "Here?"},
                                       headers=proof(devnet, club["service"], club["bob"], POST))
    assert moved.status == 307 and moved.json()["error"] == "use_primary", moved.text
    bob = await login_as(app, club["bob"]["did"], club["bob"]["handle"])   # the session reaches the copy
    follower_copy = await follower_app.start()
    form = await follower_copy.client.post(f"/c/{handle}/notices", body=f"_csrf={bob.csrf}&text=Here",
                                           headers={"Cookie": f"sid={bob.sid}",
                                                    "Content-Type": "application/x-www-form-urlencoded"})
    assert form.status == 307 and form.headers["Location"].endswith(f"/c/{handle}/notices")
    for reader in (follower.client, follower_copy.client, client):
        again = await reader.get(api.path(did, "/notices"), api_key=api.key)
        assert [n["text"] for n in again.json()["notices"]] == ["Written on the primary"]


async def test_moderators_remove_notices_and_the_history_says_so(app, client, devnet, people):
    club = await make_club(app, client, people)
    api, did = club["api"], club["community"]["did"]
    notice = (await post(club, devnet, club["bob"], "Lost: one umbrella")).json()["notice"]

    async def remove(who: dict[str, str]) -> Any:
        return await api.client.delete(api.path(did, f"/notices/{notice['id']}"), api_key=api.key,
                                       json={"moderatorDid": who["did"]},
                                       headers=proof(devnet, club["service"], who, REMOVE))

    refused = await remove(club["bob"])          # a member without notices.remove
    assert refused.status == 403 and refused.json()["error"] == "not_allowed"
    assert (await remove(club["alice"])).status == 204   # the admin holds every capability
    assert (await api.get(api.path(did, "/notices"))).json()["notices"] == []

    alice = await login_as(app, club["alice"]["did"], club["alice"]["handle"])
    history = await client.get(f"/c/{did}/settings/audit", headers={"Cookie": f"sid={alice.sid}"})
    assert "removed a notice by" in history.text


async def test_an_operator_lists_notices_and_the_metric_counts_them(app, client, devnet, people, capsys):
    club = await make_club(app, client, people)
    await post(club, devnet, club["bob"], "Garden day")
    _help, add_arguments, run = _command(app)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert await run(app, parser.parse_args([club["community"]["handle"], "--json"])) == 0
    assert '"text": "Garden day"' in capsys.readouterr().out
    metrics = (await client.get("/metrics")).text
    assert re.search(r"^commonroom_noticeboard_notices_posted_total 1\.0$", metrics, re.M), metrics[-2000:]


def _command(app: Any) -> tuple:
    for commands in app.pm.hook.cr_cli_commands():
        if commands and "notices" in commands:
            return commands["notices"]
    raise AssertionError("the plugin offers no `notices` command")
