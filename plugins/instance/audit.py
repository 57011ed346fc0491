"""The instance audit log (`instance_audit`): what each operator did, when, and whether from
the console or the command line, told in sentences; kept `instance.audit_retention_days`."""

from __future__ import annotations

import json
from typing import Any

from daemon.plugin import iso
from daemon.plugin.storage import prune_in_batches

#: Entries removed by one pruning transaction, at most.
BATCH = 1000

#: How each action reads in a sentence: "{operator} {verb} {subject}".
VERBS = {
    "operator.cli": "ran a command on",
    "community.suspend": "suspended the community",
    "community.lift": "lifted the suspension of the community",
    "community.remove": "removed from the index the community",
    "person.ban": "banned on the instance",
    "person.unban": "lifted the instance ban of",
    "creation.approve": "approved the creation request of",
    "creation.refuse": "refused the creation request of",
    "report.dismiss": "dismissed the reports about",
    "report.suspend": "settled, by suspending it, the reports about",
    "report.remove": "settled, by removing it from the index, the reports about",
    "app.deactivate": "deactivated the app",
    "app.rate_limit": "set the rate limit of the app",
}


async def record_tx(tx: Any, now: str, operator_did: str, action: str, subject: str = "",
                    detail: dict[str, Any] | None = None, via: str = "web") -> int:
    """Add one entry, in the caller's transaction (the action and its entry land together)."""
    cursor = await tx.execute(
        "INSERT INTO instance_audit (operator_did, action, subject, detail, via, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (operator_did, action, subject, json.dumps(detail or {}, sort_keys=True), via, now))
    return int(cursor.lastrowid)


async def entries(db: Any, *, limit: int = 50, before: int | None = None) -> list[dict[str, Any]]:
    """The newest entries first (`before`: an entry id, for the next page)."""
    rows = await db.fetchall(
        "SELECT * FROM instance_audit WHERE (? IS NULL OR id < ?) ORDER BY id DESC LIMIT ?",
        (before, before, limit))
    return [entry(row) for row in rows]


def entry(row: Any) -> dict[str, Any]:
    detail = json.loads(row["detail"] or "{}")
    return {"id": row["id"], "operator": row["operator_did"], "action": row["action"],
            "subject": row["subject"], "detail": detail, "via": row["via"], "at": row["created_at"],
            "sentence": sentence(row["operator_did"], row["action"], row["subject"], detail, row["via"])}


def sentence(operator: str, action: str, subject: str, detail: dict[str, Any], via: str) -> str:
    verb = VERBS.get(action, f"did {action} to")
    text = f"{operator} {verb} {subject}".rstrip()
    if detail.get("reason"):
        text += f" (reason: {detail['reason']})"
    if via == "cli":
        text += ", from the command line"
    return text + "."


async def prune(app: Any, batch: int = BATCH) -> int:
    """One pass: remove entries older than the retention window; how many it removed."""
    days = app.config.plugin("instance").audit_retention_days
    if not days:
        return 0
    cutoff = iso(app.clock.time() - days * 86400)

    async def one_batch(limit: int) -> int:
        async with app.db.transaction("instance.audit_prune") as tx:
            cursor = await tx.execute(
                "DELETE FROM instance_audit WHERE id IN"
                " (SELECT id FROM instance_audit WHERE created_at < ? ORDER BY id LIMIT ?)", (cutoff, limit))
            return cursor.rowcount

    return await prune_in_batches("instance.audit", one_batch, limit=batch)
