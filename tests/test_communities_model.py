"""The membership state table of docs/communities.md as a plain Python model, and a
hypothesis state machine that holds the service to it.

Each example creates two communities on the devnet (one `open`, one `admin-approved`) whose
primary admin is the first of four devnet people, then runs a random sequence of join,
leave (which withdraws a pending request), approve, reject, remove, promote, demote and
transfer through the API-key routes. Every answer (status, and error code or result
status) must be the one the table gives, and after each step the index must equal the
model: membership/check of every person, the member list in join order, the pending list,
the admins in order, the counts, the audit log (one entry per change, none per refusal)
and the events observed after commit. At the end of an example the community repos on
the PDS must hold one proof per member and the model's admins list.

A fifth, "ghost" DID is well formed but unknown to the PLC directory: joining with it is
400 `unknown_did`; every cheaper refusal (not a member, no request) comes first.

Bounded (``MODEL_EXAMPLES`` examples of at most ``MODEL_STEPS`` steps) and derandomized so
that CI runs the same sequences each time; set ``MODEL_EXPLORE=1`` to draw new ones.
Shrinking is off (each step costs PDS round trips): a failure prints its whole sequence.
``MODEL_STATS=1`` (with ``-s``) prints how often each row of the table was reached.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from tests.fixtures_communities import Api, devnet_module_fixtures, pds_record, proofs_on_pds

pytestmark = [pytest.mark.pds, pytest.mark.slow]

config_overrides, extra_plugins = devnet_module_fixtures()

EXAMPLES = int(os.environ.get("MODEL_EXAMPLES", "18"))
STEPS = int(os.environ.get("MODEL_STEPS", "22"))
EXPLORE = os.environ.get("MODEL_EXPLORE") == "1"

PEOPLE = ("p0", "p1", "p2", "p3", "ghost")
GHOST = "did:plc:" + ("ghost" * 5)[:24]  # well formed, unknown to the PLC directory
TYPES = ("open", "admin-approved")

# Who acts and whom a step is about are drawn as roles, resolved against the model (and
# `pick` among several candidates): drawn as plain names, most steps would be refusals.
# Admins act more often than others, and each rule weights the roles that lead somewhere;
# every role still comes up, so every refusal of the table is reached too.
ROLES = ("outsider", "pending", "member", "admin", "primary", "ghost")
ACTORS = st.sampled_from(("primary", "admin", "primary", "admin", "member", "outsider", "pending"))
COMMUNITY = st.sampled_from((0, 1))
PICK = st.integers(0, 3)


def roles(*likely: str) -> st.SearchStrategy[str]:
    """The roles, `likely` ones three times as often as the others."""
    return st.sampled_from((*likely * 3, *(r for r in ROLES if r not in likely)))


class Refused(Exception):
    """What the table says a request gets instead of a change: (status, error code)."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(status, code)
        self.status = status
        self.code = code


