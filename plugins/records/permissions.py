"""Who may create, update and delete records in a collection of a community
(docs/records.md, "Who may write"). The community's admins set a rule per collection and
action through ``PUT …/records-settings {adminDid, permissions}``:

* ``members``: any member;
* ``author`` (update, delete): the record's author;
* ``role``: members whose role grants ``records.<action>`` on the collection;
* ``admins``: admins only.

Admins may always (they hold every capability), and so may members whose role grants the
capability on the collection, except under ``admins``. Without a rule: ``members`` create,
``author`` updates and deletes, which is how the records API always behaved (the author, or
an admin). What a member's roles grant comes from the core (``MemberStatus.holds``,
daemon.plugin, read through the communities service): this plugin never imports the communities plugin.
"""

from __future__ import annotations

from typing import Any, Mapping

from daemon.plugin import ApiError, MemberStatus, invalid
from daemon.plugin.atproto import nsid_problem
from plugins.records import store

ACTIONS = ("create", "update", "delete")
RULES = {"create": ("members", "role", "admins"), "update": ("members", "author", "role", "admins"),
         "delete": ("members", "author", "role", "admins")}
DEFAULTS = {"create": "members", "update": "author", "delete": "author"}
MAX_COLLECTIONS = 100


async def rules_for(app: Any, community_did: str, collection: str) -> dict[str, str]:
    row = await store.rule(app.db, community_did, collection)
    if row is None:
        return dict(DEFAULTS)
    return {"create": row["create_rule"], "update": row["update_rule"], "delete": row["delete_rule"]}


def decide(status: MemberStatus, action: str, rule: str, collection: str, *, is_author: bool) -> str | None:
    """How the member may (``"member"``: as any member or the author, ``"granted"``: as an
    admin or through a role), or None if they may not."""
    if rule == "admins":
        return "granted" if status.is_admin else None
    if rule == "members" or (rule == "author" and is_author):
        return "member"
    if status.holds(f"records.{action}", collection):
        return "granted"
    return None


def refusal(action: str, rule: str, collection: str) -> ApiError:
    if rule == "author":
        return ApiError(403, "not_author", "Only the record's author or an admin of the community may change it.")
    who = "admins" if rule == "admins" else f"admins and members whose role grants records.{action} on it"
    return ApiError(403, "not_permitted", f"In {collection}, only {who} may {action} records.")


def parse(value: Any, field: str = "permissions") -> dict[str, dict[str, str]]:
    """`{collection: {create?, update?, delete?}}` from a request (actions left out take
    their defaults); 400 ``invalid_request`` naming the field."""
    if not isinstance(value, dict):
        raise invalid(field, "must be an object: {collection: {create, update, delete}}")
    if len(value) > MAX_COLLECTIONS:
        raise invalid(field, f"must name at most {MAX_COLLECTIONS} collections")
    out: dict[str, dict[str, str]] = {}
    for collection, rules in value.items():
        where = f"{field}.{collection}"
        problem = nsid_problem(collection)
        if problem is not None:
            raise invalid(where, "must be keyed by a collection NSID: " + problem)
        if not isinstance(rules, dict) or set(rules) - set(ACTIONS):
            raise invalid(where, "must be an object with create, update and/or delete")
        for action, rule in rules.items():
            if rule not in RULES[action]:
                raise invalid(f"{where}.{action}", "must be one of " + ", ".join(RULES[action]))
        out[collection] = {a: rules.get(a, DEFAULTS[a]) for a in ACTIONS}
    return out


def as_json(rows: list[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    return {r["collection"]: {"create": r["create_rule"], "update": r["update_rule"], "delete": r["delete_rule"]}
            for r in rows}
