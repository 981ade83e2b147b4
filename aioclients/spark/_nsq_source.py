"""The ``nsq`` streaming source: at-least-once micro-batches from an NSQ channel.

Theory of operation. NSQ keeps no replayable log: a channel hands each message to
one consumer and forgets it once finished (FIN). So the source never finishes a
message before Spark has made the micro-batch holding it durable:

- The driver-side reader (Spark runs it in one long-lived Python process per
  query) starts an :class:`aioclients.nsq.Reader` on an event loop in a
  background thread. Received messages stay in flight at nsqd, held in a
  :class:`~aioclients.spark._protocol._held_batches.HeldBatches` and TOUCHed
  every third of ``msgTimeout`` so that nsqd does not re-queue them.
- Offsets are ``{"batch": n}``, a counter that only grows. ``latestOffset``
  puts up to ``maxMessagesPerTrigger`` held messages into batch ``n + 1``;
  ``partitions`` hands that batch's rows to the executors inside the
  partitions (executors never talk to nsqd); ``commit`` FINishes them. When
  Spark asks for the next batch, the previous one is in its commit log, so
  ``latestOffset`` also FINishes everything up to its start (the last batch of
  an idle query would otherwise stay in flight).
- Memory is bounded by ``maxInFlight``: nsqd sends no more than that many
  unfinished messages (RDY).
- A stopped query re-queues what it holds (REQ, no delay) and closes; a killed
  one leaves its messages to time out after ``msgTimeout``, and so, mostly, does a
  failed one (Spark ends the source's process right after asking it to stop, often
  before the REQs are out). Either way nsqd delivers them
  again, to the restarted query or another consumer of the channel. A batch
  replayed from the checkpoint after a restart is not held by the new process:
  it is empty, and its messages arrive again in later batches. Hence at least
  once: a batch written by the sink but not committed is read twice. NSQ keeps
  no order, and a message held longer than nsqd's ``--max-msg-timeout`` (15
  minutes by default) is re-delivered even while touched.
- The loop's tasks (the one reading the Reader, the TOUCH rounds) belong to one
  :class:`TaskOwner`. If one fails (the Reader's iteration ends with an error),
  the next call from Spark raises it, so the query fails instead of waiting for
  messages that never come; stopping cancels and awaits them all.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aioclients import nsq
from aioclients._core import redact_text
from aioclients._errors import AioClientsError, ConnectError
from aioclients._tasks import TaskOwner
from aioclients.nsq._protocol._frames import is_valid_name
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._protocol._held_batches import HeldBatches
from aioclients.spark._protocol._options import OptionReader

__all__ = ("NSQ_SCHEMA", "HeldRows", "NsqStreamReader", "check_schema")

log = logging.getLogger("aioclients.spark.nsq")

FORMAT = "nsq"
NSQ_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("channel", StringType()),
        StructField("id", StringType()),
        StructField("timestamp", TimestampType()),
        StructField("attempts", IntegerType()),
        StructField("body", BinaryType()),
        StructField("nsqd", StringType()),
    ]
)
NSQ_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("channel", pa.string()),
        pa.field("id", pa.string()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("attempts", pa.int32()),
        pa.field("body", pa.binary()),
        pa.field("nsqd", pa.string()),
    ]
)
DEFAULT_MAX_PER_TRIGGER = 10_000
DEFAULT_MSG_TIMEOUT = 60.0  # nsqd's default --msg-timeout
DEFAULT_TIMEOUT = 30.0
ROWS_PER_PARTITION = 5_000
READ_OPTIONS = {
    "nsqd",
    "lookupd",
    "topic",
    "channel",
    "maxMessagesPerTrigger",
    "maxInFlight",
    "msgTimeout",
    "timeout",
}
SPARK_OPTIONS = {"path", "checkpointLocation", "queryName"}

T = TypeVar("T")


def check_schema(schema: StructType) -> None:
    if schema != NSQ_SCHEMA:
        raise DataSourceOptionError(
            f"the {FORMAT} source has a fixed schema ({NSQ_SCHEMA.simpleString()}); "
            "do not pass .schema(...) to the reader"
        )


@dataclass(frozen=True, slots=True)
class ReadConfig:
    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    topic: str
    channel: str
    max_per_trigger: int
    max_in_flight: int
    msg_timeout: float
    timeout: float


def _addresses(opts: OptionReader, name: str, example: str) -> tuple[str, ...]:
    raw = opts.get(name)
    if raw is None:
        return ()
    out = []
    for item in (a.strip() for a in raw.split(",")):
        if not item:
            continue
        bare = item.split("://", 1)[-1].rstrip("/")
        host, sep, port = bare.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DataSourceOptionError(
                f"option {name!r}: {item!r} is not host:port; use .option({name!r}, {example!r})"
            )
        out.append(item)
    return tuple(out)


def read_config(options: Mapping[str, str]) -> ReadConfig:
    opts = OptionReader(options, FORMAT)
    unknown = opts.unknown(READ_OPTIONS | SPARK_OPTIONS)
    if unknown:
        raise DataSourceOptionError(
            f"unknown option(s) {unknown} for the {FORMAT} stream reader; "
            f"it takes {sorted(READ_OPTIONS)} (names are case-insensitive)"
        )
    nsqd = _addresses(opts, "nsqd", "127.0.0.1:4150")
    lookupd = _addresses(opts, "lookupd", "127.0.0.1:4161")
    if not nsqd and not lookupd:
        raise DataSourceOptionError(
            f"the {FORMAT} stream reader needs 'nsqd' (comma list of nsqd TCP addresses) "
            "or 'lookupd' (comma list of nsqlookupd HTTP addresses); add .option(\"nsqd\", "
            '"127.0.0.1:4150") or .option("lookupd", "127.0.0.1:4161")'
        )
    topic = opts.required("topic", "events", "the NSQ topic to read")
    channel = opts.required("channel", "spark", "the NSQ channel to consume")
    for name, value in (("topic", topic), ("channel", channel)):
        if not is_valid_name(value):
            raise DataSourceOptionError(
                f"option {name!r}: {value!r} is not a valid NSQ {name} name (1 to 64 "
                "characters of letters, digits, '.', '_', '-', optionally ending in '#ephemeral')"
            )
    per_trigger = opts.integer(
        "maxMessagesPerTrigger", default=DEFAULT_MAX_PER_TRIGGER, minimum=1, example="10000"
    )
    assert per_trigger is not None
    in_flight = opts.integer("maxInFlight", default=per_trigger, minimum=1, example="10000")
    assert in_flight is not None
    return ReadConfig(
        nsqd=nsqd,
        lookupd=lookupd,
        topic=topic,
        channel=channel,
        max_per_trigger=per_trigger,
        max_in_flight=in_flight,
        msg_timeout=opts.seconds("msgTimeout", default=DEFAULT_MSG_TIMEOUT),
        timeout=opts.seconds("timeout", default=DEFAULT_TIMEOUT),
    )


@dataclass(frozen=True)
class HeldRows(InputPartition):
    """Rows of one micro-batch (or a slice of it), carried to the executor that emits them."""

    topic: str
    channel: str
    ids: list[str] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)  # microseconds
    attempts: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    nsqd: list[str] = field(default_factory=list)


def _rows(config: ReadConfig, messages: list[nsq.Message]) -> HeldRows:
    return HeldRows(
        topic=config.topic,
        channel=config.channel,
        ids=[m.id.decode("ascii", "replace") for m in messages],
        timestamps=[m.timestamp // 1000 for m in messages],
        attempts=[m.attempts for m in messages],
        bodies=[m.body for m in messages],
        nsqd=[m.nsqd_address for m in messages],
    )


def _record_batch(part: HeldRows) -> pa.RecordBatch:
    count = len(part.ids)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([part.topic] * count, pa.string()),
            pa.array([part.channel] * count, pa.string()),
            pa.array(part.ids, pa.string()),
            pa.array(part.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(part.attempts, pa.int32()),
            pa.array(part.bodies, pa.binary()),
            pa.array(part.nsqd, pa.string()),
        ],
        schema=NSQ_ARROW_SCHEMA,
    )


class _HeldConsumer:
    """An nsq.Reader on an event loop in a background thread, holding what it receives.

    Every method but :meth:`call` runs on that loop; :meth:`call` runs a coroutine
    there from Spark's thread and waits for it (bounded).
    """

    def __init__(self, config: ReadConfig, last_batch: int) -> None:
        self.config = config
        self.held: HeldBatches[nsq.Message] = HeldBatches(config.msg_timeout / 3, last_batch)
        self._loop = asyncio.new_event_loop()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopping: asyncio.Event | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks = TaskOwner(f"nsq source {config.topic}/{config.channel}", self._failed)
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="aioclients-spark-nsq", daemon=True)

    # -- Spark's thread -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        try:
            self._ready.result(self.config.timeout + 5.0)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ConnectError(
                f"the nsq source could not start within {self.config.timeout}s; check the "
                "'nsqd' / 'lookupd' options"
            ) from None

    def call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``make()`` on the loop and wait for it (bounded).

        Raises:
            ConnectError: the source stopped consuming (the error it met is the cause).
            TimeoutError: the loop did not answer in time.
        """
        self._check()
        future = asyncio.run_coroutine_threadsafe(make(), self._loop)
        try:
            return future.result(self.config.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"the nsq source's event loop did not answer within {self.config.timeout}s"
            ) from None

    def close(self) -> None:
        """Re-queue what is held, close the Reader and end the thread (bounded)."""
        if self._thread.is_alive() and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(self.config.timeout + 10.0)

    def _check(self) -> None:
        failure = self._failure
        if failure is not None:
            config = self.config
            raise ConnectError(
                f"the nsq source stopped consuming {config.topic}/{config.channel}: "
                f"{type(failure).__name__}: {redact_text(str(failure))}"
            ) from failure

    # -- the loop's thread ---------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        """A task of the loop failed: the next call from Spark raises it."""
        log.error("nsq source: %s: %s", type(exc).__name__, redact_text(str(exc)))
        self._failure = exc

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # pragma: no cover - _main reports its own errors
            if not self._ready.done():
                self._ready.set_exception(exc)
        finally:
            self._loop.close()

    async def _main(self) -> None:
        config = self.config
        self._stopping = asyncio.Event()
        reader = nsq.Reader(
            config.topic,
            config.channel,
            nsqd_tcp_addresses=list(config.nsqd),
            lookupd_http_addresses=list(config.lookupd),
            max_in_flight=config.max_in_flight,
            max_attempts=0,  # never give up on (finish) a message behind Spark's back
            msg_timeout=config.msg_timeout,
            connect_timeout=min(config.timeout, 10.0),
        )
        try:
            await reader.start()
        except AioClientsError as exc:
            where = ", ".join(config.nsqd or config.lookupd)
            self._ready.set_exception(
                ConnectError(
                    f"the nsq source cannot consume {config.topic}/{config.channel} from "
                    f"{where}: {redact_text(str(exc))}; check the 'nsqd' / 'lookupd' options"
                )
            )
            return
        self._ready.set_result(None)
        self._tasks.start(self._consume(reader), name="consume")
        try:
            await self._stopping.wait()
        finally:
            await self._tasks.aclose()
            if self._timer is not None:
                self._timer.cancel()
            held = self.held.release()
            if held:
                log.info(
                    "nsq source stopping: re-queueing %d unfinished message(s) of %s/%s",
                    len(held),
                    config.topic,
                    config.channel,
                )
            with contextlib.suppress(AioClientsError, TimeoutError):
                await asyncio.wait_for(self._answer(held, finish=False), config.timeout)
            await reader.close()

    async def _consume(self, reader: nsq.Reader) -> None:
        async for msg in reader:
            self.held.receive(msg, self._loop.time())
            if self._timer is None:
                self._arm()

    def _arm(self) -> None:
        when = self.held.get_timer()
        self._timer = None if when is None else self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        due = list(self.held.handle_timer(self._loop.time()))
        if due and not self._tasks.closed:
            self._tasks.start(self._touch(due), name="touch")
        self._arm()

    async def _touch(self, messages: list[nsq.Message]) -> None:
        for msg in messages:
            if not msg.has_responded:
                try:
                    await msg.touch()
                except AioClientsError as exc:  # its connection is gone: nsqd re-delivers it
                    log.debug("nsq source: TOUCH failed: %s", exc)

    async def _answer(self, messages: list[nsq.Message], *, finish: bool) -> None:
        for msg in messages:
            if msg.has_responded:
                continue
            try:
                if finish:
                    await msg.finish()
                else:
                    await msg.requeue(0, backoff=False)
            except AioClientsError as exc:
                log.debug("nsq source: FIN/REQ failed: %s", exc)

    async def plan(self, start: int, limit: int | None) -> int:
        self._check()
        self.held.continue_after(start)
        # Spark asks for a new batch only once the one ending at `start` is in its
        # commit log: finish it (and anything before) now.
        await self._answer(self.held.commit(start), finish=True)
        return self.held.plan(limit)

    async def messages(self, start: int, end: int) -> list[nsq.Message]:
        return self.held.messages(start, end)

    async def commit(self, end: int) -> int:
        self._check()
        done = self.held.commit(end)
        await self._answer(done, finish=True)
        return len(done)


