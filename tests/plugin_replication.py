"""A test-only plugin for scripts/bench_replication.py: a membership written on the primary
the way a join ends (member row, counts and the `member.joined` event in one transaction),
without the PDS round trip that precedes it in a real join, so that the benchmark times the
replication and not the PDS. (tests/test_replication.py makes real joins on the devnet.)"""

from __future__ import annotations

from typing import Any

from daemon import hookimpl
from daemon.http.base import BaseHandler
from daemon.runtime.events import emit_tx
from plugins.communities import store as communities_store
from plugins.communities import store as members_store


class JoinLocallyHandler(BaseHandler):
    async def post(self) -> None:
        body = self.json_body()
        community, member = body["communityDid"], body["userDid"]
        async with self.app.db.transaction("test.join") as tx:
            await members_store.insert_member_tx(tx, community_did=community, member_did=member,
                                                 now=self.app.clock.iso_now(), proof_rkey="3ktest", proof_cid=None,
                                                 membership_uri=None, membership_cid=None, app_id=None)
            await communities_store.adjust_counts_tx(tx, community, members=1)
            await emit_tx(self.app, tx, "member.joined", community_did=community, data={"userDid": member})
        self.send_json({"joined": True})


class ReplicationTestRoutes:
    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/test/join-locally", JoinLocallyHandler)]


plugin = ReplicationTestRoutes()
