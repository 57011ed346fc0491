"""What the noticeboard declares to Commonroom: its event kind (offered to apps'
webhooks), its capability (in the communities' catalogue), and its links."""

from __future__ import annotations

from daemon.plugin import DID, STRING, Capability, EventKind, Link, obj

EVENT_KINDS = [
    EventKind("notice.posted", "A member posted a notice on a community's noticeboard.",
              obj({"noticeId": STRING, "authorDid": DID, "text": STRING, "communityDid": DID},
                  ["noticeId", "authorDid", "text", "communityDid"]),
              label="A notice was posted", person_keys=("authorDid",)),
]

CAPABILITIES = [
    # Admins hold it; so does the built-in moderator role; custom roles may grant it.
    Capability("notices.remove", "remove notices from the noticeboard", moderator=True),
]

LINKS = [
    Link("community.page", "Noticeboard", "/c/{community[handle]}/notices"),
]
