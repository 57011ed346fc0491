"""What the reports plugin declares: its capability (held by admins and the built-in
moderator role), its two event kinds (for the admins' apps only), its links, its limits."""

from __future__ import annotations

from daemon.plugin import DID, STRING, STRING_OR_NULL, Capability, EventKind, Link, obj

REASONS = ("spam", "harassment", "off-topic", "illegal", "other")
ACTIONS = ("dismiss", "remove_record", "remove_member", "ban_member")
#: action -> (status, outcome)
OUTCOMES = {"dismiss": ("dismissed", "dismissed"), "remove_record": ("acted", "record_removed"),
            "remove_member": ("acted", "member_removed"), "ban_member": ("acted", "member_banned")}
MAX_TEXT = 2000        # the reporter's words
MAX_NOTE = 2000        # the reviewer's note
PER_DAY = 20           # reports a person may make in one community in 24 hours
DAY = 86400.0

_PAYLOAD = obj({"reportId": STRING, "subject": STRING, "subjectKind": {"type": "string", "enum": ["member", "record"]},
                "reason": {"type": "string", "enum": list(REASONS)}, "status": {"type": "string", "enum": ["open", "acted", "dismissed"]},
                "outcome": STRING_OR_NULL, "reporterDid": DID, "communityDid": DID},
               ["reportId", "subject", "subjectKind", "reason", "status", "outcome", "reporterDid", "communityDid"])

EVENT_KINDS = [
    EventKind("report.created", "A member reported a member or a record of the community (sent only to "
                                "apps that act for the community's admins).", _PAYLOAD,
              label="A member reported someone or something", audience="managers",
              person_keys=("reporterDid", "subject")),
    EventKind("report.resolved", "A reviewer resolved a report: dismissed it, or removed the record or the "
                                 "member, or banned the member (sent only to apps that act for the admins).",
              _PAYLOAD, label="A report was resolved", audience="managers",
              person_keys=("reporterDid", "subject")),
]

CAPABILITIES = [
    Capability("reports.review", "read the reports queue and resolve reports", moderator=True),
]


def _reviewer(values: dict) -> bool:
    """The settings link, for people holding reports.review (the slot's `holds`, where the
    page gives it; the queue itself checks again)."""
    holds = values.get("holds")
    return values.get("me") is not None and (holds is None or holds("reports.review"))


LINKS = [
    Link("community.settings", "Reports", "/c/{community[handle]}/settings/reports", when=_reviewer),
    Link("community.page", "Report this community's content", "/c/{community[handle]}/report",
         when=lambda v: v.get("me") is not None and bool((v.get("membership") or {}).get("isMember"))),
    Link("member.actions", "Report", "/c/{community[handle]}/report?subject={member[did]}",
         when=lambda v: v.get("me") is not None and v["me"].get("did") != (v.get("member") or {}).get("did")
         and bool((v.get("membership") or {"isMember": True}).get("isMember"))),
    Link("person.home", "My reports", "/reports/mine"),
]
