"""Community accounts against the devnet: provisioned and brought, sealed at rest, sessions
shared and refreshed."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from daemon.atproto import accounts
from daemon.atproto.accounts import (bring_own_account, community_repo, fetch_handle_domain,
                                     forget_account, handle_domain, provision_account)
from daemon.atproto.identity import resolve_identity
from daemon.atproto.syntax import new_tid
from daemon.http.base import ApiError
from daemon.security.secretbox import SecretBox, parse_key
from tests.conftest import TEST_SECRET_KEY

pytestmark = pytest.mark.pds

PROOF = "community.commonroom.membershipProof"


@pytest.fixture
def config_overrides(pds_config_overrides: dict[str, Any]) -> dict[str, Any]:
    return pds_config_overrides


def proof(app: Any, member: str = "did:plc:z72i7hdynmk6r22z27h6tvur") -> dict[str, Any]:
    return {"memberDid": member, "confirmedAt": app.clock.iso_now()}


async def account_rows(app: Any) -> int:
    return await app.db.fetchval("SELECT count(*) FROM community_accounts")


async def test_provisioning_creates_an_account_the_daemon_can_act_as(app: Any, devnet: Any,
                                                                     new_handle: Any) -> None:
    handle = new_handle("club")
    started = time.perf_counter()
    account = await provision_account(app, handle)
    elapsed = time.perf_counter() - started
    print(f"\nprovision_account: {elapsed * 1000:.0f} ms")
    assert account.handle == handle and account.pds_url == devnet.pds_url
    assert account.did.startswith("did:plc:")
    assert handle_domain(app) == ".test"

    info = await resolve_identity(app, handle)  # a real identity, both ways
    assert (info.did, info.handle) == (account.did, handle)

    repo = await community_repo(app, account.did)
    created = await repo.create_record(PROOF, proof(app))
    assert created["uri"].startswith(f"at://{account.did}/{PROOF}/")
    row = await accounts.account_row(app.db, account.did)
    assert row["origin"] == "provisioned" and row["handle"] == handle
    assert await app.db.fetchval("SELECT count(*) FROM account_provisioning") == 0


async def test_a_bare_name_gets_the_pds_handle_domain(app: Any, new_handle: Any) -> None:
    assert await fetch_handle_domain(app) == ".test"
    name = new_handle("grp").removesuffix(".test")
    account = await provision_account(app, name.upper())
    assert account.handle == f"{name}.test"


async def test_a_taken_or_foreign_handle_is_refused_and_nothing_is_kept(app: Any, devnet: Any,
                                                                       new_handle: Any) -> None:
    someone = devnet.create_account(new_handle("taken"))
    with pytest.raises(ApiError) as err:
        await provision_account(app, someone["handle"])
    assert (err.value.status, err.value.code) == (409, "handle_taken")
    with pytest.raises(ApiError) as err:
        await provision_account(app, "club.example.com")
    assert err.value.status == 400 and "handle" in err.value.message and ".test" in err.value.message
    assert await account_rows(app) == 0
    assert await app.db.fetchval("SELECT count(*) FROM account_provisioning") == 0


async def test_provisioning_survives_losing_the_pds_answer(app: Any, devnet: Any, new_handle: Any) -> None:
    """The PDS created the account but the daemon never saw the answer (crash, timeout): the
    password was stored first, so a retry with the same handle finds and completes it."""
    handle = new_handle("lost")
    password = "kept-before-the-call-1"
    email = f"{handle}@accounts.invalid"
    async with app.db.transaction("test.pending") as tx:
        await accounts.insert_provisioning_tx(
            tx, handle=handle, pds_url=devnet.pds_url, email=email,
            password_sealed=app.secrets.seal(password, f"account_provisioning.password:{handle}"),
            now=app.clock.iso_now())
    created_by_lost_call = devnet.create_account(handle, password=password, email=email)

    account = await provision_account(app, handle)
    assert account.did == created_by_lost_call["did"]
    repo = await community_repo(app, account.did)
    await repo.create_record(PROOF, proof(app))
    assert await app.db.fetchval("SELECT count(*) FROM account_provisioning") == 0


async def test_bringing_an_account_with_an_app_password(app: Any, devnet: Any, new_handle: Any) -> None:
    owner = devnet.create_account(new_handle("own"))
    app_password = devnet.create_app_password(owner, "commonroom")
    account = await bring_own_account(app, owner["handle"], app_password)
    assert (account.did, account.handle, account.pds_url) == (owner["did"], owner["handle"], devnet.pds_url)
    repo = await community_repo(app, owner["did"])
    created = await repo.create_record(PROOF, proof(app))
    assert (await repo.get_record(PROOF, created["uri"].rsplit("/", 1)[1]))["cid"] == created["cid"]

    # by DID works too, and re-linking replaces the stored app password
    second = devnet.create_app_password(owner, "commonroom-2")
    again = await bring_own_account(app, owner["did"], second)
    assert again == account and await account_rows(app) == 1


async def test_a_wrong_app_password_is_a_clear_400_and_nothing_is_stored(app: Any, devnet: Any,
                                                                         new_handle: Any) -> None:
    owner = devnet.create_account(new_handle("own"))
    devnet.create_app_password(owner, "real")
    with pytest.raises(ApiError) as err:
        await bring_own_account(app, owner["handle"], "aaaa-bbbb-cccc-dddd")
    assert (err.value.status, err.value.code) == (400, "invalid_credentials")
    assert "app password" in err.value.message
    assert await account_rows(app) == 0
    with pytest.raises(ApiError) as err:
        await community_repo(app, owner["did"])
    assert err.value.status == 404


async def test_the_accounts_own_password_is_refused(app: Any, devnet: Any, new_handle: Any) -> None:
    """Handing over the real password gives away the whole account: ask for an app password."""
    owner = devnet.create_account(new_handle("own"))
    with pytest.raises(ApiError) as err:
        await bring_own_account(app, owner["handle"], owner["password"])
    assert (err.value.status, err.value.code) == (400, "app_password_required")
    assert await account_rows(app) == 0


async def test_unknown_accounts_are_refused(app: Any) -> None:
    with pytest.raises(ApiError) as err:
        await bring_own_account(app, "nobody-at-all.test", "aaaa-bbbb-cccc-dddd")
    assert (err.value.status, err.value.code) == (400, "unknown_handle")
    with pytest.raises(ApiError) as err:
        await bring_own_account(app, "not a handle", "x")
    assert err.value.status == 400 and "identifier" in err.value.message


async def test_the_database_holds_no_plaintext_secret(app: Any, devnet: Any, new_handle: Any,
                                                      state_dir: Any) -> None:
    provisioned = await provision_account(app, new_handle("seal"))
    owner = devnet.create_account(new_handle("seal"))
    app_password = devnet.create_app_password(owner, "commonroom")
    await bring_own_account(app, owner["did"], app_password)
    for did in (provisioned.did, owner["did"]):
        await (await community_repo(app, did)).create_record(PROOF, proof(app))

    row = await accounts.account_row(app.db, provisioned.did)
    secrets = [app.secrets.open(row["password_sealed"], f"community_accounts.password:{provisioned.did}"),
               app_password]
    for session in app.accounts.sessions.values():
        secrets += [session.access_jwt, session.refresh_jwt,
                    session.access_jwt.rsplit(".", 1)[1], session.refresh_jwt.rsplit(".", 1)[1]]
    assert len(secrets) == 10

    files = [app.config.database_path, app.config.database_path.with_name(
        app.config.database_path.name + "-wal")]
    before_close = b"".join(f.read_bytes() for f in files if f.exists())
    await app.db.close()  # checkpoints the WAL into the main file
    after_close = b"".join(f.read_bytes() for f in files if f.exists())
    for data in (before_close, after_close):
        assert owner["did"].encode() in data  # we are looking at the right bytes
        for secret in secrets:
            assert secret.encode() not in data, "a secret is stored in the clear"


async def test_concurrent_callers_share_one_login(app: Any, new_handle: Any, http_log: Any) -> None:
    account = await provision_account(app, new_handle("share"))
    # Forget the session everywhere, as after a restart with no stored session.
    app.accounts.sessions.clear()
    async with app.db.transaction("test.drop_session") as tx:
        await accounts.update_session_tx(tx, account.did, None, app.clock.iso_now())
    http_log.clear()

    async def write() -> dict[str, Any]:
        repo = await community_repo(app, account.did)
        return await repo.create_record(PROOF, proof(app))

    results = await asyncio.gather(*(write() for _ in range(10)))
    assert len({r["uri"] for r in results}) == 10
    assert http_log.count("com.atproto.server.createSession") == 1
    assert http_log.count("com.atproto.repo.createRecord") == 10


async def test_sessions_are_refreshed_when_they_expire(app: Any, new_handle: Any, http_log: Any,
                                                       clock: Any) -> None:
    account = await provision_account(app, new_handle("fresh"))
    repo = await community_repo(app, account.did)
    await repo.create_record(PROOF, proof(app))
    http_log.clear()

    clock.advance(3 * 3600)  # access tokens live 2 h on this PDS
    await repo.create_record(PROOF, proof(app))
    assert http_log.count("refreshSession") == 1 and http_log.count("createSession") == 0

    # A session the PDS no longer accepts (e.g. revoked) is replaced by a new login.
    state = app.accounts
    old = state.sessions[account.did]
    state.sessions[account.did] = accounts._Session("not-a-token", "not-a-token",
                                                    old.access_expires_at, old.refresh_expires_at)
    http_log.clear()
    await repo.create_record(PROOF, proof(app))
    assert http_log.count("refreshSession") == 1 and http_log.count("createSession") == 1


async def test_a_revoked_app_password_is_a_502_naming_the_cause(app: Any, devnet: Any,
                                                               new_handle: Any) -> None:
    owner = devnet.create_account(new_handle("rev"))
    app_password = devnet.create_app_password(owner, "to-revoke")
    await bring_own_account(app, owner["did"], app_password)
    devnet.xrpc("com.atproto.server.revokeAppPassword", {"name": "to-revoke"}, token=owner["accessJwt"])
    app.accounts.sessions.clear()
    async with app.db.transaction("test.drop_session") as tx:
        await accounts.update_session_tx(tx, owner["did"], None, app.clock.iso_now())
    repo = await community_repo(app, owner["did"])
    with pytest.raises(ApiError) as err:
        await repo.create_record(PROOF, proof(app), rkey=new_tid(app.clock))
    assert err.value.status == 502 and "app password" in err.value.message


async def test_forgetting_an_account_removes_its_credentials(app: Any, new_handle: Any) -> None:
    account = await provision_account(app, new_handle("bye"))
    await forget_account(app, account.did)
    await forget_account(app, account.did)  # idempotent
    assert await account_rows(app) == 0
    with pytest.raises(ApiError) as err:
        await community_repo(app, account.did)
    assert err.value.status == 404


async def test_credentials_survive_a_secret_key_rotation(app: Any, new_handle: Any) -> None:
    """With the old key listed in previous_secret_keys, stored credentials still open, and the
    next login re-seals the password under the new key."""
    account = await provision_account(app, new_handle("rot"))
    old_key = parse_key(TEST_SECRET_KEY)
    app.secrets = SecretBox(os.urandom(32), (old_key,))
    app.accounts.sessions.clear()
    async with app.db.transaction("test.drop_session") as tx:
        await accounts.update_session_tx(tx, account.did, None, app.clock.iso_now())

    await (await community_repo(app, account.did)).create_record(PROOF, proof(app))
    row = await accounts.account_row(app.db, account.did)
    assert not app.secrets.needs_reseal(row["password_sealed"])
    assert not app.secrets.needs_reseal(row["session_sealed"])

    app.secrets = SecretBox(os.urandom(32))  # the key is lost: a clear error, not a crash
    app.accounts.sessions.clear()
    async with app.db.transaction("test.drop_session") as tx:
        await accounts.update_session_tx(tx, account.did, None, app.clock.iso_now())
    with pytest.raises(ApiError) as err:
        await (await community_repo(app, account.did)).create_record(PROOF, proof(app))
    assert err.value.code == "credentials_unreadable"
