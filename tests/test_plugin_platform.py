"""What the platform offers a plugin beyond hooks (issue 23, items 3 and 5): declarations
checked before any migration, services found by type, the communities service's plain
answers, capabilities of a plugin's own, audit entries in its words, and event kinds of
its own that apps subscribe to and receive signed."""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from commonroom_testing.app import build_config
from daemon.plugin import (STRING, Actor, ApiError, BaseHandler, Capability, CommunitiesService, ConfigError,
                           EventKind, Principal, check_range, emit_tx, hookimpl, obj, operation)
from daemon.plugin.testing import FakeClock
from daemon.runtime.app import create_app
from daemon.runtime.declarations import DeclarationError, collect
from daemon.runtime.plugins import build_plugin_manager
from commonroom_testing.webhooks import LOOPBACK_TARGETS, subscribe
from tests.fixtures_webhooks import make_app_key, make_community, settle

COMMUNITY = "did:plc:community1"
BULLETIN_POSTED = EventKind("bulletin.posted", "A bulletin was posted.",
                          obj({"noticeId": STRING, "communityDid": STRING}, ["noticeId"]), "A bulletin was posted")


class Notices:
    """A test plugin: an event kind, a capability, a published service."""

    @hookimpl
    def cr_event_kinds(self) -> list[EventKind]:
        return [BULLETIN_POSTED]

    @hookimpl
    def cr_capabilities(self) -> list[Capability]:
        return [Capability("bulletins.pin", "pin a notice", moderator=True),
                Capability("bulletins.archive", "archive old notices")]


def plugin(**hooks: Any) -> Any:
    """A plugin object implementing `hooks` (name -> function returning the declaration)."""
    cls = type("P", (), {name: hookimpl(staticmethod(fn)) for name, fn in hooks.items()})
    return cls()


# ------------------------------------------------------------------ declarations


def test_check_range_names_the_key_and_the_range():
    check_range(5, "notices.limit", minimum=1, maximum=10)
    with pytest.raises(ConfigError, match=r"^notices\.limit: must be from 1 to 10$"):
        check_range(11, "notices.limit", minimum=1, maximum=10)
    with pytest.raises(ConfigError, match=r"^notices\.wait: must be more than 0$"):
        check_range(0, "notices.wait", above=0)
    with pytest.raises(ConfigError, match=r"must be at least 0 and less than 1"):
        check_range(1, "notices.jitter", minimum=0, below=1)


def test_the_built_in_kinds_and_capabilities_are_declared_like_any_plugins():
    declared = collect(build_plugin_manager(load_entry_points=False))
    assert list(declared.event_kinds)[:3] == ["member.joined", "member.left", "member.approved"]
    assert {"record.created", "record.updated", "record.deleted"} <= set(declared.event_kinds)
    assert declared.owner("event kind", "record.created") == "records"
    assert declared.owner("capability", "members.ban") == "communities"
    assert declared.capabilities["members.ban"].moderator and not declared.capabilities["records.create"].moderator


@pytest.mark.parametrize(("hooks", "message"), [
    ({"cr_event_kinds": lambda: [BULLETIN_POSTED, BULLETIN_POSTED]}, r"'P' declares the event kind 'bulletin.posted' twice"),
    ({"cr_event_kinds": lambda: [EventKind("member.joined", "again")]},
     r"'P' declares the event kind 'member.joined', which plugin 'communities' declares too"),
    ({"cr_capabilities": lambda: [Capability("members.ban", "mine")]},
     r"'P' declares the capability 'members.ban', which plugin 'communities' declares too"),
    ({"cr_event_kinds": lambda: [EventKind("Notice Posted", "x")]}, r"'P' declares the event kind 'Notice Posted'"),
    ({"cr_capabilities": lambda: ["bulletins.pin"]}, r"P.cr_capabilities must return a list of Capability"),
    ({"cr_event_kinds": lambda: [EventKind("bulletin.posted", "x", audience="admins")]},
     r"'P' declares the event kind 'bulletin.posted' for the audience 'admins' \(one of: community, managers\)"),
])
def test_a_bad_declaration_stops_start_up_naming_the_plugin_and_the_thing(hooks, message):
    pm = build_plugin_manager(load_entry_points=False)
    pm.register(plugin(**hooks), name="P")
    with pytest.raises(DeclarationError, match=message):
        collect(pm)


