"""JetStream Key-Value (NATS ADR-8): names, the bucket's stream, operations, entries.

A bucket ``B`` is the stream ``KV_B`` storing subjects ``$KV.B.>``; key ``k`` is
the subject ``$KV.B.k``; a key's revision is the stream sequence of its last
message. Every message of a key is one operation, told by its ``KV-Operation``
header: none (or ``PUT``) stores a value, ``DEL`` is a delete marker, ``PURGE``
a purge marker, published with ``Nats-Rollup: sub`` so the server drops the
key's earlier messages. Same layout as nats.go ``jetstream/kv.go`` and nats-py,
so buckets are shared with them.

Pure: no I/O, no clock. The asyncio side lives in ``aioclients.jetstream._kv``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, overload

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._msgopts import format_ttl
from aioclients.jetstream._protocol._wire import POSSESSIVE

__all__ = (
    "PLAIN_PUT_REPLY",
    "DEL",
    "KV_OPERATION",
    "MAX_HISTORY",
    "PURGE",
    "PUT",
    "ROLLUP",
    "KeyValueEntry",
    "PrefixedKeys",
    "all_put",
    "bucket_stream_config",
    "decode_subjects",
    "direct_entry_fields",
    "direct_put_fields",
    "direct_put_stamp",
    "key_filter_subjects",
    "key_match",
    "keys_of_subjects",
    "key_subject",
    "matches_any",
    "ns_time",
    "operation_of",
    "operation_of_header_block",
    "plain_put_match",
    "stamp_time",
    "stream_name",
    "subject_prefix",
    "validate_bucket",
    "validate_key",
    "validate_key_filter",
    "write_prefix",
)

PUT = "PUT"
DEL = "DEL"
PURGE = "PURGE"
KV_OPERATION = "KV-Operation"
ROLLUP = "Nats-Rollup"
MARKER_REASON = "Nats-Marker-Reason"
_MARKER_OPERATIONS = {"MaxAge": PURGE, "Purge": PURGE, "Remove": DEL}
#: The server keeps at most 64 messages per subject in a KV bucket (ADR-8).
MAX_HISTORY = 64
#: nats.go's duplicate window for buckets: two minutes, or the TTL if shorter.
_DUPLICATE_WINDOW = 120.0

_BUCKET = re.compile(r"[a-zA-Z0-9_-]+")
# Tokens of [-/_=a-zA-Z0-9] joined by single dots: no empty token (ADR-8). The
# quantifiers are possessive where the interpreter has them (3.11+): a key parses
# one way only, so giving nothing back changes no answer, and the matcher keeps no
# backtracking state per token (some 400 instructions a KV get).
_KEY_TOKEN = r"[-/_=a-zA-Z0-9]"
_KEY = re.compile(
    f"{_KEY_TOKEN}++(?:\\.{_KEY_TOKEN}++)*+"
    if sys.version_info >= (3, 11)
    else f"{_KEY_TOKEN}+(?:\\.{_KEY_TOKEN}+)*"
)
# A watch / keys filter may use the subject wildcards ``*`` (one token) and ``>`` (the rest).
_FILTER = re.compile(r"[-/_=.a-zA-Z0-9*>]+")


#: ``key_match(key)`` is not None for a valid key: :func:`validate_key`'s test, for a
#: hot path that takes the key's type as checked (a ``str``) and calls
#: :func:`validate_key` only to raise.
key_match = _KEY.fullmatch


def validate_bucket(bucket: object) -> str:
    """A bucket name: ``[a-zA-Z0-9_-]+``.

    Raises:
        InvalidArgumentError: anything else.
    """
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
        raise InvalidArgumentError(
            f"invalid bucket name {bucket!r}: use letters, digits, '_' and '-' only"
        )
    return bucket


def validate_key(key: object) -> str:
    """A key: ``[-/_=.a-zA-Z0-9]+``, not starting or ending with ``.`` (ADR-8).

    Raises:
        InvalidArgumentError: anything else (wildcards included).
    """
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise InvalidArgumentError(
            f"invalid key {key!r}: use letters, digits and '-/_=.', "
            "with no empty token (no leading, trailing or double '.')"
        )
    return key


def validate_key_filter(pattern: object) -> str:
    """A key filter for ``keys`` / ``watch``: a key whose tokens may be ``*`` or a final ``>``.

    Raises:
        InvalidArgumentError: not a valid key filter.
    """
    if not isinstance(pattern, str) or not _FILTER.fullmatch(pattern):
        raise InvalidArgumentError(
            f"invalid key filter {pattern!r}: a key whose tokens may be '*' or a final '>'"
        )
    tokens = pattern.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise InvalidArgumentError(f"invalid key filter {pattern!r}: empty token")
        if ("*" in token or ">" in token) and token not in ("*", ">"):
            raise InvalidArgumentError(
                f"invalid key filter {pattern!r}: a wildcard must be a whole token"
            )
        if token == ">" and i != len(tokens) - 1:
            raise InvalidArgumentError(f"invalid key filter {pattern!r}: '>' must be last")
    return pattern


def stream_name(bucket: str) -> str:
    return f"KV_{bucket}"


def subject_prefix(bucket: str) -> str:
    """``$KV.<bucket>.``: a key's subject is this plus the key."""
    return f"$KV.{bucket}."


