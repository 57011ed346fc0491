"""Who may write in a collection (docs/records.md, "Who may write"), against the devnet:
a custom role granting records.create on one collection lets its holders write there and
nowhere else it is required; rules per action (members, author, role, admins) hold for
create, update and delete; every refusal leaves the PDS unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.test_records_api import COLLECTION, note, on_pds, path

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()

OTHER = "org.example.garden.chat"


def settings_path(did: str) -> str:
    return f"/api/v1/communities/{did}/records-settings"


async def community(app: Any, client: Any, people: Any) -> tuple[Api, str, dict, dict, dict]:
    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Garden club"))["did"]
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 201
    return api, did, alice, bob, carol


async def set_permissions(client: Any, api: Api, did: str, admin: str, permissions: Any) -> Any:
    return await client.put(settings_path(did), api_key=api.key, json={"adminDid": admin, "permissions": permissions})


async def test_a_role_with_records_create_on_one_collection_lets_its_holders_write_there(
        app, client, people, devnet):
    api, did, alice, bob, carol = await community(app, client, people)
    role = await api.post(api.path(did, "/roles"), {
        "adminDid": alice["did"], "name": "gardener",
        "collections": [{"collection": COLLECTION, "capabilities": ["records.create"]}]})
    assert role.status == 201, role.text
    assert (await api.post(api.path(did, f"/members/{bob['did']}/roles"),
                           {"adminDid": alice["did"], "role": "gardener"})).status == 200
    rules = await set_permissions(client, api, did, alice["did"], {COLLECTION: {"create": "role"},
                                                                   OTHER: {"create": "role"}})
    assert rules.status == 200, rules.text
    assert rules.json()["permissions"] == {
        COLLECTION: {"create": "role", "update": "author", "delete": "author"},
        OTHER: {"create": "role", "update": "author", "delete": "author"}}
    assert rules.json()["allowedCollections"] is None  # left as it was

    made = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION, "rkey": "b1",
                                      "record": note("bob plants")})
    assert made.status == 201, made.text
    assert (await on_pds(devnet, did, COLLECTION, "b1"))["value"]["text"] == "bob plants"

    denied = await api.post(path(did), {"userDid": carol["did"], "collection": COLLECTION, "rkey": "c1",
                                        "record": note("carol plants")})
    assert (denied.status, denied.json()["error"]) == (403, "not_permitted"), denied.text
    assert await on_pds(devnet, did, COLLECTION, "c1") is None

    # The grant is for one collection: bob may not create in the other restricted one.
    elsewhere = await api.post(path(did), {"userDid": bob["did"], "collection": OTHER, "rkey": "b2",
                                           "record": note("chat", OTHER)})
    assert (elsewhere.status, elsewhere.json()["error"]) == (403, "not_permitted"), elsewhere.text
    assert await on_pds(devnet, did, OTHER, "b2") is None
    # Admins hold every capability.
    assert (await api.post(path(did), {"userDid": alice["did"], "collection": OTHER,
                                       "record": note("admin", OTHER)})).status == 201
    # Unrestricted collections stay open to every member.
    assert (await api.post(path(did), {"userDid": carol["did"], "collection": "org.example.garden.misc",
                                       "record": note("free", "org.example.garden.misc")})).status == 201

    entries = await api.audit(did, alice["did"], action="records.permissions_changed")
    assert len(entries) == 1 and entries[0]["metadata"]["permissions"][COLLECTION]["create"] == "role"


async def test_update_and_delete_follow_the_collection_rules(app, client, people, devnet):
    api, did, alice, bob, carol = await community(app, client, people)
    rkey = (await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                       "record": note("bob's")})).json()["rkey"]
    assert (await set_permissions(client, api, did, alice["did"],
                                  {COLLECTION: {"update": "members", "delete": "admins"}})).status == 200

    # update: members: carol may edit bob's record
    edit = await client.put(path(did), api_key=api.key, json={"userDid": carol["did"], "collection": COLLECTION,
                                                              "rkey": rkey, "record": note("carol's edit")})
    assert edit.status == 200, edit.text
    assert (await on_pds(devnet, did, COLLECTION, rkey))["value"]["text"] == "carol's edit"
    # delete: admins: not even the author
    own = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key, params={"userDid": bob["did"]})
    assert (own.status, own.json()["error"]) == (403, "not_permitted"), own.text
    assert await on_pds(devnet, did, COLLECTION, rkey) is not None
    by_admin = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key,
                                   params={"userDid": alice["did"]})
    assert by_admin.status == 200, by_admin.text
    assert await on_pds(devnet, did, COLLECTION, rkey) is None

    # A role granting records.update lets its holder edit others' records under the default rule.
    assert (await set_permissions(client, api, did, alice["did"], None)).json()["permissions"] == {}
    rkey = (await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                       "record": note("bob again")})).json()["rkey"]
    plain = await client.put(path(did), api_key=api.key, json={"userDid": carol["did"], "collection": COLLECTION,
                                                               "rkey": rkey, "record": note("x")})
    assert (plain.status, plain.json()["error"]) == (403, "not_author")
    assert (await api.post(api.path(did, "/roles"), {
        "adminDid": alice["did"], "name": "editor",
        "collections": [{"collection": COLLECTION, "capabilities": ["records.update"]}]})).status == 201
    assert (await api.post(api.path(did, f"/members/{carol['did']}/roles"),
                           {"adminDid": alice["did"], "role": "editor"})).status == 200
    edited = await client.put(path(did), api_key=api.key, json={"userDid": carol["did"], "collection": COLLECTION,
                                                                "rkey": rkey, "record": note("edited")})
    assert edited.status == 200, edited.text
    assert (await on_pds(devnet, did, COLLECTION, rkey))["value"]["text"] == "edited"


@pytest.mark.parametrize("permissions, field", [
    ({COLLECTION: {"create": "author"}}, f"permissions.{COLLECTION}.create"),
    ({COLLECTION: {"update": "everyone"}}, f"permissions.{COLLECTION}.update"),
    ({COLLECTION: {"publish": "members"}}, f"permissions.{COLLECTION}"),
    ({"not an nsid": {"create": "role"}}, "permissions.not an nsid"),
    ([COLLECTION], "permissions"),
])
async def test_bad_permissions_are_400_and_change_nothing(app, client, people, permissions, field):
    api, did, alice, bob, carol = await community(app, client, people)
    resp = await set_permissions(client, api, did, alice["did"], permissions)
    assert resp.status == 400, resp.text
    assert resp.json()["details"][0]["field"] == field
    assert (await api.get(settings_path(did))).json()["permissions"] == {}


async def test_only_an_admin_sets_permissions(app, client, people):
    api, did, alice, bob, carol = await community(app, client, people)
    assert (await api.post(api.path(did, f"/members/{bob['did']}/roles"),
                           {"adminDid": alice["did"], "role": "moderator"})).status == 200
    resp = await set_permissions(client, api, did, bob["did"], {COLLECTION: {"create": "admins"}})
    assert (resp.status, resp.json()["error"]) == (403, "not_admin")
    assert (await api.get(settings_path(did))).json()["permissions"] == {}
