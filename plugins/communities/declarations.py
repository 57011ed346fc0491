"""What the communities plugin declares (docs/plugins.md): the `member.*` event kinds it
emits and the capability catalogue its roles draw from. Declared through the same hooks
as any other plugin's (`cr_event_kinds`, `cr_capabilities`)."""

from __future__ import annotations

from daemon.plugin import DID, STRING_OR_NULL, Capability, EventKind, obj
from daemon.plugin.http import DATETIME_OR_NULL
from plugins.communities.capabilities import CATALOGUE, MODERATOR, PER_COLLECTION

_BOOL = {"type": "boolean"}


def _member(by: str | None = None, **more: dict) -> dict:
    props = {"memberDid": DID, "communityDid": DID, **({by: DID} if by else {}), **more}
    return obj(props, [p for p in props if p not in ("via", "inviteId", "reason", "byInstance")])


def _kind(name: str, description: str, schema: dict, label: str, *person_keys: str) -> EventKind:
    """A member event: it exists to say who, so apps that may not see the roster get none."""
    return EventKind(name, description, schema, label, person_keys=("memberDid", *person_keys), about_people=True)


EVENT_KINDS = [
    _kind("member.joined", "Someone joined a community (a join request approved later is member.approved).",
          _member(via={"type": "string", "enum": ["invite"]}, inviteId=STRING_OR_NULL), "Someone joined"),
    _kind("member.left", "A member left (or their account was deleted: reason account_deleted).",
          _member(reason=STRING_OR_NULL), "Someone left"),
    _kind("member.approved", "An admin or moderator approved a join request.",
          _member("approvedBy"), "A join request was approved", "approvedBy"),
    _kind("member.rejected", "An admin or moderator declined a join request (byInstance: an operator's "
          "instance-wide ban did).",
          _member("rejectedBy", reason=STRING_OR_NULL, byInstance=_BOOL), "A join request was declined",
          "rejectedBy"),
    _kind("member.removed", "A member was removed (byInstance: by an operator's instance-wide ban).",
          _member("removedBy", reason=STRING_OR_NULL, byInstance=_BOOL),
          "A member was removed", "removedBy"),
    _kind("member.banned", "Someone was banned (ending a membership or a request, if any).",
          _member("bannedBy", reason=STRING_OR_NULL, expiresAt=DATETIME_OR_NULL, wasMember=_BOOL,
                  wasPending=_BOOL), "Someone was banned", "bannedBy"),
    _kind("member.unbanned", "A ban was lifted.", _member("unbannedBy"), "A ban was lifted", "unbannedBy"),
    _kind("member.roles_changed",
          "A role was given to or taken from a member, or a role was created, changed or deleted "
          "(`change` says which: for an assignment the member and the roles they now hold, for a "
          "definition the members holding it).",
          obj({"change": {"type": "string", "enum": ["assigned", "unassigned", "role_created",
                                                     "role_updated", "role_deleted"]},
               "role": STRING_OR_NULL, "changedBy": DID, "memberDid": DID,
               "roles": {"type": "array", "items": {"type": "string"}},
               "holders": {"type": "array", "items": DID}, "communityDid": DID},
              ["change", "role", "changedBy", "communityDid"]),
          "A role was given, taken or changed", "changedBy", "holders"),
]

CAPABILITIES = [Capability(name, description, moderator=name in MODERATOR, per_collection=name in PER_COLLECTION)
                for name, description in CATALOGUE.items()]