def key_subject(bucket: str, key: str) -> str:
    return f"$KV.{bucket}.{key}"


def key_filter_subjects(bucket: str, filters: Sequence[str]) -> list[str]:
    """The subjects matching ``filters`` (all keys when there are none)."""
    if isinstance(filters, str):
        filters = [filters]
    if not filters:
        return [f"$KV.{bucket}.>"]
    return [f"$KV.{bucket}.{validate_key_filter(f)}" for f in filters]


def matches_any(filters: Sequence[str], subject: str) -> bool:
    """Whether the literal ``subject`` matches one of the subject ``filters``
    (``*`` one token, ``>`` one or more at the end)."""
    tokens = subject.split(".")
    for pattern in filters:
        wanted = pattern.split(".")
        for i, token in enumerate(wanted):
            if token == ">":
                if len(tokens) > i:
                    return True
                break
            if i >= len(tokens) or (token != "*" and token != tokens[i]):
                break
        else:
            if len(wanted) == len(tokens):
                return True
    return False


def operation_of(headers: Mapping[str, Any] | None) -> str:
    """The operation a stored message stands for: ``PUT``, ``DEL`` or ``PURGE``.

    nats-server 2.11+ places its own markers (a key's TTL or max age ran out, a
    removal) with ``Nats-Marker-Reason`` instead of ``KV-Operation``.
    """
    if not headers:
        return PUT
    value = headers.get(KV_OPERATION)
    if value is None:
        reason = headers.get(MARKER_REASON)
        if reason is None:
            return PUT
        if isinstance(reason, list):
            reason = reason[-1] if reason else ""
        return _MARKER_OPERATIONS.get(str(reason).strip(), PUT)
    if isinstance(value, list):
        value = value[-1] if value else PUT
    value = str(value).strip()
    if value == DEL:
        return DEL
    if value == PURGE:
        return PURGE
    return PUT


def operation_of_header_block(block: bytes | None) -> str:
    """:func:`operation_of` on a raw ``NATS/1.0`` header block, without decoding it all.

    A hot path of ``keys()`` and ``watch()``: most messages carry no operation header.
    """
    if not block:
        return PUT
    at = block.find(b"KV-Operation:")
    if at < 0:
        if b"Nats-Marker-Reason" in block:
            return operation_of(decode_headers(block))
        return PUT
    end = block.find(b"\r\n", at)
    value = block[at + 13 : end if end >= 0 else len(block)].strip()
    if value == b"DEL":
        return DEL
    if value == b"PURGE":
        return PURGE
    return PUT


def all_put(blocks: Iterable[bytes | None]) -> bool:
    """``True`` when :func:`operation_of_header_block` gives ``PUT`` for every one of
    ``blocks`` (none names an operation or a marker), told at once; ``False``: ask
    each."""
    joined = b"".join(filter(None, blocks))
    return b"KV-Operation" not in joined and b"Nats-Marker-Reason" not in joined


def decode_subjects(subjects: Sequence[bytes]) -> list[str] | None:
    """``[s.decode("utf-8", "replace") for s in subjects]`` in one decode; ``None``
    when that cannot be told at once (a subject holding a space): decode each."""
    texts = b" ".join(subjects).decode("utf-8", "replace").split(" ")
    return texts if len(texts) == len(subjects) else None


