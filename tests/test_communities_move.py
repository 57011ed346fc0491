"""Moving a community to another PDS (docs/communities.md, "Moving to another PDS"), against two
real PDSes on one PLC directory (the session devnet's, and `devnet_b` on its directory): the
community's records, members and admins come along; afterwards its DID document points at B,
B serves its repo, A's account is deactivated, the index answers as before, and new writes go to
B. Refusals change nothing; a move interrupted after any step resumes and finishes."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import httpx
import pytest

import daemon.atproto.moves as moves
from commonroom_testing.webhooks import LOOPBACK_TARGETS
from tests.fixtures_communities import Api, devnet_module_fixtures

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures(config=LOOPBACK_TARGETS)
COLLECTION = "org.example.garden.note"


def plc_data(devnet: Any, did: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{devnet.plc_url}/{did}/data", timeout=10) as resp:
        return json.loads(resp.read())


async def list_records(pds_url: str, did: str, collection: str) -> tuple[int, list[dict[str, Any]]]:
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"{pds_url}/xrpc/com.atproto.repo.listRecords",
                              params={"repo": did, "collection": collection, "limit": 100})
    return resp.status_code, resp.json().get("records", []) if resp.status_code == 200 else []


def proof(devnet: Any, client_service: str, person: dict[str, str]) -> dict[str, str]:
    """The primary admin's service-auth token for the move (a move is always proven)."""
    got = devnet.xrpc("com.atproto.server.getServiceAuth",
                      params={"aud": client_service, "lxm": "community.commonroom.community.move"},
                      token=person["accessJwt"])
    return {"Authorization": f"Bearer {got['token']}"}


async def move(api: Api, devnet: Any, did: str, who: dict[str, str], pds_url: str, **extra: Any) -> Any:
    service = (await api.client.get("/api/v1/method-ids")).json()["serviceDid"]
    return await api.client.post(f"/api/v1/communities/{did}/move", api_key=api.key,
                                 json={"adminDid": who["did"], "pdsUrl": pds_url, **extra},
                                 headers=proof(devnet, service, who))


async def wait_moved(api: Api, did: str, seconds: float = 60) -> dict[str, Any]:
    for _ in range(int(seconds * 10)):
        got = (await api.get(f"/api/v1/communities/{did}/move")).json()
        if got["state"] == "none":
            return got
        assert not got.get("error") or "PLC" not in got["error"], got
        await asyncio.sleep(0.1)
    raise AssertionError(f"the move did not finish: {got}")


async def populated(app: Any, client: Any, people: Any) -> tuple[Api, str, dict, list[dict], list[str]]:
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Movers"))["did"]
    for person in (bob, carol):
        assert (await api.join(did, person["did"])).status == 201
    resp = await api.post(f"/api/v1/communities/{did}/admins/promote", {"adminDid": alice["did"],
                                                                        "memberDid": bob["did"]})
    assert resp.status == 200, resp.text
    rkeys = []
    for i in range(5):
        resp = await api.post(f"/api/v1/communities/{did}/records", {
            "userDid": carol["did"], "collection": COLLECTION,
            "record": {"$type": COLLECTION, "text": f"note {i}", "createdAt": "2026-11-28T00:00:00.000Z"}})
        assert resp.status == 201, resp.text
        rkeys.append(resp.json()["rkey"])
    return api, did, alice, [bob, carol], rkeys


def png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


