"""StreamConfig / ConsumerConfig as the user writes them and as the server reads them.

Users write durations in seconds (float or ``timedelta``); the server's JSON
holds nanoseconds. ``config_to_wire`` and ``config_from_wire`` convert the
fields listed in ``DURATION_FIELDS`` at any depth (``consumer_limits`` nests
one). ``validate_priority_config`` applies ADR-42's rules client-side so a bad
config gets a clear message instead of a terse server error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._protocol._names import validate_group_name
from aioclients.jetstream._protocol._time import format_rfc3339, parse_server_time

__all__ = (
    "DURATION_FIELDS",
    "PRIORITY_POLICIES",
    "STREAM_FEATURES",
    "config_from_wire",
    "config_to_wire",
    "seconds_to_ns",
    "stream_features",
    "validate_priority_config",
)

#: Config keys holding durations (nanoseconds on the wire, seconds here).
DURATION_FIELDS = frozenset(
    {
        "max_age",
        "duplicate_window",
        "subject_delete_marker_ttl",
        "ack_wait",
        "idle_heartbeat",
        "inactive_threshold",
        "max_expires",
        "backoff",
        "priority_timeout",
    }
)
#: Config keys holding points in time (RFC 3339 on the wire, aware datetimes here).
TIME_FIELDS = frozenset({"opt_start_time", "pause_until"})

PRIORITY_POLICIES = frozenset({"none", "overflow", "pinned_client", "prioritized"})

#: StreamConfig options of nats-server 2.11+ (ADR-44): the feature each turns on
#: and the JetStream API level it needs (1: nats-server 2.11, 2: 2.12). They pass
#: through as they are (``subject_delete_marker_ttl`` is a duration, seconds
#: here); a server below the level would ignore them silently, so a stream
#: create or update that sets one is checked first.
STREAM_FEATURES: dict[str, tuple[str, int]] = {
    "allow_msg_ttl": ("per-message TTL (ADR-43)", 1),
    "subject_delete_marker_ttl": ("subject delete markers (ADR-43)", 1),
    "allow_msg_counter": ("message counters (ADR-49)", 2),
    "allow_atomic": ("atomic batch publish (ADR-50)", 2),
    "allow_msg_schedules": ("message schedules (ADR-51)", 2),
}


def seconds_to_ns(value: object, *, field: str) -> int:
    """Convert seconds (int, float or timedelta) to integer nanoseconds."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgumentError(
            f"{field} must be a number of seconds or a timedelta, got {value!r}"
        )
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise InvalidArgumentError(
            f"{field} must be a finite number of seconds >= 0, got {value!r}"
        )
    return round(seconds * 1_000_000_000)


def stream_features(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The ``(feature, API level)`` of each 2.11+ option ``config`` turns on
    (a false or zero value turns nothing on), highest level first."""
    found = [
        STREAM_FEATURES[key]
        for key, value in config.items()
        if key in STREAM_FEATURES and value not in (None, False, 0)
    ]
    return sorted(found, key=lambda item: -item[1])


#: The enumerations of StreamConfig and ConsumerConfig, unchanged since JetStream
#: began: a misspelt value is refused here, naming the option, where the server's
#: answer names neither (``invalid JSON: can not unmarshal "\"explict\""``).
ENUM_FIELDS: dict[str, tuple[str, ...]] = {
    "ack_policy": ("none", "all", "explicit"),
    "deliver_policy": (
        "all",
        "last",
        "new",
        "by_start_sequence",
        "by_start_time",
        "last_per_subject",
    ),
    "replay_policy": ("instant", "original"),
    "retention": ("limits", "interest", "workqueue"),
    "storage": ("file", "memory"),
    "discard": ("old", "new"),
}


def config_to_wire(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``config`` converting durations to nanoseconds and datetimes to RFC 3339.

    Raises:
        InvalidArgumentError: a value of an enumeration (``ack_policy`` ...) that it
            does not have.
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        if value is None:
            continue
        if key in ENUM_FIELDS and value not in ENUM_FIELDS[key]:
            allowed = ", ".join(repr(v) for v in ENUM_FIELDS[key])
            raise InvalidArgumentError(f"{key} must be one of {allowed}, got {value!r}")
        if key in DURATION_FIELDS:
            if isinstance(value, (list, tuple)):
                out[key] = [seconds_to_ns(v, field=f"{key}[{i}]") for i, v in enumerate(value)]
            else:
                out[key] = seconds_to_ns(value, field=key)
        elif key in TIME_FIELDS and isinstance(value, datetime):
            try:
                out[key] = format_rfc3339(value)
            except ValueError as exc:
                raise InvalidArgumentError(f"{key}: {exc}") from None
        elif isinstance(value, Mapping):
            out[key] = config_to_wire(value)
        else:
            out[key] = value
    return out


def config_from_wire(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy a server config: nanosecond durations to float seconds, times to datetimes."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in DURATION_FIELDS and isinstance(value, (int, float)):
            out[key] = value / 1_000_000_000
        elif key in DURATION_FIELDS and isinstance(value, list):
            out[key] = [v / 1_000_000_000 for v in value]
        elif key in TIME_FIELDS and isinstance(value, str):
            out[key] = parse_server_time(value)
        elif isinstance(value, Mapping):
            out[key] = config_from_wire(value)
        else:
            out[key] = value
    return out


def validate_priority_config(config: Mapping[str, Any]) -> None:
    """ADR-42 checks on a consumer config (user form); raise InvalidArgumentError."""
    groups = config.get("priority_groups")
    policy = config.get("priority_policy")
    if groups is None and policy in (None, "none"):
        if config.get("priority_timeout") is not None:
            raise InvalidArgumentError(
                "priority_timeout only applies with priority_policy='pinned_client'"
            )
        return
    if policy is not None and policy not in PRIORITY_POLICIES:
        raise InvalidArgumentError(
            f"unknown priority_policy {policy!r}; use one of {sorted(PRIORITY_POLICIES)}"
        )
    if groups is None or policy in (None, "none"):
        raise InvalidArgumentError(
            "priority groups need both priority_groups=[name] and a priority_policy "
            "('overflow', 'pinned_client' or 'prioritized')"
        )
    if isinstance(groups, str) or not isinstance(groups, (list, tuple)):
        raise InvalidArgumentError(
            f"priority_groups must be a list with one group name, got {groups!r}"
        )
    if len(groups) != 1:
        raise InvalidArgumentError(
            f"priority_groups must name exactly one group (ADR-42), got {len(groups)}: "
            f"{list(groups)!r}"
        )
    for group in groups:
        validate_group_name(group)
    if config.get("deliver_subject"):
        raise InvalidArgumentError(
            "priority groups work with pull consumers only; remove deliver_subject"
        )
    if config.get("priority_timeout") is not None and policy != "pinned_client":
        raise InvalidArgumentError(
            "priority_timeout only applies with priority_policy='pinned_client'"
        )
