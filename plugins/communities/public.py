"""What any plugin may ask the communities plugin with plain values (the first group of
`daemon.plugin.CommunitiesService`): a community by DID or handle, a person's membership,
visibility, capabilities (the catalogue's and the plugins' own), audit entries with a
plugin's own words, and the moderation commands (the same commands the API runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from daemon.plugin import NOT_FOUND, Actor, Community, MemberStatus, is_did
from plugins.communities import bans, service, steps, store

MAX_PROFILES = 1000   # DIDs one `profiles` call may ask for

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, Reader, Row, Transaction


def community_of(row: "Row") -> Community:
    """The typed community other plugins see, from its index row."""
    return Community(row["did"], row["handle"], row["display_name"], row["description"], row["type"],
                     row["creator_did"], row["member_count"], row["created_at"], row["roster_visibility"],
                     bool(row["require_user_proof"]), bool(row["listed"]))


class PublicCommunities:
    """Mixed into the communities service (`facade.Communities`), which sets ``app``."""

    app: "Application"

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

    async def may_see(self, actor: Actor, community_did: str) -> bool:
        row = await store.get_community(self.app.db, community_did)
        if row is None or not await steps.app_can_see(self.app.db, community_did, actor.app_id):
            return False
        return row["type"] != "private" or (await self.membership(community_did, actor.did)).is_member

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
        return await service.remove(self.app, await self._active(community_did), member_did, actor, reason)

    async def ban(self, community_did: str, user_did: str, actor: Actor, *, reason: str | None = None,
                  expires_at: str | None = None) -> dict[str, Any]:
        return await bans.ban(self.app, await self._active(community_did), user_did, actor, reason=reason,
                              expires_at=expires_at)

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

