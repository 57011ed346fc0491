"""When the PDS stops answering (the devnet frozen with SIGSTOP) or is not there at all (a
closed port): a 502 after bounded retries, in bounded time, and no local state that claims
the operation worked."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from daemon.atproto.accounts import (bring_own_account, community_repo, fetch_handle_domain,
                                     provision_account)
from daemon.http.base import ApiError
from tests.conftest import deep_merge

pytestmark = [pytest.mark.pds, pytest.mark.slow]

PROOF = "community.commonroom.membershipProof"
TIMEOUT = 1.0
ATTEMPTS = 3


@pytest.fixture
def config_overrides(pds_config_overrides: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(pds_config_overrides, {"atproto": {
        "request_timeout_seconds": TIMEOUT, "max_retries": ATTEMPTS - 1,
        "retry_backoff_seconds": 0.05}})


@pytest.fixture
def paused(devnet: Any) -> Any:
    """Call ``paused()`` to freeze the PDS; it is resumed after the test whatever happens."""
    yield devnet.pause
    devnet.resume()


async def rows(app: Any, table: str) -> int:
    return await app.db.fetchval(f"SELECT count(*) FROM {table}")


async def test_provisioning_on_a_frozen_pds_fails_cleanly_and_a_retry_completes_it(
        app: Any, devnet: Any, paused: Any, new_handle: Any, http_log: Any) -> None:
    await fetch_handle_domain(app)
    handle = new_handle("frozen")
    http_log.clear()
    paused()
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        await provision_account(app, handle)
    elapsed = time.monotonic() - started
    devnet.resume()

    assert err.value.status == 502 and err.value.body()["error"] == "pds_error"
    assert "did not answer" in err.value.message
    assert http_log.count("createAccount") == ATTEMPTS
    assert ATTEMPTS * TIMEOUT <= elapsed < 15
    assert await rows(app, "community_accounts") == 0  # nothing claims the account exists
    with pytest.raises(ApiError) as missing:
        await community_repo(app, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
    assert missing.value.status == 404
    assert await rows(app, "account_provisioning") == 1  # the password, kept for the retry

    # The frozen PDS may have created the account once it woke up: either way, retrying
    # with the same handle ends with a working account.
    account = await provision_account(app, handle)
    await (await community_repo(app, account.did)).create_record(
        PROOF, {"memberDid": account.did, "confirmedAt": app.clock.iso_now()})
    assert await rows(app, "account_provisioning") == 0


async def test_repo_writes_on_a_frozen_pds_are_a_502_in_bounded_time(
        app: Any, devnet: Any, paused: Any, new_handle: Any) -> None:
    account = await provision_account(app, new_handle("frozen"))
    repo = await community_repo(app, account.did)
    paused()
    for attempt in (lambda: repo.create_record(PROOF, {"memberDid": account.did,
                                                       "confirmedAt": app.clock.iso_now()}),
                    lambda: repo.upload_blob(b"\x89PNG", "image/png")):
        started = time.monotonic()
        with pytest.raises(ApiError) as err:
            await attempt()
        assert err.value.status == 502
        assert time.monotonic() - started < 15


async def test_bringing_an_account_while_its_pds_is_frozen_stores_nothing(
        app: Any, devnet: Any, paused: Any, new_handle: Any) -> None:
    owner = devnet.create_account(new_handle("frozen"))
    app_password = devnet.create_app_password(owner, "commonroom")
    paused()
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        await bring_own_account(app, owner["handle"], app_password)
    assert err.value.status == 502 and time.monotonic() - started < 15
    assert await rows(app, "community_accounts") == 0


@pytest.fixture
def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class TestClosedPort:
    @pytest.fixture
    def config_overrides(self, pds_config_overrides: dict[str, Any], closed_port: int) -> dict[str, Any]:
        return deep_merge(pds_config_overrides, {"atproto": {
            "pds_url": f"http://127.0.0.1:{closed_port}", "request_timeout_seconds": TIMEOUT,
            "max_retries": ATTEMPTS - 1, "retry_backoff_seconds": 0.05}})

    async def test_provisioning_against_a_closed_port_is_a_502(self, app: Any, new_handle: Any,
                                                               http_log: Any) -> None:
        started = time.monotonic()
        with pytest.raises(ApiError) as err:
            await provision_account(app, new_handle("closed"))
        assert err.value.status == 502 and f"{ATTEMPTS} attempt(s)" in err.value.message
        assert time.monotonic() - started < 5
        assert len(http_log.urls) == ATTEMPTS
        assert await rows(app, "community_accounts") == 0
        assert await rows(app, "account_provisioning") == 0
