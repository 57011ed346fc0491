"""The access log (docs/operations.md, "Logs"): every error and every write gets a line;
successful reads, membership/check's POST included, are sampled by
`access_log.successful_reads` (default one in a hundred)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from daemon.runtime.config import Config, ConfigError
from tests.fixtures_communities import seed_community
from tests.helpers import login_as, register_app


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"rate_limits": {"api": {"requests": 1000, "window_seconds": 60}}}


def access_lines(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "commonroom.access"]


async def setup(app: Any, client: Any) -> tuple[str, str]:
    alice = await login_as(app, "did:plc:alice")
    key = (await register_app(client, alice))["apiKey"]
    return key, await seed_community(app, "did:plc:admin", members=("did:plc:member",))


async def test_successful_reads_are_sampled_and_the_rest_always_logged(app, client, caplog):
    key, did = await setup(app, client)
    check = f"/api/v1/communities/{did}/membership/check"
    caplog.set_level(logging.INFO, logger="commonroom.access")
    caplog.clear()
    for _ in range(150):
        assert (await client.post(check, json={"userDid": "did:plc:member"}, api_key=key)).status == 200
    for _ in range(50):
        assert (await client.get("/health")).status == 200
    reads = access_lines(caplog)
    assert len(reads) == 2, reads     # the 1st and the 101st of 200 successful reads
    assert all("(1 in 100 successful reads logged)" in line for line in reads), reads
    caplog.clear()
    assert (await client.post(check, json={"userDid": "nope"}, api_key=key)).status == 400
    assert (await client.get("/api/v1/no-such-route")).status == 404
    join = await client.post(f"/api/v1/communities/{did}/members/join", json={"userDid": "did:plc:x"})
    assert join.status == 401
    lines = access_lines(caplog)
    assert [line.split()[0] for line in lines] == ["400", "404", "401"], lines
    assert f"POST /api/v1/communities/{did}/membership/check" in lines[0]


async def test_a_successful_write_is_always_logged(app, client, caplog):
    caplog.set_level(logging.INFO, logger="commonroom.access")
    alice = await login_as(app, "did:plc:alice")
    caplog.clear()
    for i in range(3):
        await register_app(client, alice, domain=f"app{i}.example.com")
    lines = access_lines(caplog)
    assert len(lines) == 3 and all(line.startswith("201 POST /api/v1/apps/register") for line in lines), lines


class TestEveryRead:
    @pytest.fixture
    def config_overrides(self) -> dict[str, Any]:
        return {"access_log": {"successful_reads": 1}}

    async def test_one_writes_every_read(self, app, client, caplog):
        caplog.set_level(logging.INFO, logger="commonroom.access")
        caplog.clear()
        for _ in range(5):
            assert (await client.get("/health")).status == 200
        lines = access_lines(caplog)
        assert len(lines) == 5 and all(line.startswith("200 GET /health") and "1 in" not in line for line in lines)


class TestNoReads:
    @pytest.fixture
    def config_overrides(self) -> dict[str, Any]:
        return {"access_log": {"successful_reads": 0}}

    async def test_zero_writes_no_successful_read_but_every_error(self, app, client, caplog):
        caplog.set_level(logging.INFO, logger="commonroom.access")
        caplog.clear()
        for _ in range(5):
            assert (await client.get("/health")).status == 200
        assert (await client.get("/api/v1/no-such-route")).status == 404
        lines = access_lines(caplog)
        assert len(lines) == 1 and lines[0].startswith("404 GET"), lines


@pytest.mark.parametrize("value", [-0.1, 1.5, "all", True])
def test_the_setting_is_a_share_from_0_to_1(value: Any) -> None:
    with pytest.raises(ConfigError, match="access_log.successful_reads"):
        Config.from_mapping({"access_log": {"successful_reads": value}})
