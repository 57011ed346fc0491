"""The communities service: ``app.communities``, the interface
`daemon.plugin.CommunitiesService`, registered through `cr_services`.

What any plugin may ask with plain values (a community by DID or handle, a person's
membership, visibility, capabilities (the catalogue's and the plugins' own), audit entries
with a plugin's own words, the moderation commands), then the reads the JSON routes and the
web pages share (details, members, requests, the audit log: the routes call these too), the
reads of this plugin's tables the pages need, and the commands the pages run. The commands
live by subject (`membership`, `admins`, `lifecycle`, `roles`, `bans`, `invites`,
`uploads`), called by the JSON routes too; the service adds what a page needs around them:
a refusal audited as the API's `@audit_denials` does."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, cast

from daemon.plugin import Actor, ApiError, Community, MemberStatus, Visibility, encode_cursor, is_did, validate
from daemon.plugin.http import NOT_FOUND
from plugins.communities import (admins, bans, capabilities, common, denials, invites, lifecycle, membership, roles,
                                 steps, store, uploads, views)

MAX_PROFILES = 1000   # DIDs one `profiles` call may ask for

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, Principal, Reader, Row, Transaction


def community_of(row: "Row") -> Community:
    """The typed community other plugins see, from its index row."""
    return Community(row["did"], row["handle"], row["display_name"], row["description"], row["type"],
                     row["creator_did"], row["member_count"], row["created_at"], row["roster_visibility"],
                     bool(row["require_user_proof"]), bool(row["listed"]))


class Communities:
    """`daemon.plugin.CommunitiesService`, bound to one application (`communities_of(app)`
    within this plugin)."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        #: pages of members as the API answers them (common.members_json)
        self.member_pages = common.member_pages_cache()
        #: what membership/check read since the last commit (steps.checked_status)
        self.check_cache = steps.CheckCache()

    # ---------------------------------------------------------------- for any plugin

    async def community(self, did_or_handle: str) -> Community | None:
        ident = did_or_handle.strip()
        if is_did(ident):
            row = await store.get_community(self.app.db, ident)
        else:
            row = await store.active_by_handle(self.app.db, ident.lstrip("@").lower())
        if row is None or row["state"] != "active":
            return None
        return community_of(row)

    async def membership(self, community_did: str, user_did: str, *, tx: "Reader | None" = None) -> MemberStatus:
        return await steps.member_status(tx or self.app.db, community_did, user_did)

    async def visibility(self, community_did: str, viewer: str | None, *, app_id: str | None = None,
                         proven: bool | None = None, as_admin: bool = True) -> Visibility:
        row = await store.get_community(self.app.db, community_did)
        return await steps.visibility(self.app.db, row, viewer, app_id, proven=proven, as_admin=as_admin)

    async def may_see(self, actor: Actor, community_did: str) -> bool:
        return (await self.visibility(community_did, actor.did or None, app_id=actor.app_id,
                                      proven=actor.proven)).records

    async def app_may_see(self, community_did: str, app_id: str | None, *, tx: "Reader | None" = None) -> bool:
        return await steps.app_can_see(tx or self.app.db, community_did, app_id)

    async def visible(self, community_did: str, app_id: str | None) -> Community:
        return community_of(await steps.require_community(self.app, community_did, Actor("", app_id)))

    async def sees_roster(self, community_did: str, app_id: str | None) -> bool:
        return await steps.app_sees_roster(self.app.db, community_did, app_id)

    #: (tx, community_did, caused_by_app, event_type, *, managers_only) -> Audience; the rule
    #: itself, not a wrapper: every event's commit asks it
    event_audience = staticmethod(steps.event_audience)

    async def holds(self, actor: Actor | str, community_did: str, capability: str) -> bool:
        declared = self.app.declarations.capabilities.get(capability)
        if declared is None:
            raise ValueError(f"no plugin declares the capability {capability!r} (cr_capabilities)")
        status = await self.membership(community_did, actor if isinstance(actor, str) else actor.did)
        return self.status_holds(status, capability)

    def status_holds(self, status: MemberStatus, capability: str) -> bool:
        """`holds` for a status already read (a page that has it draws several links)."""
        if status.holds(capability):
            return True
        # the moderator role's grants are stored with its catalogue capabilities; a plugin's own
        # that it declares for moderators are held through the role itself
        declared = self.app.declarations.capabilities.get(capability)
        return bool(status.is_member and declared is not None and declared.moderator
                    and "moderator" in status.roles)

    async def audit_tx(self, tx: "Transaction", community_did: str, actor: Actor | None, action: str,
                       words: str, *, target_did: str | None = None, reason: str | None = None,
                       details: dict[str, Any] | None = None) -> None:
        reserved = {"outcome", "words"} & set(details or {})
        if reserved:  # the core's own keys: "outcome" marks refused actions (denials)
            raise ValueError(f"audit details may not use the key(s) {sorted(reserved)}")
        await steps.audit_tx(self.app, tx, community_did, action, actor, target_did, reason,
                             {**(details or {}), "words": words})

    async def remove_member(self, community_did: str, member_did: str, actor: Actor,
                            reason: str | None = None) -> dict[str, Any]:
        return await membership.remove(self.app, await self._active(community_did), member_did, actor, reason)

    async def ban(self, community_did: str, user_did: str, actor: Actor, *, reason: str | None = None,
                  expires_at: str | None = None) -> dict[str, Any]:
        return await bans.ban(self.app, await self._active(community_did), user_did, actor, reason=reason,
                              expires_at=expires_at)

    async def end_membership(self, community_did: str, member_did: str, *, by: str,
                             reason: str | None = None) -> dict[str, Any]:
        return await membership.end_for_instance(self.app, await self._active(community_did), member_did, by,
                                                 reason)

    async def remove_from_index(self, community_did: str, *, by: str, reason: str | None = None) -> dict[str, Any]:
        return await lifecycle.remove_from_index(self.app, community_did, by=by, reason=reason)

    async def acts_for_admins(self, community_did: str, app_id: str | None, *, tx: "Reader | None" = None) -> bool:
        return await steps.app_manages_community(tx or self.app.db, community_did, app_id)

    async def profiles(self, dids: Iterable[str]) -> dict[str, dict[str, str | None]]:
        wanted = list(dict.fromkeys(dids))
        if len(wanted) > MAX_PROFILES:
            raise ValueError(f"profiles: at most {MAX_PROFILES} DIDs at once, not {len(wanted)}")
        rows = await store.profiles(self.app.db, wanted)
        return {did: {"handle": row["handle"], "displayName": row["display_name"]} for did, row in rows.items()}

    async def _active(self, community_did: str) -> "Row":
        row = await store.get_community(self.app.db, community_did)
        if row is None or row["state"] != "active":
            raise NOT_FOUND(community_did)
        return row

    # ---------------------------------------------------------------- reads the routes and pages share

    #: A DID from a path (percent-decoded), or the community 404.
    path_did = staticmethod(steps.path_did)
    #: displayName (1..64), description (<=512), type: for create and profile update.
    community_fields = staticmethod(common.community_fields)

    async def create_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        """A creation's fields from a body: `community_fields`, the type defaulting to
        `communities.default_type`, the handle, an account to bring (`identifier` and
        `appPassword`) and the visibility settings."""
        fields = common.community_fields(body, required=True)
        fields.setdefault("description", "")
        fields.setdefault("type", self.app.config.plugin("communities").default_type)
        identifier = body.get("identifier", body.get("did"))
        if identifier is not None:
            identifier = validate.string({"identifier": identifier}, "identifier", min_len=1, max_len=253)
            validate.string(body, "appPassword", min_len=1, max_len=200)
        handle = validate.string(body, "handle", required=False, min_len=1, max_len=253)
        recovery_key = body.get("recoveryKey")
        if recovery_key is not None:
            from daemon.plugin.atproto import require_did_key
            if identifier is not None:
                raise ApiError(400, "invalid_request", "recoveryKey: only a new account takes one (an "
                                                       "adopted account keeps the keys it has)")
            recovery_key = require_did_key(recovery_key, "recoveryKey")
        return {"display_name": fields["display_name"], "description": fields["description"],
                "type": fields["type"], "handle": handle, "identifier": identifier,
                "recovery_key": recovery_key,
                "app_password": body.get("appPassword"), **common.visibility_fields(body)}

    async def details(self, row: "Row", viewer: str | None, app_id: str | None) -> dict[str, Any]:
        """Details as seen by `viewer` (None: no user named) through the app `app_id` (None:
        the service's own pages): a private community shows only its name and type to
        non-members. Where the community hides its roster from the app
        (`common.sees_roster`), the named user is ignored: their membership would answer
        the question `membership/check` answers only with their proof."""
        if viewer and not await common.sees_roster(self.app, row, app_id):
            viewer = None
        seen = await steps.visibility(self.app.db, row, viewer, None)
        restricted = not seen.records
        admins = [] if restricted else await store.admins(self.app.db, row["did"])
        return views.community_details(row, admins, seen.status if viewer else None, restricted=restricted)

    async def list_members(self, row: "Row", *, limit: int, after_id: int | None, search: str | None,
                           admin_view: bool) -> dict[str, Any]:
        """A page of members (``members``, ``total``, and ``cursor`` while more follow),
        oldest membership first after `after_id`; `search`: in handles and names."""
        like = None
        if search:
            escaped = search.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
        rows = await store.list_members(self.app.db, row["did"], limit=limit + 1, after_id=after_id,
                                        search_like=like)
        out: dict[str, Any] = {"members": [views.member_json(r, admin_view=admin_view) for r in rows[:limit]],
                               "total": row["member_count"]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        return out

    async def require_admin(self, row: "Row", did: str | None) -> MemberStatus:
        """The status of `did` if an admin of the community, else 403 ``not_admin``."""
        status = await steps.member_status(self.app.db, row["did"], did) if did else None
        if status is None or not status.is_admin:
            raise ApiError(403, "not_admin", "Only an admin of this community may do this.")
        return status

    async def pending_list(self, row: "Row", *, limit: int, after_id: int | None) -> dict[str, Any]:
        """A page of requests to join (``pendingMembers``, and ``cursor`` while more follow)."""
        rows = await store.list_requests(self.app.db, row["did"], limit=limit + 1, after_id=after_id)
        out: dict[str, Any] = {"pendingMembers": [views.request_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        return out

    async def audit_log(self, row: "Row", *, limit: int, before_id: int | None,
                        action: str | None) -> dict[str, Any]:
        """A page of the audit log as the API shows it (``entries``, and ``cursor`` while
        more follow), newest first before `before_id`, of one `action` if given."""
        rows = await store.list_entries(self.app.db, row["did"], limit=limit + 1, before_id=before_id,
                                        action=action)
        out: dict[str, Any] = {"entries": [views.audit_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        return out

    #: An audit_log row as the API shows it.
    audit_entry_json = staticmethod(views.audit_json)
    #: The URL of the community's avatar or banner.
    image_url = staticmethod(views.image_url)

    # the web pages' reads: rows of this plugin's tables, which no other plugin queries
    async def community_row(self, did: str) -> "Row | None":
        return await store.get_community(self.app.db, did)

    async def visible_row(self, did: str, app_id: str | None) -> "Row":
        return await steps.require_community(self.app, did, Actor("", app_id))

    async def search(self, text: str, *, user_did: str | None, limit: int, before_id: int | None) -> list["Row"]:
        query = store.fts_query(text) if text else None
        if text and query is None:
            return []
        return await store.list_communities(self.app.db, query=query, user_did=user_did, app_id=None,
                                            limit=limit, before_id=before_id,
                                            withheld=await self.app.withheld_communities())

    async def index_listing(self, text: str, *, sort: str = "newest", limit: int = 100) -> list["Row"]:
        if sort not in store.INDEX_ORDER:
            raise ValueError(f"sort: one of {', '.join(store.INDEX_ORDER)}")
        text = text.strip()
        exact = text if text.startswith("did:") or "." in text else None
        return await store.index_listing(self.app.db, fts=store.fts_query(text) if text else None, exact=exact,
                                         sort=sort, limit=limit)

    async def memberships_of(self, user_did: str, *, limit: int, after_id: int | None) -> list["Row"]:
        return await store.memberships_of(self.app.db, user_did, limit=limit, after_id=after_id)

    async def requests_of(self, user_did: str) -> list["Row"]:
        return await store.requests_of(self.app.db, user_did)

    async def person_did(self, handle: str) -> str | None:
        return await store.did_by_handle(self.app.db, handle.strip().lstrip("@").lower())

    async def audit_rows(self, community_did: str, *, limit: int, before_id: int | None = None,
                         actions: tuple[str, ...] | None = None, denied: bool = False, person: str | None = None,
                         since: str | None = None, until: str | None = None) -> list["Row"]:
        return await store.audit_page(self.app.db, community_did, actions=actions, denied=denied, person=person,
                                      since=since, until=until, before_id=before_id, limit=limit)

    async def allowed_apps(self, community_did: str) -> list["Row"]:
        return await store.list_allowed_apps(self.app.db, community_did)

    # ---------------------------------------------------------------- the web pages' commands
    # (a refusal audited as the API's `@audit_denials` does, where the API audits it)

    async def create(self, actor: "Actor", **fields: Any) -> dict[str, Any]:
        return await lifecycle.create(self.app, actor, **fields)

    async def update_profile(self, row: "Row", actor: "Actor", **changes: Any) -> None:
        await lifecycle.update_profile(self.app, row, actor, **changes)

    async def delete(self, row: "Row", actor: "Actor") -> dict[str, Any]:
        return await lifecycle.delete(self.app, row, actor)

    async def move(self, row: "Row", actor: "Actor", to_pds: str, *, invite_code: str | None = None) -> dict[str, Any]:
        from plugins.communities import move
        async with self._denials_audited(row, actor, "community.move"):
            answer = await move.start(self.app, row, actor, to_pds, invite_code=invite_code)
        self.app.spawn(move.run(self.app, row["did"]), name=f"communities.move:{row['did']}")
        return answer

    async def hand_over(self, row: "Row", actor: "Actor", *, to: str | None = None) -> dict[str, Any]:
        """Hand the community over to another Commonroom (plugins/communities/handover.py):
        the sealed bundle's bytes, the passphrase shown once, what does not travel."""
        from plugins.communities import handover
        async with self._denials_audited(row, actor, "community.handover"):
            return await handover.export(self.app, row, actor, to=to)

    async def import_bundle(self, data: bytes, passphrase: str, actor: "Actor") -> dict[str, Any]:
        """Import a handover bundle ("bring your own account"); refusals are `ApiError`s
        with nothing changed."""
        from plugins.communities import handover
        try:
            return await handover.import_bundle(self.app, data, passphrase, importer_did=actor.did,
                                                app_id=actor.app_id)
        except handover.ImportRefused as exc:
            raise ApiError(exc.status, exc.code, str(exc)) from None

    async def move_progress(self, row: "Row") -> dict[str, Any]:
        from daemon.plugin.atproto import move_of
        from plugins.communities import move
        return move.progress(await move_of(self.app.db, row["did"]), row)

    async def approve(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.approve"):
            return await membership.approve(self.app, row, member_did, actor)

    async def reject(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.reject"):
            return await membership.reject(self.app, row, member_did, actor, reason)

    async def remove(self, row: "Row", member_did: str, actor: "Actor", reason: str | None) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.remove"):
            return await membership.remove(self.app, row, member_did, actor, reason)

    async def promote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "admin.promote"):
            return await admins.promote(self.app, row, member_did, actor)

    async def demote(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "admin.demote"):
            return await admins.demote(self.app, row, member_did, actor)

    async def transfer(self, row: "Row", new_owner: str, actor: "Actor") -> dict[str, Any]:
        return await admins.transfer(self.app, row, new_owner, actor)

    async def allow_app(self, row: "Row", app_id: str, actor: "Actor", allow: bool,
                        manage: bool = False) -> dict[str, Any]:
        return await admins.allow_app(self.app, row, app_id, actor, allow, manage=manage)

    async def browser_join(self, row: "Row", principal: "Principal", *,
                           invite: "Row | None" = None) -> tuple[int, dict[str, Any]]:
        return await membership.browser_join(self.app, row, principal, invite=invite)

    # invites (invites.py): the page's preview and join, and the admins' page
    async def invite_preview(self, code: str) -> tuple["Row", "Row", dict[str, Any]]:
        invite, row = await invites.preview(self.app, code)
        return invite, row, invites.preview_json(invite, row)

    async def invite_community(self, code: str) -> "Row | None":
        """The active community an invite code belongs to, usable or not (None: unknown)."""
        invite = await store.get_invite(self.app.db, code_hash=invites.code_hash(code))
        if invite is None:
            return None
        row = await store.get_community(self.app.db, invite["community_did"])
        return row if row is not None and row["state"] == "active" else None

    async def list_invites(self, row: "Row", actor: "Actor", *, limit: int,
                           before_id: int | None) -> list[dict[str, Any]]:
        async with self._denials_audited(row, actor, "invite.list"):
            rows = await invites.listing(self.app, row, actor, limit=limit, before_id=before_id)
        return [invites.invite_json(r) for r in rows]

    async def create_invite(self, row: "Row", actor: "Actor", *, max_uses: int | None,
                            expires_at: str | None, note: str | None) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "invite.create"):
            return await invites.create(self.app, row, actor, max_uses=max_uses, expires_at=expires_at,
                                        note=note)

    async def revoke_invite(self, row: "Row", code_or_id: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "invite.revoke"):
            return await invites.revoke(self.app, row, code_or_id, actor)

    # roles (roles.py) and what they may grant (capabilities.py); changes audited when refused
    def capability_catalogue(self) -> dict[str, Any]:
        return capabilities.catalogue(self.app)

    async def list_roles(self, row: "Row") -> dict[str, Any]:
        return await roles.list_roles(self.app, row)

    async def role_holders(self, row: "Row") -> dict[str, list[str]]:
        return {r["member_did"]: r["roles"].split() for r in await store.holders(self.app.db, row["did"])}

    async def create_role(self, row: "Row", actor: "Actor", name: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.create"):
            return await roles.create_role(self.app, row, actor, name, body)

    async def update_role(self, row: "Row", actor: "Actor", name: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.update"):
            return await roles.update_role(self.app, row, actor, name, body)

    async def delete_role(self, row: "Row", actor: "Actor", name: str) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.delete"):
            return await roles.delete_role(self.app, row, actor, name)

    async def assign_role(self, row: "Row", actor: "Actor", member_did: str, name: str) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.assign"):
            return await roles.assign(self.app, row, actor, member_did, name)

    async def unassign_role(self, row: "Row", actor: "Actor", member_did: str, name: str) -> dict[str, Any]:
        async with self._denials_audited(row, actor, "role.unassign"):
            return await roles.unassign(self.app, row, actor, member_did, name)

    # bans (bans.py)
    async def ban_row(self, row: "Row", member_did: str, actor: "Actor", *, reason: str | None,
                      expires_at: str | None) -> dict[str, Any]:
        """`ban` for the web pages, which hold the community's row (refusals audited)."""
        async with self._denials_audited(row, actor, "membership.ban"):
            return await bans.ban(self.app, row, member_did, actor, reason=reason, expires_at=expires_at)

    async def unban(self, row: "Row", member_did: str, actor: "Actor") -> dict[str, Any]:
        async with self._denials_audited(row, actor, "membership.unban"):
            return await bans.unban(self.app, row, member_did, actor)

    async def list_bans(self, row: "Row", actor: "Actor", *, limit: int,
                        before_id: int | None) -> list[dict[str, Any]]:
        """The bans in force, newest first (`id` for the next page's `before_id`)."""
        async with self._denials_audited(row, actor, "membership.listBans"):
            capabilities.require_capability(await steps.member_status(self.app.db, row["did"], actor.did),
                                            "members.ban")
        rows = await store.list_bans(self.app.db, row["did"], self.app.clock.iso_now(), limit=limit,
                                          before_id=before_id)
        return [{**bans.ban_json(r), "id": r["id"]} for r in rows]

    async def ban_of(self, row: "Row", user_did: str) -> dict[str, Any] | None:
        """The ban in force on `user_did` (its expiry; the reason is the admins'), or None."""
        ban = await store.active_ban(self.app.db, row["did"], user_did, self.app.clock.iso_now())
        return None if ban is None else {"expiresAt": ban["expires_at"], "createdAt": ban["created_at"]}

    @contextlib.asynccontextmanager
    async def _denials_audited(self, row: "Row", actor: "Actor", action: str) -> AsyncIterator[None]:
        """A 403 is written to the audit log, as the API's `@audit_denials` does (the
        action named as the API's user method; rate limited in denials.py)."""
        try:
            yield
        except ApiError as exc:
            if exc.status == 403:
                try:
                    await denials.record(self.app, row["did"], actor, action, exc.code)
                except Exception as err:  # noqa: BLE001 (the refusal is answered all the same)
                    denials.log.warning("could not audit a denied %s in %s: %r", action, row["did"], err)
            raise

    async def browser_leave(self, row: "Row", principal: "Principal") -> dict[str, Any]:
        return await membership.browser_leave(self.app, row, principal)

    async def set_image(self, row: "Row", actor: "Actor", kind: str, data: bytes) -> None:
        await uploads.set_image(self.app, row, actor, kind, data)

    async def profile_banner(self, user_did: str) -> bytes:
        return await uploads.profile_banner(self.app, user_did)

    async def instance_counts(self) -> dict[str, int]:
        return await store.instance_counts(self.app.db)


def communities_of(app: "Application") -> Communities:
    """This plugin's own service object."""
    return cast(Communities, app.communities)
