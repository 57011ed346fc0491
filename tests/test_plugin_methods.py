"""A plugin acts for a user under its own NSID authority (issue 23, item 6): its method
ids, the lexicons it ships, the one proof call, and what start-up refuses."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from commonroom_testing.app import build_config
from daemon.plugin import STRING, BaseHandler, UserMethod, hookimpl, obj, operation, prove_acting_user
from daemon.plugin.testing import FakeClock
from daemon.runtime.app import create_app
from daemon.runtime.declarations import DeclarationError

METHOD = "com.example.notices.post"
LEXICON = {"lexicon": 1, "id": METHOD, "defs": {"main": {
    "type": "procedure", "description": "Post a notice",
    "input": {"encoding": "application/json", "schema": {
        "type": "object", "required": ["userDid"], "properties": {"userDid": {"type": "string", "format": "did"}}}}}}}


class PostNotice(BaseHandler):
    auth = "app"
    user_methods = {"POST": UserMethod(METHOD, "userDid", "Post a notice")}

    @operation("Post a notice as a proven user", body=obj({"userDid": STRING}, ["userDid"]),
               responses={200: obj({"proven": {"type": "boolean"}}, ["proven"])})
    async def post(self) -> None:
        body = self.json_body()
        required = self.get_query_argument("required", "") == "1"
        self.send_json({"proven": await prove_acting_user(self, body["userDid"], required=required)})


class Notices:
    __name__ = "notices"  # the plugin's registered name

    def __init__(self, lexicons: Path | None, method: UserMethod | None = None) -> None:
        self.lexicons = lexicons
        self.method = method

    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        handler = PostNotice
        if self.method is not None:
            handler = type("Other", (PostNotice,), {"user_methods": {"POST": self.method}})
        return [(r"/notices", handler)]

    @hookimpl
    def cr_lexicons(self) -> str | None:
        return None if self.lexicons is None else str(self.lexicons)


def lexicon_dir(tmp_path: Path, doc: dict[str, Any] = LEXICON) -> Path:
    folder = tmp_path / "lexicons"
    folder.mkdir(exist_ok=True)
    (folder / f"{doc['id']}.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return communities_config      # the devnet


@pytest.fixture
def extra_plugins(tmp_path: Path) -> tuple:
    return (Notices(lexicon_dir(tmp_path)),)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())  # tokens carry the PDS's real time


async def test_a_plugins_method_id_is_its_own_nsid_and_listed_with_the_builtins(app, client):
    listed = {m["id"]: m for m in (await client.get("/api/v1/method-ids")).json()["methods"]}
    assert listed[METHOD] == {"id": METHOD, "httpMethod": "POST", "path": "/notices", "userField": "userDid",
                              "description": "Post a notice"}
    assert "community.commonroom.membership.join" in listed
    doc = (await client.get("/api/v1/openapi.json")).json()
    assert doc["paths"]["/notices"]["post"]["x-atproto-method-id"] == METHOD


@pytest.mark.pds
async def test_the_one_proof_call_takes_the_users_token_for_the_plugins_method(app, client, devnet, people):
    from commonroom_testing.communities import Api
    api = await Api.make(app, client)
    alice = people("alice")
    aud = app.proofs.did

    async def post(headers: dict[str, str] | None = None, required: bool = False) -> Any:
        return await client.post("/notices" + ("?required=1" if required else ""), api_key=api.key,
                                 json={"userDid": alice["did"]}, headers=headers or {})

    def bearer(lxm: str) -> dict[str, str]:
        got = devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": aud, "lxm": lxm},
                          token=alice["accessJwt"])
        return {"Authorization": f"Bearer {got['token']}"}

    assert (await post()).json() == {"proven": False}            # optional, no token: the app's word
    refused = await post(required=True)
    assert refused.status == 401 and refused.json()["error"] == "user_proof_required"
    assert f"lxm={METHOD}" in refused.json()["message"]
    proven = await post(bearer(METHOD), required=True)
    assert proven.status == 200 and proven.json() == {"proven": True}, proven.text
    wrong = await post(bearer("community.commonroom.membership.join"))
    assert wrong.status == 401 and wrong.json()["error"] == "proof_wrong_method"


def _tables(path: Path) -> list[str]:
    if not path.exists():
        return []
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


@pytest.mark.parametrize(("make", "message"), [
    (lambda tmp: Notices(None), f"plugin 'notices' acts for a user as '{METHOD}' (POST /notices"),
    (lambda tmp: Notices(lexicon_dir(tmp), UserMethod("membership.join", "userDid")),
     "declares the method id 'community.commonroom.membership.join' (POST /api/v1/communities/"),
    (lambda tmp: Notices(lexicon_dir(tmp, {**LEXICON, "defs": {"main": {"type": "record"}}})), "no plugin ships its lexicon"),
])
def test_start_up_refuses_a_method_without_its_lexicon_or_taken_before_any_migration(tmp_path, io_loop, make, message):
    config, pm = build_config(tmp_path / "state", {}, (make(tmp_path),))
    with pytest.raises(DeclarationError, match=message.replace("(", r"\(").replace(".", r"\.")):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))
    assert _tables(config.database_path) == []


class ReadNotice(PostNotice):
    user_methods = {"GET": UserMethod(METHOD, "userDid", "Read a notice")}


class SplitNotices(Notices):
    """One plugin whose routes, in two modules of its package, share one method id."""

    def __init__(self, lexicons: Path, name: str = "notices") -> None:
        super().__init__(lexicons)
        self.__name__ = name

    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        post = type("PostNotice", (PostNotice,), {"__module__": f"commonroom_{self.__name__}.api"})
        read = type("ReadNotice", (ReadNotice,), {"__module__": f"commonroom_{self.__name__}.pages"})
        return [(rf"/{self.__name__}/post", post), (rf"/{self.__name__}/read", read)]


class Bulletins:
    __name__ = "bulletins"

    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/bulletins", PostNotice)]     # another plugin, the notices plugin's method id


def test_one_plugin_may_share_a_method_id_across_its_modules_but_two_plugins_may_not(tmp_path, io_loop):
    config, pm = build_config(tmp_path / "state", {}, (SplitNotices(lexicon_dir(tmp_path)),))
    app = io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock(), start=False))
    try:
        assert app.route_plugins["/notices/post"] == app.route_plugins["/notices/read"] == "notices"
    finally:
        io_loop.run_sync(app.shutdown)

    config, pm = build_config(tmp_path / "state2", {}, (SplitNotices(lexicon_dir(tmp_path)), Bulletins()))
    with pytest.raises(DeclarationError, match=r"plugin '(notices|bulletins)' declares the method id "
                                                rf"'{METHOD}' .*which plugin '(notices|bulletins)' declares too"):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))
    assert _tables(config.database_path) == []


def test_a_lexicon_file_must_be_named_after_its_id(tmp_path, io_loop):
    folder = tmp_path / "lex"
    folder.mkdir()
    (folder / "wrong.json").write_text(json.dumps(LEXICON))
    config, pm = build_config(tmp_path / "state", {}, (Notices(folder),))
    with pytest.raises(DeclarationError, match=f"ships the lexicon '{METHOD}' in wrong.json"):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))