def test_a_plugin_that_fails_its_declarations_leaves_no_migration_behind(tmp_path, io_loop):
    bad = plugin(cr_event_kinds=lambda: [BULLETIN_POSTED, BULLETIN_POSTED])
    config, pm = build_config(tmp_path, {}, (bad,))
    with pytest.raises(DeclarationError, match="twice"):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))
    assert not config.database_path.exists()


def test_declared_hooks_in_a_module_are_found_and_checked_like_written_ones(tmp_path):
    """`declared(value)` assigned to a hook's name in a plugin's module: pluggy finds it, the
    declarations are collected and checked as any; a path is answered as a string, a list
    as a copy the caller cannot change the plugin's own through."""
    import json
    import types

    from daemon.plugin import WebFolders, declared

    lexicons = tmp_path / "lexicons"
    lexicons.mkdir()
    (lexicons / "com.example.bulletins.post.json").write_text(json.dumps(
        {"lexicon": 1, "id": "com.example.bulletins.post", "defs": {"main": {"type": "procedure"}}}))
    kinds = [BULLETIN_POSTED]
    module = types.ModuleType("bulletins")
    module.cr_event_kinds = declared(kinds)
    module.cr_capabilities = declared([Capability("bulletins.pin", "pin a notice", moderator=True)])
    module.cr_lexicons = declared(lexicons)
    module.cr_web_folders = declared(WebFolders(templates=str(tmp_path)))
    module.cr_migrations = declared(("bulletins", tmp_path / "migrations"))
    pm = build_plugin_manager(load_entry_points=False)
    pm.register(module, name="bulletins")
    found = collect(pm)
    assert found.owner("event kind", "bulletin.posted") == "bulletins"
    assert found.capabilities["bulletins.pin"].moderator
    assert "com.example.bulletins.post" in found.method_lexicons()
    assert found.web_folders["bulletins"].templates == str(tmp_path)
    assert module.cr_migrations() == ("bulletins", str(tmp_path / "migrations"))
    assert module.cr_lexicons() == str(lexicons)
    module.cr_event_kinds().clear()
    assert module.cr_event_kinds() == [BULLETIN_POSTED] and kinds == [BULLETIN_POSTED]
    # checked like any: the same kind declared twice stops start-up
    twice = types.ModuleType("twice")
    twice.cr_event_kinds = declared([BULLETIN_POSTED, BULLETIN_POSTED])
    pm.register(twice, name="twice")
    with pytest.raises(DeclarationError, match="twice"):
        collect(pm)


# ------------------------------------------------------------------ services by type


class Greeter(Protocol):
    def greet(self, name: str) -> str: ...


class Greeting:
    def greet(self, name: str) -> str:
        return f"hello {name}"


class Publisher:
    @hookimpl
    def cr_services(self, app: Any) -> dict[Any, Any]:
        return {Greeter: Greeting()}


@pytest.mark.parametrize("extra_plugins", [(Publisher(),)])
async def test_a_plugin_finds_any_service_by_its_interface(app):
    assert app.service(CommunitiesService) is app.communities is not None
    assert app.service(Greeter).greet("ann") == "hello ann"
    assert app.service(Protocol) is None


@pytest.mark.parametrize("config_overrides", [{"plugins": {"disabled": ["records", "webhooks", "web", "communities", "noticeboard", "reports", "events"]}}])
async def test_a_disabled_plugins_service_is_none_by_type_too(app):
    assert app.service(CommunitiesService) is None


def test_two_plugins_publishing_one_interface_stop_start_up(tmp_path, io_loop):
    config, pm = build_config(tmp_path, {}, (Publisher(), Publisher()))
    with pytest.raises(ConfigError, match="both register the service 'Greeter'"):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))


# ------------------------------------------------------------------ the communities service


async def _member(app: Any, community: str, did: str, *, admin_rank: int | None = None,
                  roles: str | None = None, grants: str | None = None) -> None:
    from plugins.communities import store as members
    async with app.db.transaction("test.member") as tx:
        await members.insert_member_tx(tx, community_did=community, member_did=did, now=app.clock.iso_now(),
                                       proof_rkey="3kp" + did[-4:], proof_cid=None, membership_uri=None,
                                       membership_cid=None, app_id=None)
        if roles is not None:
            await tx.execute("UPDATE members SET roles = ?, grants = ? WHERE community_did = ? AND member_did = ?",
                             (roles, grants, community, did))
    if admin_rank is not None:
        async with app.db.transaction("test.admin") as tx:
            await members.set_admins_tx(tx, community, [(did, app.clock.iso_now())])


