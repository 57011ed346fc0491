"""What an actor may do in a community: the fixed catalogue of capabilities, and the roles
that grant them.

Every admin or moderator action names the capability it needs and checks it with
:func:`require_capability`. Admins hold every capability. Other members hold what their
roles grant: the built-in ``moderator`` (:data:`MODERATOR`) and the community's custom
roles, each a name plus capabilities from the catalogue (``records.*`` granted per
collection). What a member's roles grant is kept on their member row (``grants``), so a
check is one indexed read (``daemon.security.access.MemberStatus.holds``). The catalogue is
documented in docs/communities.md ("Roles and capabilities").
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from daemon.plugin import ApiError, MemberStatus, validate
from daemon.plugin.atproto import nsid_problem

# capability -> what it allows (the catalogue is fixed: custom roles pick from it)
CATALOGUE: dict[str, str] = {
    "members.approve": "approve and reject join requests",
    "members.remove": "remove members who are not admins",
    "members.ban": "ban and unban users who are not admins",
    "invites.manage": "create, list and revoke invite links",
    "audit.read": "read the community's audit log",
    "records.create": "create records in a collection (granted per collection)",
    "records.update": "update records in a collection (granted per collection)",
    "records.delete": "delete records in a collection (granted per collection)",
}

#: Capabilities granted per collection (`records.create:<collection>` in a member's grants).
PER_COLLECTION = frozenset({"records.create", "records.update", "records.delete"})

# the built-in moderator role
MODERATOR: frozenset[str] = frozenset(
    {"members.approve", "members.remove", "members.ban", "invites.manage", "audit.read"})

#: Built-in roles: `admin` (admin_rank, with the primary admin first) and `member` (the
#: member row itself) are not assigned through the roles routes; `moderator` is.
BUILTIN = ("admin", "member", "moderator")
#: Names no custom role may take.
RESERVED = frozenset(BUILTIN) | {"primary", "primary-admin", "owner", "none"}

ROLE_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")  # always fullmatch: `$` also matches before a final \n
MAX_ROLES = 50           # custom roles per community
MAX_COLLECTIONS = 50     # collections per role
MAX_DESCRIPTION = 300
MAX_CAPABILITIES = 100   # community-wide capabilities per role (the roles record's lexicon)
MAX_CAPABILITY_NAME = 128


def require_capability(status: MemberStatus | None, capability: str, collection: str | None = None) -> None:
    """403 ``not_admin`` unless `status` holds `capability` (admins hold every one; the code
    stays ``not_admin`` so callers that knew only admins see no change)."""
    assert capability in CATALOGUE, capability
    if status is not None and status.holds(capability, collection):
        return
    raise ApiError(403, "not_admin", "Only an admin of this community, or a member whose role grants "
                   f"{capability}, may do this.")


async def require_capability_of(app: Any, community_did: str, did: str, capability: str) -> MemberStatus:
    """:func:`require_capability` for the member `did` of the community (one indexed read)."""
    from plugins.communities.steps import member_status
    status = await member_status(app.db, community_did, did)
    require_capability(status, capability)
    return status


def grants_of(roles: Iterable[str], definitions: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The `grants` column for a member holding `roles`, given the custom roles'
    `definitions` ({name: {capabilities, collections}}): space-separated, sorted; None if
    empty."""
    out: set[str] = set()
    for name in roles:
        if name == "moderator":
            out |= MODERATOR
            continue
        role = definitions.get(name)
        if role is None:
            continue
        out |= set(role["capabilities"])
        for grant in role["collections"]:
            out |= {f"{cap}:{grant['collection']}" for cap in grant["capabilities"]}
    return " ".join(sorted(out)) or None


def role_name(value: Any, field: str = "name") -> str:
    if not isinstance(value, str) or not ROLE_NAME.fullmatch(value):
        raise validate.invalid(field, "must be 1-32 characters: a lower-case letter, then lower-case "
                                      "letters, digits or '-'")
    return value


