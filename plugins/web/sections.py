"""The settings area of a community: its sections, who may open each, and the check a
page or action makes before it does anything (docs/web.md, "The settings area").

A section is opened by a capability of the catalogue (docs/communities.md, "Roles and
capabilities"), by being an admin (`ADMIN`) or by being the primary admin (`PRIMARY`).
What a person holds is their `MemberStatus` (daemon/security/access.py): admins hold
every capability, others what their roles grant; the pages ask it, never "is admin".
Every list of sections comes from :func:`settings_sections`, the one place a plugin's
page (a reports queue, say) will add its entry through the web slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from daemon.plugin import ApiError
from daemon.plugin import MemberStatus

ADMIN = "admin"        # admins only (the profile, pictures, roles, trusted apps, danger zone)
PRIMARY = "primary"    # the primary admin only (delete, hand over)


@dataclass(frozen=True)
class Section:
    key: str
    label: str
    path: str                      # after /c/<ident>
    needs: tuple[str, ...]         # any one of these opens it
    hint: str = ""


#: The built-in sections, in the order of the navigation.
SECTIONS: tuple[Section, ...] = (
    Section("general", "General", "/settings", (ADMIN,), "name, description, who can join"),
    Section("pictures", "Pictures", "/settings/pictures", (ADMIN,), "avatar and banner"),
    Section("requests", "Requests", "/settings/requests", ("members.approve",), "people asking to join"),
    Section("members", "Members", "/settings/members", ("members.remove", "members.ban"),
            "roles, remove, ban"),
    Section("roles", "Roles", "/settings/roles", (ADMIN,), "moderators and custom roles"),
    Section("bans", "Bans", "/settings/bans", ("members.ban",), "who is banned, until when"),
    Section("invites", "Invites", "/settings/invites", ("invites.manage",), "invite links"),
    Section("apps", "Trusted apps", "/settings/apps", (ADMIN,), "apps that act for the admins"),
    Section("audit", "History", "/settings/audit", ("audit.read",), "who did what"),
    Section("danger", "Danger zone", "/settings/danger", (ADMIN,), "hand over, delete"),
)

#: Words for what a check needs, for the 403 page.
NEEDS_WORDS = {ADMIN: "to be an admin of this community",
               PRIMARY: "to be the primary admin of this community"}


def holds(status: MemberStatus | None, need: str) -> bool:
    if status is None:
        return False
    if need == ADMIN:
        return status.is_admin
    if need == PRIMARY:
        return status.is_primary
    return status.holds(need)


def settings_sections(status: MemberStatus | None, path_of: str, current: str | None = None,
                      extra: Iterable[tuple[str, Section]] = ()) -> list[dict[str, Any]]:
    """The sections `status` opens, as the navigation shows them (href, label, current).
    `extra`: (key of the section it follows, section) pairs from plugins; a section of a
    plugin that is not present is simply not given."""
    ordered = list(SECTIONS)
    for after, section in extra:
        keys = [s.key for s in ordered]
        ordered.insert(keys.index(after) + 1 if after in keys else len(ordered), section)
    return [{"key": s.key, "label": s.label, "href": path_of + s.path, "hint": s.hint,
             "current": s.key == current}
            for s in ordered if any(holds(status, n) for n in s.needs)]


def forbidden(needs: Iterable[str], doing: str) -> ApiError:
    """The 403 that names what is needed ("You need members.ban … to ban members")."""
    needs = tuple(needs)
    words = " or ".join(NEEDS_WORDS.get(n, f"a role that grants {n}") for n in needs)
    return ApiError(403, "capability_missing", f"To {doing} you need {words}. Ask an admin of the "
                    "community if you should have it.", details=[{"capability": n} for n in needs])


async def require(handler: Any, row: Any, *needs: str, doing: str) -> MemberStatus:
    """The signed-in person's status in the community, if it holds one of `needs`;
    otherwise the 403 page naming them."""
    assert handler.principal is not None
    status = await handler.communities.membership(row["did"], handler.principal.did)
    if not any(holds(status, n) for n in needs):
        raise forbidden(needs, doing)
    return status