@pytest.mark.parametrize("extra_plugins", [(Notices(),)])
async def test_the_communities_service_answers_with_plain_values(app, client):
    communities = app.service(CommunitiesService)
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY, type="private", creator_app_id=created["appId"])
    await _member(app, COMMUNITY, "did:plc:admin", admin_rank=0)
    await _member(app, COMMUNITY, "did:plc:mod1", roles="moderator", grants="members.ban")
    await _member(app, COMMUNITY, "did:plc:plain")

    by_did = await communities.community(COMMUNITY)
    assert by_did is not None and by_did.type == "private" and by_did.name == "Test"
    assert await communities.community("@Community1.TEST") == by_did
    assert await communities.community("nobody.test") is None

    status = await communities.membership(COMMUNITY, "did:plc:mod1")
    assert status.is_member and not status.is_admin and status.roles == ("moderator",)
    assert not (await communities.membership(COMMUNITY, "did:plc:stranger")).is_member

    # private: its app sees it, for members; another app and non-members do not
    assert await communities.may_see(Actor("did:plc:plain", created["appId"]), COMMUNITY)
    assert not await communities.may_see(Actor("did:plc:stranger", created["appId"]), COMMUNITY)
    assert not await communities.may_see(Actor("did:plc:plain", "app_other"), COMMUNITY)

    # a plugin's capability: admins hold it; the moderator role holds the one declared for it
    assert await communities.holds("did:plc:admin", COMMUNITY, "bulletins.archive")
    assert await communities.holds(Actor("did:plc:mod1"), COMMUNITY, "bulletins.pin")
    assert not await communities.holds("did:plc:mod1", COMMUNITY, "bulletins.archive")
    assert not await communities.holds("did:plc:plain", COMMUNITY, "bulletins.pin")
    assert await communities.holds("did:plc:mod1", COMMUNITY, "members.ban")
    with pytest.raises(ValueError, match="no plugin declares the capability 'bulletins.nothing'"):
        await communities.holds("did:plc:admin", COMMUNITY, "bulletins.nothing")


async def test_the_communities_rules_reach_a_plugin_through_the_service(app, client):
    """The visibility rules are the communities plugin's (issue 23 item 2): a plugin asks
    its service, by plain values, and may read inside its own transaction (`tx=`)."""
    from daemon.plugin import ApiError
    communities = app.service(CommunitiesService)
    created = await make_app_key(app, client)
    other = await make_app_key(app, client, "did:plc:dave", "other.example.com")
    await make_community(app, COMMUNITY, type="private", creator_app_id=created["appId"])
    async with app.db.transaction("test.roster") as tx:
        await tx.execute("UPDATE communities SET roster_visibility = 'admins' WHERE did = ?", (COMMUNITY,))

    seen = await communities.visible(COMMUNITY, created["appId"])
    assert (seen.did, seen.type, seen.roster_visibility, seen.require_user_proof) == (COMMUNITY, "private",
                                                                                       "admins", False)
    with pytest.raises(ApiError) as refused:
        await communities.visible(COMMUNITY, other["appId"])
    assert (refused.value.status, refused.value.code) == (404, "community_not_found")
    assert await communities.app_may_see(COMMUNITY, created["appId"])
    assert not await communities.app_may_see(COMMUNITY, other["appId"])
    assert await communities.app_may_see(COMMUNITY, None)  # the site's own pages
    assert await communities.sees_roster(COMMUNITY, created["appId"])
    assert not await communities.sees_roster(COMMUNITY, other["appId"])
    assert await communities.acts_for_admins(COMMUNITY, created["appId"])
    assert not await communities.acts_for_admins(COMMUNITY, other["appId"])

    # in a plugin's transaction, the service reads what that transaction wrote
    from plugins.communities import store as members

    class Undo(Exception):
        pass

    with pytest.raises(Undo):
        async with app.db.transaction("test.join") as tx:
            await members.insert_member_tx(tx, community_did=COMMUNITY, member_did="did:plc:new",
                                           now=app.clock.iso_now(), proof_rkey="3kpnew1", proof_cid=None,
                                           membership_uri=None, membership_cid=None, app_id=None)
            assert (await communities.membership(COMMUNITY, "did:plc:new", tx=tx)).is_member
            assert await communities.acts_for_admins(COMMUNITY, created["appId"], tx=tx)
            raise Undo  # rolled back: nothing of it stays
    assert not (await communities.membership(COMMUNITY, "did:plc:new")).is_member