async def test_a_community_moves_to_pds_b_with_its_repo_and_keeps_working(
        app, client, devnet, devnet_b, people, webhook_receiver):
    """The issue's community: 3 members, 2 admins, a custom role, a ban, an invite, 5 records,
    both pictures, and a webhook that keeps delivering."""
    from commonroom_testing.http import login_as
    api, did, alice, (bob, carol), rkeys = await populated(app, client, people)
    path = lambda tail: f"/api/v1/communities/{did}{tail}"  # noqa: E731
    erin = people("erin")
    assert (await api.join(did, erin["did"])).status == 201
    assert (await api.post(path("/bans"), {"adminDid": alice["did"], "memberDid": erin["did"],
                                           "reason": "spam", "expiresAt": "2099-01-01T00:00:00.000Z"})).status == 201
    assert (await api.post(path("/roles"), {"adminDid": alice["did"], "name": "greeter",
                                            "capabilities": ["members.approve"]})).status == 201
    assert (await api.post(path(f"/members/{carol['did']}/roles"), {"adminDid": alice["did"],
                                                                    "role": "greeter"})).status == 200
    assert (await api.post(path("/invites"), {"adminDid": alice["did"], "note": "newsletter"})).status == 201
    session = await login_as(app, alice["did"], alice["handle"])
    for kind, size in (("avatar", (64, 64)), ("banner", (300, 100))):
        resp = await client.post(f"/communities/{did}/{kind}", body=png((200, 30, 30), size), session=session,
                                 headers={"Content-Type": "image/png"})
        assert resp.status == 200, resp.text
    receiver = webhook_receiver()
    hook = await client.post("/api/v1/webhooks", api_key=api.key, json={"url": receiver.url,
                                                                         "events": ["member.joined"]})
    assert hook.status == 201, hook.text

    def seen() -> Any:
        return api.get(path(""))

    before = {p["did"]: (await api.post(path("/membership/check"), {"userDid": p["did"]})).json()
              for p in (alice, bob, carol)}
    members_before = (await api.get(path("/members"))).json()["members"]
    roles_before = (await api.get(path("/roles"))).json()["roles"]
    bans_before = (await api.get(path("/bans"), adminDid=alice["did"])).json()["bans"]
    invites_before = (await api.get(path("/invites"), adminDid=alice["did"])).json()["invites"]
    details_before = (await seen()).json()["community"]

    resp = await move(api, devnet, did, alice, devnet_b.pds_url)
    assert resp.status == 202, resp.text
    assert resp.json()["toPds"] == devnet_b.pds_url
    await wait_moved(api, did)

    doc = plc_data(devnet, did)
    assert doc["services"]["atproto_pds"]["endpoint"] == devnet_b.pds_url
    assert len(doc["rotationKeys"]) >= 3  # the recovery key first, still
    status, on_b = await list_records(devnet_b.pds_url, did, COLLECTION)
    assert status == 200 and sorted(r["uri"].rsplit("/", 1)[1] for r in on_b) == sorted(rkeys)
    # the old account is deactivated, not deleted
    async with httpx.AsyncClient() as http:
        old = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.sync.getRepoStatus", params={"did": did})
    assert old.status_code == 200 and old.json()["active"] is False

    # the index answers as before
    for p in (alice, bob, carol):
        got = (await api.post(f"/api/v1/communities/{did}/membership/check", {"userDid": p["did"]})).json()
        assert got == before[p["did"]]
    assert (await api.get(path("/members"))).json()["members"] == members_before
    assert (await api.get(path("/roles"))).json()["roles"] == roles_before
    assert (await api.get(path("/bans"), adminDid=alice["did"])).json()["bans"] == bans_before
    assert (await api.get(path("/invites"), adminDid=alice["did"])).json()["invites"] == invites_before
    details = (await seen()).json()["community"]
    assert details["displayName"] == "Movers" and details["memberCount"] == details_before["memberCount"]
    # both pictures are served by B now, from the blobs the move copied
    async with httpx.AsyncClient() as http:
        for kind in ("avatar", "banner"):
            assert details[kind] and details[kind].startswith(devnet_b.pds_url), details[kind]
            got = await http.get(details[kind])
            assert got.status_code == 200 and got.content[:4] == b"\x89PNG"

    # new writes go to B
    dave = people("dave")
    assert (await api.join(did, dave["did"])).status == 201
    delivered = await receiver.wait_for(1, timeout=20)  # webhooks keep delivering
    assert delivered[-1].json()["data"]["memberDid"] == dave["did"]
    resp = await api.post(f"/api/v1/communities/{did}/records", {
        "userDid": carol["did"], "collection": COLLECTION,
        "record": {"$type": COLLECTION, "text": "after", "createdAt": "2026-11-28T00:00:00.000Z"}})
    assert resp.status == 201, resp.text
    status, on_b = await list_records(devnet_b.pds_url, did, COLLECTION)
    assert len(on_b) == 6
    audit = (await api.get(f"/api/v1/communities/{did}/audit-log", adminDid=alice["did"])).json()
    actions = [e["action"] for e in audit[next(k for k in audit if isinstance(audit[k], list))]]
    assert "community.move_started" in actions and "community.moved" in actions


