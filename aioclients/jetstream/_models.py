"""Typed views of the server's JSON answers.

Each info class keeps the well-known fields as attributes (snake_case, as the
server names them) and the whole answer in ``raw``. Configs are
:class:`JsonObject` (a dict with attribute access) with durations in seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from aioclients._errors import RemoteProtocolError
from aioclients.jetstream._protocol._config import config_from_wire
from aioclients.jetstream._protocol._time import parse_server_time

__all__ = (
    "AccountInfo",
    "ConsumerInfo",
    "ConsumerPause",
    "JsonObject",
    "PubAck",
    "SequenceInfo",
    "StoredMessage",
    "StreamInfo",
    "StreamState",
)


class JsonObject(dict[str, Any]):
    """A JSON object whose keys also read as attributes (``cfg.max_age``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @classmethod
    def wrap(cls, value: Mapping[str, Any] | None) -> JsonObject:
        out = cls()
        for key, item in (value or {}).items():
            out[key] = cls.wrap(item) if isinstance(item, Mapping) else item
        return out


_Info = TypeVar("_Info")


def _answer_shape(
    parse: Callable[[type[_Info], Mapping[str, Any]], _Info],
) -> Callable[[type[_Info], Mapping[str, Any]], _Info]:
    """A ``from_json`` that raises RemoteProtocolError for an answer of the wrong shape
    (``{"config": 5}``), not the AttributeError or TypeError of reading it."""

    @functools.wraps(parse)
    def checked(cls: type[_Info], data: Mapping[str, Any]) -> _Info:
        try:
            return parse(cls, data)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise RemoteProtocolError(
                f"the server's answer is no {cls.__name__} "
                f"({type(exc).__name__}: {exc}): {str(data)[:200]}"
            ) from None

    return checked


def _time(value: Any) -> datetime | None:
    if not value or not isinstance(value, str) or value.startswith("0001-01-01"):
        return None
    return parse_server_time(value)


@dataclass(frozen=True, slots=True)
class StreamState:
    """What a stream holds: message and byte counts, first and last sequence and time."""

    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    first_ts: datetime | None
    last_ts: datetime | None
    consumer_count: int
    num_subjects: int
    num_deleted: int
    deleted: list[int] | None
    subjects: dict[str, int] | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamState:
        return cls(
            messages=data.get("messages", 0),
            bytes=data.get("bytes", 0),
            first_seq=data.get("first_seq", 0),
            last_seq=data.get("last_seq", 0),
            first_ts=_time(data.get("first_ts")),
            last_ts=_time(data.get("last_ts")),
            consumer_count=data.get("consumer_count", 0),
            num_subjects=data.get("num_subjects", 0),
            num_deleted=data.get("num_deleted", 0),
            deleted=data.get("deleted"),
            subjects=data.get("subjects"),
        )


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """``StreamInfo`` as the server reports it (config durations in seconds)."""

    config: JsonObject
    state: StreamState
    created: datetime | None
    cluster: JsonObject | None
    mirror: JsonObject | None
    sources: list[JsonObject] | None
    raw: dict[str, Any] = field(repr=False)
    #: when the server made this answer (``ts``; nats.go ``TimeStamp``)
    ts: datetime | None = None

    @property
    def name(self) -> str:
        name: str = self.config["name"]
        return name

    @classmethod
    @_answer_shape
    def from_json(cls, data: Mapping[str, Any]) -> StreamInfo:
        return cls(
            config=JsonObject.wrap(config_from_wire(data.get("config") or {})),
            state=StreamState.from_json(data.get("state") or {}),
            created=_time(data.get("created")),
            cluster=JsonObject.wrap(data["cluster"]) if data.get("cluster") else None,
            mirror=JsonObject.wrap(data["mirror"]) if data.get("mirror") else None,
            sources=[JsonObject.wrap(s) for s in data["sources"]] if data.get("sources") else None,
            raw=dict(data),
            ts=_time(data.get("ts")),
        )


@dataclass(frozen=True, slots=True)
class SequenceInfo:
    """A consumer's position: the consumer and stream sequence, and when it last moved."""

    consumer_seq: int
    stream_seq: int
    last_active: datetime | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> SequenceInfo:
        data = data or {}
        return cls(
            consumer_seq=data.get("consumer_seq", 0),
            stream_seq=data.get("stream_seq", 0),
            last_active=_time(data.get("last_active")),
        )


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """``ConsumerInfo`` as the server reports it (config durations in seconds)."""

    stream_name: str
    name: str
    created: datetime | None
    config: JsonObject
    delivered: SequenceInfo
    ack_floor: SequenceInfo
    num_ack_pending: int
    num_redelivered: int
    num_waiting: int
    num_pending: int
    paused: bool
    priority_groups: list[JsonObject] | None
    cluster: JsonObject | None
    raw: dict[str, Any] = field(repr=False)
    #: seconds left of a pause (ADR-42 era, nats-server 2.11+); ``None`` when not paused
    pause_remaining: float | None = None
    #: a push consumer has a subscriber on its deliver subject
    push_bound: bool = False
    #: when the server made this answer (``ts``; nats.go ``TimeStamp``)
    ts: datetime | None = None

    @classmethod
    @_answer_shape
    def from_json(cls, data: Mapping[str, Any]) -> ConsumerInfo:
        groups = data.get("priority_groups")
        return cls(
            stream_name=data.get("stream_name", ""),
            name=data.get("name", ""),
            created=_time(data.get("created")),
            config=JsonObject.wrap(config_from_wire(data.get("config") or {})),
            delivered=SequenceInfo.from_json(data.get("delivered")),
            ack_floor=SequenceInfo.from_json(data.get("ack_floor")),
            num_ack_pending=data.get("num_ack_pending", 0),
            num_redelivered=data.get("num_redelivered", 0),
            num_waiting=data.get("num_waiting", 0),
            num_pending=data.get("num_pending", 0),
            paused=bool(data.get("paused", False)),
            priority_groups=[JsonObject.wrap(g) for g in groups] if groups else None,
            cluster=JsonObject.wrap(data["cluster"]) if data.get("cluster") else None,
            raw=dict(data),
            pause_remaining=_seconds(data.get("pause_remaining")),
            push_bound=bool(data.get("push_bound", False)),
            ts=_time(data.get("ts")),
        )


@dataclass(frozen=True, slots=True)
class AccountInfo:
    """Account usage and limits (``$JS.API.INFO``)."""

    memory: int
    storage: int
    streams: int
    consumers: int
    limits: JsonObject
    api: JsonObject
    domain: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    @_answer_shape
    def from_json(cls, data: Mapping[str, Any]) -> AccountInfo:
        return cls(
            memory=data.get("memory", 0),
            storage=data.get("storage", 0),
            streams=data.get("streams", 0),
            consumers=data.get("consumers", 0),
            limits=JsonObject.wrap(data.get("limits")),
            api=JsonObject.wrap(data.get("api")),
            domain=data.get("domain") or None,
            raw=dict(data),
        )


@dataclass(frozen=True, slots=True)
class PubAck:
    """The server's acknowledgement of a published message."""

    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None
    #: a counter's new total (ADR-49), as the server wrote it; ``None`` otherwise
    value: str | None = None


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message read from a stream (``get_msg`` / Direct Get).

    ``headers`` are the user's headers (the server's Direct Get bookkeeping
    headers removed); ``num_pending`` is set on batch reads: how many matching
    messages remained after this one.
    """

    subject: str
    seq: int
    data: bytes
    headers: dict[str, str | list[str]] | None
    time: datetime
    num_pending: int | None = None


def _seconds(value: Any) -> float | None:
    """Nanoseconds from the server's JSON as seconds (``None`` when absent)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value / 1_000_000_000
    return None


@dataclass(frozen=True, slots=True)
class ConsumerPause:
    """The answer to a pause or resume (``$JS.API.CONSUMER.PAUSE``, nats-server 2.11+).

    ``paused`` is false after a resume or a pause whose time has passed;
    ``pause_until`` is the end of the pause (``None`` when not paused);
    ``pause_remaining`` the seconds left of it (``None`` when not paused).
    """

    paused: bool
    pause_until: datetime | None
    pause_remaining: float | None

    @classmethod
    @_answer_shape
    def from_json(cls, data: Mapping[str, Any]) -> ConsumerPause:
        paused = bool(data.get("paused", False))
        return cls(
            paused=paused,
            pause_until=_time(data.get("pause_until")) if paused else None,
            pause_remaining=_seconds(data.get("pause_remaining")) if paused else None,
        )