@pytest.mark.parametrize("extra_plugins", [(Notices(),)])
async def test_a_plugins_audit_entry_reads_in_its_own_words_on_the_history(app, client):
    from tests.helpers import login_as
    await make_community(app, COMMUNITY)
    await _member(app, COMMUNITY, "did:plc:admin", admin_rank=0)
    async with app.db.transaction("bulletins.pin") as tx:
        await app.communities.audit_tx(tx, COMMUNITY, Actor("did:plc:admin"), "bulletin.pinned",
                                       "pinned a notice by", target_did="did:plc:writer", details={"noticeId": "n1"})
    session = await login_as(app, "did:plc:admin", "admin.test")
    page = await client.get(f"/c/{COMMUNITY}/settings/audit", session=session)
    assert page.status == 200, page.text
    assert "pinned a notice by" in page.text and "did:plc:writer" in page.text


# ------------------------------------------------------------------ event kinds of a plugin's own


@pytest.mark.parametrize(("extra_plugins", "config_overrides"), [((Notices(),), LOOPBACK_TARGETS)])
async def test_apps_subscribe_to_a_plugins_event_kind_and_receive_it_signed(app, client, webhook_receiver):
    # the shipped receiver verifies with standardwebhooks against the real time: the default
    # test clock starts there
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY)
    rec = webhook_receiver()
    await subscribe(client, created["apiKey"], rec, ["bulletin.posted"])
    async with app.db.transaction("bulletins.post") as tx:
        event = await emit_tx(app, tx, "bulletin.posted", community_did=COMMUNITY, data={"noticeId": "n1"})
    [got] = await rec.wait_for(1)
    assert got.verify_error is None and got.webhook_id == event.id
    assert got.verified["type"] == "bulletin.posted"
    assert got.verified["data"] == {"noticeId": "n1", "communityDid": COMMUNITY}
    await settle(app)

    unknown = await client.post("/api/v1/webhooks", api_key=created["apiKey"],
                                json={"url": rec.url, "events": ["bulletin.deleted"]})
    assert unknown.status == 400 and "unknown value(s) bulletin.deleted" in unknown.json()["message"]