def plugin_capabilities(app: Any) -> frozenset[str]:
    """The capabilities other plugins declared (`cr_capabilities`): a custom role may grant
    them too."""
    return frozenset(name for name in app.declarations.capabilities if name not in CATALOGUE)


def catalogue(app: Any) -> dict[str, Any]:
    """Every capability a role may hold, from what the plugins declared (`cr_capabilities`;
    the communities plugin declares the core's the same way): ``capabilities`` {name: words},
    ``perCollection``, ``moderator`` (what the built-in moderator role holds: the declared
    ``moderator=True``), ``plugins`` {capability: the plugin that declared it} for the other
    plugins' own, and the roles' limits. What ``GET .../roles``, the roles page and the role
    form show."""
    declared = app.declarations.capabilities
    return {"capabilities": {name: cap.description for name, cap in declared.items()},
            "perCollection": sorted(name for name, cap in declared.items() if cap.per_collection),
            "moderator": sorted(name for name, cap in declared.items() if cap.moderator),
            "plugins": {name: app.declarations.owner("capability", name) or "" for name in declared
                        if name not in CATALOGUE},
            "maxRoles": MAX_ROLES, "maxCollections": MAX_COLLECTIONS, "maxDescription": MAX_DESCRIPTION}


def role_fields(body: Mapping[str, Any], extra: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`description`, `capabilities` and `collections` of a custom role from a request body
    (400 ``invalid_request`` naming the field); `extra`: the plugins' own capabilities."""
    description = validate.string(body, "description", required=False, max_len=MAX_DESCRIPTION) or ""
    caps = body.get("capabilities", [])
    if not isinstance(caps, list):
        raise validate.invalid("capabilities", "must be a list of capabilities")
    for i, cap in enumerate(caps):
        if not isinstance(cap, str):
            raise validate.invalid(f"capabilities[{i}]", "must be a capability name")
        if cap in PER_COLLECTION:
            raise validate.invalid(f"capabilities[{i}]", f"{cap} is granted per collection: "
                                   "put it under collections [{collection, capabilities}]")
        if cap not in CATALOGUE and cap not in extra:
            raise validate.invalid(f"capabilities[{i}]", "must be one of " + ", ".join(
                [c for c in CATALOGUE if c not in PER_COLLECTION] + sorted(extra)))
        if len(cap) > MAX_CAPABILITY_NAME:   # a plugin's overlong name: the roles record cannot hold it
            raise validate.invalid(f"capabilities[{i}]", f"a role can only grant capabilities of at most "
                                   f"{MAX_CAPABILITY_NAME} characters")
    if len(set(caps)) > MAX_CAPABILITIES:
        raise validate.invalid("capabilities", f"must have at most {MAX_CAPABILITIES} capabilities")
    grants = body.get("collections", [])
    if not isinstance(grants, list):
        raise validate.invalid("collections", "must be a list of {collection, capabilities}")
    if len(grants) > MAX_COLLECTIONS:
        raise validate.invalid("collections", f"must have at most {MAX_COLLECTIONS} items")
    collections: dict[str, list[str]] = {}
    for i, grant in enumerate(grants):
        if not isinstance(grant, dict) or set(grant) - {"collection", "capabilities"}:
            raise validate.invalid(f"collections[{i}]", "must be {collection, capabilities}")
        problem = nsid_problem(grant.get("collection"))
        if problem is not None:
            raise validate.invalid(f"collections[{i}].collection", "must be a collection NSID: " + problem)
        per = grant.get("capabilities")
        if not isinstance(per, list) or not per or any(not isinstance(c, str) or c not in PER_COLLECTION
                                                       for c in per):
            raise validate.invalid(f"collections[{i}].capabilities", "must be a non-empty list of "
                                   + ", ".join(sorted(PER_COLLECTION)))
        merged = collections.setdefault(grant["collection"], [])
        merged.extend(c for c in per if c not in merged)
    return {"description": description,
            "capabilities": sorted(set(caps)),
            "collections": [{"collection": c, "capabilities": sorted(p)} for c, p in sorted(collections.items())]}