@dataclass
class CommunityModel:
    """One community's row of the state table: members in join order, pending requests in
    request order, admins in order (index 0 = primary), and what the service must have
    written to the audit log and emitted as events. Each transition is the table's rows
    for its trigger, the actor's check first (see the note under the table)."""

    type: str
    creator: str
    members: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    admins: list[str] = field(default_factory=list)
    audit: list[tuple[str, str, str | None]] = field(default_factory=list)  # (action, actor, target)
    events: list[tuple[str, str]] = field(default_factory=list)              # (type, memberDid)

    def __post_init__(self) -> None:
        self.members = [self.creator]
        self.admins = [self.creator]
        self.audit = [("community.created", self.creator, self.creator)]
        self.events = [("member.joined", self.creator)]

    # -- states ------------------------------------------------------------------
    def is_member(self, who: str) -> bool:
        return who in self.members

    def is_admin(self, who: str) -> bool:
        return who in self.admins

    def is_primary(self, who: str) -> bool:
        return self.admins[0] == who

    def check(self, who: str) -> dict[str, bool]:
        return {"isMember": self.is_member(who), "isAdmin": self.is_admin(who),
                "isPending": who in self.pending}

    def _require_admin(self, actor: str) -> None:
        if not self.is_admin(actor):
            raise Refused(403, "not_admin")

    def _drop(self, who: str) -> None:
        self.members.remove(who)
        if who in self.admins:
            self.admins.remove(who)

    # -- transitions: each returns (status, result status) or raises Refused ----------
    def join(self, user: str, known: bool) -> tuple[int, str]:
        if self.is_member(user):
            raise Refused(409, "already_member")
        if user in self.pending:
            raise Refused(409, "already_pending")
        if not known:
            raise Refused(400, "unknown_did")
        if self.type == "open":
            self.members.append(user)
            self.audit.append(("member.joined", user, user))
            self.events.append(("member.joined", user))
            return 201, "joined"
        self.pending.append(user)
        self.audit.append(("member.requested", user, user))
        return 202, "pending"

    def leave(self, user: str) -> tuple[int, str]:
        if user in self.pending:
            self.pending.remove(user)
            self.audit.append(("member.request_withdrawn", user, user))
            return 200, "withdrawn"
        if not self.is_member(user):
            raise Refused(404, "not_member")
        if self.is_primary(user):
            raise Refused(409, "primary_admin_must_transfer")
        self._drop(user)
        self.audit.append(("member.left", user, user))
        self.events.append(("member.left", user))
        return 200, "left"

    def approve(self, actor: str, target: str) -> tuple[int, str]:
        self._require_admin(actor)
        if self.is_member(target):
            raise Refused(409, "already_member")
        if target not in self.pending:
            raise Refused(404, "no_pending_request")
        self.pending.remove(target)
        self.members.append(target)
        self.audit.append(("member.approved", actor, target))
        self.events.append(("member.approved", target))
        return 200, "joined"

    def reject(self, actor: str, target: str) -> tuple[int, str]:
        self._require_admin(actor)
        if self.is_member(target):
            raise Refused(409, "already_member")
        if target not in self.pending:
            raise Refused(404, "no_pending_request")
        self.pending.remove(target)
        self.audit.append(("member.rejected", actor, target))
        self.events.append(("member.rejected", target))
        return 200, "rejected"

    def remove(self, actor: str, target: str) -> tuple[int, str]:
        self._require_admin(actor)
        if not self.is_member(target):
            raise Refused(404, "not_member")
        if self.is_primary(target):
            raise Refused(409, "cannot_remove_primary_admin")
        self._drop(target)
        self.audit.append(("member.removed", actor, target))
        self.events.append(("member.removed", target))
        return 200, "removed"

    def promote(self, actor: str, target: str) -> tuple[int, None]:
        self._require_admin(actor)
        if not self.is_member(target):
            raise Refused(404, "not_member")
        if self.is_admin(target):
            raise Refused(409, "already_admin")
        self.admins.append(target)
        self.audit.append(("admin.promoted", actor, target))
        return 200, None

    def demote(self, actor: str, target: str) -> tuple[int, None]:
        self._require_admin(actor)
        if not self.is_admin(target):
            raise Refused(409, "not_admin_target")
        if self.is_primary(target):
            raise Refused(409, "cannot_demote_primary_admin")
        self.admins.remove(target)
        self.audit.append(("admin.demoted", actor, target))
        return 200, None

    def transfer(self, actor: str, target: str) -> tuple[int, None]:
        if not self.is_primary(actor):
            raise Refused(403, "not_primary_admin")
        if target == actor:
            raise Refused(409, "already_primary_admin")
        if not self.is_member(target):
            raise Refused(404, "not_member")
        self.admins = [target] + [a for a in self.admins if a != target]
        self.audit.append(("admin.transferred", actor, target))
        return 200, None