@pytest.mark.parametrize("extra_plugins", [(Notices(),)])
async def test_the_openapi_document_and_the_developer_page_list_a_plugins_kinds(app, client):
    doc = (await client.get("/api/v1/openapi.json")).json()
    events = doc["paths"]["/api/v1/webhooks"]["post"]["requestBody"]["content"]["application/json"]["schema"][
        "properties"]["events"]
    assert "bulletin.posted" in events["items"]["enum"] and "member.joined" in events["items"]["enum"]
    assert events["maxItems"] == len(app.event_kinds) and "x-enum-of" not in str(doc)
    from openapi_spec_validator import validate
    validate(doc)
    # each kind is published with its description and the body a webhook receives
    assert set(doc["webhooks"]) == set(app.event_kinds)
    posted = doc["webhooks"]["bulletin.posted"]["post"]
    assert posted["description"] == "A bulletin was posted." and posted["x-event-audience"] == "community"
    body = posted["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["type"]["const"] == "bulletin.posted"
    assert body["properties"]["data"]["properties"]["noticeId"] == STRING
    assert set(body["properties"]["data"]["required"]) == {"noticeId", "communityDid"}
    reference = (await client.get("/api/v1/docs")).text
    assert "<a href='#events'>Event kinds</a>" in reference and "id='event-bulletin.posted'" in reference
    section = reference[reference.index("id='event-bulletin.posted'"):]
    section = section[:section.index("</section>")]
    assert "A bulletin was posted." in section and "noticeId" in section and "every app that may see" in section
    assert "id='event-member.joined'" in reference

    from tests.helpers import login_as
    session = await login_as(app, "did:plc:owner")
    created = await make_app_key(app, client)
    page = await client.get(f"/apps/{created['appId']}/webhooks/new", session=session)
    assert page.status == 200, page.text
    assert 'value="bulletin.posted"' in page.text and "A bulletin was posted" in page.text


async def test_emitting_an_undeclared_kind_is_refused_and_nothing_reaches_the_outbox(app):
    with pytest.raises(ValueError, match=r"'bulletin\.posted' is not declared"):
        async with app.db.transaction("bulletins.post") as tx:
            await emit_tx(app, tx, "bulletin.posted", community_did=COMMUNITY, data={"noticeId": "n1"})
    assert await app.db.fetchone("SELECT id FROM events WHERE type = 'bulletin.posted'") is None


@pytest.mark.parametrize("config_overrides", [LOOPBACK_TARGETS])
async def test_without_the_plugin_its_kind_is_refused_as_before(app, client, webhook_receiver):
    created = await make_app_key(app, client)
    resp = await client.post("/api/v1/webhooks", api_key=created["apiKey"],
                             json={"url": webhook_receiver().url, "events": ["bulletin.posted"]})
    assert resp.status == 400 and "unknown value(s) bulletin.posted" in resp.json()["message"]


def test_a_custom_role_may_grant_a_plugins_capability_only_while_it_is_declared():
    from daemon.plugin import ApiError
    from plugins.communities.capabilities import role_fields
    assert role_fields({"capabilities": ["bulletins.pin", "audit.read"]}, frozenset({"bulletins.pin"}))["capabilities"] \
        == ["audit.read", "bulletins.pin"]
    with pytest.raises(ApiError, match=r"capabilities\[0\]: must be one of .*audit.read"):
        role_fields({"capabilities": ["bulletins.pin"]})


@pytest.mark.parametrize("extra_plugins", [(Notices(),)])
async def test_the_roles_capability_enum_lists_the_plugins_capabilities(app, client):
    doc = (await client.get("/api/v1/openapi.json")).json()
    body = doc["paths"]["/api/v1/communities/{did}/roles"]["post"]["requestBody"]["content"]["application/json"]
    enum = body["schema"]["properties"]["capabilities"]["items"]["enum"]
    assert "bulletins.pin" in enum and "members.ban" in enum and "records.create" not in enum


# ------------------------------------------------------------------ plain values, never a request


def _handler_params(fn: Any) -> list[str]:
    import inspect
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.name == "handler" or "Handler" in str(p.annotation)]


async def test_services_take_plain_values_never_a_request_handler(app):
    """Issue 23 item 3: what a service offers can be asked from anywhere (a command, a job,
    another plugin), so no method of an interface, nor of the object registered for it,
    takes the request being served."""
    from daemon.runtime.services import SERVICE_TYPES, RecordsService
    for interface in [*SERVICE_TYPES.values(), RecordsService]:
        implementation = app.service(interface)
        assert implementation is not None, interface.__name__
        for attr, fn in vars(interface).items():
            if attr.startswith("_") or not callable(fn):
                continue
            assert _handler_params(fn) == [], f"{interface.__name__}.{attr}"
            assert _handler_params(getattr(implementation, attr)) == [], f"{type(implementation).__name__}.{attr}"


async def test_the_reads_the_routes_and_pages_share_answer_plain_values(app, client):
    """The community's details, members, requests and audit log, asked with a viewer's DID,
    an app id and a page's limit and keyset id, as a job or another plugin would ask them."""
    communities = app.service(CommunitiesService)
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY, creator_app_id=created["appId"])
    await _member(app, COMMUNITY, "did:plc:admin", admin_rank=0)
    for n in range(3):
        await _member(app, COMMUNITY, f"did:plc:member{n}")
    row = await communities.community_row(COMMUNITY)

    seen = await communities.details(row, "did:plc:member1", created["appId"])
    assert seen["membership"]["isMember"] and not seen["membership"]["isAdmin"]
    assert (await communities.details(row, None, None)).get("membership") is None
    first = await communities.list_members(row, limit=2, after_id=None, search=None, admin_view=False)
    assert [m["did"] for m in first["members"]] == ["did:plc:admin", "did:plc:member0"] and first["cursor"]
    assert (await communities.visibility(COMMUNITY, None)).members
    assert (await communities.require_admin(row, "did:plc:admin")).is_primary
    with pytest.raises(ApiError) as refused:
        await communities.require_admin(row, "did:plc:member0")
    assert refused.value.code == "not_admin"
    assert await communities.pending_list(row, limit=20, after_id=None) == {"pendingMembers": []}
    assert await communities.audit_log(row, limit=20, before_id=None, action="member.joined") == {"entries": []}
    fields = await communities.create_fields({"displayName": "Made elsewhere"})
    assert fields["type"] == app.config.plugin("communities").default_type


