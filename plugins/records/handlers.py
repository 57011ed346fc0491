"""Routes under /api/v1/communities/:did/records (API key): create, update, delete, list
and get community records. See docs/records.md for who may do what.

Writes go to the community's repo on its PDS first (the source of truth); the local
index and the event (`record.created` / `record.updated` / `record.deleted`) are then
written in one transaction. A pending-write row makes that crash-consistent
(plugins/records/writes.py).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from daemon.plugin import (ApiError, BOOLEAN, BaseHandler, DATETIME, Row, STRING, STRING_OR_NULL, UserMethod, arr,
                           encode_cursor, invalid, is_did, nullable, obj, operation, page, query, require_did)
from daemon.plugin.atproto import pds, new_tid, require_nsid, require_rkey
from daemon.plugin.http import DATETIME_OR_NULL
from daemon.plugin import Actor, Community, CommunitiesService
from daemon.plugin.http import APP_NOT_TRUSTED, NOT_FOUND, ROSTER_HIDDEN
from plugins.records import collections, permissions, writes
from plugins.records.collections import community_allowlist, policy
from plugins.records import store

DID = r"(did(?::|%3[Aa])[^/?#]+)"
SEGMENT = r"([^/?#]+)"

DID_SCHEMA = {"type": "string", "pattern": r"^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$", "maxLength": 2048}
NSID = {"type": "string", "description": "a collection NSID (com.example.post)"}
RKEY = {"type": "string", "description": "a record key"}
RECORD = obj({"uri": STRING, "cid": STRING, "collection": STRING, "rkey": STRING, "value": obj({}),
              "authorDid": nullable(STRING), "createdAt": DATETIME, "updatedAt": DATETIME_OR_NULL,
              "updatedBy": STRING_OR_NULL}, ["uri", "cid", "collection", "rkey", "value"])
WRITTEN = obj({"uri": STRING, "cid": STRING, "rkey": STRING, "collection": STRING},
              ["uri", "cid", "rkey", "collection"])
RECORD_BODY = obj({"$type": STRING}, ["$type"], description="the record; $type equals the collection")
WRITE_ERRORS = {403: "not_member, not_author, not_permitted, collection_protected, collection_not_allowed, app_not_trusted, "
                     "roster_hidden (PUT, DELETE)",
                409: "record_exists", 413: "record_too_large", 502: ""}
USER_DID = query("userDid", description="a member's DID: required to read a private community's records, "
                                      "checked only there")
#: Reading a private community's records as a member: asked for only where the community
#: hides its roster from the app (`check_read`).
READ = UserMethod("record.read", "userDid", "Read a private community's records as a member (needed only "
                                            "where the roster is hidden from the app)")


def record_json(row: Row, *, sees_roster: bool = True) -> dict[str, Any]:
    """A record as the API shows it; `sees_roster` False (an app from which the community
    hides its roster, `app_sees_roster`): without the author and the last writer."""
    if not sees_roster:
        return {**record_json(row), "authorDid": None, "updatedBy": None}
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


class RecordsBase(BaseHandler):
    auth = "app"
    #: What each HTTP method does in a user's name (daemon/atproto/proofs.py, docs/identity.md).
    user_methods: dict[str, UserMethod] = {}

    @property
    def communities(self) -> CommunitiesService:
        service = self.app.service(CommunitiesService)
        assert service is not None  # a requirement of this plugin
        return service

    async def prove(self, user_did: str, community: Community) -> bool:
        """Check the proof of the acting user, if any (401 for a bad or a missing required one)."""
        requires = community.require_user_proof
        return await self.app.proofs.acting_user(self, user_did, self.user_methods.get(self.request.method),
                                                 requires)

    async def prove_changer(self, user_did: str, community: Community) -> bool:
        """`prove` for a change or deletion of an existing record: where the community hides
        its roster from the app (`app_sees_roster`), the user must be proven, else 403
        ``roster_hidden``: the answers (a no-op 200 for the author, ``not_permitted`` for
        another member, ``not_member`` for anyone else) say who wrote what and who the
        members are, which the reads hide from such an app (docs/records.md)."""
        proven = await self.prove(user_did, community)
        if not proven and not await self.communities.sees_roster(community.did, self.principal.app_id):
            raise ROSTER_HIDDEN(community.did)
        return proven

    @property
    def settings(self) -> Any:
        return self.app.config.plugin("records")

    async def community(self, raw_did: str) -> Community:
        did = unquote(raw_did)
        if not is_did(did):
            raise NOT_FOUND(did)
        return await self.communities.visible(did, self.principal.app_id)

    async def writable(self, did: str, value: Any, field: str = "collection") -> str:
        """The collection, if apps may create and update records in it here (403
        ``collection_protected`` / ``collection_not_allowed`` otherwise; see
        plugins/records/collections.py)."""
        collection = require_nsid(value, field)
        refused = policy(self.app).refusal(collection, await community_allowlist(self.app, did))
        if refused is not None:
            raise refused
        return collection

    def not_protected(self, value: Any, field: str = "collection") -> str:
        """The collection, unless it is protected (delete only needs this: it removes a
        record the service itself indexed, and nothing else)."""
        collection = require_nsid(value, field)
        refused = policy(self.app).protected_refusal(collection)
        if refused is not None:
            raise refused
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
        status = await self.communities.membership(did, user_did)
        if not status.is_member:
            raise ApiError(403, "not_member", "userDid is not a member of this community.")
        return status

    async def may_create(self, did: str, collection: str, user_did: str) -> None:
        """A member may create, unless the collection's rule says otherwise
        (plugins/records/permissions.py)."""
        status = await self.require_member(did, user_did)
        rule = (await permissions.rules_for(self.app, did, collection))["create"]
        if permissions.decide(status, "create", rule, collection, is_author=False) is None:
            raise permissions.refusal("create", rule, collection)

    async def may_change(self, did: str, row: Row, user_did: str, action: str = "update") -> None:
        """As the collection's rule says (by default the author, or an admin); whoever
        changes someone else's record as an admin or through a role does so only through
        an app the community trusts to act for its admins (as for every admin action)."""
        status = await self.require_member(did, user_did)
        rule = (await permissions.rules_for(self.app, did, row["collection"]))[action]
        how = permissions.decide(status, action, rule, row["collection"], is_author=row["author_did"] == user_did)
        if how is None:
            raise permissions.refusal(action, rule, row["collection"])
        if how == "member" or row["author_did"] == user_did:
            return
        if not await self.communities.acts_for_admins(did, self.principal.app_id):
            raise APP_NOT_TRUSTED(did, self.principal.app_id or "-")

    async def indexed(self, did: str, collection: str, rkey: str) -> Row:
        row = await store.get_record(self.app.db, did, collection, rkey)
        if row is None:
            raise ApiError(404, "record_not_found", f"No record {collection}/{rkey} in this community.")
        return row

    async def repo(self, did: str) -> Any:
        from daemon.plugin.atproto import community_repo
        return await pds(community_repo(self.app, did), refusal_is_callers=True)


class RecordsHandler(RecordsBase):
    """POST (create) and PUT (update) on …/records."""

    user_methods = {"POST": UserMethod("record.create", "userDid", "Create a record in a community's repo"),
                    "PUT": UserMethod("record.update", "userDid", "Change a record")}

    @operation("Create a record in the community's repo", body=obj(
        {"userDid": DID_SCHEMA, "collection": NSID, "rkey": RKEY, "record": RECORD_BODY},
        ["userDid", "collection", "record"]), responses={200: WRITTEN, 201: WRITTEN}, errors=WRITE_ERRORS)
    async def post(self, raw_did: str) -> None:
        body = self.json_body()
        community = await self.community(raw_did)
        did = community.did
        user_did = require_did(body.get("userDid"), "userDid")
        await self.prove(user_did, community)
        await self.app.check_action("record.write", user_did, community_did=did, app_id=self.principal.app_id)
        collection = await self.writable(did, body.get("collection"))
        record = self.record(body, collection)
        rkey = require_rkey(body["rkey"], "rkey") if body.get("rkey") is not None else None
        await self.may_create(did, collection, user_did)
        rkey = rkey or new_tid(self.app.clock)
        async with writes.hold(self.app, did, collection, rkey):
            await writes.settle(self.app, did, collection, rkey)
            existing = await store.get_record(self.app.db, did, collection, rkey)
            if existing is not None:
                if not self.same_create(existing, record, user_did):
                    raise ApiError(409, "record_exists",
                                   f"{collection}/{rkey} already exists; use PUT to change it.")
                written = {"uri": existing["uri"], "cid": existing["cid"]}  # a repeat: same answer
            else:
                repo = await self.repo(did)
                # A record the service did not write (the account's own, or put on the PDS
                # directly) is never taken over, not even by a create carrying its exact
                # value: the PDS would answer that putRecord as a no-op success.
                if await pds(repo.get_record(collection, rkey), refusal_is_callers=True) is not None:
                    raise ApiError(409, "record_exists",
                                   f"{collection}/{rkey} already exists in the community's repo and "
                                   "was not written through this service; it cannot be replaced here.")
                written = await self.app.writes.run(writes.RecordWrite(self.app, repo, writes.Write(
                    "create", did, collection, rkey, record, None, author_did=user_did,
                    user_did=user_did, app_id=self.principal.app_id)))
        self.send_json({"uri": written["uri"], "cid": written["cid"], "rkey": rkey,
                        "collection": collection}, 201)

    def same_create(self, existing: Row, record: dict[str, Any], user_did: str) -> bool:
        """The indexed record is what this create asks for, by the same user and app: the
        request is a repeat of one that succeeded."""
        return existing["author_did"] == user_did and existing["app_id"] == self.principal.app_id \
            and writes.same_value(json.loads(existing["value"]), record)

    @operation("Update a record (its author, or an admin through a trusted app)", body=obj(
        {"userDid": DID_SCHEMA, "collection": NSID, "rkey": RKEY, "record": RECORD_BODY},
        ["userDid", "collection", "rkey", "record"]), responses={200: WRITTEN}, errors=WRITE_ERRORS)
    async def put(self, raw_did: str) -> None:
        body = self.json_body()
        community = await self.community(raw_did)
        did = community.did
        user_did = require_did(body.get("userDid"), "userDid")
        await self.prove_changer(user_did, community)
        await self.app.check_action("record.write", user_did, community_did=did, app_id=self.principal.app_id)
        collection = await self.writable(did, body.get("collection"))
        rkey = require_rkey(body.get("rkey"), "rkey")
        record = self.record(body, collection)
        async with writes.hold(self.app, did, collection, rkey):
            await writes.settle(self.app, did, collection, rkey)
            row = await self.indexed(did, collection, rkey)
            await self.may_change(did, row, user_did)
            if writes.same_value(json.loads(row["value"]), record):
                written = {"uri": row["uri"], "cid": row["cid"]}  # nothing changes: no write, no event
            else:
                written = await self.app.writes.run(writes.RecordWrite(self.app, await self.repo(did), writes.Write(
                    "update", did, collection, rkey, record, row["cid"], author_did=row["author_did"],
                    user_did=user_did, app_id=self.principal.app_id)))
        self.send_json({"uri": written["uri"], "cid": written["cid"], "rkey": rkey,
                        "collection": collection})


class CollectionHandler(RecordsBase):
    """GET …/records/:collection: the collection's records, newest first."""

    user_methods = {"GET": READ}

    @operation("A collection's records, newest first", paged=True,
               params=[USER_DID, query("authorDid", DID_SCHEMA)], responses={200: page("records", RECORD)},
               errors={401: "a bad service-auth token (proof_*)", 403: "members_only, not_member, roster_hidden"})
    async def get(self, raw_did: str, raw_collection: str) -> None:
        community = await self.community(raw_did)
        did = community.did
        collection = require_nsid(unquote(raw_collection), "collection")
        await self.check_read(community)
        limit, after = self.page_params(1, "i")
        author = self.get_query_argument("authorDid", None)
        if author is not None:
            require_did(author, "authorDid")  # present but empty is a bad DID, as the document says
        sees = await self.communities.sees_roster(did, self.principal.app_id)
        if author and not sees:
            raise ROSTER_HIDDEN(did)  # who wrote what would tell who the members are
        rows = await store.list_records(self.app.db, did, collection, limit + 1,
                                        int(after[0]) if after else None, author or None)
        out: dict[str, Any] = {"records": [record_json(r, sees_roster=sees) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)

    async def check_read(self, community: Community) -> None:
        if community.type != "private":
            return
        user = self.get_query_argument("userDid", None)
        if not user:
            raise ApiError(403, "members_only",
                           "This community is private: pass the userDid of a member to read its records.")
        user = require_did(user, "userDid")
        if not await self.communities.sees_roster(community.did, self.principal.app_id):
            # 200 for a member and 403 not_member for anyone else would answer, for any DID,
            # the question membership/check answers such an app only with the user's proof.
            proven = bool(self.request.headers.get("Authorization")) and \
                await self.app.proofs.acting_user(self, user, READ)
            if not proven:
                raise ROSTER_HIDDEN(community.did)
        await self.require_member(community.did, user)


class RecordHandler(CollectionHandler):
    """GET and DELETE …/records/:collection/:rkey."""

    user_methods = {"GET": READ, "DELETE": UserMethod("record.delete", "userDid", "Delete a record")}

    @operation("One record", params=[USER_DID], responses={200: RECORD},
               errors={401: "a bad service-auth token (proof_*)", 403: "members_only, not_member, roster_hidden"})
    async def get(self, raw_did: str, raw_collection: str, raw_rkey: str) -> None:  # type: ignore[override]
        community = await self.community(raw_did)
        collection = require_nsid(unquote(raw_collection), "collection")
        rkey = require_rkey(unquote(raw_rkey), "rkey")
        await self.check_read(community)
        sees = await self.communities.sees_roster(community.did, self.principal.app_id)
        self.send_json(record_json(await self.indexed(community.did, collection, rkey), sees_roster=sees))

    @operation("Delete a record (its author, or an admin through a trusted app)", params=[USER_DID],
               body=obj({"userDid": DID_SCHEMA}), body_required=False,
               responses={200: obj({**WRITTEN["properties"], "deleted": BOOLEAN}, [*WRITTEN["required"], "deleted"])},
               errors=WRITE_ERRORS)
    async def delete(self, raw_did: str, raw_collection: str, raw_rkey: str) -> None:
        body = self.json_body(required=False)
        community = await self.community(raw_did)
        did = community.did
        collection = self.not_protected(unquote(raw_collection))
        rkey = require_rkey(unquote(raw_rkey), "rkey")
        user_did = self.user_did(body)
        await self.prove_changer(user_did, community)
        await self.app.check_action("record.write", user_did, community_did=did, app_id=self.principal.app_id)
        async with writes.hold(self.app, did, collection, rkey):
            settled = await writes.settle(self.app, did, collection, rkey)
            row = await store.get_record(self.app.db, did, collection, rkey)
            if row is None and settled is not None and settled[0] == "finished" \
                    and settled[1].op == "delete" and settled[1].user_did == user_did:
                gone = {"uri": settled[1].uri, "cid": settled[1].cid}  # a repeat of a delete that happened
            else:
                if row is None:
                    raise ApiError(404, "record_not_found", f"No record {collection}/{rkey} in this community.")
                await self.may_change(did, row, user_did, "delete")
                await self.app.writes.run(writes.RecordWrite(self.app, await self.repo(did), writes.Write(
                    "delete", did, collection, rkey, None, row["cid"], author_did=row["author_did"],
                    user_did=user_did, app_id=self.principal.app_id)))
                gone = {"uri": row["uri"], "cid": row["cid"]}
        self.send_json({"uri": gone["uri"], "cid": gone["cid"], "rkey": rkey, "collection": collection,
                        "deleted": True})


RULES = obj({a: {"type": "string", "enum": list(permissions.RULES[a])} for a in permissions.ACTIONS})
SETTINGS = obj({"communityDid": STRING, "allowedCollections": nullable(arr(STRING)), "updatedAt": DATETIME_OR_NULL,
               "permissions": obj({}, additionalProperties=RULES,
                                  description="who may create, update and delete in each collection"),
               "updatedBy": STRING_OR_NULL, "service": obj({"protected": arr(STRING), "allowedCollections": arr(STRING),
                                                             "deniedCollections": arr(STRING)})},
              ["communityDid", "allowedCollections", "service"])


class CollectionSettingsHandler(RecordsBase):
    """GET and PUT …/records-settings: the collections apps may write in the community.

    GET: any app that may see the community. PUT ``{adminDid, allowedCollections}`` (a list
    of patterns, or null for no list): an admin, through an app the community trusts to act
    for its admins (403 ``not_admin`` / ``app_not_trusted``), as for every admin action."""

    user_methods = {"PUT": UserMethod("record.updateSettings", "adminDid",
                                      "Change which collections apps may write in a community")}
    xrpc_reads = {"GET": "record.getSettings"}   # an XRPC query too (daemon/atproto/xrpc.py)

    @operation("The collections apps may write in this community", responses={200: SETTINGS})
    async def get(self, raw_did: str) -> None:
        community = await self.community(raw_did)
        row = await store.collection_settings(self.app.db, community.did)
        self.send_json(await self.settings_json(community.did, row))

    @operation("Set the community's collection allowlist and permissions (an admin, through a trusted app)",
               body=obj({"adminDid": DID_SCHEMA, "allowedCollections": nullable(arr(STRING)),
                         "permissions": nullable(obj({}, additionalProperties=RULES))}, ["adminDid"]),
               description="Give allowedCollections, permissions or both; what is left out stays as it is.",
               responses={200: SETTINGS}, errors={403: "not_admin, app_not_trusted"})
    async def put(self, raw_did: str) -> None:
        body = self.json_body()
        community = await self.community(raw_did)
        did = community.did
        admin_did = require_did(body.get("adminDid"), "adminDid")
        proven = await self.prove(admin_did, community)
        if "permissions" in body:
            rules = permissions.parse(body["permissions"]) if body["permissions"] is not None else {}
        allowed = self.allowlist(body) if "allowedCollections" in body or "permissions" not in body else None
        actor = Actor(admin_did, self.principal.app_id, proven)
        async with self.app.db.transaction("records.collection_settings") as tx:
            if not await self.communities.acts_for_admins(did, self.principal.app_id, tx=tx):
                raise APP_NOT_TRUSTED(did, self.principal.app_id or "-")
            if not (await self.communities.membership(did, admin_did, tx=tx)).is_admin:
                raise ApiError(403, "not_admin", "Only an admin of this community may do this.")
            if "allowedCollections" in body:
                await store.set_collection_settings_tx(
                    tx, did, allowed_json=None if allowed is None else json.dumps(allowed),
                    updated_by=admin_did, app_id=self.principal.app_id, now=self.app.clock.iso_now())
                await self.communities.audit_tx(
                    tx, did, actor, "records.collections_changed", "changed the collections apps may write",
                    details={"allowedCollections": allowed})
            if "permissions" in body:
                await store.replace_tx(tx, did, [
                    (c, r["create"], r["update"], r["delete"]) for c, r in rules.items()])
                await self.communities.audit_tx(
                    tx, did, actor, "records.permissions_changed", "changed who may write each collection",
                    details={"permissions": rules})
        row = await store.collection_settings(self.app.db, did)
        self.send_json(await self.settings_json(did, row))

    def allowlist(self, body: dict[str, Any]) -> list[str] | None:
        field = "allowedCollections"
        if field not in body:
            raise invalid(field, "is required (a list of collection patterns, or null for no list) "
                                  "unless permissions is given")
        value = body[field]
        if value is None:
            return None
        if not isinstance(value, list):
            raise invalid(field, "must be a list of collection patterns, or null")
        if len(value) > collections.MAX_PATTERNS:
            raise invalid(field, f"must have at most {collections.MAX_PATTERNS} items")
        namespace = self.app.config.atproto.namespace
        for i, text in enumerate(value):
            problem = collections.pattern_problem(text)
            if problem:
                raise invalid(f"{field}[{i}]", problem)
            inside = collections.protected_by(collections.parse(text), namespace)
            if inside:
                raise invalid(f"{field}[{i}]", f"{text} lies in {inside}.*, which is never writable "
                                               "through the records API")
        return list(dict.fromkeys(value))

    async def settings_json(self, did: str, row: Row | None) -> dict[str, Any]:
        cfg = self.settings
        return {
            "communityDid": did,
            "allowedCollections": collections.stored_allowlist(row),
            "permissions": permissions.as_json(await store.all_rules(self.app.db, did)),
            "updatedAt": row["updated_at"] if row else None,
            "updatedBy": row["updated_by"] if row else None,
            "service": {
                "protected": [p + ".*" for p in
                              collections.protected_prefixes(self.app.config.atproto.namespace)],
                "allowedCollections": list(cfg.allowed_collections),
                "deniedCollections": list(cfg.denied_collections),
            },
        }


def routes() -> list[tuple]:
    base = r"/api/v1/communities/" + DID + r"/records"
    return [
        (base + "-settings", CollectionSettingsHandler),
        (base, RecordsHandler),
        (base + "/" + SEGMENT, CollectionHandler),
        (base + "/" + SEGMENT + "/" + SEGMENT, RecordHandler),
    ]
