"""Handing a community over to another Commonroom (docs/communities.md, "Handing a community
over"), with two instances in one test: two applications, two databases, one devnet. Instance 1
hands the community over (API, always proven); instance 2 imports the bundle and shows the same
community; instance 1 refuses it with 410 naming where it went. Refusals change nothing."""

from __future__ import annotations

import base64
import json
import shutil
from typing import Any, Iterator

import pytest
from tornado.testing import bind_unused_port

from commonroom_testing.app import build_config, deep_merge
from commonroom_testing.http import Client, login_as, serve_app
from daemon.runtime.app import create_app
from plugins.communities import bundle, handover
from tests.fixtures_communities import Api, devnet_module_fixtures

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()
COLLECTION = "org.example.garden.note"
EXPIRY = "2099-01-01T00:00:00.000Z"


class Instance:
    """A second Commonroom: its own application, database and HTTP server."""

    def __init__(self, app: Any, client: Client, url: str) -> None:
        self.app, self.client, self.url = app, client, url


@pytest.fixture
def second(io_loop: Any, tmp_path: Any, template_db: Any, clock: Any,
           config_overrides: dict[str, Any]) -> Iterator[Instance]:
    state = tmp_path / "second"
    state.mkdir()
    shutil.copy(template_db, state / template_db.name)
    # its own address, so the audit history it imports names instance 1, not itself
    config, pm = build_config(state, deep_merge(config_overrides, {"server": {"base_url": "https://two.example"}}), ())
    app2 = io_loop.run_sync(lambda: create_app(config, pm, clock=clock, repeat_periodic=False))
    sock, port = bind_unused_port()
    serving = serve_app(io_loop, app2, sock, port)
    srv = next(serving)
    client = Client(f"http://127.0.0.1:{srv.port}")
    yield Instance(app2, client, f"http://127.0.0.1:{srv.port}")
    client.close()
    for _ in serving:
        pass
    io_loop.run_sync(app2.shutdown)


def proof(devnet: Any, service: str, person: dict[str, str], lxm: str) -> dict[str, str]:
    got = devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": service, "lxm": lxm},
                      token=person["accessJwt"])
    return {"Authorization": f"Bearer {got['token']}"}


async def hand_over(api: Api, devnet: Any, did: str, who: dict[str, str], **extra: Any) -> Any:
    service = (await api.client.get("/api/v1/method-ids")).json()["serviceDid"]
    return await api.client.post(f"/api/v1/communities/{did}/handover", api_key=api.key,
                                 json={"adminDid": who["did"], **extra},
                                 headers=proof(devnet, service, who, "community.commonroom.community.handover"))


def png(size: tuple[int, int]) -> bytes:
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", size, (30, 120, 200)).save(buf, "PNG")
    return buf.getvalue()


async def populated(app: Any, client: Client, people: Any) -> tuple[Api, str, dict[str, Any]]:
    """The issue's community: members, 2 admins, a custom role held by one, a ban with a reason
    and an expiry, an invite, settings changed, 5 records."""
    api = await Api.make(app, client)
    alice, bob, carol, erin = people("alice"), people("bob"), people("carol"), people("erin")
    did = (await api.create(alice, "Handed over", type="admin-approved"))["did"]
    path = lambda tail: f"/api/v1/communities/{did}{tail}"  # noqa: E731
    for person in (bob, carol, erin):
        assert (await api.join(did, person["did"])).status == 202
        assert (await api.decide(did, "approve", alice["did"], person["did"])).status == 200
    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    assert (await api.post(path("/bans"), {"adminDid": alice["did"], "memberDid": erin["did"],
                                           "reason": "spam links", "expiresAt": EXPIRY})).status == 201
    assert (await api.post(path("/roles"), {"adminDid": alice["did"], "name": "greeter",
                                            "capabilities": ["members.approve"]})).status == 201
    assert (await api.post(path(f"/members/{carol['did']}/roles"), {"adminDid": alice["did"],
                                                                    "role": "greeter"})).status == 200
    assert (await api.post(path("/invites"), {"adminDid": alice["did"], "note": "newsletter"})).status == 201
    resp = await client.put(path("/settings"), api_key=api.key,
                            json={"adminDid": alice["did"], "rosterVisibility": "members", "listed": False})
    assert resp.status == 200, resp.text
    session = await login_as(app, alice["did"], alice["handle"])
    for kind, size in (("avatar", (64, 64)), ("banner", (300, 100))):
        resp = await client.post(f"/communities/{did}/{kind}", body=png(size), session=session,
                                 headers={"Content-Type": "image/png"})
        assert resp.status == 200, resp.text
    for i in range(5):
        resp = await api.post(path("/records"), {
            "userDid": carol["did"], "collection": COLLECTION,
            "record": {"$type": COLLECTION, "text": f"note {i}", "createdAt": "2026-11-28T00:00:00.000Z"}})
        assert resp.status == 201, resp.text
    return api, did, {"alice": alice, "bob": bob, "carol": carol, "erin": erin}


