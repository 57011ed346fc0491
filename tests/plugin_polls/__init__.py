"""A throwaway polls plugin for the tests of the background-work kit, written on the public
plugin API only: polls close at their time, through `app.spawn_deadlines` (one loop that
sleeps until the next poll closes and is woken when a poll closing sooner is created). On a
follower the closer does not run (`writes=True`) and a new poll goes to the primary (307)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import BaseHandler, Reader, hookimpl, invalid

HERE = Path(__file__).parent


# ------------------------------------------------------------------ its queries (its own table)


async def open_polls(db: Reader) -> list[Any]:
    return await db.fetchall("SELECT * FROM test_polls WHERE closed_at IS NULL ORDER BY closes_at")


async def all_polls(db: Reader) -> list[Any]:
    return await db.fetchall("SELECT * FROM test_polls ORDER BY id")


async def close_due(app: Any) -> float | None:
    """Close every poll whose time has come; the next closing time (None: no open poll)."""
    now = app.clock.time()
    async with app.db.transaction("test_polls.close") as tx:
        await tx.execute("UPDATE test_polls SET closed_at = ? WHERE closed_at IS NULL AND closes_at <= ?",
                         (now, now))
        row = await tx.fetchone("SELECT MIN(closes_at) AS next FROM test_polls WHERE closed_at IS NULL")
    return row["next"] if row else None


class PollsHandler(BaseHandler):
    """GET: every poll; POST {question, seconds}: a poll closing in `seconds`."""

    auth = None

    async def get(self) -> None:
        self.send_json({"polls": [{"id": r["id"], "question": r["question"], "open": r["closed_at"] is None}
                                  for r in await all_polls(self.app.db)]})

    async def post(self) -> None:
        body = self.json_body()
        seconds = body.get("seconds")
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            raise invalid("seconds", "must be a positive number")
        closes_at = self.app.clock.time() + seconds
        async with self.app.db.transaction("test_polls.open") as tx:
            cur = await tx.execute("INSERT INTO test_polls (question, closes_at) VALUES (?, ?)",
                                   (str(body.get("question", "")), closes_at))
        alarm = self.app.extensions["test_polls"]["closer"]
        if alarm is not None:
            alarm.set(closes_at)   # sooner than the loop's deadline: it wakes for this one
        self.send_json({"id": cur.lastrowid}, 201)


class Polls:
    @hookimpl
    def cr_migrations(self) -> tuple[str, str]:
        return ("test_polls", str(HERE / "migrations"))

    @hookimpl
    def cr_services(self, app: Any) -> dict[str, Any]:
        return {"test_polls": {"closer": None}}

    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/test/polls", PollsHandler)]

    @hookimpl
    def cr_startup(self, app: Any) -> None:
        app.extensions["test_polls"]["closer"] = app.spawn_deadlines("test_polls.closer", lambda: close_due(app))


plugin = Polls()
