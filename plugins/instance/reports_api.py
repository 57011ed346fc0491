"""The API of reports about communities (API-key auth, in the OpenAPI document), under
/api/v1/instance/reports: an app reports a community for a person it proves with that
person's service-auth token (method ids community.commonroom.instance.*), and reads that
person's own reports with their outcome. Deciding is the operators' (the console, the CLI)."""

from __future__ import annotations

from daemon.plugin import (DATETIME, DID, STRING, STRING_OR_NULL, BaseHandler, UserMethod, arr, obj, operation,
                           prove_acting_user, query, require_did)
from daemon.plugin.http import DATETIME_OR_NULL

from plugins.instance import community_reports as reports

ROUTE = r"/api/v1/instance/reports"
_REASON = {"type": "string", "enum": list(reports.REASONS)}
OWN = obj({"id": STRING, "communityDid": DID, "communityName": STRING, "communityHandle": STRING, "reason": _REASON,
           "text": STRING_OR_NULL, "status": {"type": "string", "enum": ["open", "settled"]},
           "outcome": STRING_OR_NULL, "createdAt": DATETIME, "decidedAt": DATETIME_OR_NULL},
          ["id", "communityDid", "reason", "status", "outcome", "createdAt"])


class InstanceReportsHandler(BaseHandler):
    """POST /api/v1/instance/reports."""

    auth = "app"
    user_methods = {"POST": UserMethod("community.commonroom.instance.report", "reporterDid",
                                       "Report a whole community to the instance's operators")}

    @operation("Report a whole community to the instance's operators (spam, illegal, harassment, other), as a "
               "person who may see it (their service-auth token for community.commonroom.instance.report); the "
               "community and its apps are not told",
               body=obj({"reporterDid": DID, "communityDid": DID, "reason": _REASON,
                         "text": {"type": "string", "maxLength": reports.MAX_TEXT}},
                        ["reporterDid", "communityDid", "reason"]),
               responses={201: obj({"report": OWN}, ["report"])},
               errors={400: "invalid_request", 404: "community_not_found", 409: "already_reported",
                       429: "rate_limited"})
    async def post(self) -> None:
        body = self.json_body()
        who = require_did(body.get("reporterDid"), "reporterDid")
        await prove_acting_user(self, who, required=True)
        row = await reports.create(self.app, who, body.get("communityDid"), body.get("reason"), body.get("text"),
                                   app_id=self.principal.app_id)
        self.send_json({"report": reports.own_json(row)}, 201)


class MyInstanceReportsHandler(BaseHandler):
    """GET /api/v1/instance/reports/mine."""

    auth = "app"
    user_methods = {"GET": UserMethod("community.commonroom.instance.myReports", "reporterDid",
                                      "Read one's own reports about communities and their outcome")}

    @operation("A person's own reports about communities, newest first: status and outcome, never who decided",
               params=[query("reporterDid", DID, required=True, description="the reporter, proven")],
               responses={200: obj({"reports": arr(OWN)}, ["reports"])})
    async def get(self) -> None:
        who = require_did(self.get_query_argument("reporterDid", None), "reporterDid")
        await prove_acting_user(self, who, required=True)
        self.send_json({"reports": await reports.mine(self.app, who)})


def routes() -> list[tuple]:
    return [(ROUTE, InstanceReportsHandler), (ROUTE + r"/mine", MyInstanceReportsHandler)]
