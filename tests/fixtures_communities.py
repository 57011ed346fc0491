"""Fixtures and helpers for the communities tests (loaded by tests/conftest.py).

`Api`, `EventRecorder` and `devnet_module_fixtures`, with the ``people``, ``recorder`` and
``communities_config`` fixtures, ship as `commonroom_testing.communities` (plugin authors
use them too); what is here reads or writes Commonroom's own internals.

A test module against the devnet::

    config_overrides, extra_plugins = devnet_module_fixtures()

    @pytest.mark.pds
    async def test_x(app, client, devnet, recorder, people):
        api = await Api.make(app, client)
        alice = people("alice")            # a real account on the devnet
        created = await api.create(alice, "Garden club")
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from commonroom_testing.communities import Api, EventRecorder, devnet_module_fixtures
from daemon import hookimpl

__all__ = ["Api", "EventRecorder", "FailIndexOnce", "devnet_module_fixtures", "pds_record",
           "proofs_on_pds", "seed_community"]


async def proofs_on_pds(app: Any, community_did: str) -> dict[str, dict[str, Any]]:
    """memberDid -> membershipProof record, read from the community's repo on the PDS."""
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, community_did)
    out: dict[str, dict[str, Any]] = {}
    cursor = None
    while True:
        records, cursor = await repo.list_records(f"{app.config.atproto.namespace}.membershipProof",
                                                  limit=100, cursor=cursor)
        for r in records:
            out[r["value"]["memberDid"]] = r
        if not cursor:
            return out


async def pds_record(app: Any, community_did: str, name: str, rkey: str = "self") -> dict[str, Any] | None:
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, community_did)
    got = await repo.get_record(f"{app.config.atproto.namespace}.{name}", rkey)
    return got["value"] if got else None


async def seed_community(app: Any, admin_did: str, *, type: str = "open", creator_app_id: str | None = None,
                         members: tuple[str, ...] = ()) -> str:
    """A community written straight into the local index (no PDS): for tests of routes that
    never reach a PDS (refusals, cursors, limits). Returns its DID."""
    from plugins.communities import store as communities_store
    from plugins.communities import store as members_store

    did = f"did:plc:seed{os.urandom(8).hex()}"
    now = app.clock.iso_now()
    async with app.db.transaction("tests.seed_community") as tx:
        await communities_store.insert_community_tx(
            tx, did=did, handle=f"{did[8:20]}.test", display_name="Seeded", description="", type=type,
            pds_url="http://pds.invalid", account_kind="provisioned", creator_did=admin_did,
            creator_app_id=creator_app_id, proof_rkey="3seed", now=now, state="active")
        for rank, member in enumerate((admin_did, *members)):
            await members_store.insert_member_tx(
                tx, community_did=did, member_did=member, now=now, proof_rkey=f"3seed{rank}",
                proof_cid=None, membership_uri=None, membership_cid=None, app_id=creator_app_id,
                admin_rank=0 if rank == 0 else None)
        await communities_store.set_counts_tx(tx, did, 1 + len(members), 0)
    return did


class FailIndexOnce:
    """Aborts the next local transaction that emits the event type `armed`, as a crash
    between the PDS write and the index commit would (the real PDS cannot fail there)."""

    def __init__(self) -> None:
        self.armed: str | None = None

    @hookimpl
    def cr_event_tx(self, app: Any, tx: Any, event: Any) -> None:
        if event.type == self.armed:
            self.armed = None
            raise RuntimeError("simulated crash before the index commit")


@pytest.fixture
def failer() -> FailIndexOnce:
    return FailIndexOnce()
