"""Secrets never reach the logs.

`RedactSecrets` is a `logging.Filter` that `daemon.runtime.main.setup_logging` puts on every
handler of the root logger, so it covers every logger (the access log, the OAuth login,
plugins, libraries), not only the lines this service writes itself. It rewrites each
record's formatted message and traceback with `redact`. What it hides (docs/operations.md):

* the value of a URL query, form or ``key=value`` parameter whose name is one of
  `SECRET_NAMES` or ends in ``token``, ``secret``, ``password`` or ``key`` (any case,
  ``_``/``-`` ignored): the OAuth callback's ``code`` and ``state``, ``access_token``,
  ``api_key`` ...;
* the same names as JSON members (``"refresh_token": "..."``);
* the same names as Python dict members (``{'access_token': '...'}``) and inside URL-encoded
  values (``return_to=/x%3Fcode%3D...``); a JWK's private members (``"d"``, ``"p"`` ...);
* API keys (``cr_`` + 64 hex digits), bare JWTs (``eyJ….eyJ….…``) and ``Bearer``/``DPoP``/
  ``Basic`` credentials (any case) wherever they appear;
* invite codes in paths (``/invites/<code>``: the access log of the preview, a revocation
  by code; ``/invite/<code>``: the invite's page, also URL-encoded as a sign-in's return
  address; in any case, and percent-encoded too, judged after decoding: ``/invite/%74...``);
  an invite's short list id (``inv_<n>``) is not a secret and stays.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

REDACTED = "[redacted]"

#: Parameter names whose values are always hidden, besides any name that ends in one of
#: `SECRET_SUFFIXES`.
SECRET_NAMES = ("code", "state", "code_verifier", "client_assertion", "sid", "csrf", "nonce",
                "dpop", "authorization", "credential", "credentials", "passphrase", "invitecode",
                "invite_code", "invite-code")
SECRET_SUFFIXES = ("token", "secret", "password", "passwd", "key", "jwt")
#: Hidden only as JSON or Python-dict members (too short to look for in free text): a
#: JWK's private parts.
MEMBER_ONLY_NAMES = ("d", "p", "q", "dp", "dq", "qi")

_NAME = (r"(?:" + "|".join(SECRET_NAMES) + r"|[A-Za-z0-9_.-]*?(?:"
         + "|".join(SECRET_SUFFIXES) + r"))")
# name=value in a URL query, a form body or free text; the name must not continue a longer
# word (status_code=200 is not the `code` parameter).
_PARAM = re.compile(r"(?<![A-Za-z0-9_.-])(" + _NAME + r")(=)([^&\s#\"'<>;,]+)", re.IGNORECASE)
_MEMBER_NAME = r"(?:" + _NAME + r"|" + "|".join(MEMBER_ONLY_NAMES) + r")"
_JSON_MEMBER = re.compile(r"(\"" + _MEMBER_NAME + r"\"\s*:\s*\")((?:[^\"\\]|\\.)*)(\")", re.IGNORECASE)
# The same as Python prints a dict: {'access_token': '...'}.
_REPR_MEMBER = re.compile(r"('" + _MEMBER_NAME + r"'\s*:\s*')((?:[^'\\]|\\.)*)(')", re.IGNORECASE)
# name%3Dvalue: a parameter inside a URL-encoded value (a return address, a redirect).
_ENCODED_PARAM = re.compile(r"(?:(?<=%3F)|(?<=%3f)|(?<=%26)|(?<![A-Za-z0-9_.%-]))(" + _NAME + r")(%3D)((?:(?!%26)[^&\s#\"'<>;,])+)",
                            re.IGNORECASE)
_API_KEY = re.compile(r"\bcr_[0-9a-fA-F]{64}\b")
_AUTH_SCHEME = re.compile(r"\b(Bearer|DPoP|Basic)(\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
# A bare JWT (header.payload.signature, each base64url; header and payload are JSON objects).
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# An invite code in a path (codes are 24 URL-safe characters; list ids are inv_<digits>).
_INVITE_PATH = re.compile(r"((?:/|%2F)invites?(?:/|%2F))(?!inv_\d+\b)[A-Za-z0-9_-]{16,}", re.IGNORECASE)
# The same with the code percent-encoded (``/invite/%74%6F...``: the router decodes the
# segment, so it is the same working code): judged after decoding (`_encoded_invite`).
_ENCODED_INVITE_PATH = re.compile(r"((?:/|%2F)invites?(?:/|%2F))((?:[A-Za-z0-9_-]|%[0-9A-Fa-f]{2})*%[0-9A-Fa-f]{2}"
                                  r"(?:[A-Za-z0-9_-]|%[0-9A-Fa-f]{2})*)", re.IGNORECASE)
_CODE_START = re.compile(r"[A-Za-z0-9_-]{16,}")
_LIST_ID = re.compile(r"inv_\d+")


def _encoded_invite(m: re.Match[str]) -> str:
    segment = m.group(2)
    for _ in range(3):  # %2574 is %74 once decoded, t twice
        decoded = unquote(segment)
        if decoded == segment:
            break
        segment = decoded
    if _CODE_START.match(segment) and not _LIST_ID.fullmatch(segment):
        return f"{m.group(1)}{REDACTED}"
    return m.group(0)


def redact(text: str) -> str:
    """`text` with every secret it holds replaced by ``[redacted]``."""
    if "=" in text:
        text = _PARAM.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    if "%3" in text:
        text = _ENCODED_PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if '"' in text:
        text = _JSON_MEMBER.sub(lambda m: f"{m.group(1)}{REDACTED}{m.group(3)}", text)
    if "'" in text:
        text = _REPR_MEMBER.sub(lambda m: f"{m.group(1)}{REDACTED}{m.group(3)}", text)
    if "cr_" in text:
        text = _API_KEY.sub(REDACTED, text)
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    lowered = text.lower()
    if "invite" in lowered:
        text = _INVITE_PATH.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
        if "%" in text:
            text = _ENCODED_INVITE_PATH.sub(_encoded_invite, text)
        lowered = text.lower()
    if "bearer" in lowered or "dpop" in lowered or "basic" in lowered:
        text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text


class RedactSecrets(logging.Filter):
    """Rewrites every record it sees so that no secret is written (see the module doc)."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
