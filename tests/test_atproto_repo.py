"""Repo operations as a community account, against the devnet's PDS."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.atproto.accounts import community_repo, provision_account
from daemon.atproto.lexicons import LexiconError, lexicons_for
from daemon.atproto.pds import PdsError, blob_cid, blob_url
from daemon.atproto.syntax import is_tid, new_tid
from tests.fixtures_atproto import make_png

pytestmark = pytest.mark.pds

NS = "community.commonroom"
PROOF = f"{NS}.membershipProof"


@pytest.fixture
def config_overrides(pds_config_overrides: dict[str, Any]) -> dict[str, Any]:
    return pds_config_overrides


@pytest.fixture
def repo(app: Any, io_loop: Any, new_handle: Any) -> Any:
    account = io_loop.run_sync(lambda: provision_account(app, new_handle("repo")))
    return io_loop.run_sync(lambda: community_repo(app, account.did))


def proof(app: Any, member: str) -> dict[str, Any]:
    return {"memberDid": member, "confirmedAt": app.clock.iso_now()}


async def test_write_read_list_and_delete_records(app: Any, repo: Any, devnet: Any, new_handle: Any) -> None:
    members = [devnet.create_account(new_handle("mem"))["did"] for _ in range(3)]
    created = [await repo.create_record(PROOF, proof(app, m)) for m in members]
    rkeys = [c["uri"].rsplit("/", 1)[1] for c in created]
    assert all(is_tid(k) for k in rkeys)

    got = await repo.get_record(PROOF, rkeys[0])
    assert got["uri"] == created[0]["uri"] and got["cid"] == created[0]["cid"]
    assert got["value"]["memberDid"] == members[0] and got["value"]["$type"] == PROOF

    page1, cursor = await repo.list_records(PROOF, limit=2)
    assert len(page1) == 2 and cursor
    page2, cursor2 = await repo.list_records(PROOF, limit=2, cursor=cursor)
    assert {r["uri"] for r in page1 + page2} == {c["uri"] for c in created}

    updated = await repo.put_record(PROOF, rkeys[1], {**proof(app, members[1]),
                                                      "membershipUri": f"at://{members[1]}/{NS}.membership/{new_tid()}"})
    assert updated["uri"] == created[1]["uri"] and updated["cid"] != created[1]["cid"]

    await repo.delete_record(PROOF, rkeys[0])
    assert await repo.get_record(PROOF, rkeys[0]) is None
    await repo.delete_record(PROOF, rkeys[0])  # deleting a missing record is a success
    remaining, _ = await repo.list_records(PROOF)
    assert {r["uri"] for r in remaining} == {created[1]["uri"], created[2]["uri"]}
    lexicons_for(app).validate_record(PROOF, remaining[0]["value"])  # what the PDS holds is valid


async def test_put_with_a_stale_swap_is_a_409(app: Any, repo: Any) -> None:
    first = await repo.put_record(f"{NS}.admins", "self",
                                  {"admins": [{"did": repo.did, "addedAt": app.clock.iso_now()}]})
    second = await repo.put_record(f"{NS}.admins", "self", {"admins": [
        {"did": repo.did, "addedAt": app.clock.iso_now()},
        {"did": "did:plc:z72i7hdynmk6r22z27h6tvur", "addedAt": app.clock.iso_now()}]},
        swap_record=first["cid"])
    with pytest.raises(PdsError) as err:
        await repo.put_record(f"{NS}.admins", "self", {"admins": [
            {"did": repo.did, "addedAt": app.clock.iso_now()}]}, swap_record=first["cid"])
    assert (err.value.status, err.value.code) == (409, "record_conflict")
    assert (await repo.get_record(f"{NS}.admins", "self"))["cid"] == second["cid"]


async def test_creating_the_same_record_twice_is_recognised_as_done(app: Any, repo: Any) -> None:
    """What a retry after a lost answer looks like: the record is there, with our value."""
    rkey = new_tid(app.clock)
    value = proof(app, "did:plc:z72i7hdynmk6r22z27h6tvur")
    first = await repo.create_record(PROOF, value, rkey=rkey)
    again = await repo.create_record(PROOF, value, rkey=rkey)
    assert again == first
    with pytest.raises(PdsError):  # a different record under that key is a real conflict
        await repo.create_record(PROOF, {**value, "memberDid": "did:web:example.com"}, rkey=rkey)


async def test_apply_writes_changes_several_records_in_one_commit(app: Any, repo: Any) -> None:
    keep = await repo.create_record(PROOF, proof(app, "did:web:one.example.com"))
    gone = await repo.create_record(PROOF, proof(app, "did:web:two.example.com"))
    await repo.put_record(f"{NS}.admins", "self", {"admins": [
        {"did": "did:web:old.example.com", "addedAt": app.clock.iso_now()}]})
    results = await repo.apply_writes([
        {"action": "create", "collection": PROOF, "value": proof(app, "did:web:three.example.com")},
        {"action": "update", "collection": f"{NS}.admins", "rkey": "self",
         "value": {"admins": [{"did": repo.did, "addedAt": app.clock.iso_now()}]}},
        {"action": "delete", "collection": PROOF, "rkey": gone["uri"].rsplit("/", 1)[1]},
    ])
    assert len(results) == 3 and results[0]["uri"].startswith(f"at://{repo.did}/{PROOF}/")
    records, _ = await repo.list_records(PROOF)
    assert {r["value"]["memberDid"] for r in records} == {"did:web:one.example.com",
                                                          "did:web:three.example.com"}
    assert keep["uri"] in {r["uri"] for r in records}
    admins = await repo.get_record(f"{NS}.admins", "self")
    assert [a["did"] for a in admins["value"]["admins"]] == [repo.did]

    with pytest.raises(LexiconError):  # one bad write: nothing is sent
        await repo.apply_writes([
            {"action": "create", "collection": PROOF, "value": proof(app, "did:web:four.example.com")},
            {"action": "create", "collection": PROOF, "value": {"memberDid": "nope"}}])
    assert len((await repo.list_records(PROOF))[0]) == 2


async def test_an_uploaded_png_becomes_the_community_avatar(app: Any, repo: Any) -> None:
    png = make_png(4, 4, (255, 200, 0))
    blob = await repo.upload_blob(png, "image/png")
    assert blob["$type"] == "blob" and blob["mimeType"] == "image/png" and blob["size"] == len(png)
    profile = {"displayName": "Sunflower club", "description": "Tall flowers", "type": "open",
               "avatar": blob, "createdAt": app.clock.iso_now()}
    await repo.put_record(f"{NS}.profile", "self", profile)

    stored = await repo.get_record(f"{NS}.profile", "self")
    assert stored["value"]["avatar"]["ref"] == blob["ref"]
    lexicons_for(app).validate_record(f"{NS}.profile", stored["value"], rkey="self")
    image = await app.http.get(blob_url(repo.pds_url, repo.did, blob_cid(stored["value"]["avatar"])))
    assert image.status_code == 200 and image.content == png


async def test_a_record_breaking_our_lexicon_is_never_written(app: Any, repo: Any) -> None:
    with pytest.raises(LexiconError) as err:
        await repo.put_record(f"{NS}.profile", "self", {"displayName": "x" * 65, "type": "open",
                                                         "createdAt": app.clock.iso_now()})
    assert "displayName" in str(err.value)
    assert await repo.get_record(f"{NS}.profile", "self") is None
