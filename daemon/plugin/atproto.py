"""The AT Protocol side: identities (any DID's document and handle), public repo reads (records,
profiles, blobs), the syntax of its identifiers, the one write path to a repo on a PDS (`Command`,
`app.writes.run`), a community's own account, and following the network (`cr_sync_interest`).

    from daemon.plugin.atproto import resolve_did, Command, Plan, pds

Part of the public plugin API (docs/plugins.md, "The plugin API"): these names are promised
as `daemon.plugin`'s are.
"""

from __future__ import annotations

from daemon.atproto.accounts import (add_recovery_key, bring_own_account, community_repo, CommunityAccount,
                                     delete_account_tx, fetch_handle_domain, forget_account, provision_account,
                                     request_plc_token)
from daemon.atproto.identity import DidInfo, require_known_did, resolve_did, resolve_identity
from daemon.atproto.pds import blob_cid, blob_url, get_record, read_user_profile
from daemon.atproto.accounts import handover_credential
from daemon.atproto.moves import (abandon_move, begin_move_tx, move_of, moving_error, require_pds_url, resume_move,
                                  service_key_listed, STEPS as MOVE_STEPS, unfinished_moves, writes_settled)
from daemon.atproto.plc import plc_data, require_did_key, RotationKey
from daemon.atproto.syntax import (is_at_uri, is_cid, is_datetime, is_handle, is_nsid, is_rkey, is_tid,
                                   new_tid, normalize_handle, nsid_problem, require_at_uri, require_handle,
                                   require_nsid, require_rkey)
from daemon.atproto.writes import (Command, DROP_UNWRITTEN, Intent, KEEP, pds, Plan, ROLL_BACK, roll_back,
                                   Run, WriteKind)
from daemon.base import KeyedLocks
from daemon.sync.events import Interest, RecordOp, SyncEvent
from store.sync import account_status, record_account_status_tx

__all__ = [
    "DidInfo", "resolve_identity", "resolve_did", "require_known_did", "read_user_profile", "get_record",
    "blob_cid", "blob_url", "is_handle", "is_nsid", "is_tid", "is_rkey", "is_at_uri", "is_cid", "is_datetime",
    "require_handle", "require_nsid", "require_rkey", "require_at_uri", "normalize_handle", "new_tid",
    "nsid_problem", "pds", "roll_back", "WriteKind", "Intent", "KeyedLocks", "Command", "Plan", "Run", "KEEP",
    "DROP_UNWRITTEN", "ROLL_BACK", "community_repo", "delete_account_tx", "CommunityAccount",
    "provision_account", "bring_own_account", "fetch_handle_domain", "forget_account", "handover_credential",
    "Interest", "SyncEvent",
    "RecordOp", "record_account_status_tx", "account_status", "RotationKey", "require_did_key", "plc_data",
    "begin_move_tx", "resume_move", "abandon_move", "move_of", "unfinished_moves", "writes_settled",
    "moving_error", "MOVE_STEPS", "service_key_listed", "require_pds_url", "add_recovery_key", "request_plc_token",
]