def keys_of_subjects(subjects: Sequence[bytes], prefix: str) -> list[str] | None:
    """``[s.decode("utf-8", "replace")[len(prefix):] for s in subjects]`` from one
    join, one decode and one split at ``" " + prefix``, when every subject starts
    with ``prefix`` and none holds a space; ``None`` otherwise (decode each).

    With no space in any subject, the joined text has one between each two and no
    other (a replacement character is no space), so the split gives one piece per
    subject exactly when each one after the first starts with ``prefix``.
    """
    count = len(subjects)
    joined = b" ".join(subjects)
    if joined.count(b" ") != count - 1:
        return None  # a subject holds a space (or there are none)
    keys = joined.decode("utf-8", "replace").split(" " + prefix)
    first = keys[0]
    if len(keys) != count or not first.startswith(prefix):
        return None
    keys[0] = first[len(prefix) :]
    return keys


class PrefixedKeys(Sequence[str]):
    """The subjects ``prefix + key`` of ``keys``, made only when read (the start's
    subjects a listing delivered, most often never looked at)."""

    __slots__ = ("_keys", "_prefix")

    def __init__(self, prefix: str, keys: Sequence[str]) -> None:
        self._prefix = prefix
        self._keys = keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return map(self._prefix.__add__, self._keys)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._prefix + key for key in self._keys[index]]
        return self._prefix + self._keys[index]


def _last_header(block: bytes, name: bytes) -> bytes | None:
    """The value of the last ``name:`` line of a header block (``name`` with the colon
    and the CRLF before it), stripped; ``None`` when there is no such line."""
    at = block.rfind(name)
    if at < 0:
        return None
    start = at + len(name)
    end = block.find(b"\r\n", start)
    return block[start : end if end >= 0 else len(block)].strip()


def direct_entry_fields(block: bytes | None) -> tuple[int, str, str] | None:
    """``(revision, Nats-Time-Stamp text, operation)`` of a Direct Get reply that
    carries a stored message, read straight from its ``NATS/1.0`` header block.

    The hot path of ``KeyValue.get``: a handful of ``rfind`` calls instead of
    decoding every header into a dict. The last line of a name wins, as in the
    decoded form (the server appends its ``Nats-*`` headers after the stored
    message's own). Returns ``None`` for anything else (a status reply, or a block
    that lacks or mangles these headers): the caller then decodes the block in
    full, which classifies it or raises the right error.
    """
    if not block or not block.startswith(b"NATS/1.0\r\n") or not block.endswith(b"\r\n"):
        return None  # no headers, or a status line ("NATS/1.0 404 ..."); every line ends in CRLF
    # Inline rather than through _last_header: this runs once per get.
    find = block.find
    at = block.rfind(b"\r\nNats-Sequence:")
    if at < 0:
        return None
    seq = block[at + 16 : find(b"\r\n", at + 16)].strip()
    at = block.rfind(b"\r\nNats-Time-Stamp:")
    if at < 0 or not seq.isdigit():
        return None
    stamp = block[at + 18 : find(b"\r\n", at + 18)].strip()
    at = block.rfind(b"\r\nNats-Subject:")
    if at < 0 or not stamp or not block[at + 15 : find(b"\r\n", at + 15)].strip():
        return None
    operation = PUT
    at = block.rfind(b"\r\nKV-Operation:")
    if at >= 0:
        value = block[at + 15 : find(b"\r\n", at + 15)].strip()
        if value == b"DEL":
            operation = DEL
        elif value == b"PURGE":
            operation = PURGE
    elif b"\r\nNats-Marker-Reason:" in block:
        reason = _last_header(block, b"\r\nNats-Marker-Reason:") or b""
        operation = _MARKER_OPERATIONS.get(reason.decode("utf-8", "replace"), PUT)
    try:
        text = stamp.decode("ascii")
    except UnicodeDecodeError:
        return None
    return int(seq), text, operation


# The lines the server appends to a stored message's headers in a Direct Get reply,
# last, as current servers write them (nats-server 2.10+: RFC 3339 time stamp with
# at least microseconds). Group 1: the sequence; 2: the stamp to the microsecond.
# A value runs to its CR (``[^\r]``, not ``[^\r\n]``: a set of one byte scans several
# times faster); a bare LF, which no server writes, stays in the value, as it does
# for direct_entry_fields, which finds lines by their CRLF.
_DIRECT_TRAILER = re.compile(
    rb"\r\nNats-Subject: \S[^\r]*\r\nNats-Sequence: (\d+)\r\n"
    rb"Nats-Time-Stamp: (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})\d{0,3}Z\r\n\r\n"
)


