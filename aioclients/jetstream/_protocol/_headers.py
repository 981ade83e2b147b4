"""NATS message headers (``NATS/1.0`` blocks) and JetStream publish headers.

Headers are ``dict[str, str | list[str]]``: a list value becomes one header
line per item, and decoding turns a repeated key back into a list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._protocol._names import validate_filter_subject

__all__ = (
    "Headers",
    "decode_header_lines",
    "decode_headers",
    "encode_headers",
    "publish_headers",
)

Headers = dict[str, "str | list[str]"]

_HEADER_LINE = b"NATS/1.0\r\n"
# RFC 7230 token characters, which is what the server accepts for a key.
_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_WHITESPACE = re.compile(r"\s")

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
#: The subject (a filter) whose last sequence ``Nats-Expected-Last-Subject-Sequence``
#: checks, instead of the published one (nats-server 2.11; nats.go
#: ``WithExpectLastSequenceForSubject``). An older server ignores it and checks the
#: published subject, so the driver checks the version first.
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
LAST_SUBJECT_SEQ_SUBJECT_FEATURE = "a last-sequence check on another subject"
LAST_SUBJECT_SEQ_SUBJECT_VERSION = (2, 11, 0)


def _check_value(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"header {key!r} value must be str or list[str], got {type(value).__name__}"
        )
    if "\r" in value or "\n" in value:
        raise InvalidArgumentError(f"header {key!r} value must not contain CR or LF")
    return value


def encode_headers(headers: Mapping[str, str | list[str]]) -> bytes:
    """Encode headers as a ``NATS/1.0`` block (ending in a blank line)."""
    parts = [_HEADER_LINE]
    for key, value in headers.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise InvalidArgumentError(
                f"invalid header name {key!r}: use letters, digits and !#$%&'*+-.^_`|~"
            )
        values = value if isinstance(value, list) else [value]
        for item in values:
            parts.append(f"{key}: {_check_value(key, item)}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


def decode_headers(block: bytes, *, strict: bool = True) -> Headers:
    """Decode a ``NATS/1.0`` header block; repeated keys become lists.

    An inline status (``NATS/1.0 404 Not Found``) is returned under ``Status``
    and ``Description``. Text is UTF-8 by convention only: undecodable bytes in
    a description or a value become U+FFFD. A status code that is not digits
    raises (``strict``) or is left out (not ``strict``, as nats-py does), and so
    are malformed header lines (see :func:`decode_header_lines`).

    Raises:
        RemoteProtocolError: the block is malformed (always when it does not
            start with ``NATS/1.0``; otherwise only when ``strict``).
    """
    if not block.startswith(b"NATS/1.0"):
        raise RemoteProtocolError("header block does not start with NATS/1.0", offset=0)
    end = block.find(b"\r\n")
    first = block if end < 0 else block[:end]
    out: Headers = {}
    status_line = first[len(b"NATS/1.0") :].strip()
    if status_line:
        code, _, desc = status_line.partition(b" ")
        if code.isdigit():  # bytes.isdigit(): ASCII digits only
            out["Status"] = code.decode("ascii")
        elif strict:
            raise RemoteProtocolError(
                f"header block status code {code[:20]!r} is not a number",
                offset=first.find(code, len(b"NATS/1.0")),
            )
        if desc:
            out["Description"] = desc.strip().decode("utf-8", "replace")
    if end >= 0:
        out.update(decode_header_lines(block[end + 2 :], offset=end + 2, strict=strict))
    return out


def _add(out: Headers, name: str, text: str) -> None:
    existing = out.get(name)
    if existing is None:
        out[name] = text
    elif isinstance(existing, list):
        existing.append(text)
    else:
        out[name] = [existing, text]


def decode_header_lines(raw: bytes, *, offset: int = 0, strict: bool = True) -> Headers:
    """Decode ``Name: value`` lines (a header block after its ``NATS/1.0`` line).

    Repeated names become lists. ``strict`` raises on a line without ``:``
    (``offset`` is where ``raw`` starts in the peer's bytes, for the message);
    otherwise such lines, non-ASCII names and names with whitespace are skipped,
    the way nats-py treats them. Values are UTF-8, undecodable bytes replaced.
    """
    out: Headers = {}
    for line in raw.split(b"\r\n"):
        if line:
            key, sep, value = line.partition(b":")
            if not sep:
                if strict:
                    raise RemoteProtocolError(f"header line without ':' {line!r}", offset=offset)
            else:
                try:
                    name = key.strip().decode("ascii")
                except UnicodeDecodeError:
                    name = ""
                if name and not _WHITESPACE.search(name):
                    _add(out, name, value.strip().decode("utf-8", "replace"))
                elif strict:
                    raise RemoteProtocolError(f"invalid header name {key!r}", offset=offset)
        offset += len(line) + 2
    return out


def publish_headers(
    headers: Mapping[str, str | list[str]] | None,
    *,
    msg_id: str | None,
    expected_stream: str | None,
    expected_last_seq: int | None,
    expected_last_subject_seq: int | None,
    expected_last_msg_id: str | None,
    expected_last_subject_seq_subject: str | None = None,
) -> dict[str, str | list[str]] | None:
    """Merge the JetStream publish expectations into the user's headers.

    ``expected_last_subject_seq_subject`` (a subject, wildcards allowed) makes
    ``expected_last_subject_seq`` the last sequence of that subject rather than of
    the published one; it needs ``expected_last_subject_seq`` (the server refuses
    it alone, err_code 10193).
    """
    if headers is not None and not isinstance(headers, Mapping):
        raise InvalidArgumentError(
            f"headers must be a mapping of str to str or list[str], got {type(headers).__name__}"
        )
    extra: dict[str, str | list[str]] = {}
    for name, header, text in (
        ("msg_id", MSG_ID, msg_id),
        ("expected_stream", EXPECTED_STREAM, expected_stream),
        ("expected_last_msg_id", EXPECTED_LAST_MSG_ID, expected_last_msg_id),
    ):
        if text is not None:
            if not isinstance(text, str) or not text:
                raise InvalidArgumentError(f"{name} must be a non-empty str, got {text!r}")
            extra[header] = text
    for name, header, number in (
        ("expected_last_seq", EXPECTED_LAST_SEQ, expected_last_seq),
        ("expected_last_subject_seq", EXPECTED_LAST_SUBJECT_SEQ, expected_last_subject_seq),
    ):
        if number is not None:
            extra[header] = str(check_int(name, number, minimum=0))
    if expected_last_subject_seq_subject is not None:
        if expected_last_subject_seq is None:
            raise InvalidArgumentError(
                "expected_last_subject_seq_subject needs expected_last_subject_seq: the "
                "sequence the last message of that subject must have"
            )
        try:
            subject = validate_filter_subject(expected_last_subject_seq_subject)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"expected_last_subject_seq_subject: {exc}") from None
        extra[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = subject
    if not extra:
        return dict(headers) if headers else None
    merged: dict[str, str | list[str]] = dict(headers) if headers else {}
    merged.update(extra)
    return merged
