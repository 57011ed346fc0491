"""The shapes of "who may see what", shared by the core and every plugin: who acts
(`Actor`), what a user is in a community (`MemberStatus`), and the errors the rules raise
(who hears of an event: `daemon.runtime.events.Audience`). No SQL: the rules themselves
(visibility, membership, roster, management) are the communities plugin's, which owns
their tables (plugins/communities/steps.py), and reach other plugins through its service (`CommunitiesService`: `may_see`, `membership`,
`sees_roster`, `acts_for_admins`, `event_audience`; docs/communities.md, "Visibility").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from daemon.base import ApiError

__all__ = ["Actor", "MemberStatus", "NOBODY", "NOT_FOUND", "APP_NOT_TRUSTED", "ROSTER_HIDDEN"]


@dataclass(frozen=True)
class Actor:
    """Who acts: the user (asserted by an app, or the session user) and the app, if any."""

    did: str
    app_id: str | None = None
    #: The user is proven: a browser session, or a verified proof from the app (daemon/atproto/proofs.py).
    proven: bool = False


class MemberStatus(NamedTuple):
    """What a user is in a community (a tuple: one is made per membership/check)."""

    is_member: bool
    is_admin: bool
    is_pending: bool
    is_primary: bool
    #: The roles assigned to the member (`moderator`, custom roles), as stored.
    roles: tuple[str, ...] = ()
    #: What those roles grant: catalogue capabilities, `records.*` as `records.create:<collection>`.
    grants: frozenset[str] = frozenset()

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"isMember": self.is_member, "isAdmin": self.is_admin,
                               "isPending": self.is_pending}
        if self.roles:
            out["roles"] = list(self.roles)
        return out

    def holds(self, capability: str, collection: str | None = None) -> bool:
        """Whether the member may do what `capability` allows (on `collection`, for the
        per-collection ``records.*``): admins hold every capability, others what their roles
        grant (docs/communities.md, "Roles and capabilities")."""
        if not self.is_member:
            return False
        if self.is_admin:
            return True
        return (f"{capability}:{collection}" if collection else capability) in self.grants


NOBODY = MemberStatus(False, False, False, False)


def NOT_FOUND(did: str) -> ApiError:  # noqa: N802 (reads like a constant at call sites)
    return ApiError(404, "community_not_found", f"No community {did} here.")


# ------------------------------------------------------------------ management (trust model)
#
# An app names the acting admin (`adminDid`, `currentOwnerDid`) and this service believes it,
# but only for the apps the community trusts: its creator app, and the apps an admin granted
# management (`community_apps.manage`). Browser sessions (app_id None) act as themselves.


def APP_NOT_TRUSTED(did: str, app_id: str) -> ApiError:  # noqa: N802
    return ApiError(403, "app_not_trusted",
                    f"App {app_id} may not act for the admins of {did}: only the app that created the "
                    "community and apps an admin granted management may. An admin can grant it on "
                    "this service (POST /communities/:did/apps/:appId with {\"manage\": true}).")


# ------------------------------------------------------------------ the roster (who the members are)


def ROSTER_HIDDEN(did: str) -> ApiError:  # noqa: N802 (reads like a constant at call sites)
    return ApiError(403, "roster_hidden",
                    f"The members of {did} are hidden from this app (rosterVisibility): it may ask about a "
                    "user only with that user's service-auth token (docs/identity.md), unless the community "
                    "trusts it to act for its admins.")
