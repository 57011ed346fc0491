"""One form of a collection NSID (issue 22, hole 3): an NSID's authority is a domain name,
so `ORG.example.note` and `org.example.note` name the same collection. Before, the
allowlist and the protected namespaces folded the case but the permission rules and role
grants did not, so a plain member refused in `org.example.note` wrote to
`ORG.example.note`. Now every place that takes a collection refuses one whose authority is
not lower-case (400 ``invalid_request``, saying the canonical form): records routes,
permission rules, role grants, the community's allowlist and the operator's lists."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.test_records_api import note, path

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()

NOTE = "org.example.note"
UNCANONICAL = ("ORG.example.note", "Org.Example.note", "org.EXAMPLE.note")


def refused(resp: Any, status: int, code: str) -> None:
    assert (resp.status, resp.json()["error"]) == (status, code), resp.text


def settings_path(did: str) -> str:
    return f"/api/v1/communities/{did}/records-settings"


async def test_a_permission_rule_cannot_be_bypassed_by_the_case_of_the_authority(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Case club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    rules = await client.put(settings_path(did), api_key=api.key, json={
        "adminDid": alice["did"], "permissions": {NOTE: {"create": "role"}}})
    assert rules.status == 200, rules.text

    refused(await api.post(path(did), {"userDid": bob["did"], "collection": NOTE, "record": note("x", NOTE)}),
            403, "not_permitted")
    for collection in UNCANONICAL:
        resp = await api.post(path(did), {"userDid": bob["did"], "collection": collection,
                                          "record": note("x", collection)})
        refused(resp, 400, "invalid_request")
        assert resp.json()["details"][0]["field"] == "collection"
        assert NOTE in resp.json()["message"]
        refused(await api.get(path(did, f"/{collection}")), 400, "invalid_request")
        refused(await api.get(path(did, f"/{collection}/abc")), 400, "invalid_request")
        refused(await api.delete(path(did, f"/{collection}/abc"), {"userDid": bob["did"]}), 400, "invalid_request")
    assert (await api.get(path(did, f"/{NOTE}"))).json()["records"] == []


async def test_rules_grants_and_allowlists_refuse_an_uncanonical_collection(app, client, people):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Case rules"))["did"]
    for collection in UNCANONICAL:
        resp = await client.put(settings_path(did), api_key=api.key, json={
            "adminDid": alice["did"], "permissions": {collection: {"create": "admins"}}})
        refused(resp, 400, "invalid_request")
        resp = await client.put(settings_path(did), api_key=api.key, json={
            "adminDid": alice["did"], "allowedCollections": [collection]})
        refused(resp, 400, "invalid_request")
        resp = await api.post(api.path(did, "/roles"), {
            "adminDid": alice["did"], "name": "writer",
            "collections": [{"collection": collection, "capabilities": ["records.create"]}]})
        refused(resp, 400, "invalid_request")
        assert resp.json()["details"][0]["field"] == "collections[0].collection"
    refused(await client.put(settings_path(did), api_key=api.key, json={
        "adminDid": alice["did"], "allowedCollections": ["ORG.example.*"]}), 400, "invalid_request")
    settings = (await api.get(settings_path(did))).json()
    assert settings["allowedCollections"] is None and settings.get("permissions", {}) == {}


def test_the_operator_lists_refuse_an_uncanonical_collection():
    from daemon.runtime.config import ConfigError
    from plugins.records.settings import RecordsConfig, check
    with pytest.raises(ConfigError, match=r"records\.denied_collections\[0\]"):
        check(RecordsConfig(denied_collections=("ORG.example.note",)), "community.commonroom")
    with pytest.raises(ConfigError, match=r"records\.allowed_collections\[1\]"):
        check(RecordsConfig(allowed_collections=("org.example.*", "Org.Example.*")), "community.commonroom")
    check(RecordsConfig(allowed_collections=("org.example.Note", "org.example.*")), "community.commonroom")
