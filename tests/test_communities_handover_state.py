"""The local-only part of a community that a handover carries (plugins/communities/handover.py):
settings, bans with reason and expiry, invites and the audit log, read on one side and
written on the other. Both communities live in one test database here (seeded, no PDS): the
two-instance handover over the devnet is not built yet."""

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
