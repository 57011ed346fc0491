"""The operations on communities, shared by the API-key and browser routes.

The commands live by subject: `membership` (join, approve, reject, leave, remove, and
the browser's join and leave), `admins` (promote, demote, transfer, app grants) and
`lifecycle` (create, profile, delete), built from the steps in `steps`. Every one
follows the core's one write path (daemon/atproto/writes.py): check → intent → PDS
write(s) → one local transaction (index, event, audit). This module keeps the names
callers use.
"""

from __future__ import annotations

from daemon.plugin import pds, roll_back
from plugins.communities.admins import allow_app, demote, promote, transfer
from plugins.communities.lifecycle import create, default_handle, delete, update_profile
from plugins.communities.membership import (_confirm, approve, browser_join, browser_leave, join, leave,
                                            reject, remove)
from plugins.communities.steps import (Actor, audit_tx, community_lock, community_repo_for, fetch_profile,
                                       require_person, store_profile_tx)

__all__ = ["Actor", "allow_app", "approve", "audit_tx", "browser_join", "browser_leave", "community_lock",
           "community_repo_for", "create", "default_handle", "delete", "demote", "fetch_profile", "join",
           "leave", "pds", "promote", "reject", "remove", "require_person", "roll_back",
           "store_profile_tx", "transfer", "update_profile", "_confirm"]
