"""Community records stay consistent with the repo when the daemon fails half-way: a
record written to the PDS whose index transaction failed is indexed later with exactly one
event; a write that never reached the PDS leaves nothing; retries with the same rkey are
exactly-once (docs/records.md, "Consistency")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plugins.records.writes import reconcile
from tests.fixtures_communities import FailIndexOnce
from tests.test_records_api import COLLECTION, note, on_pds, path, setup

pytestmark = pytest.mark.pds

AFTER = 30.0  # records.reconcile_after_seconds (the default)


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return {**communities_config, "records": {"reconcile_after_seconds": AFTER}}


@pytest.fixture
def extra_plugins(recorder: Any, failer: FailIndexOnce) -> tuple:
    return (recorder, failer)


def events(recorder: Any, type: str, rkey: str) -> list[Any]:
    return [e for e in recorder.events if e.type == type and e.data["rkey"] == rkey]


async def pending(app: Any) -> list[tuple[str, str]]:
    rows = await app.db.fetchall("SELECT operation AS op, rkey FROM write_intents WHERE kind = 'records.write' ORDER BY id")
    return [(r["op"], r["rkey"]) for r in rows]


async def test_create_whose_index_transaction_fails_is_500_then_reconciled_once(
        app, client, people, devnet, recorder, failer, clock):
    api, did, alice, bob = await setup(app, client, people)
    failer.armed = "record.created"
    resp = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                      "record": note("written, not indexed")})
    assert resp.status == 500, resp.text
    assert resp.json()["error"] == "index_failed"
    rkey = resp.json()["details"]["rkey"]
    on = await on_pds(devnet, did, COLLECTION, rkey)
    assert on is not None and on["value"]["text"] == "written, not indexed"
    assert (await api.get(path(did, f"/{COLLECTION}/{rkey}"))).status == 404
    assert events(recorder, "record.created", rkey) == []
    assert await pending(app) == [("create", rkey)]

    assert (await reconcile(app))["finished"] == 0  # too young: its request may still be running
    clock.advance(AFTER + 1)
    assert (await reconcile(app))["finished"] == 1

    got = await api.get(path(did, f"/{COLLECTION}/{rkey}"))
    assert got.status == 200, got.text
    assert got.json()["cid"] == on["cid"] and got.json()["authorDid"] == bob["did"]
    created = events(recorder, "record.created", rkey)
    assert [(e.data["cid"], e.data["userDid"], e.app_id) for e in created] == [(on["cid"], bob["did"], api.app_id)]
    assert await pending(app) == []
    clock.advance(AFTER + 1)
    assert await reconcile(app) == {"finished": 0, "dropped": 0, "postponed": 0, "busy": 0}
    assert len(events(recorder, "record.created", rkey)) == 1


async def test_create_retried_with_the_same_rkey_is_one_record_and_one_event(
        app, client, people, devnet, recorder, failer):
    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "record": note("once"), "rkey": "once1"}
    failer.armed = "record.created"
    assert (await api.post(path(did), body)).status == 500

    retried = await api.post(path(did), body)
    assert retried.status == 201, retried.text
    on = await on_pds(devnet, did, COLLECTION, "once1")
    assert retried.json()["cid"] == on["cid"]
    again = await api.post(path(did), body)  # the answer was lost again: same answer, no new event
    assert again.status == 201 and again.json() == retried.json()
    assert len(events(recorder, "record.created", "once1")) == 1
    assert await pending(app) == []

    other = await api.post(path(did), {**body, "record": note("something else")})
    assert other.status == 409 and other.json()["error"] == "record_exists"
    listed = (await api.get(path(did, f"/{COLLECTION}"))).json()["records"]
    assert [(r["rkey"], r["value"]["text"]) for r in listed] == [("once1", "once")]


async def test_create_while_the_pds_is_down_is_502_and_dropped_when_it_never_happened(
        app, client, people, devnet, recorder, clock, monkeypatch):
    import httpx

    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "record": note("lost"), "rkey": "lost1"}
    real_send = app.http.send

    async def refused(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.url.path.endswith("com.atproto.repo.putRecord"):
            raise httpx.ConnectError("connection refused", request=request)
        return await real_send(request, *args, **kwargs)

    monkeypatch.setattr(app.http, "send", refused)
    resp = await api.post(path(did), body)
    monkeypatch.setattr(app.http, "send", real_send)
    assert resp.status == 502, resp.text
    assert resp.json()["details"]["rkey"] == "lost1"
    assert await pending(app) == [("create", "lost1")]

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["dropped"] == 1
    assert await pending(app) == []
    assert await on_pds(devnet, did, COLLECTION, "lost1") is None
    assert (await api.get(path(did, f"/{COLLECTION}/lost1"))).status == 404
    assert events(recorder, "record.created", "lost1") == []


async def test_create_while_the_pds_is_paused_is_502_and_settled_by_what_the_repo_holds(
        app, client, people, devnet, recorder, clock, monkeypatch):
    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "record": note("frozen"), "rkey": "frozen1"}
    real_send = app.http.send

    async def pause_before_the_write(request: Any, *args: Any, **kwargs: Any) -> Any:
        # the create first reads the key (docs/records.md, "Never replacing a record"):
        # freeze the PDS only once the write itself is on its way
        if request.url.path.endswith("com.atproto.repo.putRecord"):
            devnet.pause()
        return await real_send(request, *args, **kwargs)

    monkeypatch.setattr(app.http, "send", pause_before_the_write)
    try:
        resp = await api.post(path(did), body)
    finally:
        devnet.resume()
        monkeypatch.setattr(app.http, "send", real_send)
    assert resp.status == 502, resp.text
    assert await pending(app) == [("create", "frozen1")]
    assert events(recorder, "record.created", "frozen1") == []

    clock.advance(AFTER + 1)
    # The frozen PDS may still act on the request it had queued, once it runs again: wait
    # until it answers, then whatever the repo holds must be what the index and events say.
    await on_pds(devnet, did, COLLECTION, "frozen1")
    await asyncio.sleep(0.5)
    counts = await reconcile(app)
    on = await on_pds(devnet, did, COLLECTION, "frozen1")
    got = await api.get(path(did, f"/{COLLECTION}/frozen1"))
    created = events(recorder, "record.created", "frozen1")
    if on is None:
        assert counts["dropped"] == 1 and got.status == 404 and created == []
    else:
        assert counts["finished"] == 1 and got.json()["cid"] == on["cid"] and len(created) == 1
    assert await pending(app) == []


async def test_reconciler_keeps_the_row_while_the_pds_is_down_and_backs_off(
        app, client, people, devnet, recorder, failer, clock):
    api, did, alice, bob = await setup(app, client, people)
    failer.armed = "record.created"
    resp = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                      "record": note("later"), "rkey": "later1"})
    assert resp.status == 500
    clock.advance(AFTER + 1)
    devnet.pause()
    try:
        assert (await reconcile(app))["postponed"] == 1
    finally:
        devnet.resume()
    row = await app.db.fetchone("SELECT attempts, last_error FROM write_intents WHERE kind = 'records.write'")
    assert row["attempts"] == 1 and row["last_error"]
    assert (await reconcile(app))["finished"] == 0  # waiting out its backoff
    clock.advance(AFTER + 1)
    assert (await reconcile(app))["finished"] == 1
    assert (await api.get(path(did, f"/{COLLECTION}/later1"))).status == 200
    assert len(events(recorder, "record.created", "later1")) == 1


async def test_update_whose_index_transaction_fails_is_reconciled_once(
        app, client, people, devnet, recorder, failer, clock):
    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "record": note("v1"), "rkey": "upd1"}
    assert (await api.post(path(did), body)).status == 201
    failer.armed = "record.updated"
    resp = await client.put(path(did), api_key=api.key, json={**body, "record": note("v2")})
    assert resp.status == 500, resp.text
    on = await on_pds(devnet, did, COLLECTION, "upd1")
    assert on["value"]["text"] == "v2"
    assert (await api.get(path(did, f"/{COLLECTION}/upd1"))).json()["value"]["text"] == "v1"

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["finished"] == 1
    got = (await api.get(path(did, f"/{COLLECTION}/upd1"))).json()
    assert got["value"]["text"] == "v2" and got["cid"] == on["cid"] and got["updatedBy"] == bob["did"]
    assert [e.data["cid"] for e in events(recorder, "record.updated", "upd1")] == [on["cid"]]
    same = await client.put(path(did), api_key=api.key, json={**body, "record": note("v2")})
    assert same.status == 200 and same.json()["cid"] == on["cid"]
    assert len(events(recorder, "record.updated", "upd1")) == 1  # nothing changed: no event


async def test_delete_whose_index_transaction_fails_is_reconciled_once(
        app, client, people, devnet, recorder, failer, clock):
    api, did, alice, bob = await setup(app, client, people)
    made = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                      "record": note("doomed"), "rkey": "del1"})
    assert made.status == 201
    failer.armed = "record.deleted"
    resp = await client.delete(path(did, f"/{COLLECTION}/del1"), api_key=api.key,
                               params={"userDid": bob["did"]})
    assert resp.status == 500, resp.text
    assert await on_pds(devnet, did, COLLECTION, "del1") is None
    assert await pending(app) == [("delete", "del1")]

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["finished"] == 1
    assert (await api.get(path(did, f"/{COLLECTION}/del1"))).status == 404
    deleted = events(recorder, "record.deleted", "del1")
    assert [e.data["cid"] for e in deleted] == [made.json()["cid"]]
    assert await pending(app) == []


async def test_delete_retried_after_an_index_failure_answers_200_with_one_event(
        app, client, people, devnet, recorder, failer):
    api, did, alice, bob = await setup(app, client, people)
    made = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                      "record": note("doomed"), "rkey": "del2"})
    failer.armed = "record.deleted"
    target = path(did, f"/{COLLECTION}/del2")
    assert (await client.delete(target, api_key=api.key, params={"userDid": bob["did"]})).status == 500
    retried = await client.delete(target, api_key=api.key, params={"userDid": bob["did"]})
    assert retried.status == 200, retried.text
    assert retried.json()["cid"] == made.json()["cid"] and retried.json()["deleted"] is True
    assert len(events(recorder, "record.deleted", "del2")) == 1
    assert (await client.delete(target, api_key=api.key, params={"userDid": bob["did"]})).status == 404


async def test_a_restarted_daemon_finishes_what_the_previous_one_left(
        app, client, people, devnet, recorder, failer, state_dir, config_overrides):
    from daemon.runtime.app import create_app
    from tests.conftest import build_config
    from tests.fixtures_communities import EventRecorder
    from tests.fixtures_webhooks import wait_until

    api, did, alice, bob = await setup(app, client, people)
    failer.armed = "record.created"
    resp = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                      "record": note("before the crash"), "rkey": "crash1"})
    assert resp.status == 500
    # A new daemon on the same database: its start-up pass settles rows of any age.
    after_restart = EventRecorder()
    config, pm = build_config(state_dir, config_overrides, (after_restart,))
    second = await create_app(config, pm)
    try:
        await wait_until(lambda: after_restart.events, what="the start-up reconciliation")
        assert [(e.type, e.data["rkey"]) for e in after_restart.events] == [("record.created", "crash1")]
        assert await pending(second) == []
    finally:
        await second.shutdown()
    assert (await api.get(path(did, f"/{COLLECTION}/crash1"))).status == 200