async def what_it_shows(api: Api, did: str, admin: str, viewer: str, people_dids: list[str]) -> dict[str, Any]:
    """Everything a managing app sees of the community, minus what is per instance (app ids,
    local row ids, cursors)."""
    path = lambda tail: f"/api/v1/communities/{did}{tail}"  # noqa: E731

    async def got(tail: str, **params: Any) -> Any:
        resp = await api.get(path(tail), **params)
        assert resp.status == 200, (tail, resp.text)
        return resp.json()

    def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in ("appId", "id", "cursor")} for r in rows]

    details = (await got("", userDid=viewer))["community"]
    details = {k: v for k, v in details.items() if k not in ("viewer", "createdByApp", "appId")}
    records = await got(f"/records/{COLLECTION}", userDid=viewer)
    return {
        "details": details,
        "members": strip((await got("/members", userDid=viewer))["members"]),
        "checks": [(await api.post(path("/membership/check"), {"userDid": d})).json() for d in people_dids],
        "roles": (await got("/roles"))["roles"],
        "bans": strip((await got("/bans", adminDid=admin))["bans"]),
        "invites": strip((await got("/invites", adminDid=admin))["invites"]),
        "settings": await got("/settings"),
        "records": sorted((r["uri"], r["cid"], json.dumps(r["value"], sort_keys=True))
                          for r in records["records"]),
    }


async def test_instance_2_shows_what_instance_1_showed_and_instance_1_says_where_it_went(
        app, client, devnet, people, second):
    api, did, who = await populated(app, client, people)
    alice = who["alice"]
    dids = [p["did"] for p in who.values()]
    # an open report of a member travels, for the moderators there (reports plugin's state)
    from plugins.reports import reports as member_reports
    from plugins.reports import store as reports_store
    community = await app.communities.community(did)
    await member_reports.create(app, community, who["carol"]["did"],
                                {"subject": who["bob"]["did"], "reason": "harassment", "text": "Rude in the thread"},
                                app_id=None)
    before = await what_it_shows(api, did, alice["did"], alice["did"], dids)

    assert len(before["records"]) == 5 and before["bans"][0]["reason"] == "spam links"
    assert before["details"]["avatar"] and before["details"]["banner"] and len(before["invites"]) == 1
    audit_before = await api.audit(did, alice["did"], limit=100)

    resp = await hand_over(api, devnet, did, alice, to=second.url)
    assert resp.status == 200, resp.text
    assert resp.headers["Cache-Control"] == "no-store"
    answer = resp.json()
    assert answer["movedTo"] == second.url and answer["carried"]["bans"] == 1
    assert any("webhooks" in item for item in answer["notCarried"])
    sealed = base64.b64decode(answer["bundle"])
    assert answer["passphrase"] not in sealed.decode() and "appPassword" not in sealed.decode()

    # Instance 1 refuses reads and writes of it, saying where it went.
    gone = await api.get(f"/api/v1/communities/{did}")
    assert gone.status == 410 and gone.json()["details"]["movedTo"] == second.url, gone.text
    write = await api.join(did, people("frank")["did"])
    assert write.status == 410 and second.url in write.json()["message"], write.text
    assert await app.db.fetchone("SELECT 1 FROM community_accounts WHERE did = ?", (did,)) is None

    # Instance 2 imports it and shows the same community.
    imported = await handover.import_bundle(second.app, sealed, answer["passphrase"], importer_did=None)
    assert imported["did"] == did and imported["members"] == 3 and imported["notRestored"] == []
    api2 = await Api.make(second.app, second.client)
    # app grants do not travel: the primary admin allows the new instance's app there (the web
    # app's Apps page does this)
    from daemon.plugin import Actor
    from plugins.communities.public import communities_of
    service2 = communities_of(second.app)
    await service2.allow_app(await service2.community_row(did), api2.app_id, Actor(alice["did"], None, True),
                             True, manage=True)
    after = await what_it_shows(api2, did, alice["did"], alice["did"], dids)
    assert after == before
    [report] = await reports_store.open_reports(second.app.db, did, limit=10)
    assert (report["reporter_did"], report["subject"], report["reason"], report["body"], report["app_id"]) == \
        (who["carol"]["did"], who["bob"]["did"], "harassment", "Rude in the thread", None)

    # The audit log of instance 2 starts with the import, then instance 1's entries as history.
    audit = await api2.audit(did, alice["did"], limit=100)
    oldest_first = list(reversed(audit))
    assert oldest_first[0]["action"] == "community.imported"
    history = [e for e in oldest_first if e["metadata"].get("imported")]
    assert [e["action"] for e in history] == [e["action"] for e in reversed(audit_before)]
    assert all(e["metadata"]["importedFrom"] == app.config.server.base_url.rstrip("/") for e in history)
    imported_from = oldest_first[0]["metadata"]["from"]
    assert imported_from == app.config.server.base_url.rstrip("/") != second.app.config.server.base_url
    ban_entry = next(e for e in history if e["action"] == "member.banned")
    assert ban_entry["reason"] == "spam links" and ban_entry["targetDid"] == who["erin"]["did"]

    # It works there: a join and a record write go through instance 2.
    dave = people("dave")
    assert (await api2.join(did, dave["did"])).status == 202
    assert (await api2.decide(did, "approve", who["bob"]["did"], dave["did"])).status == 200
    assert (await api2.join(did, who["erin"]["did"])).status == 403  # the ban came along


