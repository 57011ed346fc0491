"""What one plugin may ask of another: the interfaces of the services plugins register on
the Application (`cr_services`), reached as ``app.communities``, ``app.apps``,
``app.webhooks``, ``app.oauth`` and ``app.web`` (declared in `daemon.runtime.app.Application`).

Plugins never import each other's modules (issue 12): the web plugin's pages call the
communities, apps and webhook rules through these, the same code the JSON routes run. Each
implementation is where its operations live (the plugin's own routes call it too), not a
layer forwarding to functions of the same names; its methods take plain values (the actor,
DIDs, ids, parameters), never a request handler. Everything not listed here is private to
its plugin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.events import Audience
    from daemon.security.access import Actor, MemberStatus
    from daemon.base import Principal
    from store.db import Reader, Row, Transaction

#: A DID in a route pattern; colons may arrive percent-encoded (Tornado decodes the group).
DID_PATTERN = r"(did(?::|%3[Aa])[^/?#]+)"

#: The names a plugin may register through `cr_services`, besides a third-party plugin's
#: own name (kept in ``app.extensions``).
SERVICE_NAMES = ("communities", "apps", "webhooks", "oauth", "web")


@dataclass(frozen=True)
class Community:
    """A community as other plugins see it (``app.communities.community(did_or_handle)``):
    only communities whose creation finished; visibility is `CommunitiesService.may_see`."""

    did: str
    handle: str
    #: The display name.
    name: str
    description: str
    #: ``open``, ``admin-approved`` or ``private`` (docs/communities.md, "Types").
    type: str
    creator_did: str
    member_count: int
    #: ISO 8601, UTC.
    created_at: str
    #: Who may list its members: ``public``, ``members`` or ``admins`` (docs/communities.md, "Visibility").
    roster_visibility: str = "public"
    #: Actions through apps in a user's name must carry the user's proof (docs/identity.md).
    require_user_proof: bool = False
    #: Shown in lists and search.
    listed: bool = True


@dataclass(frozen=True)
class Visibility:
    """What one viewer may see of a community (`CommunitiesService.visibility`): the one
    rule the API, the site's pages and plugins' pages ask, so none restates it.

    A viewer is a person (a DID, or None: signed out or nobody named) seen through an app
    (an app id, or None: the site's own pages)."""

    #: The community shows itself at all (its name and type): it is active, and the app may
    #: see it (a private community: its creator app and the apps its admins allowed).
    community: bool
    #: Its content (profile details, records, a plugin's posts): a private community's
    #: only to its members.
    records: bool
    #: Who its members are (the member list, who wrote what): ``rosterVisibility``
    #: (``public``; ``members``: members; ``admins``: admins), a private one's only to members.
    members: bool
    #: The viewer's membership (all False when signed out or not a member).
    status: "MemberStatus"


class CommunitiesService(Protocol):
    """The communities plugin: the operations and reads its JSON routes use, and what any
    plugin may ask with plain values (the first group)."""

    # for any plugin: plain values in, typed values out (docs/plugins.md, "Services")
    async def community(self, did_or_handle: str) -> Community | None:
        """The community with this DID or handle (``@`` and case ignored), None if unknown."""
    async def membership(self, community_did: str, user_did: str, *, tx: "Reader | None" = None) -> "MemberStatus":
        """What the user is in the community: member, admin, pending, roles (all False if
        unknown); `tx`: read in the transaction a command checks in (default ``app.db``)."""
    async def visibility(self, community_did: str, viewer: str | None, *, app_id: str | None = None,
                         proven: bool | None = None, as_admin: bool = True) -> Visibility:
        """What `viewer` (a person's DID; None: signed out) may see of the community through
        the app `app_id` (None: the site's pages, whose viewer is the signed-in person): the
        community, its records, its members (`Visibility`). The API's routes and the pages
        ask the same. Through an app the members show where the app sees them itself
        (`sees_roster`), or to a viewer it proved it acts for (`proven`; default False) whom
        the roster admits. `as_admin` False: an admin viewing as a member sees an
        ``admins`` roster no more than a member does. Unknown community: nothing."""
    async def may_see(self, actor: "Actor", community_did: str) -> bool:
        """``visibility(community_did, actor.did, app_id=actor.app_id, proven=actor.proven).records``:
        whether the community shows its content to `actor` (an `Actor(did, app_id)`)."""
    async def app_may_see(self, community_did: str, app_id: str | None, *, tx: "Reader | None" = None) -> bool:
        """Whether the app (None: the service's own pages) may see the community at all,
        whoever its user is: the first half of `may_see`. False for an unknown community."""
    async def visible(self, community_did: str, app_id: str | None) -> Community:
        """The community if `app_may_see`, else `ApiError` 404 ``community_not_found`` (what
        a route answers for a community the caller may not see)."""
    async def sees_roster(self, community_did: str, app_id: str | None) -> bool:
        """Whether the app may learn who the members are without a user it proves it acts
        for (``rosterVisibility``: ``public``, every app that sees the community; otherwise
        the apps that act for its admins). Ask it before a member's DID leaves in an answer;
        None (the service's own pages) is True. docs/communities.md, "Visibility"."""
    async def event_audience(self, tx: "Reader", community_did: str, caused_by_app: str | None,
                             event_type: str, *, managers_only: bool = False) -> "Audience":
        """Which apps may hear of an event in the community, and which of them may see the
        people it names: decided in the event's transaction by `emit_tx` and kept with it."""
    async def holds(self, actor: "Actor | str", community_did: str, capability: str) -> bool:
        """Whether the user (an `Actor` or a DID) holds `capability` (a catalogue name, also
        a plugin's own from `cr_capabilities`) in the community: admins hold all; others
        what their roles grant; the moderator role what is declared ``moderator=True``."""
    def status_holds(self, status: "MemberStatus", capability: str) -> bool:
        """`holds` for a `MemberStatus` already read (`membership`), without a query."""
    async def audit_tx(self, tx: "Transaction", community_did: str, actor: "Actor | None", action: str,
                       words: str, *, target_did: str | None = None, reason: str | None = None,
                       details: dict[str, Any] | None = None) -> None:
        """Write an entry to the community's audit log in `tx` (the transaction of the
        change), shown on the history page as "<actor> <words> <target>". `details` may not
        use the core's keys ``outcome`` (which marks refused actions) and ``words``
        (ValueError)."""
    async def remove_member(self, community_did: str, member_did: str, actor: "Actor",
                            reason: str | None = None) -> dict[str, Any]:
        """Remove a member as `actor` (who must hold ``members.remove``): the same command,
        checks, event and audit entry as the API's remove."""
    async def ban(self, community_did: str, user_did: str, actor: "Actor", *, reason: str | None = None,
                  expires_at: str | None = None) -> dict[str, Any]:
        """Ban a user as `actor` (who must hold ``members.ban``), as the API's ban does."""
    async def end_membership(self, community_did: str, member_did: str, *, by: str,
                             reason: str | None = None) -> dict[str, Any]:
        """End a membership on the instance's behalf (`by`: the DID of the operator, or of
        whoever the plugin acts for): no capability in the community is asked; the same
        command, ``member.removed`` event (data ``byInstance`` true) and audit entry as
        an admin's removal. A pending join request is declined instead (``member.rejected``,
        ``byInstance`` true; answer ``status`` ``rejected``). 404 ``not_member``; 409 for
        the primary admin."""
    async def remove_from_index(self, community_did: str, *, by: str, reason: str | None = None) -> dict[str, Any]:
        """Forget a community on the instance's behalf (`by`: the operator's DID): its
        index and stored credentials, with an audit entry; nothing is written to its repo
        and its account is not deleted (``account`` in the answer says what is left).
        404 for an unknown community; 409 while it moves."""
    async def acts_for_admins(self, community_did: str, app_id: str | None, *, tx: "Reader | None" = None) -> bool:
        """Whether the app may act for the community's admins: its creator app and apps an
        admin granted management (None, the service's own pages: yes). Where it may not, a
        route answers `APP_NOT_TRUSTED`."""
    async def profiles(self, dids: Iterable[str]) -> dict[str, dict[str, str | None]]:
        """How the site names people: ``{did: {"handle", "displayName"}}`` from the profile
        cache the member pages read, for the DIDs it knows (unknown DIDs are left out; at
        most 1000 DIDs, ValueError beyond)."""

    # the JSON routes' and the web pages' own

    # reads, as the JSON routes answer them (the routes call these too); pages are keyset
    # pages: `limit` rows after (or before) an id, and a ``cursor`` while more follow
    def path_did(self, value: str) -> str: """A DID from a path (decoded), or the community 404."""
    def community_fields(self, body: dict[str, Any], *, required: bool) -> dict[str, Any]:
        """displayName, description, type from a body (400 naming the field)."""
    async def create_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        """A creation's fields from a body, the type defaulting to ``communities.default_type``."""
    async def details(self, row: "Row", viewer: str | None, app_id: str | None) -> dict[str, Any]:
        """The community as `viewer` (a DID; None: nobody named) sees it through the app
        `app_id` (None: the service's own pages), as GET /communities/:did answers."""
    async def list_members(self, row: "Row", *, limit: int, after_id: int | None, search: str | None,
                           admin_view: bool) -> dict[str, Any]:
        """A page of members (``members``, ``total``, ``cursor``); `search` in handles and names."""
    async def require_admin(self, row: "Row", did: str | None) -> "MemberStatus":
        """The admin's status, or 403 ``not_admin``."""
    async def pending_list(self, row: "Row", *, limit: int, after_id: int | None) -> dict[str, Any]:
        """A page of requests to join (``pendingMembers``, ``cursor``)."""
    async def audit_log(self, row: "Row", *, limit: int, before_id: int | None,
                        action: str | None) -> dict[str, Any]:
        """A page of the audit log as the API shows it (``entries``, ``cursor``), newest first."""
    def image_url(self, row: "Row", image: str) -> str | None: """The URL of the avatar or banner."""
    def audit_entry_json(self, row: "Row") -> dict[str, Any]: """An audit_log row as the API shows it."""

    # the web pages' reads: rows of the communities' tables (no other plugin queries them)
    async def community_row(self, did: str) -> "Row | None": """The index row, in any state (None: unknown)."""
    async def visible_row(self, did: str, app_id: str | None) -> "Row":
        """The index row if the app (None: the pages) may see it (`visible`), else 404."""
    async def search(self, text: str, *, user_did: str | None, limit: int, before_id: int | None) -> list["Row"]:
        """Discover: listed communities matching `text` (all: ""), private ones only for members."""
    async def index_listing(self, text: str, *, sort: str = "newest", limit: int = 100) -> list["Row"]:
        """Every active community, whatever its type or listing (the instance operators'
        view): matching `text` (words of its name or description, or its DID or handle),
        ``newest``, ``oldest`` or by ``size`` (members) first."""
    async def memberships_of(self, user_did: str, *, limit: int, after_id: int | None) -> list["Row"]:
        """The user's communities, newest membership first (with ``admin_rank``, ``pending_count``)."""
    async def requests_of(self, user_did: str) -> list["Row"]: """Communities the user asked to join."""
    async def person_did(self, handle: str) -> str | None: """A handle's DID from the profile cache."""
    async def audit_rows(self, community_did: str, *, limit: int, before_id: int | None = None,
                         actions: tuple[str, ...] | None = None, denied: bool = False, person: str | None = None,
                         since: str | None = None, until: str | None = None) -> list["Row"]:
        """A page of the audit log, newest first (keyset on ``id``): of some `actions`,
        refusals only (`denied`) or none of them, by or about `person`, in [since, until)."""
    async def allowed_apps(self, community_did: str) -> list["Row"]: """Apps its admins allowed (``manage``)."""

    # commands (check → intent → PDS → one transaction; daemon/atproto/writes.py)
    async def create(self, actor: "Actor", **fields: Any) -> dict[str, Any]: ...
    async def update_profile(self, row: "Row", actor: "Actor", **changes: Any) -> None: ...
    async def delete(self, row: "Row", actor: "Actor") -> dict[str, Any]: ...
    async def move(self, row: "Row", actor: "Actor", to_pds: str, *, invite_code: str | None = None) -> dict[str, Any]:
        """Begin moving the community's account to another PDS (its primary admin): the
        account on the new PDS is made before this returns, the rest runs in the background;
        the move's progress (docs/communities.md, "Moving to another PDS")."""
    async def move_progress(self, row: "Row") -> dict[str, Any]:
        """``{state: "none", pdsUrl}``, or the progress of the community's move."""
    async def hand_over(self, row: "Row", actor: "Actor", *, to: str | None = None) -> dict[str, Any]:
        """Hand the community over to another Commonroom (its primary admin): the sealed
        bundle (``bundle``, bytes; ``filename``), its ``passphrase`` (shown once) and what does
        not travel (``notCarried``); this instance then forgets it (docs/communities.md,
        "Handing a community over to another Commonroom")."""
    async def import_bundle(self, data: bytes, passphrase: str, actor: "Actor") -> dict[str, Any]:
        """Import a handover bundle as `actor` ("bring your own account"): the community, its
        local state and audit history; refusals (``bundle_refused``, ``community_exists``,
        ``bundle_credentials_refused``, …) change nothing."""
    async def approve(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]: ...
    async def reject(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]: ...
    async def remove(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]: ...
    async def promote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]: ...
    async def demote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]: ...
    async def transfer(self, row: "Row", new_owner: str, actor: "Actor") -> dict[str, Any]: ...
    async def allow_app(self, row: "Row", app_id: str, actor: "Actor", allow: bool,
                        manage: bool = False) -> dict[str, Any]: ...
    async def browser_join(self, row: "Row", principal: "Principal", *,
                           invite: "Row | None" = None) -> tuple[int, dict[str, Any]]:
        """Join as the signed-in user; with `invite` (from `invite_preview`) a member at
        once, one use counted, exactly as the API's join with ``inviteCode``."""

    # invite links (docs/communities.md, "Invites"); 403 refusals are audited as denials
    async def invite_preview(self, code: str) -> tuple["Row", "Row", dict[str, Any]]:
        """(invite, community, the public preview's JSON) of a usable code; 404/410 if not."""
    async def invite_community(self, code: str) -> "Row | None":
        """The active community of an invite code, usable or not (None: unknown code)."""
    async def list_invites(self, row: "Row", actor: "Actor", *, limit: int,
                           before_id: int | None) -> list[dict[str, Any]]: ...
    async def create_invite(self, row: "Row", actor: "Actor", *, max_uses: int | None,
                            expires_at: str | None, note: str | None) -> dict[str, Any]:
        """The new invite with its `code` and `url` (shown this once)."""
    async def revoke_invite(self, row: "Row", code_or_id: str, actor: "Actor") -> dict[str, Any]: ...
    # roles (docs/communities.md, "Roles and capabilities"); 403 refusals audited as denials
    def capability_catalogue(self) -> dict[str, Any]:
        """{capabilities: {name: words}, plugins: {capability: plugin}, perCollection, moderator, maxRoles,
        maxCollections, maxDescription}: the core's and every running plugin's capabilities"""
    async def list_roles(self, row: "Row") -> dict[str, Any]: ...
    async def role_holders(self, row: "Row") -> dict[str, list[str]]: """member DID -> role names"""
    async def create_role(self, row: "Row", actor: "Actor", name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def update_role(self, row: "Row", actor: "Actor", name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def delete_role(self, row: "Row", actor: "Actor", name: str) -> dict[str, Any]: ...
    async def assign_role(self, row: "Row", actor: "Actor", member_did: str, name: str) -> dict[str, Any]: ...
    async def unassign_role(self, row: "Row", actor: "Actor", member_did: str, name: str) -> dict[str, Any]: ...

    # bans (docs/communities.md, "Bans"); 403 refusals audited as denials
    async def ban_row(self, row: "Row", member_did: str, actor: "Actor", *, reason: str | None,
                      expires_at: str | None) -> dict[str, Any]: ...
    async def unban(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]: ...
    async def list_bans(self, row: "Row", actor: "Actor", *, limit: int,
                        before_id: int | None) -> list[dict[str, Any]]: ...
    async def ban_of(self, row: "Row", user_did: str) -> dict[str, Any] | None:
        """The ban in force on a user ({expiresAt, createdAt}; never the reason), or None."""
    async def browser_leave(self, row: "Row", principal: "Principal") -> dict[str, Any]: ...
    async def set_image(self, row: "Row", actor: "Actor", kind: str, data: bytes) -> None: ...
    async def profile_banner(self, user_did: str) -> bytes: """The user's own profile banner."""
    async def instance_counts(self) -> dict[str, int]:
        """The instance's figures for its operators: ``communities`` (in the index) and
        ``people`` (distinct members of any community)."""


class RecordsService(Protocol):
    """The records plugin, for other plugins: ``app.service(RecordsService)``."""

    async def record(self, community_did: str, collection: str, rkey: str) -> dict[str, Any] | None:
        """The indexed record (``uri``, ``cid``, ``collection``, ``rkey``, ``authorDid``,
        ``createdAt``, ``value``), None if the community has no such record."""
    async def record_by_rkey(self, community_did: str, rkey: str) -> dict[str, Any] | None:
        """The community's newest indexed record with this record key in any collection (a
        post's web address names only the key), as `record` answers it; None if none."""
    async def delete_record(self, community_did: str, collection: str, rkey: str, actor: "Actor", *,
                            permitted: bool = False) -> dict[str, Any]:
        """Delete a record as `actor` (a member), as the API's delete does: the collection's
        delete rule (the author, an admin, a role granting ``records.delete``) unless the
        caller checked a capability of its own (`permitted`: ``reports.review`` for a reported
        record); someone else's record only through an app that acts for the admins; the PDS first, then the index and the
        ``record.deleted`` event in one transaction. Raises `ApiError` (404 record_not_found...)."""


class AppsService(Protocol):
    """The apikeys plugin: apps and their keys, as the developer's JSON routes manage them."""

    def default_limit(self) -> tuple[int, float]: ...
    def app_json(self, row: "Row", default: tuple[int, float]) -> dict[str, Any]: ...
    def app_fields(self, body: dict[str, Any], required: bool) -> dict[str, Any]: ...
    async def owned_app(self, owner_did: str, app_id: str) -> "Row": ...
    async def list_apps(self, owner_did: str, limit: int, after: Any) -> list["Row"]: ...
    async def register(self, owner_did: str, *, name: str, domain: str) -> tuple["Row", str]: ...
    async def rotate_key(self, owner_did: str, app_id: str) -> tuple["Row", str]: ...
    async def deactivate(self, owner_did: str, app_id: str) -> "Row": ...
    async def set_rate_limit(self, owner_did: str, app_id: str, requests: int | None,
                             window: float | None) -> Any: ...
    async def all_apps(self) -> list["Row"]: """Every app, whoever owns it (operators)."""
    async def operator_deactivate(self, app_id: str) -> "Row": """Deactivate any app (operators)."""
    async def operator_rate_limit(self, app_id: str, requests: int | None, window: float | None) -> "Row":
        """Set any app's rate limit, also above the default; None: the default (operators)."""


class WebhooksService(Protocol):
    """The webhooks plugin: an app's webhooks and their deliveries."""

    #: The highest `concurrency` a webhook may have (deliveries in flight at once).
    max_concurrency: int

    def settings(self) -> Any: """The plugin's config section (limits, secret overlap)."""
    def webhook_json(self, row: "Row") -> dict[str, Any]: ...
    def delivery_json(self, row: "Row") -> dict[str, Any]: ...
    async def checked_url(self, body: dict[str, Any], required: bool) -> str | None: ...
    async def owned(self, app_id: str, webhook_id: str) -> "Row": ...
    async def list_webhooks(self, app_id: str, limit: int, after: Any) -> list["Row"]: ...
    async def delivery_counts(self, webhook_id: str) -> dict[str, int]: ...
    async def failing_count(self) -> int:
        """Every app's webhooks that are failing: disabled by the service after sustained
        failure, or with deliveries given up in a row (the operators' overview)."""
    async def list_deliveries(self, app_id: str, webhook_id: str, limit: int, before: Any,
                              status: str | None) -> list["Row"]: ...
    async def create(self, app_id: str, **fields: Any) -> tuple["Row", str]: ...
    async def update(self, app_id: str, webhook_id: str, **fields: Any) -> "Row": ...
    async def delete(self, app_id: str, webhook_id: str) -> None: ...
    async def rotate_secret(self, app_id: str, webhook_id: str) -> tuple["Row", str, str | None]: ...
    async def delivery_detail(self, app_id: str, webhook_id: str, delivery_id: int) -> dict[str, Any]:
        """`delivery_json` plus `payload` (the JSON body sent) and `responseBody` (the
        receiver's answer to the last attempt, first 2 KB)."""
    async def redeliver(self, app_id: str, webhook_id: str, delivery_id: int) -> "Row": ...


class OAuthService(Protocol):
    """The oauth plugin: browser sign-in through the user's PDS."""

    async def sign_out(self, session_id: str) -> bool:
        """Revoke the session's grant at the PDS (best effort) and forget it; True if the
        PDS confirmed the revocation."""
    async def sign_out_all(self, session_ids: list[str]) -> int:
        """Forget these sessions' grants at once, and revoke their tokens at the PDSes in
        the background (best effort, all at once, a deadline for them all); returns how
        many grants there were. For signing a person out everywhere (`end_sessions_of`)."""


class WebService(Protocol):
    """The web plugin: the pages (nothing other plugins call; they ask for a page by name
    through `cr_render_page`)."""

    def url(self, name: str) -> str: """The cache-busting URL of a shipped static file."""


#: The interface of each built-in service name: ``app.service(CommunitiesService)`` is
#: ``app.communities``.
SERVICE_TYPES: dict[str, type] = {"communities": CommunitiesService, "apps": AppsService,
                                  "webhooks": WebhooksService, "oauth": OAuthService, "web": WebService}
