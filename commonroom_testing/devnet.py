"""Fixtures for tests against the local devnet (a real PLC directory + Bluesky reference PDS,
see commonroom_testing/localnet.py; Node 22 and ``scripts/devnet/setup``).

``devnet`` starts once per session; a devnet that cannot start is an error, never a skip. The
PDS resolves ``commonroom.ci-test.dev`` to 127.0.0.1 and trusts ``test_ca``, so a service run
over TLS at ``https://commonroom.ci-test.dev:<port>`` with ``test_ca.cert_pem``/``key_pem`` can
be a confidential OAuth client of it. ``lexicons.test`` is the lexicon authority
(``devnet.lexicon_authority``: handle, did, password).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from commonroom_testing.localnet import Devnet, TestCA, make_test_ca

TEST_SERVICE_HOST = "commonroom.ci-test.dev"
LEXICON_AUTHORITY = "lexicons.test"


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    """A throwaway CA and a server certificate for commonroom.ci-test.dev (+ localhost,
    127.0.0.1, ::1)."""
    return make_test_ca(tmp_path_factory.mktemp("test-ca"), [TEST_SERVICE_HOST])


@pytest.fixture(scope="session")
def devnet(test_ca: TestCA) -> Iterator[Devnet]:
    """The session's PLC + PDS (free ports; fresh data)."""
    net = Devnet(hosts={TEST_SERVICE_HOST: "127.0.0.1"}, extra_ca_pem=Path(test_ca.ca_pem),
                 lexicon_authority=LEXICON_AUTHORITY)
    net.start()  # raises DevnetError with the Node process's stderr: fail, do not skip
    try:
        yield net
    finally:
        net.resume()  # in case a test left it paused
        net.stop()


@pytest.fixture(scope="session")
def devnet_b(devnet: Devnet, test_ca: TestCA) -> Iterator[Devnet]:
    """A second PDS ("PDS B") on the session devnet's PLC directory, started the first time a
    test asks for it: moves between PDSes. Its ``plc_url`` is the devnet's."""
    net = Devnet(hosts={TEST_SERVICE_HOST: "127.0.0.1"}, extra_ca_pem=Path(test_ca.ca_pem),
                 plc_url=devnet.plc_url)
    net.start()
    try:
        yield net
    finally:
        net.resume()
        net.stop()


@pytest.fixture(scope="session")
def devnet_invites(devnet: Devnet, test_ca: TestCA) -> Iterator[Devnet]:
    """A third PDS on the session devnet's PLC directory that makes accounts only with an
    invite code (``PDS_INVITE_REQUIRED``), as many self-hosted PDSes do: a move to a PDS of
    one's own. ``invite_code(net)`` makes a code with its admin password."""
    net = Devnet(hosts={TEST_SERVICE_HOST: "127.0.0.1"}, extra_ca_pem=Path(test_ca.ca_pem),
                 plc_url=devnet.plc_url, env={"PDS_INVITE_REQUIRED": "true"})
    net.start()
    try:
        yield net
    finally:
        net.resume()
        net.stop()


def invite_code(net: Devnet, uses: int = 1) -> str:
    """A new invite code of `net`'s PDS (``com.atproto.server.createInviteCode``, admin auth)."""
    import base64
    import json
    import urllib.request
    auth = base64.b64encode(f"admin:{net.admin_password}".encode()).decode()
    req = urllib.request.Request(f"{net.pds_url}/xrpc/com.atproto.server.createInviteCode",
                                 data=json.dumps({"useCount": uses}).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Basic {auth}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["code"]