async def test_refusals_change_nothing(app, client, devnet, people, second):
    api, did, who = await populated(app, client, people)
    alice, bob, carol = who["alice"], who["bob"], who["carol"]
    # Not the primary admin: another admin, a member holding a role.
    for person in (bob, carol):
        resp = await hand_over(api, devnet, did, person)
        assert resp.status == 403 and resp.json()["error"] == "not_primary_admin", resp.text
    # Unproven.
    resp = await api.post(f"/api/v1/communities/{did}/handover", {"adminDid": alice["did"]})
    assert resp.status == 401 and resp.json()["error"] == "user_proof_required"
    assert (await api.get(f"/api/v1/communities/{did}")).status == 200

    answer = (await hand_over(api, devnet, did, alice)).json()
    sealed = base64.b64decode(answer["bundle"])
    assert answer["movedTo"] is None
    gone = await api.get(f"/api/v1/communities/{did}")
    assert gone.status == 410 and gone.json()["details"]["movedTo"] is None, gone.text
    assert "another Commonroom" in gone.json()["message"]

    async def nothing_imported() -> None:
        assert await second.app.db.fetchone("SELECT 1 FROM communities WHERE did = ?", (did,)) is None
        assert await second.app.db.fetchone("SELECT 1 FROM community_accounts WHERE did = ?", (did,)) is None
        assert await second.app.db.fetchone("SELECT 1 FROM audit_log WHERE community_did = ?", (did,)) is None

    # A wrong passphrase.
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.import_bundle(second.app, sealed, bundle.new_passphrase(), importer_did=None)
    assert caught.value.code == "bundle_refused" and "passphrase is wrong" in str(caught.value)
    await nothing_imported()
    # A tampered bundle: one changed bit of the ciphertext.
    envelope = json.loads(sealed)
    raw = bytearray(base64.b64decode(envelope["ciphertext"]))
    raw[len(raw) // 2] ^= 1
    envelope["ciphertext"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.import_bundle(second.app, json.dumps(envelope).encode(), answer["passphrase"],
                                     importer_did=None)
    assert caught.value.code == "bundle_refused" and "changed" in str(caught.value)
    await nothing_imported()

    # The untouched bundle imports; a second import of the same DID is refused.
    await handover.import_bundle(second.app, sealed, answer["passphrase"], importer_did=None)
    count = await second.app.db.fetchone("SELECT COUNT(*) AS n FROM audit_log WHERE community_did = ?", (did,))
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.import_bundle(second.app, sealed, answer["passphrase"], importer_did=None)
    assert (caught.value.status, caught.value.code) == (409, "community_exists")
    again = await second.app.db.fetchone("SELECT COUNT(*) AS n FROM audit_log WHERE community_did = ?", (did,))
    assert again["n"] == count["n"]


async def test_a_bundle_whose_app_password_no_longer_works_is_refused(app, client, devnet, people, second):
    api, did, who = await populated(app, client, people)
    answer = (await hand_over(api, devnet, did, who["alice"])).json()
    sealed = base64.b64decode(answer["bundle"])
    payload = bundle.open_bundle(sealed, answer["passphrase"])
    # The owner revokes the app password (with the account's own session: here the devnet's admin
    # signs in with the app password itself, which may revoke its own kind).
    session = devnet.xrpc("com.atproto.server.createSession",
                          body={"identifier": did, "password": payload["appPassword"]})
    names = devnet.xrpc("com.atproto.server.listAppPasswords", token=session["accessJwt"])
    assert any(p["name"].startswith(handover.APP_PASSWORD_NAME) for p in names["passwords"]), names
    for entry in names["passwords"]:
        devnet.xrpc("com.atproto.server.revokeAppPassword", body={"name": entry["name"]},
                    token=session["accessJwt"])
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.import_bundle(second.app, sealed, answer["passphrase"], importer_did=None)
    assert (caught.value.status, caught.value.code) == (400, "bundle_credentials_refused"), caught.value
    assert await second.app.db.fetchone("SELECT 1 FROM communities WHERE did = ?", (did,)) is None
    assert await second.app.db.fetchone("SELECT 1 FROM community_accounts WHERE did = ?", (did,)) is None


def cli_runner(app: Any) -> Any:
    import argparse

    commands: dict[str, Any] = {}
    for result in app.pm.hook.cr_cli_commands():
        commands.update(result or {})
    _, add_arguments, run = commands["communities"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return lambda *argv: run(app, parser.parse_args(list(argv)))


async def test_operators_hand_over_and_import_from_the_command_line(
        app, client, devnet, people, second, tmp_path, capsys, monkeypatch):
    api, did, who = await populated(app, client, people)
    out = tmp_path / "club.crhandover"
    out.write_text("an earlier file")
    one, two = cli_runner(app), cli_runner(second.app)
    # An existing file is never overwritten, and nothing changes.
    assert await one("handover", did, "--out", str(out)) == 1
    assert "cannot create" in capsys.readouterr().err and out.read_text() == "an earlier file"
    assert (await api.get(f"/api/v1/communities/{did}")).status == 200
    out.unlink()
    assert await one("handover", did, "--out", str(out), "--to", "https://two.example/") == 0
    printed = capsys.readouterr().out
    passphrase = next(line.rsplit(": ", 1)[1] for line in printed.splitlines() if line.startswith("passphrase"))
    assert "not carried" in printed and oct(out.stat().st_mode & 0o777) == "0o600"
    gone = await api.get(f"/api/v1/communities/{did}")
    assert gone.status == 410 and gone.json()["details"]["movedTo"] == "https://two.example"

    # Import: a wrong passphrase from a file is refused, with nothing imported.
    wrong = tmp_path / "wrong"
    wrong.write_text(bundle.new_passphrase() + "\n")
    assert await two("import", str(out), "--passphrase-file", str(wrong)) == 1
    assert "passphrase is wrong or the bundle was changed" in capsys.readouterr().err
    assert await second.app.db.fetchone("SELECT 1 FROM communities WHERE did = ?", (did,)) is None
    # The right one from the environment.
    monkeypatch.setenv("COMMONROOM_HANDOVER_PASSPHRASE", passphrase)
    assert await two("import", str(out), "--json") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["did"] == did and answer["members"] == 3 and answer["restored"]["bans"] == 1
    row = await second.app.db.fetchone("SELECT state, account_kind FROM communities WHERE did = ?", (did,))
    assert (row["state"], row["account_kind"]) == ("active", "brought")
    # Again: this instance has it now.
    assert await two("import", str(out)) == 1
    assert "already a community here" in capsys.readouterr().err


async def test_a_pds_failure_during_the_export_leaves_the_community_here(app, client, devnet, people, monkeypatch):
    """The PDS failing to make the app password is simulated (a fake for a failure the devnet
    will not produce on demand): nothing changes, and the same request afterwards works."""
    from daemon.atproto.pds import PdsError

    api, did, who = await populated(app, client, people)
    real = handover.handover_credential

    async def failing(*args: Any, **kwargs: Any) -> str:
        raise PdsError("the PDS did not answer", pds_status=503)
    monkeypatch.setattr(handover, "handover_credential", failing)
    resp = await hand_over(api, devnet, did, who["alice"])
    assert resp.status == 502, resp.text
    assert (await api.get(f"/api/v1/communities/{did}")).status == 200
    assert await app.db.fetchone("SELECT 1 FROM community_accounts WHERE did = ?", (did,)) is not None
    assert (await api.join(did, people("gina")["did"])).status == 202  # still writable

    monkeypatch.setattr(handover, "handover_credential", real)
    resp = await hand_over(api, devnet, did, who["alice"])
    assert resp.status == 200, resp.text


async def test_an_import_that_fails_while_rebuilding_is_undone_and_can_be_retried(
        app, client, devnet, people, second, monkeypatch):
    """The rebuild failing (the PDS going away mid-import) is simulated by a failing reindex:
    what the import wrote and the stored credentials are removed; the same bundle then imports."""
    api, did, who = await populated(app, client, people)
    answer = (await hand_over(api, devnet, did, who["alice"], to=second.url)).json()
    sealed = base64.b64decode(answer["bundle"])
    real = handover.reindex

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the PDS went away")
    monkeypatch.setattr(handover, "reindex", failing)
    with pytest.raises(ConnectionError):
        await handover.import_bundle(second.app, sealed, answer["passphrase"], importer_did=None)
    db = second.app.db
    for table, column in (("communities", "did"), ("community_accounts", "did"), ("audit_log", "community_did"),
                          ("community_bans", "community_did"), ("community_invites", "community_did"),
                          ("records", "community_did")):
        assert await db.fetchone(f"SELECT 1 FROM {table} WHERE {column} = ?", (did,)) is None, table

    monkeypatch.setattr(handover, "reindex", real)
    imported = await handover.import_bundle(second.app, sealed, answer["passphrase"], importer_did=None)
    assert imported["members"] == 3 and imported["restored"]["bans"] == 1
    first = await db.fetchone("SELECT action FROM audit_log WHERE community_did = ? ORDER BY id LIMIT 1", (did,))
    assert first["action"] == "community.imported"


async def test_two_handovers_at_once_make_one_bundle(app, client, devnet, people):
    import asyncio

    api, did, who = await populated(app, client, people)
    answers = await asyncio.gather(hand_over(api, devnet, did, who["alice"]),
                                   hand_over(api, devnet, did, who["alice"]))
    assert sorted(a.status for a in answers) == [200, 410], [a.text for a in answers]
    refused = next(a for a in answers if a.status == 410).json()
    assert refused["error"] == "community_moved"
    handed = await app.db.fetchall("SELECT 1 FROM audit_log WHERE community_did = ? AND action = "
                                   "'community.handed_over'", (did,))
    assert len(handed) == 1


async def test_an_instance_that_holds_creations_for_approval_refuses_a_persons_import(
        io_loop, tmp_path, template_db, clock, config_overrides, app, client, devnet, people):
    """An import brings an account; under `instance.creation: approval` (cr_hold_action) people
    may not bring one, so neither may they import (operators import from the command line)."""
    state = tmp_path / "approving"
    state.mkdir()
    shutil.copy(template_db, state / template_db.name)
    config, pm = build_config(state, deep_merge(config_overrides, {"instance": {"creation": "approval"}}), ())
    strict = await create_app(config, pm, clock=clock, repeat_periodic=False)
    try:
        api, did, who = await populated(app, client, people)
        answer = (await hand_over(api, devnet, did, who["alice"])).json()
        sealed = base64.b64decode(answer["bundle"])
        from daemon.plugin import ApiError
        with pytest.raises(ApiError) as caught:
            await handover.import_bundle(strict, sealed, answer["passphrase"], importer_did=who["bob"]["did"])
        assert (caught.value.status, caught.value.code) == (403, "creation_not_allowed")
        assert await strict.db.fetchone("SELECT 1 FROM communities WHERE did = ?", (did,)) is None
        assert await strict.db.fetchone("SELECT 1 FROM community_accounts WHERE did = ?", (did,)) is None
        # an operator imports it
        imported = await handover.import_bundle(strict, sealed, answer["passphrase"], importer_did=None)
        assert imported["did"] == did
    finally:
        await strict.shutdown()
