"""JSON schemas of the communities plugin's bodies and answers (the shapes of views.py and
the commands), for the handlers' OpenAPI declarations."""

from __future__ import annotations

from daemon.plugin import BOOLEAN, DATETIME, DID, INTEGER, STRING, STRING_OR_NULL, arr, nullable, obj, page, query
from daemon.plugin.http import ANY, DATETIME_OR_NULL

TYPE = {"type": "string", "enum": ["open", "admin-approved", "private"]}
URL_OR_NULL = {"type": ["string", "null"], "description": "an image URL, or null"}

SUMMARY = obj({
    "did": DID, "handle": STRING_OR_NULL, "displayName": STRING, "description": STRING_OR_NULL,
    "avatar": URL_OR_NULL, "type": TYPE, "memberCount": INTEGER, "createdAt": DATETIME,
    "isAdmin": BOOLEAN, "isMember": BOOLEAN,
}, ["did", "displayName", "type", "memberCount"])

STATUS = obj({"isMember": BOOLEAN, "isAdmin": BOOLEAN, "isPending": BOOLEAN,
              "roles": arr(STRING, description="the roles assigned to the member (moderator, custom "
                                               "roles); absent when none")},
             ["isMember", "isAdmin", "isPending"])

DETAILS = obj({
    "community": obj({
        "did": DID, "handle": STRING_OR_NULL, "displayName": STRING, "description": STRING_OR_NULL,
        "avatar": URL_OR_NULL, "banner": URL_OR_NULL, "type": TYPE, "memberCount": INTEGER,
        "restricted": BOOLEAN, "createdAt": DATETIME, "updatedAt": DATETIME_OR_NULL,
        "admins": arr(obj({"did": DID, "addedAt": DATETIME_OR_NULL, "isPrimary": BOOLEAN},
                          ["did", "isPrimary"])),
        "primaryAdmin": nullable(DID), "pendingCount": INTEGER,
        "rosterVisibility": {"type": "string", "enum": ["public", "members", "admins"]}, "listed": BOOLEAN,
    }, ["did", "displayName", "type"]),
    "isAdmin": BOOLEAN,
    "membership": obj({**STATUS["properties"], "isPrimaryAdmin": BOOLEAN},
                      ["isMember", "isAdmin", "isPending", "isPrimaryAdmin"]),
}, ["community"])

MEMBER = obj({
    "did": DID, "handle": STRING_OR_NULL, "displayName": STRING_OR_NULL, "avatar": URL_OR_NULL,
    "isAdmin": BOOLEAN, "isPrimaryAdmin": BOOLEAN, "confirmedAt": DATETIME_OR_NULL,
    "roles": arr(STRING, description="admin, member, then the roles assigned to the member"),
    "membershipUri": STRING_OR_NULL, "appId": STRING_OR_NULL,
}, ["did", "isAdmin", "isPrimaryAdmin", "roles"])
MEMBERS = page("members", MEMBER, total=INTEGER)

REQUEST = obj({"userDid": DID, "did": DID, "handle": STRING_OR_NULL, "displayName": STRING_OR_NULL,
               "avatar": URL_OR_NULL, "requestedAt": DATETIME, "appId": STRING_OR_NULL},
              ["userDid", "did", "requestedAt"])
PENDING = page("pendingMembers", REQUEST)

AUDIT_ENTRY = obj({"id": INTEGER, "action": STRING,
                   "outcome": {"type": "string", "enum": ["done", "denied"]}, "actorDid": nullable(STRING), "adminDid": nullable(STRING),
                   "targetDid": nullable(STRING), "reason": STRING_OR_NULL, "metadata": ANY,
                   "appId": STRING_OR_NULL, "createdAt": DATETIME}, ["id", "action", "createdAt"])
AUDIT = page("entries", AUDIT_ENTRY)

