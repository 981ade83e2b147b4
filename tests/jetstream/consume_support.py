"""Helpers shared by the pull-consumption tests (imported, not a conftest)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from support import until_visible

from aioclients.jetstream import Consumer, JetStream
from aioclients.jetstream._protocol._ordered import ack_sequences

#: what ordered consumes register on our client: ``handler(frames)``, a run of
#: ``(MSG, subject, sid, reply, header, payload)`` (see NatsTransport.subscribe_runs)
RunHandler = Callable[[list[tuple[Any, ...]]], None]


async def publish_many(js: JetStream, subject: str, count: int, payload: bytes = b"x") -> None:
    """Publish ``count`` messages (payload ``payload + b"-<i>"``) and wait for every ack."""
    for i in range(count):
        await js.publish_async(subject, payload + b"-%d" % i)
    await js.publish_async_complete(timeout=30)


async def next_event(queue: asyncio.Queue[Any], kind: type, timeout: float = 10.0) -> Any:
    """The next event of type ``kind`` from ``queue`` (other events are skipped)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"no {kind.__name__} event within {timeout}s")
        event = await asyncio.wait_for(queue.get(), left)
        if isinstance(event, kind):
            return event


async def until_pull_waiting(consumer: Consumer, count: int = 1, timeout: float = 5.0) -> None:
    """Wait until the server holds at least ``count`` waiting pull requests for
    ``consumer`` (its ``num_waiting``): proof that a pull reached the server, so a
    test acts on a client that is really blocked on an open pull."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        waiting = (await consumer.info()).num_waiting
        if waiting >= count:
            return
        if loop.time() > deadline:
            raise AssertionError(
                f"the server held {waiting} waiting pulls for {consumer.name}, "
                f"not {count}, after {timeout}s"
            )
        await asyncio.sleep(0.01)  # poll interval of a bounded wait


class PullSnoop:
    """Records the bodies of the pull requests sent to one consumer (a second,
    plain nats-py connection subscribed to its ``CONSUMER.MSG.NEXT`` subject)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    async def wait_count(self, count: int, timeout: float = 5.0) -> None:
        """Wait until ``count`` pull requests were seen."""
        async with asyncio.timeout(timeout):
            while len(self.bodies) < count:
                self.changed.clear()
                await self.changed.wait()

    async def _on(self, msg: NatsMsg) -> None:
        self.bodies.append(json.loads(msg.data) if msg.data else {})
        self.changed.set()


@asynccontextmanager
async def snoop_pulls(
    js: JetStream, url: str, stream: str, consumer: str
) -> AsyncIterator[PullSnoop]:
    """Record the pulls ``js`` sends to ``stream``/``consumer``.

    nats-py's flush() can return before the server has read the SUBs before it
    (see ``support.subscriptions_live``); a probe answered through the same
    snooping connection fences that before the test pulls.
    """
    snoop = PullSnoop()
    nc: NATS = await nats.connect(url)
    probe_subject = f"_snoop.{stream}.{consumer}"

    async def answer(msg: NatsMsg) -> None:
        await msg.respond(b"ok")

    try:
        await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", cb=snoop._on)
        await nc.subscribe(probe_subject, cb=answer)
        await nc.flush()
        await until_visible(js.nc, probe_subject)
        yield snoop
    finally:
        await nc.close()


class LoseOne:
    """Loses the delivery numbered ``consumer_seq`` by the first consumer that gets
    that far: the ordered consumer sees a gap and replaces its consumer. Runs read
    as frames and runs read as columns (with or without headers) alike."""

    def __init__(self, js: JetStream, consumer_seq: int) -> None:
        self.nc: Any = js.nc
        self.consumer_seq = consumer_seq
        self.lost: list[int] = []

        def wrapping(wrap: Callable[[Any], Any]) -> type[dict[int, Any]]:
            class Handlers(dict[int, Any]):
                def __setitem__(self, sid: int, handler: Any) -> None:
                    super().__setitem__(sid, wrap(handler))

            return Handlers

        # ordered consumes take their deliveries a run at a time
        nc = self.nc
        nc._run_handlers = wrapping(self.wrap)(nc._run_handlers)
        nc._deliveries_handlers = wrapping(self.wrap_columns)(nc._deliveries_handlers)
        nc._header_deliveries_handlers = wrapping(self.wrap_columns)(nc._header_deliveries_handlers)

    def _loses(self, reply: bytes) -> bool:
        text = reply.decode()
        if not self.lost and text.startswith("$JS.ACK"):
            sseq, cseq, _, _ = ack_sequences(text)
            if cseq == self.consumer_seq:
                self.lost.append(sseq)
                return True
        return False

    def wrap(self, handler: RunHandler) -> RunHandler:
        def lossy(frames: list[tuple[Any, ...]]) -> None:
            kept = [frame for frame in frames if not self._loses(frame[3])]
            if kept:
                handler(kept)

        return lossy

    def wrap_columns(self, handler: Callable[..., None]) -> Callable[..., None]:
        def lossy(subjects: Any, replies: Any, *rest: Any) -> None:
            keep = [not self._loses(reply) for reply in replies]
            columns = [
                [item for item, kept in zip(column, keep, strict=True) if kept]
                for column in (subjects, replies, *rest)
            ]
            if columns[0]:
                handler(*columns)

        return lossy
