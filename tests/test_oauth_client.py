"""The OAuth client's own pieces, without a PDS: metadata, keys, JOSE, scopes, and the
routes' answers when no authorization server is involved."""

from __future__ import annotations

import hashlib
import os
import time
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from daemon.runtime.config import ConfigError
from daemon.http.base import Principal
from plugins.oauth.client import b64url
from plugins.oauth.grants import oauth_state
from plugins.oauth.keys import generate_pem, load_client_keys, new_dpop_key
from plugins.oauth.userrepo import scope_allows, user_repo
from tests.fixtures_oauth import cookie_attrs
from tests.helpers import login_as

# No test here may reach the internet: identity look-ups hit a closed loopback port.
OFFLINE = {"atproto": {"plc_url": "http://127.0.0.1:9", "allow_insecure_http": True,
                       "max_retries": 0, "request_timeout_seconds": 2.0}}


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return OFFLINE


async def test_plain_http_loopback_base_url_uses_the_development_client(app, client):
    meta = (await client.get("/oauth-client-metadata.json")).json()
    assert meta["client_id"].startswith("http://localhost?")
    assert meta["redirect_uris"] == ["http://127.0.0.1:8080/oauth/callback"]
    assert meta["token_endpoint_auth_method"] == "none"
    assert "jwks_uri" not in meta
    assert meta["scope"] == "atproto repo:community.commonroom.membership transition:generic"
    assert "scope=atproto+repo%3Acommunity.commonroom.membership" in meta["client_id"]


@pytest.mark.parametrize("config_overrides", [{
    **OFFLINE, "server": {"base_url": "https://rooms.example.com"},
    "oauth": {"scope": "atproto repo:community.commonroom.membership", "client_name": "Rooms",
              "fallback_scope": None}}])
async def test_https_base_url_publishes_confidential_client_metadata(app, client):
    meta = (await client.get("/oauth-client-metadata.json")).json()
    assert meta == {
        "client_id": "https://rooms.example.com/oauth-client-metadata.json",
        "client_name": "Rooms", "client_uri": "https://rooms.example.com",
        "application_type": "web", "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"], "redirect_uris": ["https://rooms.example.com/oauth/callback"],
        "scope": "atproto repo:community.commonroom.membership", "dpop_bound_access_tokens": True,
        "token_endpoint_auth_method": "private_key_jwt", "token_endpoint_auth_signing_alg": "ES256",
        "jwks_uri": "https://rooms.example.com/.well-known/jwks.json"}


async def test_jwks_publishes_the_generated_key_without_private_parts(app, client, state_dir):
    jwks = (await client.get("/.well-known/jwks.json")).json()
    assert len(jwks["keys"]) == 1
    key = jwks["keys"][0]
    assert key["kty"] == "EC" and key["crv"] == "P-256" and key["alg"] == "ES256" and key["kid"]
    assert "d" not in key
    path = state_dir / "oauth_client_key.pem"
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    # The same key on the next start.
    again = load_client_keys((), state_dir)
    assert again.kid(again.signing) == key["kid"]


def test_configured_keys_rotate_first_signs_all_published(tmp_path):
    new, old = generate_pem().decode(), generate_pem().decode()
    keys = load_client_keys((new, old), tmp_path)
    jwks = keys.jwks()
    assert [k["kid"] for k in jwks["keys"]] == [keys.kid(k) for k in keys.keys]
    assert len(jwks["keys"]) == 2 and not (tmp_path / "oauth_client_key.pem").exists()
    assert keys.signing.as_dict(private=False) == ECKey.import_key(new).as_dict(private=False)


