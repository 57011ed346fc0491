"""What the page modules share: the `/c/<ident>` part of URLs, finding the community it
names, and the sentences a form post's `?done=` selects."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from daemon.plugin import ApiError
from daemon.plugin import Actor
from plugins.web import queries
from plugins.web.base import PageHandler

#: What a form post did, shown on the page it returns to (`?done=`).
NOTICES = {
    "joined": "You joined this community.",
    "requested": "Your request to join was sent. An admin will approve or decline it.",
    "left": "You left this community.",
    "withdrawn": "Your request to join was withdrawn.",
    "created": "Your community is ready. You are its primary admin.",
    "creation_requested": "Your community is waiting for the instance's operators to approve it. "
                          "Its state is shown below.",
    "profile": "The profile is saved.",
    "avatar": "The new avatar is saved.",
    "banner": "The new banner is saved.",
    "approved": "{who} is a member now: their request was approved.",
    "rejected": "The request of {who} was declined.",
    "gone": "That request was already answered or withdrawn.",
    "promoted": "{who} is now an admin.",
    "demoted": "{who} is no longer an admin.",
    "removed": "{who} was removed from the community.",
    "banned": "{who} is banned{until}.",
    "unbanned": "The ban on {who} is lifted: they may join or ask to join again.",
    "not_banned": "{who} was not banned any more (the ban was lifted or had ended).",
    "role_assigned": "{who} now holds the role {role}.",
    "role_unassigned": "{who} no longer holds the role {role}.",
    "role_created": "The role {role} was created.",
    "role_updated": "The role {role} was saved.",
    "role_deleted": "The role {role} was deleted; its holders lost it.",
    "transferred": "The primary admin role was handed over. You are still an admin.",
    "deleted": ("The community was deleted. Its account was left as is on its server (not deactivated, not "
                "deleted): whoever holds its recovery key, or its owner if it was brought, still controls it."),
    "imported": ("The community is here now, with its members, roles, bans, settings and history. Allow the "
                 "apps it uses again in its settings (Trusted apps): app grants do not travel."),
    "app_allowed": "{app} was granted access.",
    "app_revoked": "The access of {app} was revoked.",
    "invite_revoked": "The invite was revoked: its link no longer lets anyone in.",
    "signed_out": "You are signed out. Sign in again whenever you like.",
}

IDENT = r"([A-Za-z0-9._:%-]{1,253})"


async def person_name(handler: PageHandler, did: str) -> str:
    """How a page names a person: their handle from the profile cache, else their DID (the
    core's `PageHandler.person_names`, which plugins' pages use too)."""
    return (await handler.person_names([did]))[did]


def plain_notice(done: str | None) -> str | None:
    """The sentence of `?done=` on a page that names nobody (a sentence that needs a name
    is only shown where `notice_of` can fill it in)."""
    sentence = NOTICES.get(done or "")
    return sentence if sentence is not None and "{" not in sentence else None


async def notice_of(handler: PageHandler, row: Any = None) -> str | None:
    """The sentence `?done=` selects, naming the person (`who`, a DID looked up in the
    profile cache) and the role (`role`, only if the community has it). Nothing typed into
    the URL reaches the page as text: a DID is replaced by the handle the index knows."""
    from daemon.plugin import is_did
    sentence = NOTICES.get(handler.get_query_argument("done", "") or "")
    if sentence is None or "{" not in sentence:
        return sentence
    who_did = handler.get_query_argument("who", "") or ""
    who = await person_name(handler, who_did) if is_did(who_did) else "They"
    role = handler.get_query_argument("role", "") or ""
    if row is not None and role:
        known = {r["name"] for r in (await handler.communities.list_roles(row))["roles"]}
        if handler.get_query_argument("done", "") == "role_deleted":
            import json

            latest = await handler.communities.audit_rows(row["did"], limit=1, actions=("role.deleted",))
            known = {json.loads(latest[0]["metadata"] or "{}").get("role")} if latest else set()
        role = role if role in known else "that role"
    until = ""
    if row is not None and "{until}" in sentence and is_did(who_did):
        from plugins.web.dates import when
        ban = await handler.communities.ban_of(row, who_did)
        until = f" until {when(ban['expiresAt'])}" if ban and ban["expiresAt"] else ""
    app_name = "The app"
    app_id = handler.get_query_argument("app", "") or ""
    if "{app}" in sentence and app_id.startswith("app_") and len(app_id) <= 24:
        from daemon.plugin.storage import AppsTable
        found = await AppsTable.get(handler.app.db, app_id)
        app_name = found["name"] if found is not None else app_name
    return sentence.format(who=who, role=role or "that role", until=until, app=app_name)


def community_path(row: Any) -> str:
    return "/c/" + quote(row["handle"] or row["did"], safe="")


async def community_row(handler: PageHandler, ident: str) -> Any:
    """The community of `/c/<ident>` as the JSON routes would see it (404 page if none)."""
    did = await queries.community_did_of(handler.app, ident)
    if did is None:
        raise ApiError(404, "community_not_found", f"No community {ident} here.")
    return await handler.communities.visible_row(did, getattr(handler.principal, "app_id", None))


def signed_in_actor(handler: PageHandler) -> Actor:
    """The signed-in person as the actor of a community operation: proven by their OAuth
    login (audit `actorProven`), with no app."""
    assert handler.principal is not None and handler.principal.did is not None
    return Actor(handler.principal.did, None, proven=True)
