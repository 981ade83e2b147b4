"""The ``$JS.API`` request layer: what every JetStream handle talks through.

One :class:`JetStreamApi` per JetStream context owns

- the subjects: the API prefix (``$JS.API``, ``$JS.<domain>.API`` or an
  imported prefix, ADR-19) and the request subjects under it;
- request/response with deadlines: JSON in, JSON out, over one reply
  subscription (:class:`~aioclients.jetstream._publisher.ReplyMux`), and the
  publish acks (:class:`~aioclients.jetstream._publisher.AckMux`);
- error mapping: an API error answer becomes the typed error of its
  ``err_code`` (``_errors.api_error``), "no responders" becomes
  ``JetStreamNotEnabledError``, and a Direct Get status reply becomes
  ``MessageNotFoundError`` and friends (:func:`direct_get_error`);
- what the server supports (ADR-44): its version (the connection's INFO) and its
  API level (``$JS.API.INFO``), so that a feature that needs more raises
  ``ServerTooOldError`` naming the feature (:meth:`JetStreamApi.require`), and
  requests that need a level say so in ``Nats-Required-Api-Level``;
- the context's lifetime: closing it, the open reply inboxes, and the running
  fetch/consume calls that hear of disconnects, reconnects and the close.

The management calls (streams, consumers) live here too, returning the
server's answers as models; the handles (``Stream``, ``Consumer``,
``KeyValue``, ``OrderedConsumer``) wrap them and take this layer, never the
``JetStream`` facade that creates them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError, LocalProtocolError
from aioclients.jetstream._errors import (
    ConsumerNotFoundError,
    DirectGetUnavailableError,
    JetStreamClosedError,
    JetStreamError,
    JetStreamNotEnabledError,
    MessageNotFoundError,
    ServerTooOldError,
    StreamNameInUseError,
    StreamNotFoundError,
    TooManySubjectsError,
)
from aioclients.jetstream._models import AccountInfo, ConsumerInfo, PubAck, StreamInfo
from aioclients.jetstream._protocol._config import (
    config_from_wire,
    config_to_wire,
    stream_features,
    validate_priority_config,
)
from aioclients.jetstream._protocol._direct import DirectReply, ReplyKind
from aioclients.jetstream._protocol._kv import PLAIN_PUT_REPLY
from aioclients.jetstream._protocol._level import (
    REQUIRED_LEVEL_HEADER,
    Version,
    api_level_of,
    parse_version,
    shortfall,
)
from aioclients.jetstream._protocol._msgopts import (
    COUNTER_FEATURE,
    COUNTER_VERSION,
    INCR_HEADER,
    TTL_FEATURE,
    TTL_HEADER,
    TTL_VERSION,
    format_increment,
    format_ttl,
    parse_counter_value,
)
from aioclients.jetstream._protocol._names import (
    validate_consumer_name,
    validate_filter_subject,
    validate_group_name,
    validate_stream_name,
)
from aioclients.jetstream._protocol._snapshot import (
    CountedStartSubjects,
    subjects_object,
    subjects_of_object,
)
from aioclients.jetstream._publisher import (
    PUBLISH_RETRY_ATTEMPTS,
    PUBLISH_RETRY_WAIT,
    AckMux,
    ReplyMux,
    json_answer,
)
from aioclients.jetstream._transport import NatsTransport, ReplyInbox, close_connection

__all__ = (
    "DEFAULT_MAX_PENDING",
    "ConnectionListener",
    "JetStreamApi",
    "api_prefix_for",
    "check_timeout",
    "direct_get_error",
    "direct_get_unavailable",
)

log = logging.getLogger("aioclients.jetstream")

#: Default bound on outstanding ``publish_async`` acks.
DEFAULT_MAX_PENDING = 4000

#: Longest wait for a connection's queued bytes to be written when closing.
_CLOSE_BOUND = 10.0


class ConnectionListener(Protocol):
    """What a running fetch/consume needs to hear from the request layer."""

    def connection_lost(self) -> None: ...
    def connection_restored(self) -> None: ...
    def context_closed(self) -> None: ...


class JetStreamApi:
    """The ``$JS.API`` request layer over one nats-py connection.

    Args:
        nc: a connected ``nats.aio.client.Client``.
        domain: JetStream domain; the API prefix becomes ``$JS.<domain>.API``.
        api_prefix: API subject prefix (for imports across accounts).
        timeout: default timeout of API requests and publish acks, seconds.
        max_pending: bound on outstanding publish acks.

    Raises:
        InvalidArgumentError: a bad domain, prefix, timeout or ``max_pending``.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        domain: str | None = None,
        api_prefix: str = "$JS.API",
        timeout: float = 5.0,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        #: ``$JS.API``, ``$JS.<domain>.API`` or the imported prefix
        self.prefix = api_prefix_for(domain, api_prefix)
        check_timeout(timeout)
        self.nc = nc
        self.transport = NatsTransport(nc)
        self.domain = domain
        self.timeout = timeout
        #: outstanding publish acks (``publish_async``'s window)
        self.acks = AckMux(
            self.transport, max_pending=check_int("max_pending", max_pending, minimum=1)
        )
        #: outstanding requests (API calls, Direct Get, ``ack_sync``)
        #: (a Direct Get reply of a plain put is read whole, in one match)
        self.requests: ReplyMux[NatsMsg] = ReplyMux(
            self.transport, raw_frame_header=PLAIN_PUT_REPLY
        )
        #: the context opened the connection (``connect()``) and closes it too
        self.owns_connection = False
        # Open Direct Get reply inboxes, woken by close().
        self._inboxes: weakref.WeakSet[ReplyInbox] = weakref.WeakSet()
        # Running fetch/consume calls, told about disconnects, reconnects and close().
        self._listeners: set[ConnectionListener] = set()
        #: close() has begun: nothing new may be sent
        self.closing = False
        # The loop the connection runs on (bound at the first check when made outside one).
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        # ((server_id, version), API level) of the server last asked
        self._level: tuple[tuple[str, str], int] | None = None
        # (feature, version) checks passed, and the server they passed on
        self._version_ok: set[tuple[str, Version]] = set()
        self._version_ok_on: tuple[str, str] | None = None
        # Disconnects and reconnects go to the running consumers; a connection that
        # closes for good answers nothing any more: what waits for it fails at once.
        self.transport.add_listener(self)

    # -- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.closing or self.nc.is_closed

    def check_open(self) -> None:
        """Raise ``JetStreamClosedError`` if the context or its connection is closed."""
        if self.closing:
            raise JetStreamClosedError("this JetStream context is closed")
        self.transport.check_open()
        self.check_loop()

    def check_loop(self) -> None:
        """Raise ``LocalProtocolError`` when called on another loop than the connection's:
        its reads run there, so a request from here would only time out."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._loop is not None:
                raise LocalProtocolError(
                    "this JetStream context connected on another event loop; connect and "
                    "use it on one loop (e.g. inside the coroutine that asyncio.run runs)"
                )
            self._loop = loop

    def check_not_closed(self) -> None:
        """Raise ``JetStreamClosedError`` if the context is closed (not its connection:
        publishes may wait in nats-py's reconnect buffer)."""
        if self.closing:
            raise JetStreamClosedError("this JetStream context is closed")

    def add_listener(self, listener: ConnectionListener) -> None:
        """Register a running fetch/consume for connection notifications."""
        self.transport.install_listener_callbacks()  # (a connect() after the context)
        self._listeners.add(listener)

    def remove_listener(self, listener: ConnectionListener) -> None:
        self._listeners.discard(listener)

    def connection_lost(self) -> None:
        """The connection dropped (nats-py reconnects): tell the running consumers."""
        for listener in list(self._listeners):
            listener.connection_lost()

    def connection_restored(self) -> None:
        for listener in list(self._listeners):
            listener.connection_restored()

    def connection_closed(self) -> None:
        """The connection closed for good, on its own or by its owner."""
        if self.closing:
            return  # close() fails them itself
        for inbox in list(self._inboxes):
            inbox.close_now()
        for listener in list(self._listeners):
            listener.context_closed()
        self.requests.connection_closed()
        self.acks.connection_closed()

    async def open_inbox(self) -> ReplyInbox:
        """A private inbox for a multi-reply request, woken (to raise) by :meth:`close`."""
        self.check_open()
        inbox = ReplyInbox(self.transport)
        self._inboxes.add(inbox)
        await inbox.open()
        return inbox

    async def close(self) -> None:
        """Fail what is outstanding; close the connection if we opened it. Idempotent.

        What is still queued gets ``timeout`` seconds (at most 10) to be written,
        after which the socket is aborted, so that closing never hangs on a
        server that does not read.
        """
        if self.closing:
            return
        self.closing = True
        for inbox in list(self._inboxes):
            inbox.close_now()
        for listener in list(self._listeners):
            listener.context_closed()
        await self.requests.close()
        await self.acks.close()
        if self.owns_connection and not self.nc.is_closed:
            # Bounded: a server that stops reading would hold nats-py's close forever.
            await close_connection(self.nc, min(self.timeout, _CLOSE_BOUND))

    # -- requests ----------------------------------------------------------------------------

    def subject(self, name: str) -> str:
        """The subject of API request ``name``: ``STREAM.INFO.x`` -> ``$JS.API.STREAM.INFO.x``."""
        return f"{self.prefix}.{name}"

    async def request(
        self,
        subject: str,
        payload: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        level: int | None = None,
        feature: str | None = None,
    ) -> dict[str, Any]:
        """Send one ``$JS.API`` request; return the JSON answer or raise its error.

        Args:
            subject: the request's subject under the API prefix (``STREAM.INFO.x``).
            payload: the JSON body (``None``: empty).
            timeout: seconds (default: the context's).
            level: the API level the request needs (ADR-44), sent as
                ``Nats-Required-Api-Level``.
            feature: what the caller is doing, for the error of a server whose
                level is too low.

        Raises:
            JetStreamError: the server's error answer, as its typed subclass.
            ServerTooOldError: ``level`` is more than the server's.
            JetStreamNotEnabledError: nobody answers the API subject.
            APITimeoutError: no answer in time.
        """
        full = f"{self.prefix}.{subject}"
        data = await self._answer(full, payload, timeout, level)
        try:
            return json_answer(data, full)
        except ServerTooOldError as exc:
            if level is None:
                raise
            raise ServerTooOldError(
                f"{feature or full} needs JetStream API level {level} or higher; "
                f"the server refused it ({exc.description})",
                code=exc.code,
                err_code=exc.err_code,
                hint="upgrade nats-server",
            ) from None

    async def _answer(
        self,
        full: str,
        payload: Mapping[str, Any] | None,
        timeout: float | None,
        level: int | None = None,
    ) -> bytes:
        """The body of the answer to a request on ``full`` (not decoded)."""
        self.check_open()
        body = json.dumps(payload, separators=(",", ":")).encode() if payload is not None else b""
        headers = None if level is None else {REQUIRED_LEVEL_HEADER: str(level)}
        msg = await self.requests.request(full, body, timeout or self.timeout, full, headers)
        if msg.headers and msg.headers.get("Status") == "503":
            raise JetStreamNotEnabledError(
                f"nobody answers {full}",
                code=503,
                hint="enable JetStream on the server (nats-server -js) or check domain/api_prefix",
            )
        return msg.data

    async def paged(
        self, subject: str, key: str, filter_subject: str | None = None
    ) -> AsyncIterator[Any]:
        """Every item of a paged listing (``STREAM.LIST``, ``CONSUMER.NAMES.x``, ...)."""
        offset = 0
        while True:
            payload: dict[str, Any] = {"offset": offset}
            if filter_subject is not None:
                payload["subject"] = validate_filter_subject(filter_subject)
            data = await self.request(subject, payload)
            items = data.get(key) or []
            for item in items:
                yield item
            offset += len(items)
            if not items or offset >= data.get("total", 0):
                return

    # -- what the server supports (ADR-44) ---------------------------------------------------

    def server_version(self) -> Version | None:
        """The connected server's version (from its INFO), or ``None`` if unknown."""
        return parse_version(self.transport.server_identity()[1])

    async def api_level(self) -> int:
        """The connected server's JetStream API level (``$JS.API.INFO``'s
        ``api.level``; 0 for servers before 2.11, which report none).

        Asked once per server: a reconnect to another server asks again.
        """
        identity = self.transport.server_identity()
        cached = self._level
        if cached is not None and cached[0] == identity:
            return cached[1]
        level = api_level_of(await self.request("INFO"))
        self._level = (identity, level)
        return level

    async def require(
        self, feature: str, *, level: int | None = None, version: Version | None = None
    ) -> None:
        """Check that the server can serve ``feature`` before anything is sent.

        Args:
            feature: what the caller wants, named in the error (``"per-message TTL"``).
            level: the JetStream API level it needs (asks ``$JS.API.INFO`` once).
            version: the nats-server version it needs, ``(major, minor, patch)``
                (for plain publishes, on which the server ignores the level header).

        Raises:
            ServerTooOldError: the server is older than that.
        """
        self.check_open()
        have_version = self.server_version() if version is not None else None
        have_level = await self.api_level() if level is not None else None
        why = shortfall(
            feature, level=level, have_level=have_level, version=version, have_version=have_version
        )
        if why is not None:
            raise ServerTooOldError(why, hint="upgrade nats-server")

    async def require_version(self, feature: str, version: Version) -> None:
        """:meth:`require` for a plain publish (``version`` only), remembered for the
        server connected now, so that a publish loop pays for it once.

        Raises:
            ServerTooOldError: the server is older than ``version``.
        """
        identity = self.transport.server_identity()
        if identity != self._version_ok_on:
            self._version_ok.clear()
            self._version_ok_on = identity
        elif (feature, version) in self._version_ok:
            return
        await self.require(feature, version=version)
        self._version_ok.add((feature, version))

    async def require_stream_features(self, config: Mapping[str, Any]) -> None:
        """Check the options of a stream config that need nats-server 2.11+ (an older
        server would ignore them and create a stream without them).

        Raises:
            ServerTooOldError: the server's API level is below what one of them needs.
        """
        for feature, level in stream_features(config):
            await self.require(feature, level=level)

    # -- account -----------------------------------------------------------------------------

    async def account_info(self) -> AccountInfo:
        """Usage and limits of the account (``$JS.API.INFO``)."""
        data = await self.request("INFO")
        self._level = (self.transport.server_identity(), api_level_of(data))
        return AccountInfo.from_json(data)

    # -- streams -----------------------------------------------------------------------------

    async def create_stream(self, name: str, config: Mapping[str, Any]) -> StreamInfo:
        """Create a stream (``config``: StreamConfig JSON names, durations in seconds)."""
        validate_stream_name(name)
        cfg = dict(config, name=name)
        subjects = cfg.get("subjects")
        if subjects is not None:
            if isinstance(subjects, str):
                raise InvalidArgumentError("subjects must be a list of subjects, not a str")
            for s in subjects:
                validate_filter_subject(s)
            cfg["subjects"] = list(subjects)
        await self.require_stream_features(cfg)
        try:
            data = await self.request(f"STREAM.CREATE.{name}", config_to_wire(cfg))
        except StreamNameInUseError as exc:
            raise _with_hint(
                exc,
                f"stream {name!r} exists with another configuration: update_stream({name!r}, "
                f"...) changes it, delete_stream({name!r}) removes it",
            ) from None
        return StreamInfo.from_json(data)

    async def update_stream(self, name: str, config: Mapping[str, Any]) -> StreamInfo:
        """Merge ``config`` into the stream's current config."""
        validate_stream_name(name)
        await self.require_stream_features(config)
        current = await self.request(f"STREAM.INFO.{name}")
        merged = dict(current.get("config") or {})
        merged.update(config_to_wire(config))
        merged["name"] = name
        data = await self.request(f"STREAM.UPDATE.{name}", merged)
        return StreamInfo.from_json(data)

    async def stream_info(
        self, name: str, *, subjects_filter: str | None = None, deleted_details: bool = False
    ) -> StreamInfo:
        """``StreamInfo``; ``subjects_filter`` fills ``state.subjects``."""
        validate_stream_name(name)
        payload: dict[str, Any] = {}
        if subjects_filter is not None:
            payload["subjects_filter"] = validate_filter_subject(subjects_filter)
        if deleted_details:
            payload["deleted_details"] = True
        try:
            data = await self.request(f"STREAM.INFO.{name}", payload or None)
        except StreamNotFoundError as exc:
            raise _with_hint(exc, _no_stream(name)) from None
        return StreamInfo.from_json(data)

    async def subjects_and_last_seq(self, name: str, subjects_filter: str) -> tuple[set[str], int]:
        """The subjects matching ``subjects_filter`` that hold a message now, and
        the stream's last sequence, from the same ``STREAM.INFO`` answer (paged
        past the server's 100,000 subjects per answer: later pages are a little
        later in time)."""
        validate_stream_name(name)
        return await self._subject_pages(name, subjects_filter, set(), None)

    async def _subject_pages(
        self, name: str, subjects_filter: str, subjects: set[str], last_seq: int | None
    ) -> tuple[set[str], int]:
        """The pages of subjects after those in ``subjects`` (``last_seq``: that of
        the first page, ``None`` before it)."""
        while True:
            request = {"subjects_filter": subjects_filter, "offset": len(subjects)}
            data = await self.request(f"STREAM.INFO.{name}", request)
            state = data.get("state") or {}
            if last_seq is None:
                last_seq = int(state.get("last_seq") or 0)
            page = state.get("subjects") or {}
            before = len(subjects)
            subjects.update(page)
            if len(subjects) == before or len(subjects) >= int(data.get("total") or 0):
                return subjects, last_seq

    async def counted_subjects(
        self, name: str, subjects_filter: str
    ) -> tuple[CountedStartSubjects | set[str], int, int]:
        """:meth:`subjects_and_last_seq`, with the subjects only counted when one
        answer holds them all and they are written plainly (see
        :func:`subjects_object`): a :class:`CountedStartSubjects` then (the
        subjects decoded only if it needs them), a set otherwise. Then the
        stream's last sequence and its number of messages in the (first) answer."""
        validate_stream_name(name)
        full = f"{self.prefix}.STREAM.INFO.{name}"
        data = await self._answer(full, {"subjects_filter": subjects_filter, "offset": 0}, None)
        cut = subjects_object(data)
        if cut is not None:
            rest, inner = cut
            answer = json_answer(rest, full)
            state = answer.get("state")
            if isinstance(state, dict) and state.get("subjects") == {}:
                count, load = subjects_of_object(inner)
                last_seq = int(state.get("last_seq") or 0)
                messages = int(state.get("messages") or 0)
                if count >= int(answer.get("total") or 0):
                    return CountedStartSubjects(count, load, last_seq), last_seq, messages
                if count:  # more pages
                    paged = await self._subject_pages(name, subjects_filter, load(), last_seq)
                    return *paged, messages
        answer = json_answer(data, full)
        state = answer.get("state") or {}
        subjects = set(state.get("subjects") or {})
        last_seq = int(state.get("last_seq") or 0)
        messages = int(state.get("messages") or 0)
        if not subjects or len(subjects) >= int(answer.get("total") or 0):
            return subjects, last_seq, messages
        paged = await self._subject_pages(name, subjects_filter, subjects, last_seq)
        return *paged, messages

    async def delete_stream(self, name: str) -> None:
        validate_stream_name(name)
        try:
            await self.request(f"STREAM.DELETE.{name}")
        except StreamNotFoundError as exc:
            raise _with_hint(exc, _no_stream(name)) from None

    async def list_streams(self, subject: str | None = None) -> AsyncIterator[StreamInfo]:
        async for item in self.paged("STREAM.LIST", "streams", subject):
            yield StreamInfo.from_json(item)

    def stream_names(self, subject: str | None = None) -> AsyncIterator[str]:
        return self.paged("STREAM.NAMES", "streams", subject)

    # -- consumers ---------------------------------------------------------------------------

    async def upsert_consumer(
        self, stream: str, config: Mapping[str, Any], action: str
    ) -> ConsumerInfo:
        """Create (``action="create"``), update (``"update"``) or create-or-update
        (``""``) a consumer; ``config``: ConsumerConfig JSON names."""
        validate_stream_name(stream)
        cfg = dict(config)
        name = cfg.get("name") or cfg.get("durable_name")
        if cfg.get("name") and cfg.get("durable_name") and cfg["name"] != cfg["durable_name"]:
            raise InvalidArgumentError("name and durable_name must match when both are given")
        if name is not None:
            validate_consumer_name(name)
            cfg.setdefault("name", name)
        elif action == "update":
            raise InvalidArgumentError("update_consumer needs the consumer's name or durable_name")
        if "filter_subject" in cfg and "filter_subjects" in cfg:
            raise InvalidArgumentError("give filter_subject or filter_subjects, not both")
        if cfg.get("filter_subject") is not None:
            validate_filter_subject(cfg["filter_subject"])
        if cfg.get("filter_subjects") is not None:
            if isinstance(cfg["filter_subjects"], str):
                raise InvalidArgumentError("filter_subjects must be a list of subjects")
            for s in cfg["filter_subjects"]:
                validate_filter_subject(s)
        if action == "update":
            # Merge into the current config (user form), so that what is not given
            # keeps its value rather than falling back to a create-time default.
            current = await self.request(f"CONSUMER.INFO.{stream}.{name}")
            merged = config_from_wire(current.get("config") or {})
            if "filter_subject" in cfg:
                merged.pop("filter_subjects", None)
            if "filter_subjects" in cfg:
                merged.pop("filter_subject", None)
            merged.update(cfg)
            cfg = merged
        else:
            cfg.setdefault("ack_policy", "explicit")
        validate_priority_config(cfg)
        wire = config_to_wire(cfg)
        payload: dict[str, Any] = {"stream_name": stream, "config": wire}
        if action:
            payload["action"] = action
        if name is None:
            subject = f"CONSUMER.CREATE.{stream}"
        elif wire.get("filter_subject") and not wire.get("filter_subjects"):
            subject = f"CONSUMER.CREATE.{stream}.{name}.{wire['filter_subject']}"
        else:
            subject = f"CONSUMER.CREATE.{stream}.{name}"
        return ConsumerInfo.from_json(await self.request(subject, payload))

    async def consumer_info(self, stream: str, name: str) -> ConsumerInfo:
        validate_stream_name(stream)
        validate_consumer_name(name)
        try:
            return ConsumerInfo.from_json(await self.request(f"CONSUMER.INFO.{stream}.{name}"))
        except StreamNotFoundError as exc:
            raise _with_hint(exc, _no_stream(stream)) from None
        except ConsumerNotFoundError as exc:
            raise _with_hint(exc, f"no consumer {name!r} on stream {stream!r}") from None

    async def delete_consumer(self, stream: str, name: str) -> None:
        validate_stream_name(stream)
        validate_consumer_name(name)
        try:
            await self.request(f"CONSUMER.DELETE.{stream}.{name}")
        except StreamNotFoundError as exc:
            raise _with_hint(exc, _no_stream(stream)) from None
        except ConsumerNotFoundError as exc:
            raise _with_hint(exc, f"no consumer {name!r} on stream {stream!r}") from None

    async def list_consumers(self, stream: str) -> AsyncIterator[ConsumerInfo]:
        validate_stream_name(stream)
        async for item in self.paged(f"CONSUMER.LIST.{stream}", "consumers"):
            yield ConsumerInfo.from_json(item)

    async def consumer_names(self, stream: str) -> AsyncIterator[str]:
        validate_stream_name(stream)
        async for item in self.paged(f"CONSUMER.NAMES.{stream}", "consumers"):
            yield item

    async def unpin_consumer(self, stream: str, consumer: str, group: str) -> None:
        """ADR-42: release the pinned client of ``group``."""
        validate_stream_name(stream)
        validate_consumer_name(consumer)
        validate_group_name(group)
        await self.request(f"CONSUMER.UNPIN.{stream}.{consumer}", {"group": group})

    # -- publishing --------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str | list[str]] | None,
        timeout: float | None = None,
    ) -> PubAck:
        """Publish (``headers`` built already, a TTL by :meth:`ttl_headers`) and wait
        for the stream's ack, trying again after "no responders" as
        :meth:`JetStream.publish` does by default."""
        self.check_not_closed()
        if timeout is not None:
            check_timeout(timeout)
        future = await self.acks.publish(
            subject,
            payload,
            headers,
            timeout or self.timeout,
            retry=(PUBLISH_RETRY_ATTEMPTS, PUBLISH_RETRY_WAIT),
        )
        return await future

    async def ttl_headers(
        self, headers: Mapping[str, str | list[str]] | None, ttl: object
    ) -> dict[str, str | list[str]]:
        """``headers`` with ``Nats-TTL`` (ADR-43) for ``ttl`` (seconds >= 1 or
        ``"never"``), once the server is known to honour it.

        Raises:
            InvalidArgumentError: a bad ``ttl``.
            ServerTooOldError: the server predates per-message TTLs (2.11).
        """
        text = format_ttl(ttl)
        await self.require_version(TTL_FEATURE, TTL_VERSION)
        merged: dict[str, str | list[str]] = dict(headers) if headers else {}
        merged[TTL_HEADER] = text
        return merged

    async def counter_add(self, subject: str, delta: int, timeout: float | None = None) -> int:
        """ADR-49: add ``delta`` to the counter of ``subject``; return the new total.

        Raises:
            InvalidArgumentError: ``delta`` is not an int, or a bad timeout.
            ServerTooOldError: the server predates counters (2.12).
            JetStreamError: the stream refused it (e.g. it lacks ``allow_msg_counter``).
        """
        increment = format_increment(delta)
        self.check_not_closed()
        if timeout is not None:
            check_timeout(timeout)
        await self.require_version(COUNTER_FEATURE, COUNTER_VERSION)
        # Sequential: the caller waits for this ack, so the frame goes to the
        # socket at once rather than on the flusher's next turn.
        future = await self.acks.publish(
            subject, b"", {INCR_HEADER: increment}, timeout or self.timeout, immediate=True
        )
        ack = await future
        return parse_counter_value(ack.value, what=f"the ack of the increment of {subject!r}")