MEMBERSHIP = obj({
    "uri": STRING_OR_NULL, "cid": STRING_OR_NULL, "communityDid": DID, "joinedAt": DATETIME_OR_NULL,
    "role": {"type": "string", "enum": ["admin", "member"]}, "isPrimaryAdmin": BOOLEAN,
    "status": {"type": "string", "enum": ["member"]}, "community": SUMMARY,
}, ["communityDid", "role", "status", "community"])
MEMBERSHIPS = obj({
    "memberships": arr(MEMBERSHIP), "cursor": STRING,
    "pending": arr(obj({"communityDid": DID, "requestedAt": DATETIME,
                        "status": {"type": "string", "enum": ["pending"]}, "community": SUMMARY},
                       ["communityDid", "status", "community"]),
                   description="requests awaiting an admin (first page only)"),
}, ["memberships"])

CHANGE = obj({
    "status": {"type": "string", "enum": ["joined", "pending", "rejected", "withdrawn", "left", "removed"]},
    "communityDid": DID, "memberDid": DID,
}, ["status", "communityDid", "memberDid"], description="A membership change (more fields may follow)")
ADMINS = obj({"communityDid": DID, "admins": arr(obj({"did": DID, "addedAt": DATETIME_OR_NULL}, ["did"]))},
             ["communityDid", "admins"])
DELETED = obj({"status": {"type": "string", "enum": ["deleted"]}, "did": DID}, ["status", "did"])
APP_ACCESS = obj({"communityDid": DID, "appId": STRING, "allowed": BOOLEAN, "manage": BOOLEAN},
                 ["communityDid", "appId", "allowed", "manage"])

PROFILE_FIELDS = {
    "displayName": {"type": "string", "minLength": 1, "maxLength": 64},
    "description": {"type": "string", "maxLength": 512},
    "type": TYPE,
}
CREATE_FIELDS = {
    **PROFILE_FIELDS,
    "handle": {"type": "string", "minLength": 1, "maxLength": 253,
               "description": "the community account's handle (default: derived from the name)"},
    "identifier": {"type": "string", "minLength": 1, "maxLength": 253,
                   "description": "adopt an existing account (handle or DID), with appPassword"},
    "appPassword": {"type": "string", "minLength": 1, "maxLength": 200},
    "recoveryKey": {"type": "string", "minLength": 9, "maxLength": 128, "pattern": "^did:key:z",
                    "description": "a new account's recovery key: the did:key of a key you hold, made the "
                                   "first rotation key of the community's DID (default: the service makes "
                                   "one and answers its private key once, in recoveryKey)"},
    "rosterVisibility": {"type": "string", "enum": ["public", "members", "admins"],
                         "description": "who may list the members (default public)"},
    "listed": {"type": "boolean", "description": "false: absent from lists and search (default true)"},
}
REASON = {"type": "string", "maxLength": 1000}
RECOVERY_KEY = obj({
    "didKey": STRING, "privateKeyHex": STRING_OR_NULL, "generated": BOOLEAN, "note": STRING},
    ["didKey", "generated", "note"],
    description="The new account's recovery key. privateKeyHex is shown only here, once: it is not stored")
MOVE = obj({
    "state": {"type": "string", "enum": ["none", "moving"]}, "pdsUrl": STRING, "fromPds": STRING, "toPds": STRING,
    "step": STRING, "stepWords": STRING, "stepsDone": INTEGER, "stepsTotal": INTEGER, "error": STRING_OR_NULL,
    "startedAt": DATETIME, "updatedAt": DATETIME}, ["state"])
HANDOVER = obj({
    "did": DID, "handle": STRING, "displayName": STRING, "pds": STRING,
    "movedTo": {**STRING_OR_NULL, "description": "where the admin said it goes (null: not said)"},
    "bundle": {"type": "string", "description": "the sealed handover bundle (docs/communities.md, format version 1), base64"},
    "filename": STRING,
    "passphrase": {"type": "string", "description": "opens the bundle; shown only in this answer"},
    "passphraseNote": STRING,
    "carried": obj({"bans": INTEGER, "invites": INTEGER, "auditEntries": INTEGER}),
    "notCarried": {"type": "array", "items": STRING, "description": "what does not travel, in words"}},
    ["did", "bundle", "passphrase", "notCarried"])
