"""Routes under /api/v1/communities/:did/records (API key): create, update, delete, list
and get community records. See docs/records.md for who may do what.

Writes go to the community's repo on its PDS first (the source of truth); the local
index and the event (`record.created` / `record.updated` / `record.deleted`) are then
written in one transaction.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from daemon.atproto.syntax import is_did, new_tid, require_did, require_nsid, require_rkey
from daemon.events import emit_tx
from daemon.http import ApiError, BaseHandler, encode_cursor
from daemon.validate import invalid
from plugins.communities.access import NOT_FOUND, member_status, require_community
from store import records as store
from store.db import Row

DID = r"(did(?::|%3[Aa])[^/?#]+)"
SEGMENT = r"([^/?#]+)"


def record_json(row: Row) -> dict[str, Any]:
    return {
        "uri": row["uri"],
        "cid": row["cid"],
        "collection": row["collection"],
        "rkey": row["rkey"],
        "value": json.loads(row["value"]),
        "authorDid": row["author_did"],
        "createdAt": row["created_at"],
        "updatedAt": row["updated_at"],
        "updatedBy": row["updated_by"],
    }


async def pds_call(step: Any) -> Any:
    """Await a PDS call: a record the PDS refuses as invalid is the caller's 400; any
    other failure stays a 502 (or the conflict it is)."""
    from daemon.atproto.pds import PdsError
    try:
        return await step
    except PdsError as exc:
        if exc.status == 502 and exc.pds_status == 400:
            raise ApiError(400, "record_rejected", f"The PDS refused the record: {exc.message}") from None
        raise
    except ApiError:
        raise
    except Exception as exc:  # noqa: BLE001 (no PDS failure may read as success)
        raise ApiError(502, "pds_error", f"The community's PDS failed: {exc}") from None


class RecordsBase(BaseHandler):
    auth = "app"

    @property
    def settings(self) -> Any:
        return self.app.config.plugin("records")

    async def community(self, raw_did: str) -> Row:
        did = unquote(raw_did)
        if not is_did(did):
            raise NOT_FOUND(did)
        return await require_community(self.app, did, self.principal)

    def collection(self, value: Any, field: str = "collection") -> str:
        collection = require_nsid(value, field)
        namespace = self.app.config.atproto.namespace
        if collection == namespace or collection.startswith(namespace + "."):
            raise ApiError(403, "reserved_collection",
                           f"{collection} belongs to the service ({namespace}.*) and cannot be "
                           "written through the records API.")
        return collection

    def record(self, body: dict[str, Any], collection: str) -> dict[str, Any]:
        record = body.get("record")
        if not isinstance(record, dict):
            raise invalid("record", "must be an object with a $type")
        if record.get("$type") != collection:
            raise invalid("record.$type", f"must equal the collection ({collection}), "
                                          f"not {record.get('$type')!r}")
        size = len(json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode())
        limit = self.settings.max_record_bytes
        if size > limit:
            raise ApiError(413, "record_too_large", f"The record is {size} bytes; the limit is {limit}.")
        return record

    def user_did(self, body: dict[str, Any] | None = None) -> str:
        """From the body, else the query string (DELETE requests often have no body)."""
        if body and "userDid" in body:
            return require_did(body["userDid"], "userDid")
        return require_did(self.get_query_argument("userDid", None), "userDid")

    async def require_member(self, did: str, user_did: str) -> Any:
        status = await member_status(self.app, did, user_did)
        if not status.is_member:
            raise ApiError(403, "not_member", "userDid is not a member of this community.")
        return status

    async def may_change(self, did: str, row: Row, user_did: str) -> None:
        status = await self.require_member(did, user_did)
        if row["author_did"] != user_did and not status.is_admin:
            raise ApiError(403, "not_author",
                           "Only the record's author or an admin of the community may change it.")

    async def indexed(self, did: str, collection: str, rkey: str) -> Row:
        row = await store.get_record(self.app.db, did, collection, rkey)
        if row is None:
            raise ApiError(404, "record_not_found", f"No record {collection}/{rkey} in this community.")
        return row

    async def repo(self, did: str) -> Any:
        from daemon.atproto.accounts import community_repo
        return await pds_call(community_repo(self.app, did))

    def event_data(self, row_or_values: dict[str, Any], user_did: str) -> dict[str, Any]:
        return {k: row_or_values[k] for k in ("collection", "rkey", "uri", "cid")} | {"userDid": user_did}


class RecordsHandler(RecordsBase):
    """POST (create) and PUT (update) on …/records."""

    async def post(self, raw_did: str) -> None:
        body = self.json_body()
        community = await self.community(raw_did)
        did = community["did"]
        user_did = require_did(body.get("userDid"), "userDid")
        collection = self.collection(body.get("collection"))
        record = self.record(body, collection)
        rkey = require_rkey(body["rkey"], "rkey") if body.get("rkey") is not None else None
        await self.require_member(did, user_did)
        if rkey is not None and await store.get_record(self.app.db, did, collection, rkey):
            raise ApiError(409, "record_exists", f"{collection}/{rkey} already exists; use PUT to change it.")
        rkey = rkey or new_tid(self.app.clock)
        repo = await self.repo(did)
        written = await pds_call(repo.create_record(collection, record, rkey))
        now = self.app.clock.iso_now()
        async with self.app.db.transaction("records.create") as tx:
            await store.upsert_record_tx(
                tx, community_did=did, collection=collection, rkey=rkey, uri=written["uri"],
                cid=written["cid"], author_did=user_did, app_id=self.principal.app_id,
                value_json=json.dumps(record, separators=(",", ":"), ensure_ascii=False), now=now)
            values = {"collection": collection, "rkey": rkey, **written}
            await emit_tx(self.app, tx, "record.created", community_did=did,
                          data=self.event_data(values, user_did), app_id=self.principal.app_id,
                          actor_did=user_did)
        self.send_json({"uri": written["uri"], "cid": written["cid"], "rkey": rkey,
                        "collection": collection}, 201)

    async def put(self, raw_did: str) -> None:
        body = self.json_body()
        community = await self.community(raw_did)
        did = community["did"]
        user_did = require_did(body.get("userDid"), "userDid")
        collection = self.collection(body.get("collection"))
        rkey = require_rkey(body.get("rkey"), "rkey")
        record = self.record(body, collection)
        row = await self.indexed(did, collection, rkey)
        await self.may_change(did, row, user_did)
        repo = await self.repo(did)
        written = await pds_call(repo.put_record(collection, rkey, record, swap_record=row["cid"]))
        now = self.app.clock.iso_now()
        async with self.app.db.transaction("records.update") as tx:
            current = await store.get_record_tx(tx, did, collection, rkey)
            if current is None:  # deleted meanwhile: the repo has it again, so index it
                await store.upsert_record_tx(
                    tx, community_did=did, collection=collection, rkey=rkey, uri=written["uri"],
                    cid=written["cid"], author_did=row["author_did"], app_id=row["app_id"],
                    value_json=json.dumps(record, separators=(",", ":"), ensure_ascii=False), now=now)
            else:
                await store.update_record_tx(
                    tx, current["id"], uri=written["uri"], cid=written["cid"],
                    value_json=json.dumps(record, separators=(",", ":"), ensure_ascii=False),
                    updated_by=user_did, now=now)
            values = {"collection": collection, "rkey": rkey, **written}
            await emit_tx(self.app, tx, "record.updated", community_did=did,
                          data=self.event_data(values, user_did), app_id=self.principal.app_id,
                          actor_did=user_did)
        self.send_json({"uri": written["uri"], "cid": written["cid"], "rkey": rkey,
                        "collection": collection})


class CollectionHandler(RecordsBase):
    """GET …/records/:collection: the collection's records, newest first."""

    async def get(self, raw_did: str, raw_collection: str) -> None:
        community = await self.community(raw_did)
        did = community["did"]
        collection = require_nsid(unquote(raw_collection), "collection")
        await self.check_read(community)
        limit, after = self.page_params(1)
        author = self.get_query_argument("authorDid", None)
        if author:
            require_did(author, "authorDid")
        rows = await store.list_records(self.app.db, did, collection, limit + 1,
                                        int(after[0]) if after else None, author or None)
        out: dict[str, Any] = {"records": [record_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)

    async def check_read(self, community: Row) -> None:
        if community["type"] != "private":
            return
        user = self.get_query_argument("userDid", None)
        if not user:
            raise ApiError(403, "members_only",
                           "This community is private: pass the userDid of a member to read its records.")
        await self.require_member(community["did"], require_did(user, "userDid"))


class RecordHandler(CollectionHandler):
    """GET and DELETE …/records/:collection/:rkey."""

    async def get(self, raw_did: str, raw_collection: str, raw_rkey: str) -> None:  # type: ignore[override]
        community = await self.community(raw_did)
        collection = require_nsid(unquote(raw_collection), "collection")
        rkey = require_rkey(unquote(raw_rkey), "rkey")
        await self.check_read(community)
        self.send_json(record_json(await self.indexed(community["did"], collection, rkey)))

    async def delete(self, raw_did: str, raw_collection: str, raw_rkey: str) -> None:
        body = self.json_body(required=False)
        community = await self.community(raw_did)
        did = community["did"]
        collection = self.collection(unquote(raw_collection))
        rkey = require_rkey(unquote(raw_rkey), "rkey")
        user_did = self.user_did(body)
        row = await self.indexed(did, collection, rkey)
        await self.may_change(did, row, user_did)
        repo = await self.repo(did)
        await pds_call(repo.delete_record(collection, rkey))
        async with self.app.db.transaction("records.delete") as tx:
            current = await store.get_record_tx(tx, did, collection, rkey)
            if current is not None:
                await store.delete_record_tx(tx, current["id"])
            gone = current or row
            await emit_tx(self.app, tx, "record.deleted", community_did=did,
                          data=self.event_data(dict(gone), user_did), app_id=self.principal.app_id,
                          actor_did=user_did)
        self.send_json({"uri": row["uri"], "cid": row["cid"], "rkey": rkey, "collection": collection,
                        "deleted": True})


def routes() -> list[tuple]:
    base = r"/api/v1/communities/" + DID + r"/records"
    return [
        (base, RecordsHandler),
        (base + "/" + SEGMENT, CollectionHandler),
        (base + "/" + SEGMENT + "/" + SEGMENT, RecordHandler),
    ]
