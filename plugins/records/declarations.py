"""The `record.*` event kinds the records plugin emits, declared like any plugin's
(`cr_event_kinds`; the payloads are in docs/webhooks.md)."""

from __future__ import annotations

from daemon.plugin import DID, STRING, STRING_OR_NULL, EventKind, obj

_RECORD = {"collection": STRING, "rkey": STRING, "uri": STRING, "userDid": DID, "communityDid": DID}

EVENT_KINDS = [
    EventKind("record.created", "A record was created in a community's repo.",
              obj({**_RECORD, "cid": STRING}, [*_RECORD, "cid"]), "A community record was created",
              person_keys=("userDid",)),
    EventKind("record.updated", "A record in a community's repo was changed.",
              obj({**_RECORD, "cid": STRING}, [*_RECORD, "cid"]), "A community record was changed",
              person_keys=("userDid",)),
    EventKind("record.deleted", "A record was deleted from a community's repo (cid: the deleted version).",
              obj({**_RECORD, "cid": STRING_OR_NULL}, list(_RECORD)), "A community record was deleted",
              person_keys=("userDid",)),
]
