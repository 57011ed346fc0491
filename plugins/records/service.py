"""What other plugins may ask the records plugin (`daemon.plugin.services.RecordsService`): read an
indexed record, and delete one as a member through the same rules and write path as the
API's DELETE (the reports plugin removes a reported record with it)."""

from __future__ import annotations

import json

from typing import TYPE_CHECKING, Any

from daemon.plugin import Actor, ApiError, CommunitiesService
from daemon.plugin.atproto import pds
from daemon.plugin.http import APP_NOT_TRUSTED
from plugins.records import permissions, writes
from plugins.records.collections import policy
from plugins.records import store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application


class Records:
    def __init__(self, app: "Application") -> None:
        self.app = app

    async def record(self, community_did: str, collection: str, rkey: str) -> dict[str, Any] | None:
        return _record_json(await store.get_record(self.app.db, community_did, collection, rkey))

    async def record_by_rkey(self, community_did: str, rkey: str) -> dict[str, Any] | None:
        return _record_json(await store.record_by_rkey(self.app.db, community_did, rkey))

    async def delete_record(self, community_did: str, collection: str, rkey: str, actor: Actor, *,
                            permitted: bool = False) -> dict[str, Any]:
        app = self.app
        communities = app.service(CommunitiesService)
        assert communities is not None  # a requirement of this plugin
        did = (await communities.visible(community_did, actor.app_id)).did
        refused = policy(app).protected_refusal(collection)
        if refused is not None:
            raise refused
        async with writes.hold(app, did, collection, rkey):
            await writes.settle(app, did, collection, rkey)
            row = await store.get_record(app.db, did, collection, rkey)
            if row is None:
                raise ApiError(404, "record_not_found", f"No record {collection}/{rkey} in this community.")
            status = await communities.membership(did, actor.did)
            if not status.is_member:
                raise ApiError(403, "not_member", "The acting user is not a member of this community.")
            rule = (await permissions.rules_for(app, did, collection))["delete"]
            how = "granted" if permitted else permissions.decide(status, "delete", rule, collection,
                                                                is_author=row["author_did"] == actor.did)
            if how is None:
                raise permissions.refusal("delete", rule, collection)
            if how != "member" and row["author_did"] != actor.did and not await communities.acts_for_admins(
                    did, actor.app_id):
                raise APP_NOT_TRUSTED(did, actor.app_id or "-")
            from daemon.plugin.atproto import community_repo
            repo = await pds(community_repo(app, did), refusal_is_callers=True)
            await app.writes.run(writes.RecordWrite(app, repo, writes.Write(
                "delete", did, collection, rkey, None, row["cid"], author_did=row["author_did"],
                user_did=actor.did, app_id=actor.app_id)))
        return {"uri": row["uri"], "cid": row["cid"], "collection": collection, "rkey": rkey, "deleted": True}


def _record_json(row: Any) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"uri": row["uri"], "cid": row["cid"], "collection": row["collection"], "rkey": row["rkey"],
            "authorDid": row["author_did"], "createdAt": row["created_at"],
            "value": json.loads(row["value"]) if row["value"] else None}
