"""What the API-key and browser handlers share: path DIDs, body fields, reads."""

from __future__ import annotations

import time
from typing import Any

from daemon.plugin import Row, is_did, require_did, validate
from daemon.plugin import ApiError, BaseHandler, encode_cursor
from daemon.plugin.http import encode_json
from plugins.communities import views
from plugins.communities.config import TYPES
from plugins.communities.steps import MemberStatus, app_sees_roster, member_status, require_community
from plugins.communities.steps import roster_visible, visibility
from plugins.communities.steps import DID, path_did  # noqa: F401 (the handlers' path parsing)
from plugins.communities import store


def body_did(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    return value if is_did(value) else require_did(value, field)


def query_did(handler: BaseHandler, field: str, required: bool = False) -> str | None:
    value = handler.get_query_argument(field, None)
    if value in (None, ""):
        if required:
            raise validate.invalid(field, "is required")
        return None
    return require_did(value, field)


def query_bool(handler: BaseHandler, field: str) -> bool:
    value = (handler.get_query_argument(field, "") or "").lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise validate.invalid(field, "must be true or false")


def community_fields(body: dict[str, Any], *, required: bool) -> dict[str, Any]:
    """displayName (1..64), description (<=512), type; for create and profile update."""
    out: dict[str, Any] = {}
    name = validate.string(body, "displayName", required=required, min_len=1, max_len=64, name=True)
    if name is not None:
        out["display_name"] = name
    description = validate.string(body, "description", required=False, max_len=512)
    if description is not None:
        out["description"] = description
    kind = validate.string(body, "type", required=False)
    if kind is not None:
        if kind not in TYPES:
            raise validate.invalid("type", f"must be one of {', '.join(TYPES)}")
        out["type"] = kind
    return out


def reason_field(body: dict[str, Any]) -> str | None:
    return validate.string(body, "reason", required=False, max_len=1000) or None


ROSTER_VISIBILITY = ("public", "members", "admins")


def visibility_fields(body: dict[str, Any]) -> dict[str, Any]:
    """`rosterVisibility` (public | members | admins) and `listed` (true | false), each
    optional: for create and settings."""
    out: dict[str, Any] = {}
    roster = validate.string(body, "rosterVisibility", required=False)
    if roster is not None:
        if roster not in ROSTER_VISIBILITY:
            raise validate.invalid("rosterVisibility", f"must be one of {', '.join(ROSTER_VISIBILITY)}")
        out["roster_visibility"] = roster
    listed = validate.boolean(body, "listed")
    if listed is not None:
        out["listed"] = listed
    return out


# ------------------------------------------------------------------ reads


def app_of(handler: Any) -> str | None:
    """The request's app (None: a browser session, the service's own)."""
    return getattr(handler.principal, "app_id", None)


async def sees_roster(app: Any, row: Row, app_id: str | None) -> bool:
    """`app_sees_roster` for the app `app_id` (None, the browser's routes: yes), with no
    read where the roster is public or the app created the community."""
    if row["roster_visibility"] == "public" or app_id is None or row["creator_app_id"] == app_id:
        return True
    return await app_sees_roster(app.db, row["did"], app_id)


def page_after(handler: BaseHandler) -> tuple[int, int | None]:
    """A page's `limit` and the id its integer keyset cursor names (None: the first page)."""
    limit, cursor = handler.page_params(1, "i")
    return limit, int(cursor[0]) if cursor else None


def _page_args(handler: BaseHandler) -> tuple[int, int | None, str | None]:
    """A member list's `limit`, the id after which it starts, and the `search`."""
    limit, after = page_after(handler)
    return limit, after, handler.get_query_argument("search", None)


#: How many pages of members `members_json` keeps (at most ~25 KB each: a page of 100).
MEMBER_PAGES_CACHED = 64


def member_pages_cache() -> Any:
    """The cache of member pages one application keeps (`Communities.member_pages`): a
    `VersionedCache`, so never stale for this daemon's own writes (emptied by every commit)
    and stale at most a second for another process's (the operator CLI)."""
    from daemon.plugin.storage import VersionedCache
    return VersionedCache(time, max_entries=MEMBER_PAGES_CACHED)


async def members_json(handler: Any, row: Row, *, admin_view: bool) -> bytes:
    """`list_members` as the JSON bytes the API answers. A page without `search` is built
    as text by SQLite (`store.member_page`: no dict per member, no encoder) and kept in
    the application's cache of member pages until the next commit: apps show member lists
    on every community view, and between two changes every one of them is the same bytes.
    A search, or a row whose roles need it, takes the dict way. All give the same JSON."""
    limit, after, search = _page_args(handler)
    if not search:
        cache = handler.app.communities.member_pages
        version = cache.version(handler.app.db)
        # the total comes from the community's row, read before the version: part of the key
        key = (row["did"], limit, after, admin_view, row["member_count"])
        body = cache.get(version, key)
        if body is not None:
            return body
        page = await store.member_page(handler.app.db, row["did"], limit=limit, after_id=after,
                                               admin_view=admin_view)
        if not page.odd:
            more = f',"cursor":"{encode_cursor([page.last_id])}"' if page.last_id is not None else ""
            body = f'{{"members":{page.members},"total":{int(row["member_count"])}{more}}}'.encode()
            cache.put(version, key, body)
            return body
    return encode_json(await handler.app.communities.list_members(row, limit=limit, after_id=after, search=search,
                                                                   admin_view=admin_view))


async def require_member_view(handler: BaseHandler, row: Row, viewer: str | None, *,
                              as_admin: bool = True) -> MemberStatus | None:
    """Private communities show their members only to members; `rosterVisibility`
    narrows that further (`members`, or `admins`: only a viewer acting as an admin, i.e.
    `as_admin`: named as adminDid by a managing app, or a browser session)."""
    seen = await visibility(handler.app.db, row, viewer, None, as_admin=as_admin)
    status = seen.status if viewer else None
    if not seen.members:
        if row["roster_visibility"] == "admins":
            raise ApiError(403, "members_hidden", "The members of this community are visible to its admins only.")
        raise ApiError(403, "members_hidden", "The members of this community are visible to its members only.")
    return status


async def memberships(handler: BaseHandler, user_did: str) -> dict[str, Any]:
    limit, cursor = handler.page_params(1, "i")
    rows = await store.memberships_of(handler.app.db, user_did, limit=limit + 1,
                                              after_id=int(cursor[0]) if cursor else None)
    out: dict[str, Any] = {"memberships": [views.membership_json(r) for r in rows[:limit]]}
    if cursor is None:
        out["pending"] = [{"communityDid": r["did"], "requestedAt": r["requested_at"], "status": "pending",
                           "community": views.community_summary(r)}
                          for r in await store.requests_of(handler.app.db, user_did)]
    if len(rows) > limit:
        out["cursor"] = encode_cursor([rows[limit - 1]["member_id"]])
    return out


async def community_for(handler: BaseHandler, raw_did: str) -> Row:
    return await require_community(handler.app, path_did(raw_did), handler.principal)


async def created(handler: BaseHandler, did: str, viewer: str) -> dict[str, Any]:
    row = await store.get_community(handler.app.db, did)
    return await handler.app.communities.details(row, viewer, app_of(handler))


def destination(to: str | None) -> str | None:
    """Where a handed-over community goes, as its primary admin gave it (optional): an
    http(s) address, without a trailing slash; None when not given."""
    from daemon.plugin import validate
    if to is None or not to.strip():
        return None
    to = to.strip().rstrip("/")
    if not to.startswith(("https://", "http://")) or any(ch.isspace() for ch in to) or len(to) < 10:
        raise validate.invalid("to", "must be the new instance's address (https://…), or left out")
    return to