CREATED = obj({**DETAILS["properties"], "recoveryKey": RECOVERY_KEY}, DETAILS.get("required", []))


# common.query_did: an empty optional DID parameter counts as absent
DID_OR_EMPTY = {**DID, "pattern": "^(" + DID["pattern"].strip("^$") + ")?$",
                "description": "a DID; empty is the same as absent"}


def did_query(name: str, description: str = "", required: bool = False) -> object:
    return query(name, DID if required else DID_OR_EMPTY, required=required, description=description)


# ------------------------------------------------------------------ settings, invites, bans

VISIBILITY_FIELDS = {"rosterVisibility": CREATE_FIELDS["rosterVisibility"], "listed": CREATE_FIELDS["listed"]}
SETTINGS = obj({"communityDid": DID, "requireUserProof": BOOLEAN, **VISIBILITY_FIELDS},
               ["communityDid", "requireUserProof", "rosterVisibility", "listed"])

INVITE_CODE = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$",
               "description": "an invite code"}
INVITE = obj({
    "id": STRING, "maxUses": nullable(INTEGER), "uses": INTEGER, "expiresAt": DATETIME_OR_NULL,
    "note": STRING_OR_NULL, "createdBy": DID, "createdAt": DATETIME, "revokedAt": DATETIME_OR_NULL,
    "revokedBy": nullable(DID), "appId": STRING_OR_NULL,
}, ["id", "maxUses", "uses", "expiresAt", "createdBy", "createdAt"])
INVITE_CREATED = obj({**INVITE["properties"], "code": STRING, "url": STRING},
                     ["code", "url", *INVITE["required"]], description="The code is shown only here")
INVITES = page("invites", INVITE)
INVITE_BODY = obj({"adminDid": DID, "maxUses": {"type": "integer", "minimum": 1, "maximum": 1000000},
                   "expiresAt": {**DATETIME, "description": "ISO 8601 time with a time zone, in the future"},
                   "note": {"type": "string", "maxLength": 200}}, ["adminDid"])
INVITE_PREVIEW = obj({
    "community": obj({"did": DID, "handle": STRING_OR_NULL, "displayName": STRING, "description": STRING_OR_NULL,
                      "avatar": URL_OR_NULL, "type": TYPE, "memberCount": INTEGER},
                     ["did", "displayName", "type", "memberCount"]),
    "invite": obj({"expiresAt": DATETIME_OR_NULL, "maxUses": nullable(INTEGER), "uses": INTEGER},
                  ["expiresAt", "maxUses", "uses"]),
}, ["community", "invite"])

BAN = obj({"memberDid": DID, "handle": STRING_OR_NULL, "displayName": STRING_OR_NULL, "reason": STRING_OR_NULL,
           "expiresAt": DATETIME_OR_NULL, "bannedBy": DID, "appId": STRING_OR_NULL, "createdAt": DATETIME},
          ["memberDid", "expiresAt", "bannedBy", "createdAt"])
BANS = page("bans", BAN)
BAN_BODY = obj({"adminDid": DID, "memberDid": DID, "reason": REASON,
                "expiresAt": {**DATETIME, "description": "ISO 8601 time with a time zone, in the future; "
                                                         "absent: until lifted"}}, ["adminDid", "memberDid"])
BANNED = obj({"status": {"type": "string", "enum": ["banned"]}, "communityDid": DID, "memberDid": DID,
              "reason": STRING_OR_NULL, "expiresAt": DATETIME_OR_NULL, "bannedBy": DID, "createdAt": DATETIME,
              "wasMember": BOOLEAN, "wasPending": BOOLEAN},
             ["status", "communityDid", "memberDid", "expiresAt", "wasMember", "wasPending"])
UNBANNED = obj({"status": {"type": "string", "enum": ["unbanned"]}, "communityDid": DID, "memberDid": DID},
               ["status", "communityDid", "memberDid"])