async def test_refusals_change_nothing(app, client, devnet, devnet_b, people):
    api, did, alice, (bob, carol), _ = await populated(app, client, people)
    path = f"/api/v1/communities/{did}/move"
    same = await move(api, devnet, did, alice, devnet.pds_url)
    assert same.status == 400 and same.json()["error"] == "same_pds"
    not_primary = await move(api, devnet, did, bob, devnet_b.pds_url)
    assert not_primary.status == 403, not_primary.text
    for bad in ("ftp://x", "https://xn--", "https://pds.example/path", "https://a..b", 42):
        nowhere = await move(api, devnet, did, alice, bad)
        assert nowhere.status == 400 and "pdsUrl" in nowhere.json()["message"], (bad, nowhere.text)
    unproven = await api.post(path, {"adminDid": alice["did"], "pdsUrl": devnet_b.pds_url})
    assert unproven.status == 401 and unproven.json()["error"] == "user_proof_required"
    assert (await api.get(path)).json()["state"] == "none"
    assert plc_data(devnet, did)["services"]["atproto_pds"]["endpoint"] == devnet.pds_url
    assert (await api.join(did, people("erin")["did"])).status == 201  # still writable


async def unchanged_on_a(api: Api, devnet: Any, did: str, people: Any) -> None:
    assert (await api.get(f"/api/v1/communities/{did}/move")).json()["state"] == "none"
    assert plc_data(devnet, did)["services"]["atproto_pds"]["endpoint"] == devnet.pds_url
    assert (await api.join(did, people("erin")["did"])).status == 201  # still writable, on A


async def test_a_pds_that_refuses_the_account_changes_nothing(app, client, devnet, devnet_b, people):
    """The new PDS says no when the account is made (the first step, before the answer): here
    its handle is taken there. The answer says why; the community stays on A, writable."""
    api, did, alice, _, _ = await populated(app, client, people)
    handle = (await api.get(f"/api/v1/communities/{did}")).json()["community"]["handle"]
    devnet_b.create_account(handle)
    taken = await move(api, devnet, did, alice, devnet_b.pds_url)
    assert 400 <= taken.status < 500 and "handle" in taken.json()["message"].lower(), taken.text
    await unchanged_on_a(api, devnet, did, people)


async def test_a_move_to_a_pds_that_asks_for_an_invite_code(app, client, devnet, devnet_invites, people):
    """A PDS of one's own that makes accounts only with an invite code: without one the move
    is refused and nothing changes; with the owner's code (`inviteCode`) it moves."""
    from commonroom_testing.devnet import invite_code
    api, did, alice, _, rkeys = await populated(app, client, people)
    refused = await move(api, devnet, did, alice, devnet_invites.pds_url)
    assert 400 <= refused.status < 500 and "invite" in refused.json()["message"].lower(), refused.text
    await unchanged_on_a(api, devnet, did, people)
    wrong = await move(api, devnet, did, alice, devnet_invites.pds_url, inviteCode="not-a-code")
    assert 400 <= wrong.status < 500 and "invite" in wrong.json()["message"].lower(), wrong.text
    started = await move(api, devnet, did, alice, devnet_invites.pds_url, inviteCode=invite_code(devnet_invites))
    assert started.status in (200, 202), started.text
    await wait_moved(api, did)
    assert plc_data(devnet, did)["services"]["atproto_pds"]["endpoint"] == devnet_invites.pds_url
    status, records = await list_records(devnet_invites.pds_url, did, COLLECTION)
    assert status == 200 and sorted(r["uri"].rsplit("/", 1)[1] for r in records) == sorted(rkeys)