# A Direct Get reply of a message stored without headers of its own (a plain put,
# the usual value): the server's four lines and nothing else, as current servers
# write them. Whatever this matches, _DIRECT_TRAILER matches the same way (one
# Nats-Subject line, the same groups), and no operation or marker header is there.
# Its stamp is one that always makes a datetime (years 1000-9999, months, hours,
# minutes and seconds in range, days to the 28th: group 3, the 29th to the 31st,
# may not exist), so that reading it can wait (see :func:`direct_put_stamp`); any
# other stamp takes _DIRECT_TRAILER's reading, which reads it at once, as ever.
# Its repeats are possessive where the interpreter has them (3.11+, ``POSSESSIVE``):
# each runs up to a byte it cannot take (a CR, a dash, a Z), so giving nothing back
# changes no answer, and the matcher keeps no backtracking state for them (some 500
# instructions a KV get, with the frame's own, see reply_frame_pattern).
_PLAIN_PUT_REPLY = re.compile(
    (
        rb"NATS/1\.0\r\nNats-Stream: [^\r]+%(p)s\r\nNats-Subject: \S[^\r]*%(p)s\r\n"
        rb"Nats-Sequence: (\d+%(p)s)\r\n"
        rb"Nats-Time-Stamp: ([1-9]\d{3}%(p)s-(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8]|(29|3[01]))"
        rb"T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}%(p)s)\d{0,3}%(p)sZ\r\n\r\n"
    )
    % {b"p": POSSESSIVE}
)

#: The header block of a Direct Get reply that carries a plain put (groups: revision,
#: stamp, late day): the request layer reads such a reply whole in one match at the
#: socket's read callback (``ReplyMux(raw_frame_header=...)``), ``KeyValue.get``
#: its groups as it reads those of :data:`plain_put_match`.
PLAIN_PUT_REPLY = _PLAIN_PUT_REPLY

#: ``plain_put_match(block)``: :func:`direct_put_stamp`'s one match, for a hot path
#: that reads its groups itself (``(revision, stamp, late day)``: a stamp with no
#: late day may be left unread, else it reads with :func:`stamp_time` at once).
plain_put_match = _PLAIN_PUT_REPLY.fullmatch


def direct_put_fields(block: bytes | None) -> tuple[int, datetime] | None:
    """``(revision, created)`` of a Direct Get reply that carries a plain ``PUT``, in
    the exact form current servers write it; ``None`` for anything else.

    A cheaper :func:`direct_entry_fields` (one regular-expression match at the
    server's trailing lines, no time parser) for the usual reply: whatever it
    accepts, :func:`direct_entry_fields` reads the same way (its operation ``PUT``,
    its stamp to the same microsecond). On ``None`` take
    :func:`direct_entry_fields`, which reads every other form (operation headers,
    markers, other stamp precisions) or refuses it.

    Raises:
        ValueError: a stamp of the right form that is no time (a 30th of February).
    """
    put = direct_put_stamp(block)
    if put is None:
        return None
    seq, created = put
    if created.__class__ is bytes:
        return seq, stamp_time(created)
    return put  # type: ignore[return-value]


