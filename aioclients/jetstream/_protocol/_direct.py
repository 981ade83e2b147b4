"""ADR-31 Direct Get: request payloads and reply classification.

A Direct Get reply is a plain NATS message. Success carries the stored message
with ``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence`` and ``Nats-Time-Stamp``
headers (and, in batch mode, ``Nats-Num-Pending`` and ``Nats-Last-Sequence``).
A batch ends with an empty ``204 EOB`` status message carrying the pending
count, the last sequence and, for ``multi_last``, ``Nats-UpTo-Sequence``.
Errors are status messages: 404 not found, 408 bad request, 413 too many
subjects; 503 means nobody answers (``allow_direct`` is off or no stream).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._protocol._names import validate_filter_subject
from aioclients.jetstream._protocol._time import format_rfc3339, parse_server_time

__all__ = (
    "DIRECT_GET_HEADERS",
    "MAX_MULTI_SUBJECTS",
    "DirectReply",
    "ReplyKind",
    "batch_request",
    "classify_reply",
    "multi_last_request",
    "multi_last_subjects",
    "single_request",
)

#: Bookkeeping headers the server adds to a Direct Get reply; not the user's.
DIRECT_GET_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    }
)
#: The server refuses multi_last requests matching more subjects than this (413).
MAX_MULTI_SUBJECTS = 1024


class ReplyKind(enum.Enum):
    MESSAGE = "message"
    END_OF_BATCH = "eob"
    NOT_FOUND = "404"
    BAD_REQUEST = "408"
    TOO_MANY_SUBJECTS = "413"
    NO_RESPONDERS = "503"
    OTHER_STATUS = "other"


@dataclass(frozen=True, slots=True)
class DirectReply:
    kind: ReplyKind
    status: str | None = None
    description: str | None = None
    subject: str | None = None
    seq: int | None = None
    time: datetime | None = None
    headers: dict[str, str | list[str]] | None = None
    num_pending: int | None = None
    last_seq: int | None = None
    up_to_seq: int | None = None


def _int_header(headers: Mapping[str, Any], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    if isinstance(value, list):
        value = value[-1]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RemoteProtocolError(f"header {name} is not an integer: {value!r}") from None


def classify_reply(headers: Mapping[str, Any] | None) -> DirectReply:
    """Classify one Direct Get reply by its headers (already decoded)."""
    if not headers:
        raise RemoteProtocolError("Direct Get reply without headers")
    status = headers.get("Status")
    # A stored message always carries Nats-Sequence and a status reply never does;
    # checking it first keeps a user header named "Status" from passing for one.
    if status and "Nats-Sequence" not in headers:
        status = str(status)
        desc = headers.get("Description")
        description = str(desc) if desc is not None else None
        common = {
            "status": status,
            "description": description,
            "num_pending": _int_header(headers, "Nats-Num-Pending"),
            "last_seq": _int_header(headers, "Nats-Last-Sequence"),
            "up_to_seq": _int_header(headers, "Nats-UpTo-Sequence"),
        }
        kind = {
            "204": ReplyKind.END_OF_BATCH,
            "404": ReplyKind.NOT_FOUND,
            "408": ReplyKind.BAD_REQUEST,
            "413": ReplyKind.TOO_MANY_SUBJECTS,
            "503": ReplyKind.NO_RESPONDERS,
        }.get(status, ReplyKind.OTHER_STATUS)
        return DirectReply(kind, **common)  # type: ignore[arg-type]
    subject = headers.get("Nats-Subject")
    seq = _int_header(headers, "Nats-Sequence")
    stamp = headers.get("Nats-Time-Stamp")
    if not subject or seq is None or not stamp:
        raise RemoteProtocolError(
            "Direct Get reply lacks Nats-Subject, Nats-Sequence or Nats-Time-Stamp"
        )
    user_headers = {str(k): v for k, v in headers.items() if str(k) not in DIRECT_GET_HEADERS}
    return DirectReply(
        ReplyKind.MESSAGE,
        subject=str(subject),
        seq=seq,
        time=parse_server_time(str(stamp)),
        headers=user_headers or None,
        num_pending=_int_header(headers, "Nats-Num-Pending"),
        last_seq=_int_header(headers, "Nats-Last-Sequence"),
        up_to_seq=_int_header(headers, "Nats-UpTo-Sequence"),
    )


def _check_time(name: str, value: object) -> str:
    if not isinstance(value, datetime):
        raise InvalidArgumentError(f"{name} must be an aware datetime, got {value!r}")
    try:
        return format_rfc3339(value)
    except ValueError as exc:
        raise InvalidArgumentError(f"{name}: {exc}") from None


def _check_seq(name: str, value: int | None) -> None:
    if value is not None:
        check_int(name, value, minimum=1)


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def single_request(
    *,
    seq: int | None,
    last_by_subj: str | None,
    next_by_subj: str | None,
    start_time: datetime | None,
) -> bytes | None:
    """The payload of a single-message Direct Get.

    Returns ``None`` for a ``last_by_subj`` lookup of a concrete subject, which is
    sent in the subject-appended form (``$JS.API.DIRECT.GET.<stream>.<subject>``,
    no payload) so that subject-scoped permissions apply. A wildcard filter
    cannot be a subject token, so it goes in the payload.
    """
    _check_seq("seq", seq)
    if last_by_subj is not None:
        if seq is not None or next_by_subj is not None or start_time is not None:
            raise InvalidArgumentError("last_by_subj cannot be combined with other selectors")
        validate_filter_subject(last_by_subj)
        tokens = last_by_subj.split(".")
        if "*" in tokens or ">" in tokens:
            return _encode({"last_by_subj": last_by_subj})
        return None
    if next_by_subj is not None:
        validate_filter_subject(next_by_subj)
    payload: dict[str, Any] = {}
    if seq is not None:
        payload["seq"] = seq
    if next_by_subj is not None:
        payload["next_by_subj"] = next_by_subj
    if start_time is not None:
        if seq is not None:
            raise InvalidArgumentError("start_time cannot be combined with seq")
        payload["start_time"] = _check_time("start_time", start_time)
    if not payload:
        raise InvalidArgumentError(
            "direct_get needs one of seq, last_by_subj, next_by_subj or start_time"
        )
    return _encode(payload)


def batch_request(
    *,
    batch: int,
    seq: int | None,
    start_time: datetime | None,
    next_by_subj: str | None,
    max_bytes: int | None,
) -> bytes:
    """The payload of a batched Direct Get (server 2.11+)."""
    check_int("batch", batch, minimum=1)
    _check_seq("seq", seq)
    _check_seq("max_bytes", max_bytes)
    if next_by_subj is not None:
        validate_filter_subject(next_by_subj)
    payload: dict[str, Any] = {"batch": batch}
    if start_time is not None:
        if seq is not None:
            raise InvalidArgumentError("start_time cannot be combined with seq")
        payload["start_time"] = _check_time("start_time", start_time)
    else:
        payload["seq"] = seq if seq is not None else 1
    if next_by_subj is not None:
        payload["next_by_subj"] = next_by_subj
    if max_bytes is not None:
        payload["max_bytes"] = max_bytes
    return _encode(payload)


def multi_last_subjects(subjects: object) -> list[str]:
    """``multi_last``'s subjects as a list: one subject, or 1 to 1024 of them."""
    if isinstance(subjects, str):
        subjects = [subjects]
    elif not isinstance(subjects, (list, tuple)):
        raise InvalidArgumentError(
            f"subjects must be a subject or a list of subjects, got {subjects!r}"
        )
    if not subjects or any(not isinstance(s, str) or not s for s in subjects):
        raise InvalidArgumentError("subjects must be a non-empty list of non-empty subjects")
    if len(subjects) > MAX_MULTI_SUBJECTS:
        raise InvalidArgumentError(
            f"multi_last takes at most {MAX_MULTI_SUBJECTS} subjects, got {len(subjects)}"
        )
    return list(subjects)


def multi_last_request(
    subjects: Sequence[str],
    *,
    up_to_seq: int | None,
    up_to_time: datetime | None,
    batch: int | None,
    seq: int | None = None,
) -> bytes:
    """The payload of a ``multi_last`` Direct Get page.

    The first page may bound the point in time by ``up_to_seq`` or ``up_to_time``;
    later pages pass the ``Nats-UpTo-Sequence`` of the first page as ``up_to_seq``
    and start after the last sequence received (``seq``).
    """
    subjects = multi_last_subjects(subjects)
    _check_seq("up_to_seq", up_to_seq)
    _check_seq("seq", seq)
    if up_to_seq is not None and up_to_time is not None:
        raise InvalidArgumentError("give up_to_seq or up_to_time, not both")
    _check_seq("batch", batch)
    payload: dict[str, Any] = {"multi_last": subjects}
    if up_to_seq is not None:
        payload["up_to_seq"] = up_to_seq
    if up_to_time is not None:
        payload["up_to_time"] = _check_time("up_to_time", up_to_time)
    if batch is not None:
        payload["batch"] = batch
    if seq is not None:
        payload["seq"] = seq
    return _encode(payload)