# -- error mapping of Direct Get status replies (ADR-31) -------------------------------------


def direct_get_unavailable(stream: str) -> DirectGetUnavailableError:
    """Nobody answers Direct Get on ``stream``."""
    return DirectGetUnavailableError(
        f"no Direct Get responder for stream {stream!r}",
        code=503,
        hint=f"the stream does not exist or has allow_direct off; enable it with "
        f"update_stream({stream!r}, allow_direct=True)",
    )


def direct_get_error(stream: str, reply: DirectReply) -> JetStreamError:
    """The error of a Direct Get reply on ``stream`` that is a status, not a message."""
    code = int(reply.status) if reply.status and reply.status.isdigit() else None
    desc = reply.description or f"status {reply.status}"
    if reply.kind is ReplyKind.NOT_FOUND:
        return MessageNotFoundError(f"{desc} in stream {stream!r}", code=code)
    if reply.kind is ReplyKind.TOO_MANY_SUBJECTS:
        return TooManySubjectsError(
            desc, code=code, hint="narrow the subjects; the server allows 1024 per request"
        )
    if reply.kind is ReplyKind.NO_RESPONDERS:
        return direct_get_unavailable(stream)
    return JetStreamError(f"Direct Get on {stream!r}: {desc}", code=code)


# -- argument checks -------------------------------------------------------------------------


