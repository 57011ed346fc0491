"""What `daemon.plugin.security` gives a plugin for sign-in and outbound calls (docs/plugins.md, "The
plugin API": browser sessions, the outbound guard), used only through that module, as an
outside plugin would use it."""

from __future__ import annotations

import httpx
import pytest

import daemon.plugin.security as api
from commonroom_testing.http import Session

DID = "did:plc:pluginapisessionaaaaaaaa"


async def test_a_session_made_through_the_plugin_api_signs_in_until_it_is_ended(app, client):
    made = await api.create_session(app, DID, "alice.test")
    session = Session(DID, "alice.test", made.sid, made.csrf)
    assert (await client.get("/api/v1/apps", session=session)).status == 200
    principal = await api.authenticate_session(app, made.sid)
    assert (principal.kind, principal.did, principal.session_id) == ("session", DID, made.id_hash)

    await api.end_session(app, made.id_hash)
    gone = await client.get("/api/v1/apps", session=session)
    assert gone.status == 401 and gone.json()["error"] == "session_invalid"


async def test_a_plugins_guarded_client_reaches_loopback_only_when_its_operator_lists_it(webhook_receiver):
    receiver = webhook_receiver()
    closed = api.Guard(allow_http=True, allowed_targets=[])
    with pytest.raises(api.TargetRefused, match="127.0.0.1 is a loopback address"):
        await closed.check(receiver.url)
    async with httpx.AsyncClient(transport=api.GuardedTransport(closed)) as refused:
        with pytest.raises(api.RequestRefused) as err:
            await refused.post(receiver.url, content=b"{}")
    assert err.value.host == "127.0.0.1" and "loopback" in err.value.reason
    assert receiver.started == 0  # refused before anything was sent

    listed = api.Guard(allow_http=True, allowed_targets=["127.0.0.0/8"])
    assert (await listed.check(receiver.url)).port == receiver.port
    async with httpx.AsyncClient(transport=api.GuardedTransport(listed)) as allowed:
        answer = await allowed.post(receiver.url, content=b"{}")
    assert answer.status_code == 200 and receiver.started == 1
