"""What an actor may do in a community: the fixed catalogue of capabilities.

Every admin or moderator action names the capability it needs and checks it with
:func:`require_capability`. Today only admins hold capabilities (an admin holds all of
them); roles (built-in ``moderator`` and custom roles) grant subsets of the catalogue.
The catalogue is documented in docs/communities.md.
"""

from __future__ import annotations

from daemon.access import MemberStatus
from daemon.http import ApiError

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

# the built-in moderator role
MODERATOR: frozenset[str] = frozenset(
    {"members.approve", "members.remove", "members.ban", "invites.manage", "audit.read"})


def require_capability(status: MemberStatus | None, capability: str) -> None:
    """403 ``not_admin`` unless `status` holds `capability` (admins hold every one)."""
    assert capability in CATALOGUE, capability
    if status is not None and status.is_admin:
        return
    raise ApiError(403, "not_admin", "Only an admin of this community may do this.")
