"""Every validation pattern matches the whole value (issue 22, hole 1): with `re.match` and
a closing `$`, a value with a line break at the end (or, for a pattern applied per label,
inside) passed, because `$` also matches just before a final line break."""

from __future__ import annotations

import pytest

from daemon.http.base import ApiError


@pytest.mark.parametrize("name", ["helper\n", "moderator\n", "admin\n"])
def test_role_names_with_a_line_break_are_refused(name):
    from plugins.communities.capabilities import role_name
    assert role_name(name.strip()) == name.strip()
    with pytest.raises(ApiError):
        role_name(name)


def test_host_names_with_a_line_break_in_a_label_are_refused():
    from daemon.http.base import hostname
    from daemon.security.netguard import allowlist_problem
    assert hostname("app.example.com") == "app.example.com"
    with pytest.raises(ApiError):
        hostname("app\n.example.com")
    assert allowlist_problem("hooks.example.com") is None
    assert allowlist_problem("hooks\n.example.com") is not None


def test_api_keys_migration_names_and_did_web_hosts_match_whole():
    from daemon.atproto.syntax import did_problem
    from plugins.apikeys.keys import KEY_RE
    from store.migrate import _NAME
    key = "cr_" + "0" * 64
    assert KEY_RE.fullmatch(key) and not KEY_RE.fullmatch(key + "\n")
    assert _NAME.fullmatch("0009_strict_role_names.sql") and not _NAME.fullmatch("0009_x.sql\n")
    assert did_problem("did:web:example.com") is None and did_problem("did:web:example.com\n") is not None
