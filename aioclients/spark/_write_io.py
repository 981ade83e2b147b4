"""The asyncio drivers of the Spark writers' lean publish paths.

JetStream: :class:`JetStreamPublishConnection` is one NATS connection per Spark
task (the connecting, TLS and auth of :class:`DirectGetConnection`). A task's
Arrow batches become ``PUB``/``HPUB`` frames column-wise
(:func:`~aioclients.spark._protocol._publish_frames.publish_frames`); runs of
rows go out with one write each, while at most ``window`` publishes wait for
their acks; the pure :class:`AckParser` counts acks as they arrive. Every
publish's ack is awaited and checked: a refused publish, a lost connection or
no progress within ``timeout`` fails the task.

NSQ: :func:`mpub_commands` builds ``MPUB`` commands column-wise (sizes packed by
Arrow, no bytes object per row), and :func:`nsq_publish` keeps a few of them in
flight on one :class:`aioclients.nsq.Producer` (nsqd answers in order), so the
next batch is on the wire while nsqd handles the one before.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NoReturn

import pyarrow as pa
import pyarrow.compute as pc

from aioclients._core import redact_text
from aioclients._errors import (
    ConnectError,
    InvalidArgumentError,
    OperationTimeoutError,
    RemoteProtocolError,
)
from aioclients.spark._direct_io import DirectGetConnection, TlsFiles
from aioclients.spark._errors import PublishFailedError
from aioclients.spark._protocol._direct_reader import Ping, Pong, ServerErr, ServerInfo
from aioclients.spark._protocol._mpub_frames import Mpub, MpubBuilder
from aioclients.spark._protocol._publish_frames import (
    AckParser,
    frame_bytes,
    header_blocks,
    publish_frames,
)

if TYPE_CHECKING:
    from aioclients import nsq

__all__ = (
    "JetStreamPublishConnection",
    "nsq_publish",
    "publish_and_check",
    "publish_record_batches",
)

#: Rows per write: small enough to start the server early, large enough that a
#: write's fixed cost vanishes.
CHUNK_ROWS = 512


class JetStreamPublishConnection(DirectGetConnection):
    """A NATS connection that publishes frames and counts the JetStream acks."""

    def __init__(self, timeout: float, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(timeout, ssl_context)
        self.reply_prefix = f"{self.inbox}.".encode()
        self.acks = AckParser(self.reply_prefix)
        self.sent = 0
        self.max_payload: int | None = None
        self._room: asyncio.Future[None] | None = None
        self._room_at = 0

    @classmethod
    async def connect(
        cls, servers: list[str], *, timeout: float, tls: TlsFiles | None = None
    ) -> JetStreamPublishConnection:
        conn = await cls.open(servers, timeout=timeout, tls=tls)
        assert isinstance(conn, JetStreamPublishConnection)
        try:
            conn._pong = asyncio.get_running_loop().create_future()
            conn._write(b"SUB %s* 2\r\nPING\r\n" % conn.reply_prefix)
            await conn._wait(conn._pong, "PONG after SUB")
        except BaseException:
            conn.abort()
            raise
        return conn

    # -- asyncio.Protocol -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        try:
            events = self.acks.receive_data(data)
        except RemoteProtocolError as exc:
            self._fail(exc)
            return
        for event in events:
            if isinstance(event, Ping):
                if self._transport is not None:
                    self._transport.write(b"PONG\r\n")
            elif isinstance(event, ServerInfo):
                payload = event.info.get("max_payload")
                if isinstance(payload, int):
                    self.max_payload = payload
                self._settle(self._info, event.info)
            elif isinstance(event, ServerErr):
                self._fail(ConnectError(f"NATS server error: {redact_text(event.message)}"))
            elif isinstance(event, Pong):
                self._settle(self._pong, None)
        room = self._room
        if room is not None and self.sent - self.acks.settled <= self._room_at:
            self._room = None
            if not room.done():
                room.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        super()._fail(exc)
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_exception(exc)

    # -- publishing -------------------------------------------------------------------------

    async def wait_until_outstanding(self, at_most: int) -> None:
        """Wait until at most ``at_most`` publishes await their ack.

        Raises:
            OperationTimeoutError: no ack arrived within the timeout.
            ConnectError, RemoteProtocolError: the connection failed.
        """
        while self.sent - self.acks.settled > at_most:
            if self._failure is not None:
                raise self._failure
            before = self.acks.settled
            self._room_at = at_most
            self._room = room = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(room, self._timeout)
            except asyncio.TimeoutError:
                if self.acks.settled == before:
                    exc = OperationTimeoutError(
                        f"no publish ack from the NATS server within {self._timeout}s "
                        f"({self.sent - self.acks.settled} publishes unanswered)"
                    )
                    self._fail(exc)
                    raise exc from None
        if self._failure is not None and self.sent - self.acks.settled:
            raise self._failure

    def send(self, data: memoryview, rows: int) -> None:
        self._write(data)  # type: ignore[arg-type]
        self.sent += rows


def _failure_text(conn: JetStreamPublishConnection) -> str | None:
    first = conn.acks.first_failure
    if first is None:
        return None
    return f"row {first.row}: {first.reason}"


async def publish_record_batches(
    conn: JetStreamPublishConnection,
    batches: Iterator[pa.RecordBatch],
    *,
    subject: str | None,
    window: int,
    on_failure: Callable[[str], NoReturn],
) -> None:
    """Publish every row of ``batches`` and wait for every ack.

    ``on_failure(text)`` is called (and must raise) for the first refused publish;
    rows are ``subject`` (or the option), ``data``, ``msg_id``, ``headers``.
    """
    chunk = max(1, min(CHUNK_ROWS, window))
    for batch in batches:
        count = batch.num_rows
        if not count:
            continue
        names = batch.schema.names
        subjects = _subjects(batch, subject, on_failure) if "subject" in names else None
        if subjects is None:
            if subject is None:
                on_failure("there is no 'subject' column or option")
            subjects = pa.array([subject] * count, pa.string())
        msg_ids = batch.column("msg_id") if "msg_id" in names else None
        headers = batch.column("headers") if "headers" in names else None
        try:
            blocks = (
                header_blocks(msg_ids, headers, count)
                if msg_ids is not None or headers is not None
                else None
            )
            frames = publish_frames(
                subjects,
                batch.column("data"),
                reply_prefix=conn.reply_prefix,
                first=conn.sent,
                headers=blocks,
            )
        except ValueError as exc:
            on_failure(f"a row of this batch cannot be published: {exc}")
        _check_payload(conn, batch.column("data"), blocks, on_failure)
        for start in range(0, count, chunk):
            stop = min(count, start + chunk)
            await conn.wait_until_outstanding(window - (stop - start))
            text = _failure_text(conn)
            if text is not None:
                on_failure(text)  # fail fast: publish nothing more
            conn.send(frame_bytes(frames, start, stop), stop - start)
    await conn.wait_until_outstanding(0)
    text = _failure_text(conn)
    if text is not None:
        on_failure(text)


async def publish_and_check(
    servers: list[str],
    batches: Iterator[pa.RecordBatch],
    *,
    timeout: float,
    tls: TlsFiles,
    window: int,
    subject: str | None,
    retry_note: str,
) -> tuple[int, int]:
    """One task's publish: connect, publish every row, check every ack, close.

    Returns (stored, duplicates). A refused publish, a lost connection or no ack in
    time raises :class:`PublishFailedError` (``retry_note`` says what a retry does).
    """
    conn = await JetStreamPublishConnection.connect(servers, timeout=timeout, tls=tls)

    def fail(text: str) -> NoReturn:
        failed = max(conn.acks.failed, 1)
        raise PublishFailedError(
            f"{failed} publish(es) failed, the first with: {redact_text(text)}; the task "
            f"fails so that nothing is dropped ({retry_note})"
        )

    try:
        try:
            await publish_record_batches(
                conn, batches, subject=subject, window=window, on_failure=fail
            )
        except (ConnectError, OperationTimeoutError, RemoteProtocolError) as exc:
            refused = _failure_text(conn)
            fail(
                f"{exc} ({conn.sent - conn.acks.settled} publishes without an ack"
                + (f"; refused before that: {refused})" if refused else ")")
            )
    finally:
        await conn.close()
    return conn.acks.stored, conn.acks.duplicates


def _subjects(
    batch: pa.RecordBatch, default: str | None, on_failure: Callable[[str], NoReturn]
) -> pa.Array:
    column = batch.column("subject")
    empty = pc.equal(pc.utf8_length(column), 0)
    if pc.any(empty).as_py():  # an empty subject falls back on the option, as a null one
        column = pc.if_else(empty, pa.scalar(None, pa.string()), column)
    if column.null_count:
        if default is None:
            on_failure("a row has a null subject and there is no 'subject' option to fall back on")
        column = pc.fill_null(column, default)
    return column


def _check_payload(
    conn: JetStreamPublishConnection,
    data: pa.Array,
    blocks: pa.Array | None,
    on_failure: Callable[[str], NoReturn],
) -> None:
    """The server closes the connection on a message over its max_payload: say so first."""
    if conn.max_payload is None:
        return
    sizes = pc.binary_length(pc.cast(data, pa.large_binary()))
    if blocks is not None:
        sizes = pc.add(sizes, pc.fill_null(pc.binary_length(blocks), 0))
    largest = pc.max(sizes).as_py()
    if largest is not None and largest > conn.max_payload:
        on_failure(
            f"a row of {largest} bytes (headers and data) is over the server's "
            f"max_payload of {conn.max_payload} bytes"
        )


# -- NSQ ------------------------------------------------------------------------------------

#: MPUB commands sent before the oldest one's OK: nsqd answers in order, so the next
#: batch is on the wire (and being read) while nsqd applies the one before.
MPUBS_IN_FLIGHT = 4


async def nsq_publish(
    producer: nsq.Producer,
    builder: MpubBuilder,
    column: str,
    batches: Iterator[pa.RecordBatch],
    on_failure: Callable[[Mpub, BaseException], NoReturn],
) -> tuple[int, int]:
    """Send every row of ``column`` as MPUB commands, a few in flight; wait for every OK.

    Returns (messages, commands). ``on_failure`` is called (and must raise) for
    the first command in order that failed; nothing after it is sent.
    """
    # Imported here: the jetstream and liftbridge writers share this module, and
    # a Python worker running one of them need not load the nsq client (aiohttp).
    from aioclients import nsq

    in_flight: collections.deque[tuple[Mpub, asyncio.Future[None]]] = collections.deque()
    published = mpubs = 0

    async def settle_oldest() -> None:
        nonlocal published, mpubs
        mpub, future = in_flight.popleft()
        try:
            await future
        except (
            nsq.NSQError,
            nsq.NSQConnectError,
            nsq.NSQClosedError,
            InvalidArgumentError,
            TimeoutError,
        ) as exc:
            on_failure(mpub, exc)
        published += mpub.rows
        mpubs += 1

    def commands() -> Iterator[Mpub]:
        for batch in batches:
            yield from builder.add(batch.column(column))
        yield from builder.finish()

    try:
        for mpub in commands():
            while len(in_flight) >= MPUBS_IN_FLIGHT or (in_flight and in_flight[0][1].done()):
                await settle_oldest()
            # The task runs its synchronous start (the write) before any answer is read.
            in_flight.append((mpub, asyncio.ensure_future(producer._send(mpub.command))))
        while in_flight:
            await settle_oldest()
    finally:
        for _, future in in_flight:
            future.cancel()
        if in_flight:
            await asyncio.gather(*(f for _, f in in_flight), return_exceptions=True)
    return published, mpubs
