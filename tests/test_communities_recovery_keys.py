"""A provisioned community's recovery key (docs/communities.md, "Who owns a community"),
against the devnet's PDS and PLC directory: the key made for the creator is shown once and is
the first rotation key of the community's DID; a key the creator brings is used as given; and
with that key alone, no service involved, the owner can sign a PLC operation that moves the
identity elsewhere, which the directory accepts."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any
from urllib.parse import urlencode

import pytest

from daemon.atproto.plc import RotationKey, next_operation, operation_cid, sign_operation
from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.helpers import login_as

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


def plc_get(devnet: Any, path: str) -> Any:
    with urllib.request.urlopen(f"{devnet.plc_url}/{path}", timeout=10) as resp:
        return json.loads(resp.read())


def plc_post(devnet: Any, did: str, op: dict[str, Any]) -> int:
    req = urllib.request.Request(f"{devnet.plc_url}/{did}", data=json.dumps(op).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_a_key_made_for_the_creator_is_shown_once_and_heads_the_dids_rotation_keys(
        app, client, devnet, people):
    api = await Api.make(app, client)
    alice = people("alice")
    resp = await api.post("/api/v1/communities", {"creatorDid": alice["did"], "displayName": "Key keepers"})
    assert resp.status == 201, resp.text
    assert resp.headers.get("Cache-Control") == "no-store"
    answer = resp.json()
    did, key = answer["community"]["did"], answer["recoveryKey"]
    assert key["generated"] is True and re.fullmatch(r"[0-9a-f]{64}", key["privateKeyHex"])
    held = RotationKey.from_hex(key["privateKeyHex"])
    assert held.did_key == key["didKey"]

    data = plc_get(devnet, f"{did}/data")
    assert data["rotationKeys"][0] == held.did_key       # above the PDS's own key
    assert len(data["rotationKeys"]) == 3                # owner, this service, the PDS
    # the service never keeps the private half: not in any column of the database
    rows = [*await app.db.fetchall("SELECT * FROM community_accounts"),
            *await app.db.fetchall("SELECT * FROM account_provisioning")]
    dump = "\n".join(str(tuple(r)) for r in rows)
    assert key["privateKeyHex"] not in dump and held.did_key in dump
    # and the community's page never shows it again
    got = await api.get(f"/api/v1/communities/{did}")
    assert "privateKeyHex" not in got.text and key["privateKeyHex"] not in got.text

    # With the recovery key alone, the owner points the identity at another PDS.
    elsewhere = "https://pds-b.example.org"
    op = next_operation(data, plc_get(devnet, f"{did}/log/audit")[-1]["cid"],
                        services={"atproto_pds": {"type": "AtprotoPersonalDataServer", "endpoint": elsewhere}})
    signed = sign_operation(op, held)
    assert plc_post(devnet, did, signed) == 200
    assert plc_get(devnet, f"{did}/data")["services"]["atproto_pds"]["endpoint"] == elsewhere
    assert plc_get(devnet, f"{did}/log/audit")[-1]["cid"] == operation_cid(signed)

    # A key nobody listed is refused by the directory.
    stranger = RotationKey.generate()
    op = next_operation(plc_get(devnet, f"{did}/data"), operation_cid(signed), alsoKnownAs=["at://x.test"])
    assert plc_post(devnet, did, sign_operation(op, stranger)) >= 400


async def test_a_did_key_the_creator_brings_is_the_first_rotation_key_and_no_secret_is_answered(
        app, client, devnet, people):
    api = await Api.make(app, client)
    bob = people("bob")
    mine = RotationKey.generate()
    resp = await api.post("/api/v1/communities", {"creatorDid": bob["did"], "displayName": "Own key",
                                                  "recoveryKey": mine.did_key})
    assert resp.status == 201, resp.text
    answer = resp.json()
    assert answer["recoveryKey"] == {"didKey": mine.did_key, "privateKeyHex": None, "generated": False,
                                     "note": answer["recoveryKey"]["note"]}
    data = plc_get(devnet, f"{answer['community']['did']}/data")
    assert data["rotationKeys"][0] == mine.did_key
    assert mine.hex not in resp.text


async def test_a_recovery_key_that_is_not_a_did_key_is_refused_and_nothing_is_created(app, client, people):
    api = await Api.make(app, client)
    carol = people("carol")
    before = await app.db.fetchval("SELECT COUNT(*) FROM community_accounts")
    for bad in ("did:plc:abc", "did:key:zNotAKey", 42):
        resp = await api.post("/api/v1/communities", {"creatorDid": carol["did"], "displayName": "Bad key",
                                                      "recoveryKey": bad})
        assert resp.status == 400, resp.text
        assert resp.json()["error"] == "invalid_request" and "recoveryKey" in resp.json()["message"]
    assert await app.db.fetchval("SELECT COUNT(*) FROM community_accounts") == before


def form(session: Any, fields: dict[str, str]) -> dict[str, Any]:
    return {"body": urlencode({**fields, "_csrf": session.csrf}), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


async def test_the_web_form_shows_the_made_key_once_on_the_creations_answer(app, client, devnet, people):
    dora = people("dora")
    session = await login_as(app, dora["did"], dora["handle"])
    resp = await client.post("/new", **form(session, {"displayName": "Web keepers", "description": "",
                                                      "type": "open", "account": "new"}))
    assert resp.status == 200, resp.text
    assert resp.headers.get("Cache-Control") == "no-store"
    page = resp.text
    hexkey = re.search(r'id="secret" type="text" readonly value="([0-9a-f]{64})"', page).group(1)
    assert "shown only this once" in page
    held = RotationKey.from_hex(hexkey)
    did = re.search(r"identity <code>(did:plc:[a-z0-9]+)</code>", page).group(1)
    assert plc_get(devnet, f"{did}/data")["rotationKeys"][0] == held.did_key
    onwards = re.search(r'<a class="button" href="([^"]+)">I have stored it: continue</a>', page).group(1)
    community = await client.get(onwards, headers={"Cookie": f"sid={session.sid}"})
    assert community.status == 200 and hexkey not in community.text

    # a bad key typed into the form: said next to its field, what was typed kept
    resp = await client.post("/new", **form(session, {"displayName": "Typo keepers", "description": "",
                                                      "type": "open", "account": "new",
                                                      "recoveryKey": "did:key:oops"}))
    assert resp.status == 400
    assert '<a href="#recoveryKey">' in resp.text and 'value="did:key:oops"' in resp.text


def emailed_token(devnet: Any, did: str) -> str:
    """The token the PDS e-mailed for a PLC operation. The devnet has no mail server: the test
    reads it where the PDS keeps it until used (its account database), as the operator would
    read the mail sent to the account's address."""
    import sqlite3
    con = sqlite3.connect(f"file:{devnet.data_dir / 'pds' / 'account.sqlite'}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT token FROM email_token WHERE did = ? AND purpose = 'plc_operation'",
                          (did,)).fetchone()
    finally:
        con.close()
    assert row is not None, "the PDS sent no token"
    return row[0]