async def test_writes_are_refused_with_503_while_the_community_moves(app, client, devnet, devnet_b, people):
    api, did, alice, (bob, carol), _ = await populated(app, client, people)
    from daemon.plugin.atproto import begin_move_tx
    async with app.db.transaction("test.move") as tx:
        await begin_move_tx(app, tx, did, devnet_b.pds_url)
    resp = await api.join(did, people("frank")["did"])
    assert resp.status == 503 and resp.json()["error"] == "community_moving"
    assert resp.headers["Retry-After"] == "30"
    resp = await api.post(f"/api/v1/communities/{did}/records", {
        "userDid": carol["did"], "collection": COLLECTION,
        "record": {"$type": COLLECTION, "text": "x", "createdAt": "2026-11-28T00:00:00.000Z"}})
    assert resp.status == 503 and resp.json()["error"] == "community_moving"
    # nor can it be deleted: the move finishes with its credentials
    deleted = await api.delete(f"/api/v1/communities/{did}", {"adminDid": alice["did"]})
    assert deleted.status == 503 and deleted.json()["error"] == "community_moving"
    # reads still work
    assert (await api.post(f"/api/v1/communities/{did}/membership/check",
                           {"userDid": bob["did"]})).json()["isMember"] is True


@pytest.mark.parametrize("crash_after", moves.STEPS[:-1])
async def test_a_move_interrupted_after_each_step_resumes_and_finishes(
        app, client, devnet, devnet_b, people, monkeypatch, crash_after):
    """A crash between two steps (the process stopped there, in-process here: the step is
    recorded, the next is not run) is taken up by the start-up resumption."""
    api, did, alice, _, rkeys = await populated(app, client, people)

    class Crash(BaseException):
        pass

    def crash(moving: str, step: str) -> None:
        if moving == did and step == crash_after:
            raise Crash()

    monkeypatch.setattr(moves, "after_step", crash)
    from plugins.communities import move
    row = (await api.get(f"/api/v1/communities/{did}")).json()
    community = await app.communities.community_row(did)
    try:
        from daemon.plugin import Actor
        await move.start(app, community, Actor(alice["did"], api.app_id, False), devnet_b.pds_url)
        await move.run(app, did)
    except Crash:
        pass
    monkeypatch.setattr(moves, "after_step", None)
    progress = (await api.get(f"/api/v1/communities/{did}/move")).json()
    assert progress["state"] == "moving"
    # the community still answers reads in between
    assert (await api.get(f"/api/v1/communities/{did}")).status == 200
    await move.resume_all(app)  # what start-up does
    await wait_moved(api, did)
    assert plc_data(devnet, did)["services"]["atproto_pds"]["endpoint"] == devnet_b.pds_url
    status, on_b = await list_records(devnet_b.pds_url, did, COLLECTION)
    assert len(on_b) == 5
    assert (await api.join(did, people("gina")["did"])).status == 201


async def test_an_operator_moves_a_community_from_the_command_line(app, client, devnet, devnet_b, people, capsys):
    import argparse

    api, did, alice, _, rkeys = await populated(app, client, people)
    commands: dict[str, Any] = {}
    for result in app.pm.hook.cr_cli_commands():
        commands.update(result or {})
    _, add_arguments, run = commands["communities"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert await run(app, parser.parse_args(["move", did])) == 2  # nothing to resume, no --to
    assert "--to" in capsys.readouterr().err
    assert await run(app, parser.parse_args(["move", did, "--to", devnet_b.pds_url])) == 0
    out = capsys.readouterr()
    assert f"moved {did} to {devnet_b.pds_url}" in out.out
    assert "Copying the repository" in out.err and "Pointing the identity at the new PDS" in out.err
    assert plc_data(devnet, did)["services"]["atproto_pds"]["endpoint"] == devnet_b.pds_url
    status, on_b = await list_records(devnet_b.pds_url, did, COLLECTION)
    assert len(on_b) == 5
    # moving it again to where it is: refused in words, non-zero
    assert await run(app, parser.parse_args(["move", did, "--to", devnet_b.pds_url])) == 1
    assert "already hosted" in capsys.readouterr().err
