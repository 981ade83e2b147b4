"""The JetStream context: the ``$JS.API`` request layer, stream and consumer
management, and publishing (ADR-37, "JetStream Context")."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg

from aioclients._core import redact_text, redact_url
from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._errors import (
    JetStreamClosedError,
    JetStreamConnectError,
    JetStreamNotEnabledError,
)
from aioclients.jetstream._models import AccountInfo, ConsumerInfo, PubAck, StreamInfo
from aioclients.jetstream._protocol._config import (
    config_from_wire,
    config_to_wire,
    validate_priority_config,
)
from aioclients.jetstream._protocol._headers import publish_headers
from aioclients.jetstream._protocol._names import (
    validate_consumer_name,
    validate_filter_subject,
    validate_stream_name,
)
from aioclients.jetstream._publisher import AckMux, ReplyMux, json_answer
from aioclients.jetstream._transport import (
    NatsClient,
    NatsTransport,
    ReplyInbox,
    close_connection,
)

if TYPE_CHECKING:
    from aioclients.jetstream._consumer import Consumer
    from aioclients.jetstream._kv import KeyValue
    from aioclients.jetstream._ordered import OrderedConsumeEvent, OrderedConsumer
    from aioclients.jetstream._stream import Stream

__all__ = ("DEFAULT_MAX_PENDING", "ConnectionListener", "JetStream", "connect")


class ConnectionListener(Protocol):
    """What a running fetch/consume needs to hear from its context."""

    def connection_lost(self) -> None: ...
    def connection_restored(self) -> None: ...
    def context_closed(self) -> None: ...


log = logging.getLogger("aioclients.jetstream")

#: Default bound on outstanding ``publish_async`` acks.
DEFAULT_MAX_PENDING = 4000

#: Longest wait for a connection's queued bytes to be written when closing.
_CLOSE_BOUND = 10.0

#: Keepalive PINGs (seconds apart), and how many may go unanswered before the
#: connection counts as stale and is replaced. nats-py's defaults (120 s, 2) take
#: up to six minutes to notice a server that froze.
_PING_INTERVAL = 30
_MAX_OUTSTANDING_PINGS = 2


class JetStream:
    """A JetStream context over a nats-py connection the caller owns.

    Args:
        nc: a connected ``nats.aio.client.Client``.
        domain: JetStream domain; the API prefix becomes ``$JS.<domain>.API``.
        api_prefix: API subject prefix (for imports across accounts).
        timeout: default timeout of API requests and publish acks, seconds.
        max_pending: bound on outstanding ``publish_async`` acks.
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
        self._prefix = _api_prefix(domain, api_prefix)
        _check_timeout(timeout)
        self._nc = nc
        self._transport = NatsTransport(nc)
        self.domain = domain
        self.timeout = timeout
        self._acks = AckMux(
            self._transport, max_pending=check_int("max_pending", max_pending, minimum=1)
        )
        self._requests: ReplyMux[NatsMsg] = ReplyMux(self._transport)
        # Open Direct Get reply inboxes, woken by close().
        self._inboxes: weakref.WeakSet[ReplyInbox] = weakref.WeakSet()
        # Running fetch/consume calls, told about disconnects, reconnects and close().
        self._listeners: set[ConnectionListener] = set()
        self._hooks_installed = False
        self._owns_connection = False
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def nc(self) -> NATS:
        """The underlying nats-py client."""
        return self._nc

    @property
    def api_prefix(self) -> str:
        return self._prefix

    @property
    def closed(self) -> bool:
        return self._closed or self._nc.is_closed

    def _check_open(self) -> None:
        if self._closed:
            raise JetStreamClosedError("this JetStream context is closed")
        self._transport.check_open()

    def _add_listener(self, listener: ConnectionListener) -> None:
        """Register a running fetch/consume for connection notifications."""
        if not self._hooks_installed:
            self._install_hooks()
        self._listeners.add(listener)

    def _install_hooks(self) -> None:
        """Chain our handlers in front of the connection's disconnect/reconnect callbacks."""
        nc = self._nc
        listeners = self._listeners
        previous_disconnected = nc._disconnected_cb
        previous_reconnected = nc._reconnected_cb

        async def disconnected() -> None:
            for listener in list(listeners):
                listener.connection_lost()
            if previous_disconnected is not None:
                await previous_disconnected()

        async def reconnected() -> None:
            for listener in list(listeners):
                listener.connection_restored()
            if previous_reconnected is not None:
                await previous_reconnected()

        nc._disconnected_cb = disconnected
        nc._reconnected_cb = reconnected
        self._hooks_installed = True

    async def _api(
        self,
        subject: str,
        payload: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one ``$JS.API`` request; return the JSON answer or raise its error."""
        self._check_open()
        full = f"{self._prefix}.{subject}"
        body = json.dumps(payload, separators=(",", ":")).encode() if payload is not None else b""
        msg = await self._requests.request(full, body, timeout or self.timeout, full)
        if msg.headers and msg.headers.get("Status") == "503":
            raise JetStreamNotEnabledError(
                f"nobody answers {full}",
                code=503,
                hint="enable JetStream on the server (nats-server -js) or check domain/api_prefix",
            )
        return json_answer(msg.data, full)

    async def close(self) -> None:
        """Close the context: outstanding acks fail with ``JetStreamClosedError``.

        If the context opened the connection (``connect()``), the connection is
        closed too: what is still queued gets up to ``timeout`` seconds (at most
        10) to be written, after which the socket is aborted, so that closing
        never hangs on a server that does not read. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        for inbox in list(self._inboxes):
            inbox.close_now()
        for listener in list(self._listeners):
            listener.context_closed()
        await self._requests.close()
        await self._acks.close()
        if self._owns_connection and not self._nc.is_closed:
            # Bounded: a server that stops reading would hold nats-py's close forever.
            await close_connection(self._nc, min(self.timeout, _CLOSE_BOUND))

    async def __aenter__(self) -> JetStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None and not self.closed:
                await self._acks.wait_idle(self.timeout)
        finally:
            await self.close()

    # -- account ---------------------------------------------------------------------------

    async def account_info(self) -> AccountInfo:
        """Usage and limits of the account (``$JS.API.INFO``)."""
        return AccountInfo.from_json(await self._api("INFO"))

    # -- streams ---------------------------------------------------------------------------

    async def create_stream(
        self, name: str, *, subjects: list[str] | None = None, **config: Any
    ) -> Stream:
        """Create a stream; ``config`` keys are StreamConfig JSON names (durations in seconds).

        Creating a stream that exists with the same config returns it; with a
        different config raises ``StreamNameInUseError``.
        """
        from aioclients.jetstream._stream import Stream

        validate_stream_name(name)
        cfg = dict(config, name=name)
        if subjects is not None:
            if isinstance(subjects, str):
                raise InvalidArgumentError("subjects must be a list of subjects, not a str")
            for s in subjects:
                validate_filter_subject(s)
            cfg["subjects"] = list(subjects)
        data = await self._api(f"STREAM.CREATE.{name}", config_to_wire(cfg))
        return Stream(self, name, StreamInfo.from_json(data))

    async def update_stream(self, name: str, **config: Any) -> Stream:
        """Change a stream's config: the given keys are merged into the current config."""
        from aioclients.jetstream._stream import Stream

        validate_stream_name(name)
        current = await self._api(f"STREAM.INFO.{name}")
        merged = dict(current.get("config") or {})
        merged.update(config_to_wire(config))
        merged["name"] = name
        data = await self._api(f"STREAM.UPDATE.{name}", merged)
        return Stream(self, name, StreamInfo.from_json(data))

    async def stream(self, name: str) -> Stream:
        """Look up a stream (raises ``StreamNotFoundError``)."""
        from aioclients.jetstream._stream import Stream

        return Stream(self, name, await self.stream_info(name))

    async def stream_info(
        self, name: str, *, subjects_filter: str | None = None, deleted_details: bool = False
    ) -> StreamInfo:
        """Fetch ``StreamInfo``; ``subjects_filter`` fills ``state.subjects``."""
        validate_stream_name(name)
        payload: dict[str, Any] = {}
        if subjects_filter is not None:
            payload["subjects_filter"] = validate_filter_subject(subjects_filter)
        if deleted_details:
            payload["deleted_details"] = True
        data = await self._api(f"STREAM.INFO.{name}", payload or None)
        return StreamInfo.from_json(data)

    async def delete_stream(self, name: str) -> None:
        """Delete a stream and all its messages (raises ``StreamNotFoundError``)."""
        validate_stream_name(name)
        await self._api(f"STREAM.DELETE.{name}")

    async def list_streams(self, subject: str | None = None) -> AsyncIterator[StreamInfo]:
        """Every stream's info, optionally only those that store ``subject``."""
        async for item in self._paged("STREAM.LIST", "streams", subject):
            yield StreamInfo.from_json(item)

    async def stream_names(self, subject: str | None = None) -> AsyncIterator[str]:
        """Every stream's name, optionally only those that store ``subject``."""
        async for item in self._paged("STREAM.NAMES", "streams", subject):
            yield item

    async def _paged(
        self, subject: str, key: str, filter_subject: str | None = None
    ) -> AsyncIterator[Any]:
        offset = 0
        while True:
            payload: dict[str, Any] = {"offset": offset}
            if filter_subject is not None:
                payload["subject"] = validate_filter_subject(filter_subject)
            data = await self._api(subject, payload)
            items = data.get(key) or []
            for item in items:
                yield item
            offset += len(items)
            if not items or offset >= data.get("total", 0):
                return

    # -- consumers -------------------------------------------------------------------------

    async def _upsert_consumer(
        self, stream: str, config: Mapping[str, Any], action: str
    ) -> Consumer:
        from aioclients.jetstream._consumer import Consumer

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
            current = await self._api(f"CONSUMER.INFO.{stream}.{name}")
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
        data = await self._api(subject, payload)
        info = ConsumerInfo.from_json(data)
        return Consumer(self, stream, info.name, info)

    async def create_consumer(self, stream: str, **config: Any) -> Consumer:
        """Create a consumer.

        With ``durable_name`` the consumer is durable. With only ``name`` it is a
        named ephemeral consumer, which the server removes after
        ``inactive_threshold`` (default 5 s) without clients; with neither, the
        server picks the name. ``config`` keys are ConsumerConfig JSON names,
        durations in seconds; ``ack_policy`` defaults to ``"explicit"``.

        Raises:
            ConsumerExistsError: one of that name exists with a different config.
        """
        return await self._upsert_consumer(stream, config, "create")

    async def update_consumer(self, stream: str, **config: Any) -> Consumer:
        """Change an existing consumer: the given keys are merged into its current config.

        Giving ``filter_subject`` replaces ``filter_subjects`` and vice versa.
        """
        return await self._upsert_consumer(stream, config, "update")

    async def create_or_update_consumer(self, stream: str, **config: Any) -> Consumer:
        """Create the consumer, or replace the config of an existing one."""
        return await self._upsert_consumer(stream, config, "")

    async def consumer(self, stream: str, name: str) -> Consumer:
        """Look up a consumer (raises ``ConsumerNotFoundError``)."""
        from aioclients.jetstream._consumer import Consumer

        info = await self.consumer_info(stream, name)
        return Consumer(self, stream, name, info)

    async def consumer_info(self, stream: str, name: str) -> ConsumerInfo:
        validate_stream_name(stream)
        validate_consumer_name(name)
        return ConsumerInfo.from_json(await self._api(f"CONSUMER.INFO.{stream}.{name}"))

    async def delete_consumer(self, stream: str, name: str) -> None:
        """Delete a consumer (raises ``ConsumerNotFoundError``)."""
        validate_stream_name(stream)
        validate_consumer_name(name)
        await self._api(f"CONSUMER.DELETE.{stream}.{name}")

    async def list_consumers(self, stream: str) -> AsyncIterator[ConsumerInfo]:
        """Every consumer of ``stream``."""
        validate_stream_name(stream)
        async for item in self._paged(f"CONSUMER.LIST.{stream}", "consumers"):
            yield ConsumerInfo.from_json(item)

    async def consumer_names(self, stream: str) -> AsyncIterator[str]:
        """The names of every consumer of ``stream``."""
        validate_stream_name(stream)
        async for item in self._paged(f"CONSUMER.NAMES.{stream}", "consumers"):
            yield item

    async def ordered_consumer(
        self,
        stream: str,
        *,
        filter_subjects: list[str] | None = None,
        deliver_policy: str = "all",
        opt_start_seq: int | None = None,
        opt_start_time: datetime | None = None,
        headers_only: bool = False,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
    ) -> OrderedConsumer:
        """An ordered consumer (ADR-17): in-order, gapless delivery without acks.

        The server-side consumer is ephemeral (``ack_policy none``, ``max_deliver
        1``, memory storage); on a gap, a missed heartbeat, a reconnect or its
        deletion it is replaced by a fresh one starting after the last message
        delivered, and ``on_event`` receives ``ConsumerReset(next_seq)``.

        Raises:
            StreamNotFoundError: no such stream.
            InvalidArgumentError: a bad start or filter.
        """
        from aioclients.jetstream._ordered import OrderedConsumer
        from aioclients.jetstream._protocol._ordered import ordered_consumer_config

        validate_stream_name(stream)
        config = ordered_consumer_config(
            filter_subjects=filter_subjects,
            deliver_policy=deliver_policy,
            opt_start_seq=opt_start_seq,
            opt_start_time=opt_start_time,
            headers_only=headers_only,
        )
        for s in config.get("filter_subjects") or [config.get("filter_subject") or ">"]:
            validate_filter_subject(s)
        oc = OrderedConsumer(self, stream, config, on_event=on_event)
        await oc._ensure()
        return oc

    # -- Key-Value (ADR-8) -----------------------------------------------------------------

    async def create_key_value(
        self,
        bucket: str,
        *,
        history: int = 1,
        ttl: float | None = None,
        max_value_size: int | None = None,
        max_bytes: int | None = None,
        storage: str = "file",
        replicas: int = 1,
        description: str | None = None,
    ) -> KeyValue:
        """Create a Key-Value bucket (the stream ``KV_<bucket>``), or return it when
        it exists with the same settings.

        Args:
            history: revisions kept per key (1 to 64).
            ttl: seconds a value lives (``None``: for ever).
            max_value_size: the largest value, bytes (``None``: no limit).
            max_bytes: the largest size of the whole bucket, bytes (``None``: no limit).
            storage: ``"file"`` or ``"memory"``.
            replicas: 1 to 5.

        Raises:
            InvalidArgumentError: a bad name or setting (before any request).
            StreamNameInUseError: the bucket exists with other settings.
        """
        from aioclients.jetstream._kv import create_key_value

        return await create_key_value(
            self,
            bucket,
            history=history,
            ttl=ttl,
            max_value_size=max_value_size,
            max_bytes=max_bytes,
            storage=storage,
            replicas=replicas,
            description=description,
        )

    async def key_value(self, bucket: str) -> KeyValue:
        """Open an existing bucket (raises ``BucketNotFoundError``)."""
        from aioclients.jetstream._kv import key_value

        return await key_value(self, bucket)

    async def delete_key_value(self, bucket: str) -> None:
        """Delete a bucket and everything in it (raises ``BucketNotFoundError``)."""
        from aioclients.jetstream._kv import delete_key_value

        await delete_key_value(self, bucket)

    async def unpin_consumer(self, stream: str, consumer: str, group: str) -> None:
        """ADR-42: release the pinned client of ``group`` so another can take over."""
        from aioclients.jetstream._protocol._names import validate_group_name

        validate_stream_name(stream)
        validate_consumer_name(consumer)
        validate_group_name(group)
        await self._api(f"CONSUMER.UNPIN.{stream}.{consumer}", {"group": group})

    # -- publishing ------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Mapping[str, str | list[str]] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        timeout: float | None = None,
    ) -> PubAck:
        """Publish and wait for the stream's acknowledgement.

        Returns:
            the ``PubAck`` (``duplicate`` is true when ``msg_id`` was seen within
            the stream's duplicate window and the message was not stored again).
        Raises:
            NoStreamResponseError: no stream stores ``subject``.
            WrongLastSequenceError / WrongLastMsgIdError / WrongExpectedStreamError:
                an expectation failed; nothing was stored.
            MaxPayloadError: the message is larger than the server accepts.
            APITimeoutError: no ack in time (the message may or may not be stored).
        """
        future = await self.publish_async(
            subject,
            payload,
            headers=headers,
            msg_id=msg_id,
            expected_stream=expected_stream,
            expected_last_seq=expected_last_seq,
            expected_last_subject_seq=expected_last_subject_seq,
            expected_last_msg_id=expected_last_msg_id,
            timeout=timeout,
        )
        return await future

    async def publish_async(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Mapping[str, str | list[str]] | None = None,
        msg_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_seq: int | None = None,
        expected_last_subject_seq: int | None = None,
        expected_last_msg_id: str | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future[PubAck]:
        """Publish without waiting for the ack; return a future of it.

        Waits (back-pressure) while ``max_pending`` acks are outstanding, then
        sends and returns. The future fails like :meth:`publish` would, or with
        ``APITimeoutError`` when the ack does not arrive within ``timeout``.
        """
        if self._closed:
            raise JetStreamClosedError("this JetStream context is closed")
        if (
            headers is None
            and msg_id is None
            and expected_stream is None
            and (
                expected_last_seq is None
                and expected_last_subject_seq is None
                and expected_last_msg_id is None
            )
        ):
            hdrs = None
        else:
            hdrs = publish_headers(
                headers,
                msg_id=msg_id,
                expected_stream=expected_stream,
                expected_last_seq=expected_last_seq,
                expected_last_subject_seq=expected_last_subject_seq,
                expected_last_msg_id=expected_last_msg_id,
            )
        if timeout is not None:
            _check_timeout(timeout)
        return await self._acks.publish(subject, payload, hdrs, timeout or self.timeout)

    async def publish_async_complete(self, timeout: float | None = None) -> None:
        """Wait until every ``publish_async`` ack has arrived (or failed).

        Raises:
            APITimeoutError: acks are still outstanding after ``timeout`` seconds.
        """
        self._check_open()
        if timeout is not None:
            _check_timeout(timeout)
        await self._acks.wait_idle(timeout)

    @property
    def publish_async_pending(self) -> int:
        """How many publish acks are outstanding."""
        return self._acks.outstanding


async def connect(
    servers: str | list[str] = "nats://127.0.0.1:4222",
    *,
    domain: str | None = None,
    api_prefix: str = "$JS.API",
    timeout: float = 5.0,
    max_pending: int = DEFAULT_MAX_PENDING,
    **nats_options: Any,
) -> JetStream:
    """Open a NATS connection and return a JetStream context that owns it.

    ``nats_options`` go to ``nats.connect`` (``user``, ``password``, ``tls``, ...).
    Use as ``async with await connect(url) as js``; closing the context closes
    the connection.

    Raises:
        JetStreamConnectError: the server cannot be reached.
    """
    # Check our own arguments before opening anything.
    _api_prefix(domain, api_prefix)
    _check_timeout(timeout, allow_infinite=False)  # it bounds the connect, too
    check_int("max_pending", max_pending, minimum=1)
    if isinstance(servers, str):
        urls = [servers]
    elif (
        isinstance(servers, (list, tuple))
        and servers
        and all(isinstance(u, str) and u for u in servers)
    ):
        urls = list(servers)
    else:
        raise InvalidArgumentError(
            f"servers must be a URL or a non-empty list of URLs, got {redact_text(repr(servers))}"
        )
    nc = NatsClient()
    options: dict[str, Any] = {
        "connect_timeout": timeout,
        # A write waiting on a server that does not read gives up after this long.
        "flush_timeout": timeout,
        "ping_interval": _PING_INTERVAL,
        "max_outstanding_pings": _MAX_OUTSTANDING_PINGS,
        "error_cb": _log_error,
        "disconnected_cb": _disconnect_logger(nc),
        "reconnected_cb": _log_reconnected,
    }
    options.update(nats_options)
    # nats-py retries a failed first connect up to max_reconnect_attempts times
    # (two minutes by default); bound it so an unreachable server fails fast.
    deadline = float(options["connect_timeout"]) * max(1, len(urls)) + 1.0
    try:
        await _first_connect(nc, urls, options, deadline)
    except (OSError, asyncio.TimeoutError, nats.errors.Error) as exc:
        last = getattr(nc, "_err", None) or exc
        reason = str(last) or f"{type(last).__name__} (no answer within {deadline:.0f}s)"
        # Bounded: a server that accepted but does not read could hold a plain close.
        await close_connection(nc, 1.0)
        where = ", ".join(redact_url(u) for u in urls)
        if isinstance(exc, ConnectionRefusedError):
            raise JetStreamConnectError(
                f"no NATS server at {where} (connection refused): start one with "
                "`aioclients-servers` or `nats-server -js`, or check the address"
            ) from None
        raise JetStreamConnectError(
            f"cannot connect to NATS at {where}: {redact_text(reason)}"
        ) from None
    js = JetStream(
        nc, domain=domain, api_prefix=api_prefix, timeout=timeout, max_pending=max_pending
    )
    js._owns_connection = True
    return js


def _api_prefix(domain: object, api_prefix: object) -> str:
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


def _check_timeout(timeout: object, *, allow_infinite: bool = True) -> float:
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


async def _log_error(exc: Exception) -> None:
    # nats-py's errors may quote a server URL, with the credentials in it.
    log.warning("NATS connection error: %s", redact_text(str(exc) or type(exc).__name__))


async def _first_connect(
    nc: NatsClient, urls: list[str], options: dict[str, Any], deadline: float
) -> None:
    """``nc.connect``, bounded by ``deadline``, failing at once when every server refused.

    nats-py tries the servers in turn, waiting ``reconnect_time_wait`` (2 s) before it
    tries one again; a refusal from each, one round, answers the question (nats.go's
    ``Connect`` does not retry a refused first connect either).

    Raises:
        ConnectionRefusedError: every server refused the connection.
        asyncio.TimeoutError: no connection within ``deadline`` seconds.
    """
    refused_in_a_row = 0
    all_refused = asyncio.Event()
    first_connect = True
    error_cb = options["error_cb"]

    async def count_refusals(exc: Exception) -> None:
        nonlocal refused_in_a_row
        if first_connect:
            if isinstance(exc, ConnectionRefusedError):
                refused_in_a_row += 1
                if refused_in_a_row >= len(urls):  # each server, one round
                    all_refused.set()
                if error_cb is _log_error:  # connect() raises it, naming the servers
                    log.debug("NATS connection refused: %s", exc)
                    return
            else:
                refused_in_a_row = 0
        await error_cb(exc)

    connecting = asyncio.ensure_future(nc.connect(urls, **{**options, "error_cb": count_refusals}))
    refusals = asyncio.ensure_future(all_refused.wait())
    try:
        await asyncio.wait(
            {connecting, refusals}, timeout=deadline, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        first_connect = False
        refusals.cancel()
        if not connecting.done():
            connecting.cancel()
            await asyncio.wait({connecting})
    if not connecting.cancelled():
        connecting.result()  # connected, or nats-py's own error
    elif all_refused.is_set():
        raise ConnectionRefusedError("every server refused the connection")
    else:
        raise asyncio.TimeoutError


def _disconnect_logger(nc: NatsClient) -> Callable[[], Any]:
    async def disconnected() -> None:
        # A close we asked for is no news; a lost connection is.
        if nc.is_closed:
            log.debug("NATS connection closed")
        else:
            log.info("NATS disconnected")

    return disconnected


async def _log_reconnected() -> None:
    log.info("NATS reconnected")