def direct_put_stamp(block: bytes | None) -> tuple[int, datetime | bytes] | None:
    """:func:`direct_put_fields` with the time left unread where that is sure to
    succeed: ``created`` is then the stamp's bytes, which :func:`stamp_time` turns
    into the same ``datetime``, and which a :class:`KeyValueEntry` takes as its
    ``created`` (read on first access). The hot path of ``KeyValue.get``: most
    callers never look at the time.

    Raises:
        ValueError: as :func:`direct_put_fields`.
    """
    if not block:
        return None
    m = _PLAIN_PUT_REPLY.fullmatch(block)  # the usual reply, in one match
    if m is not None:
        seq, stamp, late_day = m.groups()  # (one call for the three)
        if late_day is None:  # a day that every month has: the time reads later
            return int(seq), stamp
        return int(seq), stamp_time(stamp)
    if not block.startswith(b"NATS/1.0\r\n"):
        return None  # a status line ("NATS/1.0 404 ...")
    m = _direct_trailer(block)
    if m is None:
        return None
    return int(m[1]), stamp_time(m[2])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ns_time(ns: int) -> datetime:
    """The time of a JetStream ack subject's timestamp (nanoseconds since the epoch,
    UTC), to the microsecond."""
    # Positional (days, seconds, microseconds): a third cheaper than microseconds=
    # alone.
    return _EPOCH + timedelta(0, ns // 1_000_000_000, (ns // 1000) % 1_000_000)


def stamp_time(stamp: bytes) -> datetime:
    """The time of a stamp matched by the Direct Get readings (microseconds, UTC).

    Raises:
        ValueError: no such time.
    """
    # (an offset in the text: far cheaper than .replace(tzinfo=...) afterwards)
    return datetime.fromisoformat(stamp.decode("ascii") + "+00:00")


def _direct_trailer(block: bytes) -> re.Match[bytes] | None:
    """The match of the server's trailing lines, if the stored message's own headers
    before them hold no operation or marker header."""
    at = block.rfind(b"\r\nNats-Subject: ")
    if at < 0:
        return None
    m = _DIRECT_TRAILER.match(block, at)
    if (
        m is None
        or m.end() != len(block)
        or b"\r\nKV-Operation:" in block
        or b"\r\nNats-Marker-Reason:" in block
    ):
        return None
    return m


@dataclass(frozen=True, slots=True)
class KeyValueEntry:
    """One revision of a key.

    Attributes:
        bucket: the bucket's name.
        key: the key.
        value: the value (empty for ``DEL``/``PURGE`` markers and in ``meta_only`` watches).
        revision: the stream sequence of this revision.
        created: when the server stored it (aware ``datetime``).
        delta: how many newer messages the bucket (or watch) holds after it; 0 for ``get``.
        operation: ``"PUT"``, ``"DEL"`` or ``"PURGE"``.
    """

    bucket: str
    key: str
    value: bytes
    revision: int
    created: datetime
    delta: int
    operation: str
    # The revision's headers as stored (a raw header block or a decoded dict): its
    # trace context, for aioclients.telemetry.context_of. Not compared, not shown.
    _headers: bytes | Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


class _Created:
    """``KeyValueEntry.created``: its slot, read through. A get's entry is made with
    the server's stamp in the slot (bytes, sure to be a time: see
    :func:`direct_put_stamp`), a watch's with its ack subject's timestamp (an int
    of nanoseconds: see :func:`ns_time`); its first reading turns it into the
    ``datetime`` and keeps that in its place, so that every reading, comparison,
    ``repr``, hash and copy sees the ``datetime``."""

    __slots__ = ("_del", "_get", "_set")

    def __init__(self, slot: Any) -> None:
        self._get = slot.__get__
        self._set = slot.__set__
        self._del = slot.__delete__

    def __get__(self, entry: object, owner: type | None = None) -> Any:
        if entry is None:
            return self
        created = self._get(entry, owner)
        kind = created.__class__
        if kind is int:
            created = ns_time(created)
            self._set(entry, created)
        elif kind is bytes:
            created = stamp_time(created)
            self._set(entry, created)
        return created

    def __set__(self, entry: object, value: Any) -> None:
        self._set(entry, value)

    def __delete__(self, entry: object) -> None:
        self._del(entry)


setattr(KeyValueEntry, "created", _Created(KeyValueEntry.__dict__["created"]))  # noqa: B010


def bucket_stream_config(
    bucket: str,
    *,
    history: int,
    ttl: float | None,
    max_value_size: int | None,
    max_bytes: int | None,
    storage: str,
    replicas: int,
    description: str | None,
    limit_marker_ttl: float | None = None,
    compression: bool = False,
    metadata: Mapping[str, str] | None = None,
    republish: Mapping[str, Any] | None = None,
    placement: Mapping[str, Any] | None = None,
    mirror: str | Mapping[str, Any] | None = None,
    sources: Sequence[str | Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The stream config of a bucket, as nats.go's ``CreateKeyValue`` builds it
    (user form: durations in seconds; ``config_to_wire`` converts them).

    ``mirror`` and ``sources`` name buckets (``"b"`` or ``"KV_b"``) or are the
    server's StreamSource objects; as in nats.go, a mirror turns on
    ``mirror_direct`` and takes no subjects, and a source without
    ``subject_transforms`` gets one mapping ``$KV.<source>.>`` to this bucket.

    Raises:
        InvalidArgumentError: an out-of-range setting.
    """
    validate_bucket(bucket)
    if not isinstance(history, int) or isinstance(history, bool) or not 1 <= history <= 64:
        raise InvalidArgumentError(
            f"history must be an int from 1 to {MAX_HISTORY}, got {history!r}"
        )
    if ttl is not None and (
        not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or ttl < 0 or ttl != ttl
    ):
        raise InvalidArgumentError(f"ttl must be seconds >= 0 (or None), got {ttl!r}")
    for name, value in (("max_value_size", max_value_size), ("max_bytes", max_bytes)):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise InvalidArgumentError(f"{name} must be an int >= 1 (or None), got {value!r}")
    if storage not in ("file", "memory"):
        raise InvalidArgumentError(f"storage must be 'file' or 'memory', got {storage!r}")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 5:
        raise InvalidArgumentError(f"replicas must be an int from 1 to 5, got {replicas!r}")
    duplicate_window = _DUPLICATE_WINDOW
    if ttl and ttl < duplicate_window:
        duplicate_window = float(ttl)
    config: dict[str, Any] = {
        "subjects": [f"$KV.{bucket}.>"],
        "max_msgs_per_subject": history,
        "max_bytes": max_bytes if max_bytes is not None else -1,
        "max_age": float(ttl or 0),
        "max_msg_size": max_value_size if max_value_size is not None else -1,
        "storage": storage,
        "num_replicas": replicas,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "duplicate_window": duplicate_window,
        "max_msgs": -1,
        "max_consumers": -1,
        "allow_direct": True,
        "discard": "new",
    }
    if description is not None:
        config["description"] = description
    if limit_marker_ttl is not None:
        # ADR-48: per-key TTLs, and markers where a key's TTL or the max age ends.
        format_ttl(limit_marker_ttl, name="limit_marker_ttl")  # checks it: seconds >= 1
        if isinstance(limit_marker_ttl, str):
            raise InvalidArgumentError("limit_marker_ttl must be seconds >= 1, not 'never'")
        config["allow_msg_ttl"] = True
        config["subject_delete_marker_ttl"] = limit_marker_ttl
    if not isinstance(compression, bool):
        raise InvalidArgumentError(f"compression must be a bool, got {compression!r}")
    if compression:
        config["compression"] = "s2"
    if metadata is not None and (
        not isinstance(metadata, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise InvalidArgumentError("metadata must map str to str")
    if metadata:
        config["metadata"] = dict(metadata)
    for field_name, wanted in (("republish", republish), ("placement", placement)):
        if wanted is not None:
            if not isinstance(wanted, Mapping):
                raise InvalidArgumentError(f"{field_name} must be a mapping, got {wanted!r}")
            config[field_name] = dict(wanted)
    if mirror is not None:
        if sources:
            raise InvalidArgumentError("a bucket takes a mirror or sources, not both")
        config["mirror"] = _kv_source(mirror, "mirror")
        config["mirror_direct"] = True
        del config["subjects"]
    elif sources:
        config["sources"] = [_kv_source_for(source, bucket) for source in sources]
    return config


def write_prefix(bucket: str, config: Mapping[str, Any]) -> str:
    """The subject prefix writes to ``bucket`` go to.

    A mirror takes no writes of its own: as nats.go does, they go to the bucket it
    mirrors, through that domain's API prefix when the origin is external.
    """
    mirror = config.get("mirror")
    if not isinstance(mirror, Mapping) or not isinstance(mirror.get("name"), str):
        return subject_prefix(bucket)
    name: str = mirror["name"]
    origin = subject_prefix(name.removeprefix("KV_"))
    external = mirror.get("external")
    api = external.get("api") if isinstance(external, Mapping) else None
    if isinstance(api, str) and api:
        return f"{api}.{origin}"
    return origin


def _kv_source(source: str | Mapping[str, Any], what: str) -> dict[str, Any]:
    """A StreamSource naming the stream of a bucket (``KV_`` prefixed as needed)."""
    if isinstance(source, str):
        source = {"name": source}
    if not isinstance(source, Mapping) or not isinstance(source.get("name"), str):
        raise InvalidArgumentError(
            f"{what} must be a bucket name or a mapping with a 'name', got {source!r}"
        )
    out = dict(source)
    if not out["name"].startswith("KV_"):
        out["name"] = stream_name(out["name"])
    return out


def _kv_source_for(source: str | Mapping[str, Any], bucket: str) -> dict[str, Any]:
    """A source of ``bucket``: with transforms as given, or mapping the source
    bucket's keys into this bucket (nats.go's ``prepareKeyValueConfig``)."""
    if isinstance(source, Mapping) and source.get("subject_transforms"):
        return dict(source)  # the caller maps subjects: the name is used as is
    out = _kv_source(source, "a source")
    source_bucket = out["name"].removeprefix("KV_")
    if out.get("external") is None or source_bucket != bucket:
        out["subject_transforms"] = [
            {"src": f"{subject_prefix(source_bucket)}>", "dest": f"{subject_prefix(bucket)}>"}
        ]
    return out