async def test_a_community_made_before_recovery_keys_gets_one_through_its_pds_and_can_move(
        app, client, devnet, people, capsys):
    """A community whose DID lists only its PDS's rotation key (as every community made before
    0.2.0): the operator asks the PDS for its e-mailed token, then gives it; the DID then lists
    a recovery key made for the owner (printed once) first and the service's key second, and the
    owner's key alone controls it. Run again, it refuses to replace the owner's key."""
    import argparse

    api = await Api.make(app, client)
    alice = people("alice")
    made = (await api.post("/api/v1/communities", {"creatorDid": alice["did"], "displayName": "Old timers"})).json()
    did, key = made["community"]["did"], RotationKey.from_hex(made["recoveryKey"]["privateKeyHex"])
    # back to how communities were made before recovery keys: only the PDS's key, none held here
    data = plc_get(devnet, f"{did}/data")
    pds_key = data["rotationKeys"][-1]
    last = plc_get(devnet, f"{did}/log/last")
    assert plc_post(devnet, did, sign_operation(next_operation(data, operation_cid(last), rotationKeys=[pds_key]),
                                                key)) == 200
    async with app.db.transaction("test.old") as tx:
        await tx.execute("UPDATE community_accounts SET rotation_key_sealed = NULL WHERE did = ?", (did,))

    commands: dict[str, Any] = {}
    for result in app.pm.hook.cr_cli_commands():
        commands.update(result or {})
    _, add_arguments, run = commands["communities"]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert await run(app, parser.parse_args(["recovery-key", did])) == 1   # no token: the PDS must sign
    assert "token" in capsys.readouterr().err
    assert plc_get(devnet, f"{did}/data")["rotationKeys"] == [pds_key]
    assert await run(app, parser.parse_args(["recovery-key", did, "--token", "WRONG-TOKEN"])) == 1
    assert "did not sign" in capsys.readouterr().err
    assert await run(app, parser.parse_args(["recovery-key", did, "--request"])) == 0
    assert "e-mailed a token" in capsys.readouterr().out
    token = emailed_token(devnet, did)
    assert await run(app, parser.parse_args(["recovery-key", did, "--token", token, "--json"])) == 0
    answer = json.loads(capsys.readouterr().out)
    owner = RotationKey.from_hex(answer["privateKeyHex"])
    keys = plc_get(devnet, f"{did}/data")["rotationKeys"]
    assert keys[0] == owner.did_key == answer["recoveryKey"] and keys[-1] == pds_key and len(keys) == 3
    from daemon.plugin.atproto import service_key_listed
    assert await service_key_listed(app, did)  # the service can sign a move again
    dump = "\n".join(str(tuple(r)) for r in await app.db.fetchall("SELECT * FROM community_accounts"))
    assert answer["privateKeyHex"] not in dump  # the owner's half is not kept

    # the owner's key alone repoints the identity (no service, no PDS)
    data = plc_get(devnet, f"{did}/data")
    moved = next_operation(data, operation_cid(plc_get(devnet, f"{did}/log/last")),
                           services={"atproto_pds": {"type": "AtprotoPersonalDataServer",
                                                     "endpoint": "https://pds.owner.example"}})
    assert plc_post(devnet, did, sign_operation(moved, owner)) == 200
    # and the service never replaces the owner's key
    assert await run(app, parser.parse_args(["recovery-key", did, "--did-key", RotationKey.generate().did_key])) == 1
    assert "never replaces" in capsys.readouterr().err
