"""The reports API (API-key auth, in the OpenAPI document), under
/api/v1/communities/:did/reports. Every route acts for a member the app proves with the
member's service-auth token under the plugin's own method ids (community.commonroom.reports.*):
reporting and reading one's own reports need a member; the queue and resolving need
reports.review, through an app the community trusts to act for its admins."""

from __future__ import annotations

from urllib.parse import unquote

from daemon.plugin import (DATETIME, DID, DID_PATTERN, INTEGER, STRING, STRING_OR_NULL, Actor, BaseHandler,
                           UserMethod, arr, obj, operation, prove_acting_user, query, require_did)
from daemon.plugin.http import DATETIME_OR_NULL

from plugins.reports import reports
from plugins.reports.declarations import ACTIONS, MAX_NOTE, MAX_TEXT, REASONS

REPORTS = r"/api/v1/communities/" + DID_PATTERN + r"/reports"
_REASON = {"type": "string", "enum": list(REASONS)}
_STATUS = {"type": "string", "enum": ["open", "acted", "dismissed"]}
OWN = obj({"id": STRING, "communityDid": DID, "subject": STRING, "subjectKind": STRING, "reason": _REASON,
           "text": STRING_OR_NULL, "status": _STATUS, "outcome": STRING_OR_NULL, "createdAt": DATETIME,
           "resolvedAt": DATETIME_OR_NULL},
          ["id", "communityDid", "subject", "subjectKind", "reason", "status", "outcome", "createdAt"])
REVIEWED = obj({**OWN["properties"], "reporterDid": DID, "subjectDid": STRING, "reviewerDid": STRING_OR_NULL,
                "note": STRING_OR_NULL}, OWN["required"] + ["reporterDid"])
GROUP = obj({"subject": STRING, "subjectKind": STRING, "subjectDid": STRING, "count": INTEGER,
             "oldestAt": DATETIME, "firstReportId": STRING, "reasons": obj({}), "reports": arr(REVIEWED)},
            ["subject", "subjectKind", "count", "oldestAt", "reports"])


async def _acting(handler: BaseHandler, raw_did: str, field: str, value: str | None) -> tuple:
    who = require_did(value, field)
    actor = Actor(who, handler.principal.app_id, proven=await prove_acting_user(handler, who, required=True))
    community = await reports.visible_community(handler.app, unquote(raw_did), actor)
    return actor, community


class ReportsHandler(BaseHandler):
    """GET (the queue) and POST (report) /api/v1/communities/:did/reports."""

    auth = "app"
    user_methods = {"POST": UserMethod("community.commonroom.reports.create", "reporterDid",
                                       "Report a member or a record of a community"),
                    "GET": UserMethod("community.commonroom.reports.review", "reviewerDid",
                                      "Read a community's reports queue (reports.review)")}

    @operation("The open reports, grouped by subject with counts, oldest first (reports.review, through an "
               "app that acts for the admins)",
               params=[query("reviewerDid", DID, required=True, description="the reviewer, proven")],
               responses={200: obj({"groups": arr(GROUP), "resolved": arr(REVIEWED)}, ["groups", "resolved"])},
               errors={403: "not_allowed, app_not_trusted", 404: "community_not_found"})
    async def get(self, raw_did: str) -> None:
        actor, community = await _acting(self, raw_did, "reviewerDid", self.get_query_argument("reviewerDid", None))
        await reports.require_reviewer(self.app, community, actor)
        self.send_json({"groups": await reports.queue(self.app, community),
                        "resolved": await reports.recent_resolved(self.app, community)})

    @operation("Report a member (their DID) or a record (its at:// URI) of the community, as a member "
               "(their service-auth token for community.commonroom.reports.create)",
               body=obj({"reporterDid": DID, "subject": STRING, "reason": _REASON,
                         "text": {"type": "string", "maxLength": MAX_TEXT}},
                        ["reporterDid", "subject", "reason"]),
               responses={201: obj({"report": OWN}, ["report"])},
               errors={400: "subject_not_member, subject_outside_community, cannot_report_self",
                       403: "not_member", 404: "community_not_found, record_not_found",
                       409: "already_reported", 429: "rate_limited"})
    async def post(self, raw_did: str) -> None:
        body = self.json_body()
        actor, community = await _acting(self, raw_did, "reporterDid", body.get("reporterDid"))
        row = await reports.create(self.app, community, actor.did, body, app_id=self.principal.app_id)
        self.send_json({"report": reports.own_json(row)}, 201)


class MyReportsHandler(BaseHandler):
    """GET /api/v1/communities/:did/reports/mine."""

    auth = "app"
    user_methods = {"GET": UserMethod("community.commonroom.reports.list", "reporterDid",
                                      "Read one's own reports and their status")}

    @operation("A member's own reports, newest first: status and outcome, never who reviewed them",
               params=[query("reporterDid", DID, required=True, description="the reporter, proven")],
               responses={200: obj({"reports": arr(OWN)}, ["reports"])}, errors={404: "community_not_found"})
    async def get(self, raw_did: str) -> None:
        actor, community = await _acting(self, raw_did, "reporterDid", self.get_query_argument("reporterDid", None))
        self.send_json({"reports": await reports.mine(self.app, community, actor.did)})


class ResolveHandler(BaseHandler):
    """POST /api/v1/communities/:did/reports/:id/resolve."""

    auth = "app"
    user_methods = {"POST": UserMethod("community.commonroom.reports.resolve", "reviewerDid",
                                       "Resolve the open reports of a subject (reports.review)")}

    @operation("Resolve every open report of this report's subject: dismiss, remove the record (the records "
               "command), remove or ban the member (the communities' commands), with a note",
               body=obj({"reviewerDid": DID, "action": {"type": "string", "enum": list(ACTIONS)},
                         "note": {"type": "string", "maxLength": MAX_NOTE},
                         "expiresAt": {"type": "string", "format": "date-time",
                                       "description": "ban_member only: when the ban ends"}},
                        ["reviewerDid", "action"]),
               responses={200: obj({"subject": STRING, "status": _STATUS, "outcome": STRING,
                                    "resolvedReportIds": arr(STRING)},
                                   ["subject", "status", "outcome", "resolvedReportIds"])},
               errors={403: "not_allowed, app_not_trusted", 404: "community_not_found, report_not_found",
                       409: "report_resolved"})
    async def post(self, raw_did: str, report_id: str) -> None:
        body = self.json_body()
        actor, community = await _acting(self, raw_did, "reviewerDid", body.get("reviewerDid"))
        self.send_json(await reports.resolve(self.app, community, report_id, actor, body))


def routes() -> list[tuple]:
    return [(REPORTS, ReportsHandler), (REPORTS + r"/mine", MyReportsHandler),
            (REPORTS + r"/([0-9]{1,18})/resolve", ResolveHandler)]