# ------------------------------------------------------------------ authentication


class TokenAuth:
    """An outside plugin's own credential (an ``X-Test-Token`` header): a token it knows is
    answered at once with the `Principal`, one it must look up through a coroutine."""

    @hookimpl
    def cr_authenticate(self, handler: Any) -> Any:
        token = handler.request.headers.get("X-Test-Token")
        if token is None:
            return None
        if token == "known":
            return Principal(kind="session", did="did:plc:knownperson")
        if token == "refused-now":
            raise ApiError(401, "invalid_token", "The test token is not valid.")

        async def look_up() -> Principal:
            if token == "stored":
                return Principal(kind="session", did="did:plc:storedperson")
            raise ApiError(401, "invalid_token", "The test token is not valid.")
        return look_up()

    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/test/whoami", WhoAmI)]


class WhoAmI(BaseHandler):
    auth = "session"

    @operation("test: who the request is from", responses={200: obj({"did": STRING})})
    async def get(self) -> None:
        self.send_json({"did": self.principal.did})


@pytest.mark.parametrize("extra_plugins", [(TokenAuth(),)])
async def test_a_plugin_may_answer_a_credential_it_knows_at_once_or_through_a_coroutine(app, client):
    known = await client.get("/test/whoami", headers={"X-Test-Token": "known"})
    assert known.status == 200 and known.json() == {"did": "did:plc:knownperson"}
    assert known.headers["RateLimit-Limit"] == str(app.config.rate_limits.session.requests)
    stored = await client.get("/test/whoami", headers={"X-Test-Token": "stored"})
    assert stored.status == 200 and stored.json() == {"did": "did:plc:storedperson"}
    wrong = await client.get("/test/whoami", headers={"X-Test-Token": "wrong"})
    assert wrong.status == 401 and wrong.json()["error"] == "invalid_token"
    assert (await client.get("/test/whoami")).status == 401


@pytest.mark.parametrize("extra_plugins", [(TokenAuth(),)])
async def test_a_credential_a_plugin_refuses_at_once_counts_towards_the_failed_auth_budget(app, client):
    budget = app.config.rate_limits.failed_auth.requests
    answers = []
    for token in ["refused-now", "wrong"] * ((budget + 2) // 2):
        answers.append((await client.get("/test/whoami", headers={"X-Test-Token": token})).status)
    assert answers[:budget] == [401] * budget and set(answers[budget:]) == {429}
    assert (await client.get("/test/whoami", headers={"X-Test-Token": "known"})).status == 200


def test_a_plugin_declaring_an_api_range_the_daemon_does_not_meet_stops_start_up(tmp_path) -> None:
    """`cr_plugin_api_version`: a plugin made for another major of the plugin API is refused,
    naming the plugin and both versions; one made for this one loads."""
    import pytest as _pytest

    from daemon.plugin import API_VERSION, hookimpl
    from daemon.runtime.plugins import PluginError, api_version_in, build_plugin_manager

    class FutureOnly:
        plugin_name = "future-polls"

        @hookimpl
        def cr_plugin_api_version(self) -> str:
            return ">=2.0,<3"

    class ThisOne:
        plugin_name = "polls"

        @hookimpl
        def cr_plugin_api_version(self) -> str:
            return ">=1.0,<2"

    with _pytest.raises(PluginError) as refused:
        build_plugin_manager((), (FutureOnly(),), load_entry_points=False)
    message = str(refused.value)
    assert "'future-polls'" in message and ">=2.0,<3" in message and API_VERSION in message
    assert build_plugin_manager((), (ThisOne(),), load_entry_points=False).has_plugin("polls")
    assert api_version_in("1.0", ">=1.0,<2") and not api_version_in("1.0", ">1.0") and api_version_in("1.4", "!=1.3")
