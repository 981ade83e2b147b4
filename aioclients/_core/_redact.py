"""Keep credentials out of every message the library raises or logs.

Server addresses may carry secrets: ``nats://alice:S3cret@host:4222`` (user and
password), ``nats://TOKEN@host:4222`` (a token in the user part),
``http://host:4161/?auth_secret=...`` (a secret in the query). Any URL or
address that reaches an exception message or a log record goes through
:func:`redact_url` (one address) or :func:`redact_text` (free text that may
quote addresses, such as a third-party library's error message).

A user name that comes with a password is kept (it helps to see *which* account
failed); a lone user part is a token and is hidden. Query values whose name
suggests a secret are hidden too.
"""

from __future__ import annotations

import re

__all__ = ("REDACTED", "redact_text", "redact_url")

REDACTED = "***"

# scheme://userinfo@ : userinfo has no '/', '@' or white space.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/@?#'\"<>]*)@")
# name=value in a query string, where the name suggests a secret.
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&;](?:[A-Za-z0-9_.\-]*(?:token|secret|passw(?:or)?d|pass|pwd|auth|key|jwt|nkey|creds|signature)[A-Za-z0-9_.\-]*))=(?P<value>[^&;#\s'\"<>]*)",
    re.IGNORECASE,
)


def _hide_userinfo(userinfo: str) -> str:
    user, sep, _password = userinfo.partition(":")
    if sep and user:
        return f"{user}:{REDACTED}"
    return REDACTED


def _redact_userinfo(match: re.Match[str]) -> str:
    return f"{match['scheme']}{_hide_userinfo(match['userinfo'])}@"


def _redact_query(match: re.Match[str]) -> str:
    return f"{match['name']}={REDACTED}" if match["value"] else match[0]


def redact_text(text: str) -> str:
    """Return ``text`` with the credentials of every URL in it replaced by ``***``."""
    if "@" in text:
        text = _USERINFO.sub(_redact_userinfo, text)
    if "=" in text:
        text = _SECRET_QUERY.sub(_redact_query, text)
    return text


def redact_url(url: object) -> str:
    """Return one server address as text that is safe to print.

    Accepts full URLs (``nats://user:pass@host:4222``) and bare addresses with
    user info (``user:pass@host:4222``, which nats-py also accepts); anything
    that is not a ``str`` is shown by its type only, since its repr could hold
    anything.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    if "://" not in url and "@" in url:
        userinfo, _, rest = url.rpartition("@")
        url = f"{_hide_userinfo(userinfo)}@{rest}"
    return redact_text(url)