def _batch(offset: Mapping[str, Any]) -> int:
    value = offset.get("batch")
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataSourceOptionError(
            f"the checkpoint's offset {dict(offset)} is not an nsq source offset; "
            "use a new checkpointLocation"
        )
    return value


class NsqStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("nsq")``: held micro-batches, finished once committed."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.config = read_config(options)
        # Started on first use, on the driver only: executors build their own
        # instance just to call read(), which needs no connection.
        self._consumer: _HeldConsumer | None = None

    def _started(self, last_batch: int = 0) -> _HeldConsumer:
        if self._consumer is None:
            consumer = _HeldConsumer(self.config, last_batch)
            consumer.start()
            self._consumer = consumer
        return self._consumer

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.config.max_per_trigger)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        first = _batch(start)
        consumer = self._started(first)
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return {"batch": consumer.call(lambda: consumer.plan(first, rows))}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[HeldRows]:
        first, last = _batch(start), _batch(end)
        consumer = self._started(first)
        messages = consumer.call(lambda: consumer.messages(first, last))
        if not messages:
            if last > first:
                log.warning(
                    "nsq source: micro-batch(es) %d..%d were planned by an earlier run of this "
                    "query and are not held any more; nsqd delivers their messages again, "
                    "in later micro-batches",
                    first + 1,
                    last,
                )
            return [HeldRows(self.config.topic, self.config.channel)]
        return [
            _rows(self.config, messages[i : i + ROWS_PER_PARTITION])
            for i in range(0, len(messages), ROWS_PER_PARTITION)
        ]

    def read(self, partition: HeldRows) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if partition.ids:
            yield _record_batch(partition)

    def commit(self, end: dict[str, Any]) -> None:
        last = _batch(end)
        consumer = self._started(last)
        finished = consumer.call(lambda: consumer.commit(last))
        log.debug("nsq source: batch %d committed, %d message(s) finished", last, finished)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