def test_a_key_that_is_not_p256_is_a_config_error(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    p384 = ec.generate_private_key(ec.SECP384R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with pytest.raises(ConfigError) as err:
        load_client_keys((generate_pem().decode(), p384.decode()), tmp_path)
    assert err.value.path == "oauth.signing_keys[1]"
    with pytest.raises(ConfigError):
        load_client_keys(("not a key",), tmp_path)


@pytest.mark.parametrize("config_overrides", [{**OFFLINE, "server": {"base_url": "https://rooms.example.com"}}])
async def test_client_assertion_verifies_with_the_published_jwks(app):
    client = oauth_state(app).client
    form = client.client_assertion("https://pds.example.com")
    assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    keyset = KeySet.import_key_set(client.keys.jwks())
    token = jwt.decode(form["client_assertion"], keyset)
    assert token.header["kid"] == client.keys.kid(client.keys.signing)
    claims = token.claims
    assert claims["iss"] == claims["sub"] == client.client_id
    assert claims["aud"] == "https://pds.example.com" and claims["exp"] - claims["iat"] <= 60
    assert form["client_assertion"] != client.client_assertion("https://pds.example.com")["client_assertion"]


async def test_dpop_proof_binds_method_url_token_and_nonce(app):
    client = oauth_state(app).client
    key = new_dpop_key()
    client._nonces["https://pds.example.com"] = "n-123"
    proof = client.dpop_proof(key, "POST", "https://pds.example.com/xrpc/x.y?z=1", access_token="tok")
    token = jwt.decode(proof, key)
    assert token.header["typ"] == "dpop+jwt" and token.header["alg"] == "ES256"
    assert "d" not in token.header["jwk"]
    assert token.claims["htm"] == "POST" and token.claims["htu"] == "https://pds.example.com/xrpc/x.y"
    assert token.claims["nonce"] == "n-123"
    assert token.claims["ath"] == b64url(hashlib.sha256(b"tok").digest())
    other = client.dpop_proof(key, "GET", "https://other.example.com/")
    assert "nonce" not in jwt.decode(other, key).claims and "ath" not in jwt.decode(other, key).claims


@pytest.mark.parametrize(("scope", "collection", "action", "allowed"), [
    ("atproto transition:generic", "a.b.c", "create", True),
    ("atproto repo:community.commonroom.membership", "community.commonroom.membership", "delete", True),
    ("atproto repo:community.commonroom.membership", "community.commonroom.other", "create", False),
    ("atproto repo:community.commonroom.membership?action=create", "community.commonroom.membership",
     "delete", False),
    ("atproto repo?collection=community.commonroom.membership&action=delete",
     "community.commonroom.membership", "delete", True),
    ("atproto repo:*", "x.y.z", "update", True),
    ("atproto", "community.commonroom.membership", "create", False),
])
def test_scope_allows(scope, collection, action, allowed):
    assert scope_allows(scope, collection, action) is allowed


async def test_callback_with_unknown_state_shows_a_page_and_no_session(app, client):
    resp = await client.get("/oauth/callback", params={"state": "forged", "code": "x",
                                                       "iss": "https://pds.example.com"})
    assert resp.status == 400
    assert resp.headers["Content-Type"].startswith("text/html")
    assert "already used or is not one we issued" in resp.text and "unknown_state" in resp.text
    assert not resp.headers.get_list("Set-Cookie")
    resp = await client.get("/oauth/callback")
    assert resp.status == 400 and "missing_state" in resp.text


async def test_callback_clears_the_flow_cookie_even_when_it_refuses(app, client):
    resp = await client.get("/oauth/callback", params={"state": "forged", "code": "x"},
                            headers={"Cookie": "oauth-flow=some-nonce"})
    assert resp.status == 400 and "unknown_state" in resp.text
    [cleared] = resp.headers.get_list("Set-Cookie")  # and no session cookie
    assert cleared.startswith('oauth-flow="";') and "Path=/oauth/callback" in cleared
    expires = cookie_attrs(cleared)["expires"]
    assert parsedate_to_datetime(expires).timestamp() < time.time()  # gone from the browser


@pytest.mark.parametrize("config_overrides", [{**OFFLINE, "oauth": {"error_url": "/welcome?x=1"}}])
async def test_callback_errors_can_redirect_with_a_code(app, client):
    resp = await client.get("/oauth/callback", params={"state": "forged"})
    assert resp.status == 302
    assert resp.headers["Location"] == "/welcome?x=1&error=unknown_state"


async def test_login_needs_an_input(app, client):
    resp = await client.post("/login", json={})
    assert resp.status == 400 and resp.json()["details"][0]["field"] == "input"
    form = await client.post("/login", body="input=",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status == 400 and form.headers["Content-Type"].startswith("text/html")


async def test_login_is_rate_limited_per_client(app, client):
    limit = app.config.rate_limits.auth.requests
    statuses = [(await client.post("/login", json={})).status for _ in range(limit + 1)]
    assert statuses[:limit] == [400] * limit and statuses[-1] == 429


async def test_users_me_needs_a_session_and_degrades_to_did_and_handle(app, client):
    assert (await client.get("/users/me")).status == 401
    session = await login_as(app, "did:plc:abcdefghijklmnopqrstuvwx", "alice.test")
    resp = await client.get("/users/me", session=session)
    assert resp.status == 200
    assert resp.json() == {"did": "did:plc:abcdefghijklmnopqrstuvwx", "handle": "alice.test",
                           "displayName": None, "avatar": None, "description": None}


async def test_logout_needs_csrf_then_ends_the_session(app, client):
    session = await login_as(app, "did:plc:abcdefghijklmnopqrstuvwx", "alice.test")
    refused = await client.post("/logout", session=session, csrf=False)
    assert refused.status == 403
    assert (await client.get("/users/me", session=session)).status == 200
    done = await client.post("/logout", session=session)
    assert done.status == 200 and done.json()["loggedOut"] is True
    assert "sid=" in " ".join(done.headers.get_list("Set-Cookie"))
    assert (await client.get("/users/me", session=session)).status == 401


async def test_writing_to_a_repo_needs_an_oauth_session(app):
    from daemon.http.base import ApiError
    session = await login_as(app, "did:plc:abcdefghijklmnopqrstuvwx", "alice.test")
    from daemon.security.sessions import hash_sid
    principal = Principal(kind="session", did=session.did, session_id=hash_sid(session.sid))
    with pytest.raises(ApiError) as err:
        await user_repo(app, principal)
    assert err.value.status == 403 and err.value.code == "oauth_grant_missing"
    with pytest.raises(ApiError) as err:
        await user_repo(app, Principal(kind="app", app_id="app_" + os.urandom(8).hex()))
    assert err.value.status == 403


def test_a_service_without_signing_keys_generates_one_once(tmp_path):
    """(The test apps share one pre-written key, tests/conftest.py: this is the generation itself.)"""
    first = load_client_keys((), tmp_path)
    path = tmp_path / "oauth_client_key.pem"
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    assert load_client_keys((), tmp_path).kid(first.signing) == first.kid(first.signing)
