"""Argument checks of the Liftbridge client: pure functions, one place for each rule.

Owns every rule about what a caller may pass (names, NATS subjects, partitions,
headers, offsets, durations, the CreateStream options, the subscribe start and
stop positions) and the error that says what to fix (``InvalidArgumentError``).
No I/O, no clock (``build_subscribe_request`` takes ``now_ns``), no asyncio or
grpc: the client, the subscription and the group consumer call these before
anything reaches the broker layer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone

from aioclients._errors import InvalidArgumentError
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._protocol._types import AckPolicy, StartPosition, StopPosition

__all__ = (
    "INT32_MAX",
    "INT64_MAX",
    "STREAM_OPTIONS",
    "build_subscribe_request",
    "check_ack_policy",
    "check_bytes",
    "check_headers",
    "check_name",
    "check_offset",
    "check_partition",
    "check_partitions",
    "check_seconds",
    "check_subject",
    "to_nanoseconds",
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# CreateStream options: keyword -> (request field, kind). Durations are float
# seconds here and milliseconds on the wire (as the Go client sends them).
STREAM_OPTIONS: dict[str, tuple[str, str]] = {
    "retention_max_bytes": ("retentionMaxBytes", "int64"),
    "retention_max_messages": ("retentionMaxMessages", "int64"),
    "retention_max_age": ("retentionMaxAge", "duration"),
    "cleaner_interval": ("cleanerInterval", "duration"),
    "segment_max_bytes": ("segmentMaxBytes", "int64"),
    "segment_max_age": ("segmentMaxAge", "duration"),
    "compact_max_goroutines": ("compactMaxGoroutines", "int32"),
    "compact_enabled": ("compactEnabled", "bool"),
    "auto_pause_time": ("autoPauseTime", "duration"),
    "auto_pause_disable_if_subscribers": ("autoPauseDisableIfSubscribers", "bool"),
    "min_isr": ("minIsr", "int32"),
    "optimistic_concurrency_control": ("optimisticConcurrencyControl", "bool"),
    "encryption": ("encryption", "bool"),
}


def check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty str, got {value!r}")
    return value


def check_subject(what: str, value: object) -> str:
    subject = check_name(what, value)
    if any(c in subject for c in " \t\r\n") or any(not t for t in subject.split(".")):
        raise InvalidArgumentError(
            f"{what} {subject!r} is not a valid NATS subject (dot-separated, non-empty tokens, "
            "no whitespace)"
        )
    return subject


def check_partition(value: object, what: str = "partition") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT32_MAX:
        raise InvalidArgumentError(
            f"{what} must be an int between 0 and {INT32_MAX}, got {value!r}"
        )
    return value


def check_headers(headers: Mapping[str, bytes] | None) -> dict[str, bytes]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidArgumentError(
            f"headers must be a dict[str, bytes], got {type(headers).__name__}"
        )
    out = {}
    for k, v in headers.items():
        if not isinstance(k, str) or not isinstance(v, (bytes, bytearray)):
            raise InvalidArgumentError(
                f"headers must map str to bytes, got {k!r}: {type(v).__name__}"
            )
        out[k] = bytes(v)
    return out


def check_bytes(what: str, value: object, *, optional: bool = False) -> bytes:
    if value is None and optional:
        return b""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"{what} must be bytes, got {type(value).__name__}")
    return bytes(value)


def check_ack_policy(value: object) -> AckPolicy:
    try:
        return AckPolicy(value)  # type: ignore[arg-type]
    except ValueError:
        raise InvalidArgumentError(f"ack_policy must be an AckPolicy, got {value!r}") from None


def check_seconds(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(f"{what} must be a number of seconds > 0, got {value!r}")
    return float(value)


def check_partitions(partitions: Sequence[int] | None) -> list[int]:
    """A list of partitions (None: an empty list, which means "all")."""
    if partitions is None:
        return []
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Sequence):
        raise InvalidArgumentError(f"partitions must be a list of ints, got {partitions!r}")
    return [check_partition(p, "each partition") for p in partitions]


def to_nanoseconds(name: str, value: object) -> int:
    """An aware ``datetime`` or integer nanoseconds since the epoch, as int ns."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgumentError(
                f"{name} must be a timezone-aware datetime (e.g. datetime.now(timezone.utc))"
            )
        # Exact integer arithmetic: no float rounding of the microseconds.
        ns = (value - _EPOCH) // timedelta(microseconds=1) * 1000
        if ns < 0:
            raise InvalidArgumentError(f"{name} must not be before 1970, got {value!r}")
        return int(ns)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= INT64_MAX:
            raise InvalidArgumentError(f"{name} must be >= 0 nanoseconds, got {value!r}")
        return value
    raise InvalidArgumentError(
        f"{name} must be an aware datetime or int nanoseconds, got {type(value).__name__}"
    )