def test_membership_follows_the_documented_state_table(io_loop: Any, app: Any, client: Any, people: Any,
                                                       recorder: Any) -> None:
    def run(coro_fn: Any) -> Any:
        return io_loop.run_sync(coro_fn, timeout=120)

    reached: collections.Counter[str] = collections.Counter()
    api: Api = run(lambda: Api.make(app, client))
    dids = {name: people(name)["did"] for name in PEOPLE if name != "ghost"}
    dids["ghost"] = GHOST
    name_of = {did: name for name, did in dids.items()}

    class MembershipMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.models: list[CommunityModel] = []
            self.community_dids: list[str] = []

        @initialize()
        def create_communities(self) -> None:
            """Both communities, each with a member besides its creator (an admin in the
            open one) and, in the admin-approved one, a pending request: hypothesis tries
            short and one-sided sequences first (and runs some examples with only a few
            of the rules), so starting from an empty room would leave most of the table
            unvisited."""
            for index, type_ in enumerate(TYPES):
                created = run(lambda: api.create(dids["p0"], f"Model {type_} {os.urandom(3).hex()}", type=type_))
                self.community_dids.append(created["did"])
                self.models.append(CommunityModel(type_, "p0"))
                self.compare(index)
            open_did, approved_did = self.community_dids
            for user in ("p1", "p2"):
                self.expect(0, "join", lambda: api.join(open_did, dids[user]), user, True)
            self.expect(0, "promote", lambda: api.admins(open_did, "promote", {
                "adminDid": dids["p0"], "memberDid": dids["p1"]}), "p0", "p1")
            for user in ("p1", "p2"):
                self.expect(1, "join", lambda: api.join(approved_did, dids[user]), user, True)
            self.expect(1, "approve", lambda: api.decide(approved_did, "approve", dids["p0"], dids["p1"]),
                        "p0", "p1")

        # -- helpers ------------------------------------------------------------
        def who(self, index: int, role: str, pick: int = 0) -> str:
            """A person in `role` in the community (the `pick`-th of several), or any
            real person when nobody is in that role now."""
            model = self.models[index]
            people = [p for p in PEOPLE if p != "ghost"]
            candidates = {
                "primary": model.admins[:1],
                "admin": model.admins[1:] or model.admins[:1],
                "member": [m for m in model.members if not model.is_admin(m)],
                "pending": model.pending,
                "outsider": [p for p in people if not model.is_member(p) and p not in model.pending],
                "ghost": ["ghost"],
            }[role] or people
            return candidates[pick % len(candidates)]

        def expect(self, index: int, step: str, call: Any, *args: Any) -> None:
            """Apply `step` to the model, send `call`, and compare the answer."""
            model = self.models[index]
            try:
                status, result = getattr(model, step)(*args)
                expected: tuple[int, str | None] = (status, result)
                refused = False
            except Refused as exc:
                expected = (exc.status, exc.code)
                refused = True
            reached[f"{step} -> {expected[0]} {expected[1]}"] += 1
            resp = run(call)
            body = resp.json()
            got = (resp.status, body.get("error") if refused or resp.status >= 400 else body.get("status"))
            assert got == expected, (
                f"{step}{tuple(name_of.get(a, a) for a in args)} on the {model.type} community: "
                f"the table says {expected}, the service answered {resp.status} {resp.text}")
            if step in ("promote", "demote", "transfer") and not refused:
                assert [a["did"] for a in body["admins"]] == [dids[a] for a in model.admins], resp.text
            self.compare(index)

        def compare(self, index: int) -> None:
            """The index, as the API shows it, equals the model."""
            model, did = self.models[index], self.community_dids[index]
            run(lambda: self._compare(model, did))

        async def _compare(self, model: CommunityModel, did: str) -> None:
            label = f"the {model.type} community"
            for name in PEOPLE:
                assert await api.check(did, dids[name]) == model.check(name), f"{name} in {label}"
            members = (await api.get(api.path(did, "/members"), limit=100)).json()
            assert [name_of[m["did"]] for m in members["members"]] == model.members, label
            assert members["total"] == len(model.members), label
            assert [(name_of[m["did"]], m["isAdmin"], m["isPrimaryAdmin"]) for m in members["members"]] == [
                (m, model.is_admin(m), model.is_primary(m)) for m in model.members], label
            primary = dids[model.admins[0]]
            pending = (await api.get(api.path(did, "/members/pending"), adminDid=primary, limit=100)).json()
            assert [name_of[p["userDid"]] for p in pending["pendingMembers"]] == model.pending, label
            details = (await api.get(api.path(did), userDid=primary)).json()["community"]
            assert [name_of[a["did"]] for a in details["admins"]] == model.admins, label
            assert details["primaryAdmin"] == primary, label
            assert (details["memberCount"], details["pendingCount"]) == (len(model.members), len(model.pending)), \
                f"counts (members, pending) of {label}"
            entries = (await api.get(api.path(did, "/audit-log"), adminDid=primary, limit=100)).json()["entries"]
            assert [(e["action"], name_of.get(e["actorDid"]), name_of.get(e["targetDid"]))
                    for e in reversed(entries) if e["outcome"] == "done"] == model.audit, label
            seen = [(e.type, name_of[e.data["memberDid"]]) for e in recorder.events if e.community_did == did]
            assert seen == model.events, label

        # -- rules: one per trigger of the table ---------------------------------
        @rule(index=COMMUNITY, user=roles("outsider"), pick=PICK)
        def join(self, index: int, user: str, pick: int) -> None:
            did, user = self.community_dids[index], self.who(index, user, pick)
            self.expect(index, "join", lambda: api.join(did, dids[user]), user, user != "ghost")

        @rule(index=COMMUNITY, user=roles("member", "pending", "admin"), pick=PICK)
        def leave(self, index: int, user: str, pick: int) -> None:
            did, user = self.community_dids[index], self.who(index, user, pick)
            self.expect(index, "leave", lambda: api.leave(did, dids[user]), user)

        @rule(index=COMMUNITY, actor=ACTORS, subject=roles("pending"), pick=PICK)
        def approve(self, index: int, actor: str, subject: str, pick: int) -> None:
            self.decide(index, "approve", actor, subject, pick)

        @rule(index=COMMUNITY, actor=ACTORS, subject=roles("pending"), pick=PICK)
        def reject(self, index: int, actor: str, subject: str, pick: int) -> None:
            self.decide(index, "reject", actor, subject, pick)

        def decide(self, index: int, decision: str, actor: str, subject: str, pick: int) -> None:
            did, actor, subject = (self.community_dids[index], self.who(index, actor, pick),
                                   self.who(index, subject, pick))
            self.expect(index, decision, lambda: api.decide(did, decision, dids[actor], dids[subject]),
                        actor, subject)

        @rule(index=COMMUNITY, actor=ACTORS, subject=roles("member", "admin"), pick=PICK)
        def remove(self, index: int, actor: str, subject: str, pick: int) -> None:
            did, actor, subject = (self.community_dids[index], self.who(index, actor, pick),
                                   self.who(index, subject, pick))
            self.expect(index, "remove", lambda: api.delete(api.path(did, f"/members/{dids[subject]}"),
                                                             {"adminDid": dids[actor]}), actor, subject)

        @rule(index=COMMUNITY, actor=ACTORS, subject=roles("member"), pick=PICK)
        def promote(self, index: int, actor: str, subject: str, pick: int) -> None:
            did, actor, subject = (self.community_dids[index], self.who(index, actor, pick),
                                   self.who(index, subject, pick))
            self.expect(index, "promote", lambda: api.admins(did, "promote", {
                "adminDid": dids[actor], "memberDid": dids[subject]}), actor, subject)

        @rule(index=COMMUNITY, actor=ACTORS, subject=roles("admin"), pick=PICK)
        def demote(self, index: int, actor: str, subject: str, pick: int) -> None:
            did, actor, subject = (self.community_dids[index], self.who(index, actor, pick),
                                   self.who(index, subject, pick))
            self.expect(index, "demote", lambda: api.admins(did, "demote", {
                "adminDid": dids[actor], "memberDid": dids[subject]}), actor, subject)

        @rule(index=COMMUNITY, actor=ACTORS, subject=roles("member", "admin"), pick=PICK)
        def transfer(self, index: int, actor: str, subject: str, pick: int) -> None:
            did, actor, subject = (self.community_dids[index], self.who(index, actor, pick),
                                   self.who(index, subject, pick))
            self.expect(index, "transfer", lambda: api.admins(did, "transfer", {
                "currentOwnerDid": dids[actor], "newOwnerDid": dids[subject]}), actor, subject)

        def teardown(self) -> None:
            """The repos on the PDS agree with the model too: one proof per member, and
            the admins record in the model's order."""
            for model, did in zip(self.models, self.community_dids):
                proofs = run(lambda: proofs_on_pds(app, did))
                assert sorted(name_of[d] for d in proofs) == sorted(model.members), model.type
                admins = run(lambda: pds_record(app, did, "admins"))
                assert [name_of[a["did"]] for a in admins["admins"]] == model.admins, model.type

    run_state_machine_as_test(MembershipMachine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        derandomize=not EXPLORE, database=None, phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck)))
    if os.environ.get("MODEL_STATS") == "1":  # which rows of the table the sequences reached
        print("".join(f"\n{count:4d}  {row}" for row, count in sorted(reached.items())))
