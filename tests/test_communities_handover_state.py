"""The local-only part of a community that a handover carries (plugins/communities/handover.py):
settings, bans with reason and expiry, invites and the audit log, read on one side and
written on the other. Both communities live in one test database here (seeded, no PDS); the
two-instance handover over the devnet is tests/test_communities_handover.py."""

from __future__ import annotations

import json

from plugins.communities import bundle, handover
from plugins.communities import store
from tests.fixtures_communities import seed_community

ADMIN = "did:plc:handoveradmin"
TROLL = "did:plc:handovertroll"


async def test_what_one_side_reads_the_other_writes_back_through_a_sealed_bundle(app):
    old = await seed_community(app, ADMIN, type="admin-approved")
    new = await seed_community(app, ADMIN)
    now = app.clock.iso_now()
    async with app.db.transaction("tests.handover") as tx:
        await tx.execute("UPDATE communities SET roster_visibility = 'members', listed = 0 WHERE did = ?", (old,))
        await store.put_ban_tx(tx, community_did=old, member_did=TROLL, reason="spam links",
                               expires_at="2030-01-01T00:00:00.000Z", banned_by=ADMIN, app_id=None, now=now)
        await store.insert_invite_tx(tx, community_did=old, code_hash="ab" * 32, max_uses=5,
                                     expires_at=None, note="for the newsletter", created_by=ADMIN,
                                     app_id=None, now=now)
        await store.insert_entry_tx(tx, community_did=old, action="member.banned", actor_did=ADMIN,
                                    target_did=TROLL, reason="spam links", metadata={"x": 1},
                                    app_id=None, now=now)

    state = await handover.local_state(app.db, old)
    phrase = bundle.new_passphrase()
    carried = bundle.open_bundle(bundle.seal({"local": state}, phrase), phrase)["local"]

    async with app.db.transaction("tests.handover.restore") as tx:
        not_restored = await handover.restore_local_state_tx(tx, new, carried, now=now,
                                                             source="https://one.example")
    # The invite's code is still held by the old community in this one database: said, not dropped.
    assert len(not_restored) == 1 and "invite" in not_restored[0]

    row = await store.get_community(app.db, new)
    assert (row["type"], row["roster_visibility"], row["listed"]) == ("admin-approved", "members", 0)
    ban = await store.active_ban(app.db, new, TROLL, now)
    assert ban["reason"] == "spam links" and ban["expires_at"] == "2030-01-01T00:00:00.000Z"
    audit = await app.db.fetchall("SELECT * FROM audit_log WHERE community_did = ? ORDER BY id", (new,))
    assert audit[0]["action"] == "community.imported"
    assert json.loads(audit[0]["metadata"])["from"] == "https://one.example"
    imported = [a for a in audit[1:] if json.loads(a["metadata"]).get("imported")]
    assert [a["action"] for a in imported][-1] == "member.banned"
    assert imported[-1]["reason"] == "spam links" and imported[-1]["target_did"] == TROLL


async def _snapshot(app, did):
    return ([dict(r) for r in await app.db.fetchall("SELECT * FROM communities WHERE did = ?", (did,))],
            [dict(r) for r in await app.db.fetchall("SELECT * FROM audit_log WHERE community_did = ?", (did,))])


async def test_an_import_is_refused_with_nothing_changed(app):
    import base64
    import pytest

    here = await seed_community(app, ADMIN)
    state = await handover.local_state(app.db, here)
    before = await _snapshot(app, here)
    phrase = bundle.new_passphrase()

    def sealed(did):
        return bundle.seal(handover.handover_payload(
            did=did, handle="moved.test", pds_url="http://pds.invalid", app_password="aaaa-bbbb-cccc-dddd",
            source="https://one.example", state=state), phrase)

    # A DID this instance already has.
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.open_for_import(app.db, sealed(here), phrase)
    assert (caught.value.status, caught.value.code) == (409, "community_exists")
    assert "already a community here" in str(caught.value)

    other = sealed("did:plc:elsewhere")
    # A wrong passphrase.
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.open_for_import(app.db, other, bundle.new_passphrase())
    assert (caught.value.status, caught.value.code) == (400, "bundle_refused")
    # A changed bundle.
    envelope = json.loads(other)
    raw = bytearray(base64.b64decode(envelope["ciphertext"]))
    raw[0] ^= 1
    envelope["ciphertext"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(handover.ImportRefused) as caught:
        await handover.open_for_import(app.db, json.dumps(envelope).encode(), phrase)
    assert caught.value.code == "bundle_refused"

    assert await _snapshot(app, here) == before
    assert await app.db.fetchone("SELECT 1 FROM communities WHERE did = 'did:plc:elsewhere'") is None
    # The untouched bundle for a new DID opens.
    assert (await handover.open_for_import(app.db, other, phrase))["did"] == "did:plc:elsewhere"


async def test_a_community_handed_over_is_gone_from_here_and_says_where_it_went(app, client):
    from daemon.atproto.accounts import account_row
    from tests.helpers import login_as

    did = await seed_community(app, ADMIN, members=("did:plc:handovermember",))
    await handover.mark_handed_over(app, did, moved_to="https://two.example", actor_did=ADMIN)

    assert await store.get_community(app.db, did) is None
    assert await account_row(app.db, did) is None  # the credentials are forgotten
    outsider = await login_as(app, "did:plc:handoveroutsider", "outsider.test")
    read = await client.get(f"/communities/{did}", session=outsider)
    assert read.status == 410, read.text
    body = read.json()
    assert body["error"] == "community_moved" and body["details"]["movedTo"] == "https://two.example"
    assert "left this instance" in body["message"] and "https://two.example" in body["message"]
    write = await client.post(f"/communities/{did}/join", session=outsider)
    assert write.status == 410 and write.json()["details"]["movedTo"] == "https://two.example", write.text
    audit = await app.db.fetchall("SELECT action FROM audit_log WHERE community_did = ? ORDER BY id", (did,))
    assert audit[-1]["action"] == "community.handed_over"
    # apps asking membership/check (every page view of theirs) learn where it went too
    from tests.fixtures_communities import Api
    api = await Api.make(app, client)
    check = await api.post(f"/api/v1/communities/{did}/membership/check", {"userDid": "did:plc:handovermember"})
    assert check.status == 410 and check.json()["details"]["movedTo"] == "https://two.example", check.text
    # A DID never here is still a plain 404.
    assert (await client.get("/communities/did:plc:neverhere", session=outsider)).status == 404


async def test_the_page_of_a_community_handed_over_says_where_it_went(app, client):
    from tests.helpers import login_as

    did = await seed_community(app, ADMIN)
    await handover.mark_handed_over(app, did, moved_to="https://two.example", actor_did=ADMIN)
    visitor = await login_as(app, "did:plc:handovervisitor", "visitor.test")
    page = await client.get(f"/c/{did}", session=visitor)
    assert page.status == 410 and page.headers["Content-Type"].startswith("text/html"), page.text
    assert "left this instance" in page.text and "https://two.example" in page.text
