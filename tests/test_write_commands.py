"""The command runner (``app.writes.run``, docs/plugins.md "Writing to a repo on a PDS"):
what a plugin's command gets for free, tried with a repo that records its calls. The
built-in commands' behaviour against the devnet is in test_communities_* and test_records_*."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.atproto.pds import PdsError
from daemon.plugin import ApiError, hookimpl
from daemon.plugin.atproto import DROP_UNWRITTEN, ROLL_BACK, Command, Plan, WriteKind

KIND = "test.note"


class _Plugin:
    @hookimpl
    def cr_write_kinds(self, app: Any) -> list[WriteKind]:
        async def settle(app: Any, intent: Any) -> str:
            return "settled"
        return [WriteKind(KIND, settle, lambda app: 60.0)]


@pytest.fixture
def extra_plugins() -> tuple:
    return (_Plugin(),)


class Repo:
    did = "did:plc:test"

    def __init__(self, fail_at: int | None = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.fail_at, self.error = fail_at, error

    async def put_record(self, collection: str, rkey: str, record: dict[str, Any], **options: Any) -> dict[str, Any]:
        self.calls.append(("put", collection, rkey))
        if self.fail_at is not None and len([c for c in self.calls if c[0] == "put"]) == self.fail_at:
            raise self.error or PdsError("down")
        return {"uri": f"at://{self.did}/{collection}/{rkey}", "cid": "bafy"}

    async def delete_record(self, collection: str, rkey: str, **options: Any) -> None:
        self.calls.append(("delete", collection, rkey))


class Note(Command):
    kind = name = KIND

    def __init__(self, repo: Repo, *, refuse_in_check: bool = False, refuse_at_commit: bool = False,
                 records: int = 1) -> None:
        self._repo, self.refuse_in_check, self.refuse_at_commit, self.records = \
            repo, refuse_in_check, refuse_at_commit, records
        self.committed = False

    def locks(self) -> list[str]:
        return ["note:1"]

    async def check(self, tx: Any) -> Plan:
        if self.refuse_in_check:
            raise ApiError(409, "taken", "no")
        return Plan(key="note:1", operation="note.put", rkey="r1", payload={"n": 1})

    async def repo(self) -> Repo:
        return self._repo

    async def write(self, run: Any) -> None:
        for i in range(self.records):
            await run.put("com.example.note", f"r{i + 1}", {"n": i})

    async def commit(self, tx: Any, run: Any) -> dict[str, Any]:
        if self.refuse_at_commit:
            run.refuse(ApiError(409, "lost", "a concurrent request won"), undo=run.written)
            return {}
        self.committed = True
        return {"done": True, "uri": run.results[-1]["uri"]}


async def _intents(app: Any) -> list[Any]:
    return await app.db.fetchall("SELECT key, operation FROM write_intents WHERE kind = ?", (KIND,))


async def test_a_command_writes_then_commits_and_leaves_no_intent(app):
    repo = Repo()
    command = Note(repo)
    assert await app.writes.run(command) == {"done": True, "uri": "at://did:plc:test/com.example.note/r1"}
    assert command.committed and repo.calls == [("put", "com.example.note", "r1")]
    assert await _intents(app) == [] and not app.writes.busy("note:1")


async def test_a_refusal_in_the_check_writes_nothing_anywhere(app):
    repo = Repo()
    with pytest.raises(ApiError) as caught:
        await app.writes.run(Note(repo, refuse_in_check=True))
    assert caught.value.code == "taken" and repo.calls == [] and await _intents(app) == []


async def test_a_pds_failure_keeps_the_intent_for_the_reconciler_by_default(app):
    command = Note(Repo(fail_at=1))
    with pytest.raises(ApiError) as caught:
        await app.writes.run(command)
    assert caught.value.status == 502 and not command.committed
    assert [tuple(r) for r in await _intents(app)] == [("note:1", "note.put")]


@pytest.mark.parametrize("status, dropped", [(400, True), (503, False), (None, False)])
async def test_drop_unwritten_drops_the_intent_only_when_the_pds_surely_did_not_write(app, status, dropped):
    command = Note(Repo(fail_at=1, error=PdsError("refused", pds_status=status)))
    command.on_pds_error = DROP_UNWRITTEN
    with pytest.raises(ApiError):
        await app.writes.run(command)
    assert (await _intents(app) == []) is dropped


async def test_roll_back_deletes_what_a_failed_command_wrote_and_drops_its_intent(app):
    repo = Repo(fail_at=3)
    command = Note(repo, records=3)
    command.on_pds_error = ROLL_BACK
    with pytest.raises(ApiError):
        await app.writes.run(command)
    assert repo.calls[3:] == [("delete", "com.example.note", "r2"), ("delete", "com.example.note", "r1")]
    assert await _intents(app) == []


async def test_a_refusal_at_the_commit_finishes_the_intent_and_takes_back_the_write(app):
    repo = Repo()
    with pytest.raises(ApiError) as caught:
        await app.writes.run(Note(repo, refuse_at_commit=True))
    assert caught.value.code == "lost"
    assert repo.calls == [("put", "com.example.note", "r1"), ("delete", "com.example.note", "r1")]
    assert await _intents(app) == []