def api_prefix_for(domain: object, api_prefix: object) -> str:
    """The API prefix for ``domain`` or ``api_prefix`` (checked)."""
    if domain is not None and not isinstance(domain, str):
        raise InvalidArgumentError(f"domain must be a str, got {type(domain).__name__}")
    if not isinstance(api_prefix, str):
        raise InvalidArgumentError(f"api_prefix must be a str, got {type(api_prefix).__name__}")
    if domain is not None:
        if api_prefix != "$JS.API":
            raise InvalidArgumentError("give domain or api_prefix, not both")
        if not domain or any(c in domain for c in " .*>"):
            raise InvalidArgumentError(f"invalid JetStream domain {domain!r}")
        return f"$JS.{domain}.API"
    if not api_prefix or api_prefix.endswith(".") or any(c.isspace() for c in api_prefix):
        raise InvalidArgumentError(f"invalid api_prefix {api_prefix!r}")
    return api_prefix


def check_timeout(timeout: object, *, allow_infinite: bool = True) -> float:
    """A timeout in seconds: a number > 0; ``math.inf`` means no deadline where allowed."""
    if (
        not isinstance(timeout, (int, float))
        or isinstance(timeout, bool)
        or math.isnan(timeout)
        or timeout <= 0
        or (math.isinf(timeout) and not allow_infinite)
    ):
        kind = "a number" if allow_infinite else "a finite number"
        raise InvalidArgumentError(f"timeout must be {kind} of seconds > 0, got {timeout!r}")
    return float(timeout)


_E = TypeVar("_E", bound=JetStreamError)


def _with_hint(exc: _E, hint: str) -> _E:
    """The same error (class, server text, codes) with what it was about: the server's
    "stream not found" names no stream."""
    return type(exc)(exc.description, code=exc.code, err_code=exc.err_code, hint=hint)


def _no_stream(name: str) -> str:
    return f"no stream {name!r}: create_stream({name!r}, subjects=[...]) makes it"