def check_offset(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT64_MAX:
        raise InvalidArgumentError(f"{name} must be an int offset >= 0, got {value!r}")
    return value


def build_subscribe_request(
    stream: str,
    *,
    partition: int,
    start_at: StartPosition,
    start_offset: int | None,
    start_time: object,
    start_time_delta: object,
    stop_at: StopPosition | None,
    stop_offset: int | None,
    stop_time: object,
    read_isr_replica: bool,
    resume: bool,
    now_ns: int,
) -> pb.SubscribeRequest:
    """Validate the subscribe arguments and build the request (raises InvalidArgumentError)."""
    if not isinstance(stream, str) or not stream:
        raise InvalidArgumentError(f"stream must be a non-empty str, got {stream!r}")
    if (
        not isinstance(partition, int)
        or isinstance(partition, bool)
        or not 0 <= partition <= INT32_MAX
    ):
        raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
    try:
        start = StartPosition(start_at)
    except ValueError:
        raise InvalidArgumentError(f"start_at must be a StartPosition, got {start_at!r}") from None
    req = pb.SubscribeRequest(
        stream=stream,
        partition=partition,
        readISRReplica=bool(read_isr_replica),
        resume=bool(resume),
    )
    # The most specific argument picks the start position (an offset, a time,
    # a delta); start_at alone names the others.
    given = [
        n
        for n, v in (
            ("start_offset", start_offset),
            ("start_time", start_time),
            ("start_time_delta", start_time_delta),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"give at most one of start_offset, start_time, start_time_delta; got {given}"
        )
    if start_offset is not None:
        if start not in (StartPosition.OFFSET, StartPosition.NEW_ONLY):
            raise InvalidArgumentError(f"start_offset goes with start_at=OFFSET, not {start.name}")
        req.startPosition = pb.OFFSET
        req.startOffset = check_offset("start_offset", start_offset)
    elif start_time is not None or start_time_delta is not None:
        if start not in (StartPosition.TIMESTAMP, StartPosition.NEW_ONLY):
            raise InvalidArgumentError(f"start_time goes with start_at=TIMESTAMP, not {start.name}")
        req.startPosition = pb.TIMESTAMP
        if start_time is not None:
            req.startTimestamp = to_nanoseconds("start_time", start_time)
        else:
            if isinstance(start_time_delta, timedelta):
                delta_ns = start_time_delta // timedelta(microseconds=1) * 1000
            elif isinstance(start_time_delta, (int, float)) and not isinstance(
                start_time_delta, bool
            ):
                delta_ns = int(start_time_delta * 1e9)
            else:
                raise InvalidArgumentError(
                    "start_time_delta must be a timedelta or float seconds, "
                    f"got {start_time_delta!r}"
                )
            if delta_ns < 0:
                raise InvalidArgumentError(
                    f"start_time_delta must be >= 0, got {start_time_delta!r}"
                )
            req.startTimestamp = max(0, now_ns - delta_ns)
    else:
        if start is StartPosition.OFFSET:
            raise InvalidArgumentError("start_at=OFFSET needs start_offset")
        if start is StartPosition.TIMESTAMP:
            raise InvalidArgumentError("start_at=TIMESTAMP needs start_time or start_time_delta")
        req.startPosition = int(start)  # type: ignore[assignment]

    stop: StopPosition | None = None
    if stop_at is not None:
        try:
            stop = StopPosition(stop_at)
        except ValueError:
            raise InvalidArgumentError(f"stop_at must be a StopPosition, got {stop_at!r}") from None
    if stop_offset is not None and stop_time is not None:
        raise InvalidArgumentError("give at most one of stop_offset and stop_time")
    if stop_offset is not None:
        if stop not in (None, StopPosition.OFFSET):
            raise InvalidArgumentError(f"stop_offset goes with stop_at=OFFSET, not {stop.name}")
        stop = StopPosition.OFFSET
        req.stopOffset = check_offset("stop_offset", stop_offset)
    elif stop_time is not None:
        if stop not in (None, StopPosition.TIMESTAMP):
            raise InvalidArgumentError(f"stop_time goes with stop_at=TIMESTAMP, not {stop.name}")
        stop = StopPosition.TIMESTAMP
        req.stopTimestamp = to_nanoseconds("stop_time", stop_time)
    elif stop is StopPosition.OFFSET:
        raise InvalidArgumentError("stop_at=OFFSET needs stop_offset")
    elif stop is StopPosition.TIMESTAMP:
        raise InvalidArgumentError("stop_at=TIMESTAMP needs stop_time")
    if stop is not None:
        req.stopPosition = int(stop)  # type: ignore[assignment]
    return req
