"""What the page modules share: the `/c/<ident>` part of URLs, finding the community it
names, and the sentences a form post's `?done=` selects."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from daemon.plugin import ApiError
from daemon.security.access import Actor, require_community
from plugins.web import queries
from plugins.web.base import PageHandler

#: What a form post did, shown on the page it returns to (`?done=`).
NOTICES = {
    "joined": "You joined this community.",
    "requested": "Your request to join was sent. An admin will approve or decline it.",
    "left": "You left this community.",
    "withdrawn": "Your request to join was withdrawn.",
    "created": "Your community is ready. You are its primary admin.",
    "profile": "The profile is saved.",
    "avatar": "The new avatar is saved.",
    "banner": "The new banner is saved.",
    "approved": "The request was approved: they are a member now.",
    "rejected": "The request was declined.",
    "gone": "That request was already answered or withdrawn.",
    "promoted": "They are an admin now.",
    "demoted": "They are no longer an admin.",
    "removed": "They were removed from the community.",
    "transferred": "The primary admin role was handed over. You are still an admin.",
    "deleted": "The community was deleted.",
    "app_allowed": "The app was granted access.",
    "app_revoked": "The app's access was revoked.",
    "invite_revoked": "The invite was revoked: its link no longer lets anyone in.",
}

IDENT = r"([A-Za-z0-9._:%-]{1,253})"


def community_path(row: Any) -> str:
    return "/c/" + quote(row["handle"] or row["did"], safe="")


async def community_row(handler: PageHandler, ident: str) -> Any:
    """The community of `/c/<ident>` as the JSON routes would see it (404 page if none)."""
    did = await queries.community_did_of(handler.app.db, ident)
    if did is None:
        raise ApiError(404, "community_not_found", f"No community {ident} here.")
    return await require_community(handler.app, did, handler.principal)


def signed_in_actor(handler: PageHandler) -> Actor:
    """The signed-in person as the actor of a community operation: proven by their OAuth
    login (audit `actorProven`), with no app."""
    assert handler.principal is not None and handler.principal.did is not None
    return Actor(handler.principal.did, None, proven=True)

