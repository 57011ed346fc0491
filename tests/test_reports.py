"""Reports and the moderation queue (plugins/reports; issue 24 item 4) against communities on
the devnet: members report a member or a record, proven by their service-auth token or
through the site's pages; the limits; holders of reports.review resolve reports through
the platform's commands (the record leaves the PDS, the member is banned); the reporter
sees outcomes and never the reviewer; report.created/report.resolved reach only the apps
that act for the admins, signed; every action is in the community's history."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from daemon.plugin import iso
from commonroom_testing.communities import Api, devnet_module_fixtures
from commonroom_testing.http import login_as
from commonroom_testing.webhooks import LOOPBACK_TARGETS, subscribe

config_overrides, extra_plugins = devnet_module_fixtures(config=LOOPBACK_TARGETS)

pytestmark = pytest.mark.pds
NS = "community.commonroom.reports"
COLLECTION = "org.example.garden.note"
FORM = "application/x-www-form-urlencoded"


def proof(devnet: Any, service_did: str, person: dict[str, str], method: str) -> dict[str, str]:
    got = devnet.xrpc("com.atproto.server.getServiceAuth", params={"aud": service_did, "lxm": method},
                      token=person["accessJwt"])
    return {"Authorization": f"Bearer {got['token']}"}


async def on_pds(devnet: Any, repo: str, rkey: str) -> bool:
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord",
                              params={"repo": repo, "collection": COLLECTION, "rkey": rkey})
    return resp.status_code == 200


class Club:
    """alice's community (made through app `api`, which thus acts for its admins); bob is a
    moderator; carol, dave, erin are members; frank is not a member."""

    async def make(self, app: Any, client: Any, devnet: Any, people: Any) -> "Club":
        self.client, self.devnet = client, devnet
        self.api = await Api.make(app, client)
        self.alice, self.bob, self.carol, self.dave, self.erin, self.frank = (
            people(n) for n in ("alice", "bob", "carol", "dave", "erin", "frank"))
        self.community = await self.api.create(self.alice, "Report club")
        self.did, self.handle = self.community["did"], self.community["handle"]
        for person in (self.bob, self.carol, self.dave, self.erin):
            assert (await self.api.join(self.did, person["did"])).status == 201
        made = await self.api.post(self.api.path(self.did, f"/members/{self.bob['did']}/roles"),
                                   {"adminDid": self.alice["did"], "role": "moderator"})
        assert made.status == 200, made.text
        self.service = (await client.get("/api/v1/method-ids")).json()["serviceDid"]
        return self

    async def record(self, author: dict[str, str], text: str) -> dict[str, Any]:
        made = await self.api.post(self.api.path(self.did, "/records"), {
            "userDid": author["did"], "collection": COLLECTION,
            "record": {"$type": COLLECTION, "text": text, "createdAt": "2026-11-22T00:00:00.000Z"}})
        assert made.status == 201, made.text
        return made.json()

    async def report(self, who: dict[str, str], subject: str, reason: str = "spam", api: Api | None = None,
                     **extra: Any) -> Any:
        api = api or self.api
        return await api.client.post(api.path(self.did, "/reports"), api_key=api.key,
                                     json={"reporterDid": who["did"], "subject": subject, "reason": reason, **extra},
                                     headers=proof(self.devnet, self.service, who, f"{NS}.create"))

    async def queue(self, who: dict[str, str], api: Api | None = None) -> Any:
        api = api or self.api
        return await api.client.get(api.path(self.did, "/reports"), api_key=api.key,
                                    params={"reviewerDid": who["did"]},
                                    headers=proof(self.devnet, self.service, who, f"{NS}.review"))

    async def resolve(self, who: dict[str, str], report_id: str, action: str, note: str = "",
                      api: Api | None = None) -> Any:
        api = api or self.api
        return await api.client.post(api.path(self.did, f"/reports/{report_id}/resolve"), api_key=api.key,
                                     json={"reviewerDid": who["did"], "action": action, "note": note},
                                     headers=proof(self.devnet, self.service, who, f"{NS}.resolve"))

    async def mine(self, who: dict[str, str]) -> Any:
        return await self.api.client.get(self.api.path(self.did, "/reports/mine"), api_key=self.api.key,
                                         params={"reporterDid": who["did"]},
                                         headers=proof(self.devnet, self.service, who, f"{NS}.list"))


async def test_a_member_reports_a_record_and_a_member_and_a_moderator_resolves_both(
        app, client, devnet, people, webhook_receiver):
    club = await Club().make(app, client, devnet, people)
    trusted, other = webhook_receiver(), webhook_receiver()
    await subscribe(client, club.api.key, trusted, ["report.created", "report.resolved"])
    bystander = await Api.make(app, client, owner="did:plc:otherowner")   # sees the open community, not trusted
    await subscribe(client, bystander.key, other, ["report.created", "report.resolved", "member.joined"])

    # Dave posts, then the moderator bans him: his record stays in the community to be reported
    post = await club.record(club.dave, "Buy cheap watches")
    banned = await club.api.post(club.api.path(club.did, "/bans"), {
        "adminDid": club.bob["did"], "memberDid": club.dave["did"], "reason": "Spam everywhere"})
    assert banned.status == 201, banned.text
    assert (await club.api.check(club.did, club.dave["did"]))["isMember"] is False
    assert await on_pds(devnet, club.did, post["rkey"])
    first = await club.report(club.carol, post["uri"], "spam", text="Advertising, again")
    assert first.status == 201, first.text
    second = await club.report(club.carol, club.erin["did"], "harassment")
    assert second.status == 201, second.text
    also = await club.report(club.erin, post["uri"], "off-topic")
    assert also.status == 201, also.text
    record_report, member_report = first.json()["report"], second.json()["report"]
    assert record_report["status"] == "open" and record_report["subjectKind"] == "record"

    # the queue: grouped by subject with counts, the oldest first; reporters shown to reviewers
    queue = await club.queue(club.bob)
    assert queue.status == 200, queue.text
    groups = queue.json()["groups"]
    assert [(g["subject"], g["count"]) for g in groups] == [(post["uri"], 2), (club.erin["did"], 1)]
    assert groups[0]["subjectDid"] == club.dave["did"]
    assert {r["reporterDid"] for r in groups[0]["reports"]} == {club.carol["did"], club.erin["did"]}
    # a member without reports.review, and an app that does not act for the admins, are refused
    refused = await club.queue(club.carol)
    assert refused.status == 403 and refused.json()["error"] == "not_allowed"
    untrusted = await club.queue(club.bob, api=bystander)
    assert untrusted.status == 403 and untrusted.json()["error"] == "app_not_trusted"

    removed = await club.resolve(club.bob, record_report["id"], "remove_record", "Spam, removed")
    assert removed.status == 200, removed.text
    assert removed.json()["outcome"] == "record_removed" and len(removed.json()["resolvedReportIds"]) == 2
    assert not await on_pds(devnet, club.did, post["rkey"])
    gone = await club.api.get(club.api.path(club.did, f"/records/{COLLECTION}/{post['rkey']}"))
    assert gone.status == 404
    dismissed = await club.resolve(club.bob, member_report["id"], "dismiss", "Banter between friends")
    assert dismissed.status == 200 and dismissed.json()["status"] == "dismissed", dismissed.text
    again = await club.resolve(club.bob, member_report["id"], "dismiss")
    assert again.status == 409 and again.json()["error"] == "report_resolved"
    assert (await club.queue(club.bob)).json()["groups"] == []

    # the reporter sees both outcomes, never who reviewed or the note
    mine = (await club.mine(club.carol)).json()["reports"]
    assert {(r["subject"], r["status"], r["outcome"]) for r in mine} == {
        (post["uri"], "acted", "record_removed"), (club.erin["did"], "dismissed", "dismissed")}
    assert all("reviewerDid" not in r and "note" not in r and "reporterDid" not in r for r in mine)
    # resolved reports keep who did what, for reviewers
    resolved = (await club.queue(club.alice)).json()["resolved"]
    assert {(r["reviewerDid"], r["outcome"], r["note"]) for r in resolved} == {
        (club.bob["did"], "record_removed", "Spam, removed"), (club.bob["did"], "dismissed", "Banter between friends")}

    # the trusted app gets every event signed, with the reporter and never the reviewer
    got = await trusted.wait_for(6)
    assert all(g.verify_error is None for g in got)
    kinds = [g.verified["type"] for g in got]
    assert kinds.count("report.created") == 3 and kinds.count("report.resolved") == 3
    for g in got:
        data = g.verified["data"]
        assert set(data) == {"reportId", "subject", "subjectKind", "reason", "status", "outcome", "reporterDid",
                             "communityDid"}
        assert club.bob["did"] not in str(g.verified)
    resolved_events = {g.verified["data"]["reportId"]: g.verified["data"] for g in got
                       if g.verified["type"] == "report.resolved"}
    assert resolved_events[member_report["id"]]["outcome"] == "dismissed"
    assert resolved_events[record_report["id"]] == {**resolved_events[record_report["id"]], "status": "acted",
                                                    "outcome": "record_removed", "reporterDid": club.carol["did"]}
    # the other app sees the community but does not act for its admins: no report events
    assert {r.json["type"] for r in other.requests} <= {"member.joined"}

    # the history has each action
    audit = await club.api.audit(club.did, club.alice["did"])
    actions = [e["action"] for e in audit]
    assert actions.count("report.created") == 3 and actions.count("report.resolved") == 2
    assert "member.banned" in actions
    decisions = {(e["actorDid"], e["metadata"]["subject"], e["metadata"]["decision"]) for e in audit
                 if e["action"] == "report.resolved"}
    assert decisions == {(club.bob["did"], post["uri"], "record_removed"),
                         (club.bob["did"], club.erin["did"], "dismissed")}


async def test_reviewers_ban_and_remove_members_only_through_a_trusted_app(app, client, devnet, people):
    club = await Club().make(app, client, devnet, people)
    report = (await club.report(club.carol, club.dave["did"], "illegal")).json()["report"]
    bad = await club.api.client.post(club.api.path(club.did, f"/reports/{report['id']}/resolve"), api_key=club.api.key,
                                     json={"reviewerDid": club.bob["did"], "action": "ban_member", "expiresAt": "soon"},
                                     headers=proof(devnet, club.service, club.bob, f"{NS}.resolve"))
    assert bad.status == 400 and "expiresAt" in bad.text, bad.text
    banned = await club.resolve(club.bob, report["id"], "ban_member", "Posted illegal material")
    assert banned.status == 200 and banned.json()["outcome"] == "member_banned", banned.text
    assert (await club.api.check(club.did, club.dave["did"]))["isMember"] is False
    bans = await club.api.get(club.api.path(club.did, "/bans"), adminDid=club.alice["did"])
    assert club.dave["did"] in bans.text
    # a moderator's removal through an app that does not act for the admins is refused
    bystander = await Api.make(app, client, owner="did:plc:otherowner")
    other = (await club.report(club.carol, club.erin["did"], "spam")).json()["report"]
    untrusted = await club.resolve(club.bob, other["id"], "remove_member", api=bystander)
    assert untrusted.status == 403 and untrusted.json()["error"] == "app_not_trusted", untrusted.text
    assert (await club.api.check(club.did, club.erin["did"]))["isMember"] is True
    removed = await club.resolve(club.bob, other["id"], "remove_member", "Left after a warning")
    assert removed.status == 200 and removed.json()["outcome"] == "member_removed", removed.text
    assert (await club.api.check(club.did, club.erin["did"]))["isMember"] is False


async def test_limits_and_refusals(app, client, devnet, people):
    club = await Club().make(app, client, devnet, people)
    other = await club.api.create(club.frank, "Elsewhere")
    elsewhere = await club.api.post(club.api.path(other["did"], "/records"), {
        "userDid": club.frank["did"], "collection": COLLECTION,
        "record": {"$type": COLLECTION, "text": "hi", "createdAt": "2026-11-22T00:00:00.000Z"}})
    assert elsewhere.status == 201, elsewhere.text
    own = await club.record(club.carol, "My own note")

    async def refused(status: int, error: str, resp: Any) -> None:
        assert resp.status == status and resp.json()["error"] == error, resp.text

    await refused(400, "cannot_report_self", await club.report(club.carol, club.carol["did"]))
    await refused(400, "cannot_report_self", await club.report(club.carol, own["uri"]))
    await refused(400, "subject_not_member", await club.report(club.carol, club.frank["did"]))
    await refused(400, "subject_outside_community", await club.report(club.carol, elsewhere.json()["uri"]))
    await refused(404, "record_not_found", await club.report(club.carol, f"at://{club.did}/{COLLECTION}/3kaaaaaaaaaaa"))
    await refused(403, "not_member", await club.report(club.frank, club.dave["did"]))
    await refused(400, "invalid_request", await club.report(club.carol, club.dave["did"], "rude"))
    await refused(400, "invalid_request", await club.report(club.carol, club.dave["did"], text="x" * 2001))
    unproven = await club.api.post(club.api.path(club.did, "/reports"),
                                   {"reporterDid": club.carol["did"], "subject": club.dave["did"], "reason": "spam"})
    assert unproven.status == 401, unproven.text

    assert (await club.report(club.carol, club.dave["did"], text="x" * 2000)).status == 201
    await refused(409, "already_reported", await club.report(club.carol, club.dave["did"]))

    # 20 a day per person per community: the 21st waits, with Retry-After, until a day has passed
    from plugins.reports import store
    async with app.db.transaction("test.fill") as tx:
        for i in range(19):
            await store.insert_tx(tx, community_did=club.did, reporter_did=club.carol["did"],
                                  subject=f"did:plc:filler{i}", subject_kind="member", subject_did=f"did:plc:filler{i}",
                                  reason="spam", body=None, app_id=None, now=app.clock.iso_now())
    limited = await club.report(club.carol, club.erin["did"])
    await refused(429, "rate_limited", limited)
    assert 0 < int(limited.headers["Retry-After"]) <= 86400
    assert (await club.report(club.erin, club.dave["did"])).status == 201   # another person's own budget
    # a day later (the proofs' clock stays put: the reports are made a day older instead)
    async with app.db.transaction("test.age") as tx:
        await tx.execute("UPDATE reports SET created_at = ? WHERE reporter_did = ?",
                         (iso(app.clock.time() - 86401), club.carol["did"]))
    assert (await club.report(club.carol, club.erin["did"])).status == 201


async def test_pages_report_queue_and_my_reports(app, client, devnet, people):
    club = await Club().make(app, client, devnet, people)
    carol = await login_as(app, club.carol["did"], club.carol["handle"])
    bob = await login_as(app, club.bob["did"], club.bob["handle"])
    alice = await login_as(app, club.alice["did"], club.alice["handle"])

    def cookie(s: Any) -> dict[str, str]:
        return {"Cookie": f"sid={s.sid}"}

    page = (await client.get(f"/c/{club.handle}", headers=cookie(carol))).text
    assert f'href="/c/{club.handle}/report"' in page
    settings = (await client.get(f"/c/{club.handle}/settings", headers=cookie(alice))).text
    assert f'href="/c/{club.handle}/settings/reports">Reports</a>' in settings

    form = await client.get(f"/c/{club.handle}/report?subject={club.dave['did']}", headers=cookie(carol))
    # the member's Report link gives their DID; the form shows them by handle
    assert form.status == 200 and '<header class="site-header">' in form.text
    assert f'value="@{club.dave["handle"]}"' in form.text
    # and the community page's member rows carry the Report link (not on one's own row)
    assert f'href="/c/{club.handle}/report?subject={club.dave["did"]}"' in page
    assert f'href="/c/{club.handle}/report?subject={club.carol["did"]}"' not in page

    def body(s: Any, **fields: str) -> str:
        from urllib.parse import urlencode
        return urlencode({"_csrf": s.csrf, **fields})

    self_report = await client.post(f"/c/{club.handle}/report", headers={**cookie(carol), "Content-Type": FORM},
                                    body=body(carol, subject=club.carol["did"], reason="spam", text="typed"))
    assert self_report.status == 400 and "cannot report yourself" in self_report.text
    assert 'id="subject-error"' in self_report.text and ">typed</textarea>" in self_report.text
    sent = await client.post(f"/c/{club.handle}/report", headers={**cookie(carol), "Content-Type": FORM},
                             body=body(carol, subject=club.dave["did"], reason="harassment", text="Rude to me"))
    assert sent.status == 303 and sent.headers["Location"] == f"/c/{club.handle}/report?done=reported", sent.text

    refused = await client.get(f"/c/{club.handle}/settings/reports", headers=cookie(carol))
    assert refused.status == 403 and "reports.review" in refused.text
    queue = await client.get(f"/c/{club.handle}/settings/reports", headers=cookie(bob))
    assert queue.status == 200 and club.dave["did"] in queue.text and "Rude to me" in queue.text
    # the queue is one of the settings pages: their section menu, with Reports the current one
    # (bob, a moderator, is offered only the sections his role opens)
    assert 'class="settings-nav"' in queue.text
    assert f'href="/c/{club.handle}/settings/reports" aria-current="page">Reports</a>' in queue.text
    assert f'href="/c/{club.handle}/settings/pictures"' not in queue.text
    # people are named as the rest of the site names them: the reported member and the reporter by handle
    assert f'Member @{club.dave["handle"]}' in queue.text or f'(@{club.dave["handle"]})' in queue.text, queue.text
    assert f'from @{club.carol["handle"]}' in queue.text or f'(@{club.carol["handle"]}) on' in queue.text
    report_id = (await club.mine(club.carol)).json()["reports"][0]["id"]
    done = await client.post(f"/c/{club.handle}/settings/reports/{report_id}/resolve",
                             headers={**cookie(bob), "Content-Type": FORM},
                             body=body(bob, action="dismiss", note="Talked to both"))
    assert done.status == 303 and done.headers["Location"].endswith("/settings/reports?done=dismissed"), done.text

    # a ban from the queue's form, for seven days
    await club.report(club.carol, club.erin["did"], "harassment")
    erin_report = [r for r in (await club.mine(club.carol)).json()["reports"] if r["subject"] == club.erin["did"]][0]
    banned = await client.post(f"/c/{club.handle}/settings/reports/{erin_report['id']}/resolve",
                               headers={**cookie(bob), "Content-Type": FORM},
                               body=body(bob, action="ban_member", banDays="7", note="Second warning ignored"))
    assert banned.status == 303, banned.text
    bans = (await club.api.get(club.api.path(club.did, "/bans"), adminDid=club.alice["did"])).json()
    [ban] = [b for b in bans["bans"] if b["memberDid"] == club.erin["did"]]
    assert ban["expiresAt"] is not None and ban["reason"] == "Second warning ignored"

    mine = await client.get("/reports/mine", headers=cookie(carol))
    assert mine.status == 200 and "Dismissed" in mine.text and club.bob["did"] not in mine.text
    assert "Acted on: the member was banned" in mine.text
    assert "Talked to both" not in mine.text
    assert f'@{club.dave["handle"]}' in mine.text and f'@{club.erin["handle"]}' in mine.text
    queue = await client.get(f"/c/{club.handle}/settings/reports", headers=cookie(bob))
    assert f'@{club.bob["handle"]}' in queue.text   # the reviewer of the resolved ones
    history = await client.get(f"/c/{club.did}/settings/audit", headers=cookie(alice))
    assert "reported (harassment)" in history.text and "dismissed 1 report(s)" in history.text


async def test_an_app_granted_management_receives_report_events_and_others_do_not(
        app, client, devnet, people, webhook_receiver):
    club = await Club().make(app, client, devnet, people)
    granted_app = await Api.make(app, client, owner="did:plc:ownerone")
    plain_app = await Api.make(app, client, owner="did:plc:ownertwo")
    granted, plain = webhook_receiver(), webhook_receiver()
    await subscribe(client, granted_app.key, granted, ["report.created"])
    await subscribe(client, plain_app.key, plain, ["report.created"])
    grant = await club.api.post(club.api.path(club.did, f"/apps/{granted_app.app_id}"),
                                {"adminDid": club.alice["did"], "manage": True})
    assert grant.status in (200, 201), grant.text
    made = await club.report(club.carol, club.dave["did"], "other", api=plain_app)   # any app may report
    assert made.status == 201, made.text
    [got] = await granted.wait_for(1)
    assert got.verify_error is None and got.verified["data"]["reporterDid"] == club.carol["did"]
    await app.webhooks.dispatcher.settle()
    assert plain.requests == []
    # the reported member's row on the members page offers a report link (the member.actions slot)
    alice = await login_as(app, club.alice["did"], club.alice["handle"])
    members = (await client.get(f"/c/{club.handle}/settings/members", headers={"Cookie": f"sid={alice.sid}"})).text
    assert f'href="/c/{club.handle}/report?subject={club.dave["did"]}"' in members


async def test_a_custom_role_granting_reports_review_opens_the_queue(app, client, devnet, people):
    """A plugin's capability can be granted by a custom role: the role is written to the
    community's repo (its lexicon once knew only the catalogue's names: 502), and its holder
    reviews reports; a name no plugin declares is still a 400."""
    club = await Club().make(app, client, devnet, people)
    assert (await club.report(club.dave, club.erin["did"], "spam")).status == 201
    refused = await club.queue(club.carol)
    assert refused.status == 403 and refused.json()["error"] == "not_allowed"

    made = await club.api.post(club.api.path(club.did, "/roles"), {
        "adminDid": club.alice["did"], "name": "triage", "capabilities": ["reports.review"]})
    assert made.status == 201, made.text
    assert made.json()["capabilities"] == ["reports.review"]
    given = await club.api.post(club.api.path(club.did, f"/members/{club.carol['did']}/roles"),
                                {"adminDid": club.alice["did"], "role": "triage"})
    assert given.status == 200, given.text
    queue = await club.queue(club.carol)
    assert queue.status == 200, queue.text
    assert [g["subject"] for g in queue.json()["groups"]] == [club.erin["did"]]
    # the record on the community's PDS names the capability
    async with httpx.AsyncClient() as http:
        got = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord", params={
            "repo": club.did, "collection": "community.commonroom.roles", "rkey": "self"})
    assert got.status_code == 200
    assert got.json()["value"]["roles"][0]["capabilities"] == ["reports.review"]

    undeclared = await club.api.post(club.api.path(club.did, "/roles"), {
        "adminDid": club.alice["did"], "name": "ghost", "capabilities": ["reports.nothing"]})
    assert undeclared.status == 400 and undeclared.json()["error"] == "invalid_request", undeclared.text
    assert "capabilities[0]" in undeclared.text


async def test_a_person_is_reported_by_handle_and_a_post_by_its_web_address(app, client, devnet, people):
    """Nobody knows their neighbours' DIDs: the subject may be a handle (with or without @), an
    at:// URI whose authority is a handle, or a post's address on a Bluesky-style client; the
    answer names the DID; who is not a member is refused in words that say so."""
    club = await Club().make(app, client, devnet, people)
    by_handle = await club.report(club.carol, "@" + club.dave["handle"], "harassment")
    assert by_handle.status == 201, by_handle.text
    assert by_handle.json()["report"]["subject"] == club.dave["did"]
    plain = await club.report(club.dave, club.erin["handle"].upper(), "spam")
    assert plain.status == 201 and plain.json()["report"]["subject"] == club.erin["did"]

    outsider = await club.report(club.carol, "@" + club.frank["handle"])
    assert outsider.status == 400 and outsider.json()["error"] == "subject_not_member"
    assert f"@{club.frank['handle']}" in outsider.json()["message"] and "not a member" in outsider.json()["message"]
    nobody = await club.report(club.carol, "@nobody-at-all.test")
    assert nobody.status == 400 and "nobody-at-all.test" in nobody.json()["message"]
    gibberish = await club.report(club.carol, "what is this?")
    assert gibberish.status == 400 and "'what is this?'" in gibberish.json()["message"]

    # a community record shown as a post by a Bluesky-style client: its web address names the
    # community (by handle) and the record's key
    post = await club.record(club.dave, "Cheap watches here")
    rkey = post["rkey"]
    url = f"https://bsky.app/profile/{club.handle}/post/{rkey}"
    made = await club.report(club.erin, url, "spam")
    assert made.status == 201, made.text
    assert made.json()["report"]["subject"] == post["uri"]
    # the same record by an at:// URI naming the community by handle: already reported by erin
    again = await club.report(club.erin, f"at://{club.handle}/{COLLECTION}/{rkey}")
    assert again.status == 409 and again.json()["error"] == "already_reported"
    elsewhere = await club.report(club.erin, f"https://bsky.app/profile/{club.dave['handle']}/post/{rkey}")
    assert elsewhere.status == 400 and elsewhere.json()["error"] == "subject_outside_community"

    # the queue shows what the reported post says, by whom it is, and where to see it
    alice = await login_as(app, club.alice["did"], club.alice["handle"])
    queue = (await client.get(f"/c/{club.handle}/settings/reports", headers={"Cookie": f"sid={alice.sid}"})).text
    assert "Cheap watches here" in queue and "A note (" in queue
    assert f"@{club.dave['handle']}" in queue
