"""A DID an app names for a person is checked before it is written anywhere: strict
did:plc / did:web syntax, then resolution through the identity layer (docs/communities.md,
"Which DIDs are accepted"). Against the devnet: refused joins, requests, promotions,
transfers and creations leave the community's repo on the PDS and the local index as they
were. Also: approving or rejecting someone who is not pending, and `POST /login` with a
did:web this service may not call."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record, proofs_on_pds
from tests.helpers import login_as

config_overrides, extra_plugins = devnet_module_fixtures()

DOCS = Path(__file__).resolve().parent.parent / "docs"
METADATA_IP = "169.254.169.254"


def bad_dids(real_did: str) -> list[tuple[str, str]]:
    """(DID, expected 400 code) for every kind of DID that must never become a member."""
    method_specific = real_did[len("did:plc:"):]
    return [
        ("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "unsupported_did"),  # other method
        ("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "unknown_did"),            # well-formed, not in the PLC
        ("did:plc:" + method_specific.upper(), "invalid_request"),       # a real DID, upper-cased
        (f"did:web:{METADATA_IP}", "unsupported_did"),                    # an IP address, never called
    ]


async def snapshot(app: Any, api: Api, did: str) -> dict[str, Any]:
    """Everything a refused request must leave alone, on the PDS and in the index."""
    details = (await api.get(api.path(did))).json()["community"]
    admin = details["primaryAdmin"]
    members = (await api.get(api.path(did, "/members"), limit=100)).json()
    pending = (await api.get(api.path(did, "/members/pending"), adminDid=admin)).json()
    return {
        "proofs": sorted(await proofs_on_pds(app, did)),
        "pds_admins": [a["did"] for a in (await pds_record(app, did, "admins"))["admins"]],
        "admins": [a["did"] for a in details["admins"]],
        "members": [m["did"] for m in members["members"]],
        "total": members["total"],
        "pending": [p["userDid"] for p in pending["pendingMembers"]],
        "member_rows": await app.db.fetchval("SELECT count(*) FROM members WHERE community_did = ?", (did,)),
        "requests": await app.db.fetchval("SELECT count(*) FROM join_requests WHERE community_did = ?", (did,)),
        "pending_writes": await app.db.fetchval("SELECT count(*) FROM write_intents"),
        "audit": await app.db.fetchval("SELECT count(*) FROM audit_log WHERE community_did = ?", (did,)),
        "events": await app.db.fetchval("SELECT count(*) FROM events WHERE community_did = ?", (did,)),
    }


def refused(resp: Any, status: int, code: str, did: str) -> None:
    assert resp.status == status, (did, resp.text)
    assert resp.json()["error"] == code, (did, resp.text)


async def add_legacy_member(app: Any, community_did: str, member_did: str) -> None:
    """A member row as a join before these checks (or an old index) could have left it: the
    promote and transfer checks must not trust the index to hold only real people."""
    from plugins.communities import store as communities_store
    from plugins.communities import store as members_store
    async with app.db.transaction("tests.legacy_member") as tx:
        await members_store.insert_member_tx(
            tx, community_did=community_did, member_did=member_did, now=app.clock.iso_now(),
            proof_rkey="3legacy" + str(abs(hash(member_did)) % 10**6), proof_cid=None, membership_uri=None,
            membership_cid=None, app_id=None)
        await communities_store.adjust_counts_tx(tx, community_did, members=1)


@pytest.mark.pds
async def test_join_and_join_request_refuse_bad_or_unknown_dids_and_write_nothing(app, client, people, http_log,
                                                                                  recorder):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    open_did = (await api.create(alice, "Open doors"))["did"]
    gated_did = (await api.create(alice, "Closed doors", type="admin-approved"))["did"]
    before = {d: await snapshot(app, api, d) for d in (open_did, gated_did)}
    events_before = len(recorder.events)
    http_log.clear()

    for user, code in bad_dids(bob["did"]):
        for community in (open_did, gated_did):
            refused(await api.join(community, user), 400, code, user)
            # membership/check stays a read of the index: "not a member", nothing resolved
            assert await api.check(community, user) == {"isMember": False, "isAdmin": False, "isPending": False}

    assert {d: await snapshot(app, api, d) for d in (open_did, gated_did)} == before
    assert len(recorder.events) == events_before
    # Syntax refusals send nothing anywhere; only the well-formed did:plc was looked up,
    # at the PLC directory (and only by the join, never by membership/check).
    assert not [u for u in http_log.urls if METADATA_IP in u or "did:key" in u or "did:plc:" + bob["did"][8:].upper() in u]
    assert [u for u in http_log.urls if "aaaaaaaaaaaaaaaaaaaaaaaa" in u] == \
        [f"{app.config.atproto.plc_url.rstrip('/')}/did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"] * 2
    # a real person still joins both
    assert (await api.join(open_did, bob["did"])).status == 201
    assert (await api.join(gated_did, bob["did"])).status == 202


@pytest.mark.pds
async def test_promote_and_transfer_refuse_members_whose_did_is_bad_or_unknown(app, client, people, http_log):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Old index"))["did"]
    cases = bad_dids(bob["did"])
    for user, _ in cases:
        await add_legacy_member(app, did, user)
    before = await snapshot(app, api, did)
    session = await login_as(app, alice["did"], alice["handle"])
    http_log.clear()

    for user, code in cases:
        refused(await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": user}), 400, code, user)
        refused(await client.post(f"/communities/{did}/members/{user}/admin", session=session), 400, code, user)
        refused(await api.admins(did, "transfer", {"currentOwnerDid": alice["did"], "newOwnerDid": user}),
                400, code, user)

    assert await snapshot(app, api, did) == before
    assert not [u for u in http_log.urls if METADATA_IP in u or "did:key" in u]
    # the refusals that need no look-up still come first
    refused(await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": "did:plc:aaaaaaaaaaaaaaaaaaaaaaab"}),
            404, "not_member", "not a member")


@pytest.mark.pds
async def test_create_refuses_a_creator_did_that_does_not_resolve(app, client):
    api = await Api.make(app, client)
    for creator, code in bad_dids("did:plc:abcdefghijklmnopqrstuvwx"):
        resp = await api.post("/api/v1/communities", {"creatorDid": creator, "displayName": "Ghost town",
                                                      "handle": "ghost" + creator[-4:].lower().replace(".", "")})
        refused(resp, 400, code, creator)
    assert await app.db.fetchval("SELECT count(*) FROM communities") == 0
    assert await app.db.fetchval("SELECT count(*) FROM account_provisioning") == 0


@pytest.mark.pds
async def test_join_request_while_the_directory_is_unreachable_is_502_and_changes_nothing(
        app, client, people, devnet):
    """The devnet is paused (SIGSTOP): the PLC directory that would vouch for the new DID
    does not answer. An admin-approved request writes only to the index, so without the
    check it would be accepted unchecked."""
    api = await Api.make(app, client)
    alice, dana = people("alice"), people("dana")   # dana was never resolved by this app
    did = (await api.create(alice, "Patient club", type="admin-approved"))["did"]
    before = await snapshot(app, api, did)
    devnet.pause()
    try:
        resp = await api.join(did, dana["did"])
    finally:
        devnet.resume()
    assert resp.status == 502, resp.text
    assert resp.json()["error"] == "pds_error"
    assert await snapshot(app, api, did) == before
    # the same request succeeds once the directory answers
    assert (await api.join(did, dana["did"])).status == 202


@pytest.mark.pds
async def test_approve_or_reject_a_member_is_409_and_someone_who_never_asked_is_404(app, client, people):
    api = await Api.make(app, client)
    alice, bob, dave = people("alice"), people("bob"), people("dave")
    did = (await api.create(alice, "Strict door", type="admin-approved"))["did"]
    assert (await api.join(did, bob["did"])).status == 202
    assert (await api.decide(did, "approve", alice["did"], bob["did"])).status == 200
    before = await snapshot(app, api, did)
    session = await login_as(app, alice["did"], alice["handle"])

    for decision in ("approve", "reject"):
        refused(await api.decide(did, decision, alice["did"], bob["did"]), 409, "already_member", decision)
        refused(await client.post(f"/communities/{did}/members/{bob['did']}/{decision}", session=session),
                409, "already_member", decision)
        refused(await api.decide(did, decision, alice["did"], dave["did"]), 404, "no_pending_request", decision)
    assert await snapshot(app, api, did) == before

    # and the state machine in docs/communities.md says the same
    text = (DOCS / "communities.md").read_text()
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:5])
            for line in text.splitlines() if line.startswith("|") and "approve / reject" in line}
    codes = {(r[0], r[4]) for r in rows}
    assert ("member", "**409** `already_member`") in codes, rows
    assert ("none", "**404** `no_pending_request`") in codes, rows
    assert not re.search(r"\| not pending \| approve", text)


@pytest.mark.parametrize("config_overrides", [{}])  # the defaults: public addresses only
@pytest.mark.parametrize("did", [f"did:web:{METADATA_IP}", "did:web:localhost"])
async def test_login_with_a_did_web_this_service_may_not_call_is_a_400(app, client, http_log, did):
    """`did:web:169.254.169.254` is refused by its syntax (an IP address: nothing is sent);
    `did:web:localhost` names a host that resolves to loopback, which the outbound guard
    refuses (the attempt never connects). Both are the person's input: 400, not 502."""
    resp = await client.post("/login", json={"input": did})
    assert resp.status == 400, resp.text
    assert resp.json()["error"] == "unsupported_did"
    form = await client.post("/login", body=f"input={did}",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status == 400 and form.headers["Content-Type"].startswith("text/html")
    assert "unsupported_did" in form.text and "did:plc and did:web" in form.text
    assert not [u for u in http_log.urls if METADATA_IP in u]


async def test_approving_an_old_request_from_a_bad_did_writes_nothing(app, client):
    """A join request stored before DIDs were checked (put in the index directly here) is
    refused on approval with the same codes as a join, before anything is written."""
    from plugins.communities import store as members_store
    from tests.fixtures_communities import Api, seed_community
    api = await Api.make(app, client)
    community = await seed_community(app, "did:plc:admin", type="admin-approved", creator_app_id=api.app_id)
    old = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    async with app.db.transaction("tests.old_request") as tx:
        await members_store.insert_request_tx(tx, community_did=community, member_did=old,
                                              now=app.clock.iso_now(), membership_uri=None,
                                              membership_cid=None, app_id=api.app_id)
    resp = await api.decide(community, "approve", "did:plc:admin", old)
    assert resp.status == 400 and resp.json()["error"] == "unsupported_did", resp.text
    assert (await api.check(community, old))["isPending"] is True  # still only a request
