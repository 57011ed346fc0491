"""A pending write that no request finishes (the daemon crashed, or the local transaction
failed, and the client never retried) is rolled back by the reconciler once it is older
than `communities.reconcile_after_seconds` (docs/communities.md, "Consistency")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plugins.communities.reconcile import reconcile
from tests.fixtures_communities import Api, FailIndexOnce, proofs_on_pds

pytestmark = pytest.mark.pds

AFTER = 300.0  # communities.reconcile_after_seconds (the default)


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return communities_config


@pytest.fixture
def extra_plugins(recorder: Any, failer: FailIndexOnce) -> tuple:
    return (recorder, failer)


async def pending_keys(app: Any) -> list[str]:
    return [r["key"] for r in await app.db.fetchall("SELECT key FROM write_intents WHERE kind LIKE 'communities.%' ORDER BY key")]


async def reconciled_entries(app: Any, did: str) -> list[dict[str, Any]]:
    rows = await app.db.fetchall(
        "SELECT target_did, metadata FROM audit_log WHERE community_did = ? AND action = 'reconciled'", (did,))
    return [{"target": r["target_did"], **json.loads(r["metadata"])} for r in rows]


def joined(recorder: Any, did: str, member: str) -> list[Any]:
    return [e for e in recorder.of("member.joined", did) if e.data["memberDid"] == member]


async def crashed_join(app: Any, client: Any, people: Any, failer: FailIndexOnce) -> tuple[Api, dict, dict, str]:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Crashy club"))["did"]
    failer.armed = "member.joined"
    resp = await api.join(did, bob["did"])
    assert resp.status == 500, resp.text
    # the proof reached the PDS, the index did not change: the state the reconciler repairs
    assert bob["did"] in await proofs_on_pds(app, did)
    assert await pending_keys(app) == [f"proof:{did}:{bob['did']}"]
    return api, alice, bob, did


async def test_orphan_proof_of_a_crashed_join_is_rolled_back_after_the_delay(
        app, client, people, failer, recorder, clock):
    api, alice, bob, did = await crashed_join(app, client, people, failer)

    # too young: a retry by the client may still come
    assert (await reconcile(app))["reconciled"] == 0
    assert bob["did"] in await proofs_on_pds(app, did)
    assert await pending_keys(app) != []

    clock.advance(AFTER + 1)
    counts = await reconcile(app)
    assert counts["reconciled"] == 1, counts
    assert list(await proofs_on_pds(app, did)) == [alice["did"]]
    assert await pending_keys(app) == []
    assert await api.check(did, bob["did"]) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert joined(recorder, did, bob["did"]) == []
    entries = await reconciled_entries(app, did)
    assert len(entries) == 1 and entries[0]["target"] == bob["did"]
    assert entries[0]["operation"] == "member.joined" and entries[0]["undone"]

    # and bob can still join normally afterwards
    resp = await api.join(did, bob["did"])
    assert resp.status == 201, resp.text
    assert list(await proofs_on_pds(app, did)).count(bob["did"]) == 1


async def test_startup_pass_settles_rows_of_any_age(app, client, people, failer):
    api, alice, bob, did = await crashed_join(app, client, people, failer)
    assert (await reconcile(app, any_age=True))["reconciled"] == 1
    assert list(await proofs_on_pds(app, did)) == [alice["did"]]
    assert await pending_keys(app) == []


async def test_a_retry_before_reconciliation_finishes_normally(app, client, people, failer, recorder, clock):
    api, alice, bob, did = await crashed_join(app, client, people, failer)
    first_rkey = (await proofs_on_pds(app, did))[bob["did"]]["uri"].rsplit("/", 1)[-1]

    resp = await api.join(did, bob["did"])
    assert resp.status == 201, resp.text
    assert await pending_keys(app) == []
    assert len(joined(recorder, did, bob["did"])) == 1

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["reconciled"] == 0
    proofs = await proofs_on_pds(app, did)
    assert proofs[bob["did"]]["uri"].rsplit("/", 1)[-1] == first_rkey  # same key reused, kept
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert await reconciled_entries(app, did) == []


async def test_pds_down_during_reconciliation_keeps_the_row_and_backs_off(
        app, client, people, failer, clock, monkeypatch):
    """The PDS "goes down" by refusing the connection before anything is sent: pausing the
    real PDS (SIGSTOP) cannot guarantee that, since the kernel still queues the request
    and the PDS carries it out after it resumes."""
    import httpx

    api, alice, bob, did = await crashed_join(app, client, people, failer)
    clock.advance(AFTER + 1)
    real_send = app.http.send

    async def refused(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.url.path.endswith("com.atproto.repo.deleteRecord"):
            raise httpx.ConnectError("connection refused", request=request)
        return await real_send(request, *args, **kwargs)

    monkeypatch.setattr(app.http, "send", refused)
    try:
        counts = await reconcile(app)
    finally:
        monkeypatch.setattr(app.http, "send", real_send)
    assert counts["postponed"] == 1 and counts["reconciled"] == 0, counts
    assert await pending_keys(app) == [f"proof:{did}:{bob['did']}"]
    assert await reconciled_entries(app, did) == []

    # waiting out the backoff: not tried again at once
    assert (await reconcile(app))["reconciled"] == 0
    assert bob["did"] in await proofs_on_pds(app, did)

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["reconciled"] == 1
    assert list(await proofs_on_pds(app, did)) == [alice["did"]]
    assert await pending_keys(app) == []


async def test_a_crashed_leave_puts_the_members_proof_back(app, client, people, failer, recorder, clock):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Leaky club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    proof = (await proofs_on_pds(app, did))[bob["did"]]

    failer.armed = "member.left"
    resp = await api.leave(did, bob["did"])
    assert resp.status == 500, resp.text
    assert bob["did"] not in await proofs_on_pds(app, did)  # deleted on the PDS, still a member here

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["reconciled"] == 1
    proofs = await proofs_on_pds(app, did)
    assert proofs[bob["did"]]["uri"] == proof["uri"]
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert recorder.of("member.left", did) == []
    assert await pending_keys(app) == []


async def test_an_unfinished_admins_change_is_undone_from_the_index(app, client, people, clock):
    from daemon.atproto.accounts import community_repo
    from plugins.communities.steps import admins_record, nsid
    from tests.fixtures_communities import pds_record

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Promoted club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    # a promotion that wrote the admins record and then crashed before its commit
    await app.writes.begin(kind="communities.admins", key=f"admins:{did}", community_did=did,
                           operation="admin.promoted", rkey="self",
                           payload={"admins": [alice["did"], bob["did"]]})
    repo = await community_repo(app, did)
    now = app.clock.iso_now()
    await repo.put_record(nsid(app, "admins"), "self", admins_record([(alice["did"], now), (bob["did"], now)], now))

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["reconciled"] == 1
    record = await pds_record(app, did, "admins")
    assert [a["did"] for a in record["admins"]] == [alice["did"]]
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert [e["operation"] for e in await reconciled_entries(app, did)] == ["admin.promoted"]


async def test_an_unfinished_removal_of_a_role_holder_puts_the_roles_record_back(
        app, client, people, failer, clock):
    """The removal put the roles record without the moderator and deleted their proof, then
    its transaction failed: the reconciler puts both back from the index (issue 22)."""
    from tests.fixtures_communities import pds_record

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Moderated club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert (await api.post(api.path(did, f"/members/{bob['did']}/roles"),
                           {"adminDid": alice["did"], "role": "moderator"})).status == 200
    failer.armed = "member.removed"
    resp = await api.delete(api.path(did, f"/members/{bob['did']}"), {"adminDid": alice["did"]})
    assert resp.status == 500, resp.text
    assert (await pds_record(app, did, "roles"))["members"] == []
    assert bob["did"] not in await proofs_on_pds(app, did)

    clock.advance(AFTER + 1)
    assert (await reconcile(app))["reconciled"] == 1
    assert (await pds_record(app, did, "roles"))["members"] == [{"did": bob["did"], "roles": ["moderator"]}]
    assert bob["did"] in await proofs_on_pds(app, did)
    assert (await api.check(did, bob["did"]))["roles"] == ["moderator"]
    assert f"put {app.config.atproto.namespace}.roles/self" in (await reconciled_entries(app, did))[0]["undone"]
