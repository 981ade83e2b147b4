"""Adversarial tests of the JetStream context's lifecycle: calls after close(), close()
while work is in flight, server restarts and outages, bad constructor/connect
arguments, and what the library writes to stderr, against a real nats-server."""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg as NatsMsg
from support import PROBE, Server, WaitFor, until_visible

from aioclients import AioClientsError, InvalidArgumentError
from aioclients.jetstream import (
    JetStream,
    JetStreamClosedError,
    PubAck,
    StoredMessage,
    Stream,
    connect,
)
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = pytest.mark.timeout(60)


def _assert_closed_error(exc: BaseException, what: str = "") -> None:
    assert isinstance(exc, AioClientsError), f"{what}: {exc!r}"
    assert type(exc).__name__.endswith("ClosedError"), f"{what}: {exc!r}"


@pytest.fixture
async def other_nc(nats_server: Server) -> AsyncIterator[NATS]:
    nc = await nats.connect(nats_server.url)
    try:
        yield nc
    finally:
        await nc.close()


# -- calls on a closed context ----------------------------------------------------------------


def _calls(
    js: JetStream, stream: Stream, consumer: Any, subject: str
) -> dict[str, Callable[[], Awaitable[object]]]:
    name = stream.name
    return {
        "publish": lambda: js.publish(subject, b"x"),
        "publish_async": lambda: js.publish_async(subject, b"x"),
        "account_info": js.account_info,
        "create_stream": lambda: js.create_stream(f"{name}_new"),
        "update_stream": lambda: js.update_stream(name, max_msgs=5),
        "stream": lambda: js.stream(name),
        "stream_info": lambda: js.stream_info(name),
        "delete_stream": lambda: js.delete_stream(name),
        "list_streams": lambda: js.list_streams().__anext__(),
        "stream_names": lambda: js.stream_names().__anext__(),
        "create_consumer": lambda: js.create_consumer(name, durable_name="other"),
        "update_consumer": lambda: js.update_consumer(name, durable_name="d"),
        "create_or_update_consumer": lambda: js.create_or_update_consumer(name, durable_name="d"),
        "consumer": lambda: js.consumer(name, "d"),
        "consumer_info": lambda: js.consumer_info(name, "d"),
        "delete_consumer": lambda: js.delete_consumer(name, "d"),
        "list_consumers": lambda: js.list_consumers(name).__anext__(),
        "consumer_names": lambda: js.consumer_names(name).__anext__(),
        "unpin_consumer": lambda: js.unpin_consumer(name, "d", "g"),
        "Stream.info": stream.info,
        "Stream.purge": stream.purge,
        "Stream.get_msg": lambda: stream.get_msg(1),
        "Stream.delete_msg": lambda: stream.delete_msg(1),
        "Stream.direct_get": lambda: stream.direct_get(1),
        "Stream.direct_get(last_by_subj)": lambda: stream.direct_get(last_by_subj=subject),
        "Stream.direct_get_batch": lambda: stream.direct_get_batch(batch=2).__anext__(),
        "Stream.direct_get_last_for": lambda: stream.direct_get_last_for([f"{name}.>"]).__anext__(),
        "Stream.create_consumer": lambda: stream.create_consumer(durable_name="other"),
        "Stream.consumer": lambda: stream.consumer("d"),
        "Stream.delete_consumer": lambda: stream.delete_consumer("d"),
        "Stream.list_consumers": lambda: stream.list_consumers().__anext__(),
        "Stream.unpin_consumer": lambda: stream.unpin_consumer("d", "g"),
        "Consumer.info": consumer.info,
        "Consumer.delete": consumer.delete,
        "Consumer.unpin": lambda: consumer.unpin("g"),
    }


@pytest.mark.parametrize("how", ["owned", "borrowed", "connection-closed"])
async def test_every_call_on_a_closed_context_raises_closed_error(
    nats_server: Server, js: JetStream, unique_name: str, how: str
) -> None:
    subject = f"{unique_name}.x"
    nc: NATS | None = None
    if how == "owned":
        ctx = await connect(nats_server.url, timeout=5.0)
    else:
        nc = await nats.connect(nats_server.url)
        ctx = JetStream(nc, timeout=5.0)
    try:
        stream = await ctx.create_stream(
            unique_name, subjects=[f"{unique_name}.>"], allow_direct=True
        )
        await ctx.publish(subject, b"before")
        consumer = await stream.create_consumer(durable_name="d")
        assert len(ctx.nc._subs) == 2  # the context's request inbox and ack inbox
        if how == "connection-closed":
            assert nc is not None
            await nc.close()
        else:
            await ctx.close()
        assert ctx.closed
        if how == "borrowed":
            assert len(ctx.nc._subs) == 0  # close() released both inboxes

        slow = []
        for what, call in _calls(ctx, stream, consumer, subject).items():
            start = time.monotonic()
            with pytest.raises(AioClientsError) as excinfo:
                await asyncio.wait_for(call(), 5)
            _assert_closed_error(excinfo.value, what)
            if time.monotonic() - start > 0.5:
                slow.append(what)
        assert not slow, f"these took long to fail: {slow}"
        await ctx.close()  # idempotent
        await ctx.close()
    finally:
        await ctx.close()
        if nc is not None:
            await nc.close()
    # Nothing reached the server after close(): the stream and consumer are intact.
    info = await js.stream_info(unique_name)
    assert info.state.messages == 1
    assert [c async for c in js.consumer_names(unique_name)] == ["d"]


async def test_publish_async_complete_on_a_closed_context_raises_closed_error(
    nats_server: Server,
) -> None:
    ctx = await connect(nats_server.url)
    await ctx.close()
    with pytest.raises(AioClientsError) as excinfo:
        await asyncio.wait_for(ctx.publish_async_complete(timeout=1), 2)
    _assert_closed_error(excinfo.value)


async def test_closing_concurrently_and_repeatedly(nats_server: Server, unique_name: str) -> None:
    ctx = await connect(nats_server.url)
    await ctx.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    futures = [await ctx.publish_async(f"{unique_name}.x", b"%d" % i) for i in range(100)]
    await asyncio.wait_for(asyncio.gather(*(ctx.close() for _ in range(5))), 5)
    assert ctx.closed
    assert ctx.nc.is_closed
    assert ctx.publish_async_pending == 0
    for future in futures:  # every ack either arrived or failed with ClosedError
        assert future.done()
        if future.exception() is not None:
            _assert_closed_error(future.exception())  # type: ignore[arg-type]
    await ctx.close()
    async with await connect(nats_server.url) as check:
        await check.delete_stream(unique_name)


# -- close() while work is in flight ----------------------------------------------------------


class SilentDirect:
    """Takes a stream's Direct Get requests in place of the server and answers
    ``replies`` (then nothing more)."""

    def __init__(self, nc: NATS, stream: str) -> None:
        self.nc = nc
        self.stream = stream
        self.replies: list[tuple[dict[str, str], bytes]] = []

    async def _on_request(self, msg: NatsMsg) -> None:
        if msg.data == PROBE:
            await self.nc.publish(msg.reply, b"")
            return
        for headers, data in self.replies:
            await self.nc.publish(msg.reply, data, headers=headers)

    async def start(self) -> None:
        await self.nc.subscribe(f"$JS.API.DIRECT.GET.{self.stream}", cb=self._on_request)
        await self.nc.subscribe(f"$JS.API.DIRECT.GET.{self.stream}.>", cb=self._on_request)
        await self.nc.flush()


def _stored_headers(stream: str, seq: int) -> dict[str, str]:
    return {
        "Nats-Stream": stream,
        "Nats-Subject": f"{stream}.x",
        "Nats-Sequence": str(seq),
        "Nats-Time-Stamp": "2024-01-02T03:04:05.123456789Z",
        "Nats-Num-Pending": "3",
        "Nats-Last-Sequence": str(seq - 1),
    }


@pytest.fixture
async def silent(js: JetStream, other_nc: NATS, unique_name: str) -> SilentDirect:
    # No allow_direct: the server leaves this stream's Direct Get requests to us.
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    responder = SilentDirect(other_nc, unique_name)
    await responder.start()
    await until_visible(js.nc, f"$JS.API.DIRECT.GET.{unique_name}")
    return responder


@pytest.mark.parametrize("how", ["owned", "borrowed"])
async def test_close_ends_a_batch_iteration_in_progress_promptly(
    nats_server: Server, js: JetStream, silent: SilentDirect, how: str
) -> None:
    silent.replies = [(_stored_headers(silent.stream, 1), b"one")]
    if how == "owned":
        ctx = await connect(nats_server.url, timeout=10.0)
        await until_visible(ctx.nc, f"$JS.API.DIRECT.GET.{silent.stream}")
    else:
        ctx = JetStream(js.nc, timeout=10.0)
    stream = await ctx.stream(silent.stream)
    batch = stream.direct_get_batch(batch=4)
    try:
        first = await asyncio.wait_for(batch.__anext__(), 3)
        assert first.seq == 1
        pending = asyncio.ensure_future(batch.__anext__())
        await asyncio.sleep(0.05)
        assert not pending.done()

        await ctx.close()
        with pytest.raises(AioClientsError) as excinfo:
            await asyncio.wait_for(pending, 1.5)
        _assert_closed_error(excinfo.value)
    finally:
        await ctx.close()
        await batch.aclose()


@pytest.mark.parametrize("what", ["account_info", "direct_get"])
async def test_close_fails_a_request_in_flight_promptly_with_closed_error(
    nats_server: Server, other_nc: NATS, silent: SilentDirect, unique_name: str, what: str
) -> None:
    if what == "account_info":
        # A JetStream API prefix served by a listener that never answers.
        prefix = f"api_{unique_name}.API"  # outside the stream's subjects

        async def only_probes(msg: NatsMsg) -> None:
            if msg.data == PROBE:
                await other_nc.publish(msg.reply, b"")

        await other_nc.subscribe(f"{prefix}.>", cb=only_probes)
        await other_nc.flush()
        ctx = await connect(nats_server.url, timeout=10.0, api_prefix=prefix)
        await until_visible(ctx.nc, f"{prefix}.INFO")
        task = asyncio.ensure_future(ctx.account_info())
    else:
        ctx = await connect(nats_server.url, timeout=10.0)
        await until_visible(ctx.nc, f"$JS.API.DIRECT.GET.{silent.stream}")
        stream = await ctx.stream(silent.stream)
        task = asyncio.ensure_future(stream.direct_get(1))  # taken, never answered
    try:
        await asyncio.sleep(0.1)
        assert not task.done()

        await ctx.close()
        with pytest.raises(AioClientsError) as excinfo:
            await asyncio.wait_for(task, 1.5)
        _assert_closed_error(excinfo.value)
    finally:
        await ctx.close()


async def test_close_while_publish_async_waits_for_its_ack_subscription(
    nats_server: Server, unique_name: str
) -> None:
    ctx = await connect(nats_server.url)
    await ctx.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    tasks = [
        asyncio.ensure_future(ctx.publish_async(f"{unique_name}.x", b"%d" % i)) for i in range(20)
    ]
    closer = asyncio.ensure_future(ctx.close())
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
    await closer
    for result in results:
        if isinstance(result, BaseException):
            _assert_closed_error(result)
        else:
            assert result.done()  # its ack arrived or it failed with ClosedError
            if result.exception() is not None:
                _assert_closed_error(result.exception())  # type: ignore[arg-type]
    assert ctx.publish_async_pending == 0
    async with await connect(nats_server.url) as check:
        await check.delete_stream(unique_name)


# -- server restarts and outages --------------------------------------------------------------


@pytest.fixture
async def private(nats_server_private: Server) -> AsyncIterator[tuple[NatsServer, JetStream]]:
    if isinstance(nats_server_private, ExternalServer):
        pytest.skip("restarts the server; cannot restart an external one")
    ctx = await connect(
        nats_server_private.url, timeout=1.5, reconnect_time_wait=0.1, max_reconnect_attempts=-1
    )
    try:
        yield nats_server_private, ctx
    finally:
        nats_server_private.start()
        await ctx.close()


async def _reconnected(ctx: JetStream, wait_for: WaitFor, *, reconnects: int = 1) -> None:
    """Wait until the client has reconnected (``reconnects`` times in all). After a
    restart that blocked the loop, the client may still believe its old socket works."""

    async def connected() -> bool:
        return ctx.nc.stats["reconnects"] >= reconnects and ctx.nc.is_connected

    await wait_for(connected, timeout=10, what="the client to reconnect")


def _settled(futures: list[asyncio.Future[PubAck]]) -> tuple[list[PubAck], list[BaseException]]:
    acks, errors = [], []
    for f in futures:
        exc = f.exception()
        if exc is None:
            acks.append(f.result())
        else:
            errors.append(exc)
    return acks, errors


@pytest.mark.fault
async def test_publish_async_across_a_restart_settles_typed_and_recovers(
    private: tuple[NatsServer, JetStream], wait_for: WaitFor
) -> None:
    server, ctx = private
    stream = await ctx.create_stream("R", subjects=["r.>"], storage="file", allow_direct=True)
    subs = None
    futures: list[asyncio.Future[PubAck]] = []
    raised: list[BaseException] = []
    for i in range(200):
        if i == 100:
            server.restart()  # blocks the loop: in-flight frames and acks are lost
        try:
            futures.append(await ctx.publish_async("r.x", b"%d" % i))
        except AioClientsError as exc:
            raised.append(exc)
        if subs is None:
            subs = len(ctx.nc._subs)
    _, pending = await asyncio.wait(futures, timeout=ctx.timeout + 3)
    assert not pending, "every ack future settles by its deadline"
    acks, errors = _settled(futures)
    assert all(isinstance(e, AioClientsError) for e in errors + raised), errors + raised
    assert ctx.publish_async_pending == 0

    await _reconnected(ctx, wait_for)
    assert len(ctx.nc._subs) == subs
    after = await ctx.publish("r.x", b"after", timeout=5)
    assert after.stream == "R"
    # Every acknowledged message is stored with its payload (file storage survived).
    for ack in acks:
        stored = await stream.get_msg(ack.seq)
        assert stored.seq == ack.seq
    assert len({a.seq for a in acks}) == len(acks)


@pytest.mark.fault
async def test_publish_async_during_an_outage_settles_and_recovers(
    private: tuple[NatsServer, JetStream], wait_for: WaitFor
) -> None:
    server, ctx = private
    await ctx.create_stream("O", subjects=["o.>"], storage="file")
    assert (await ctx.publish("o.x", b"before")).seq == 1
    server.stop()

    async def disconnected() -> bool:
        return not ctx.nc.is_connected

    await wait_for(disconnected, timeout=5, what="the client to notice")
    futures: list[asyncio.Future[PubAck]] = []
    for i in range(10):
        try:
            futures.append(await ctx.publish_async("o.x", b"%d" % i))
        except AioClientsError:
            pass  # refusing while disconnected is fine too
    server.start()
    _, pending = await asyncio.wait(futures, timeout=ctx.timeout + 3)
    assert not pending
    acks, errors = _settled(futures)
    assert all(isinstance(e, AioClientsError) for e in errors), errors
    assert ctx.publish_async_pending == 0

    await _reconnected(ctx, wait_for)
    ack = await ctx.publish("o.x", b"after", timeout=5)
    # At least every acknowledged message was stored; unacked ones may or may not be.
    assert 2 + len(acks) <= ack.seq <= 2 + len(futures)


@pytest.mark.fault
async def test_batch_read_across_a_restart_is_bounded_and_typed(
    private: tuple[NatsServer, JetStream], wait_for: WaitFor
) -> None:
    server, ctx = private
    stream = await ctx.create_stream("B", subjects=["b.>"], storage="file", allow_direct=True)
    for i in range(1500):
        await ctx.publish_async("b.x", b"%05d" % i + b"." * 1000)
    await ctx.publish_async_complete(timeout=10)
    subs = len(ctx.nc._subs)

    got: list[StoredMessage] = []
    error: BaseException | None = None
    start = time.monotonic()
    try:
        async for msg in stream.direct_get_batch(batch=1500):
            got.append(msg)
            if len(got) == 1:
                server.restart()
    except AioClientsError as exc:
        error = exc
    assert error is None or isinstance(error, TimeoutError), repr(error)
    assert time.monotonic() - start < ctx.timeout + 3
    # Whatever arrived is the stream's prefix, in order, intact.
    assert [m.seq for m in got] == list(range(1, len(got) + 1))
    assert all(m.data == b"%05d" % (m.seq - 1) + b"." * 1000 for m in got)
    assert len(ctx.nc._subs) == subs

    await _reconnected(ctx, wait_for)
    assert [m.seq async for m in stream.direct_get_batch(batch=1500)] == list(range(1, 1501))
    last = [m.seq async for m in stream.direct_get_last_for(["b.>"])]
    assert last == [1500]


@pytest.mark.fault
async def test_calls_during_an_outage_fail_typed_within_their_timeout(
    private: tuple[NatsServer, JetStream], wait_for: WaitFor
) -> None:
    server, ctx = private
    stream = await ctx.create_stream("U", subjects=["u.>"], allow_direct=True)
    await ctx.publish("u.x", b"x")
    server.stop()
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "account_info": ctx.account_info,
        "stream_info": stream.info,
        "direct_get": lambda: stream.direct_get(1),
        "direct_get_batch": lambda: stream.direct_get_batch(batch=2).__anext__(),
        "publish": lambda: ctx.publish("u.x", b"y"),
    }

    async def outcome(call: Callable[[], Awaitable[object]]) -> tuple[object, float]:
        start = time.monotonic()
        try:
            result: object = await asyncio.wait_for(call(), ctx.timeout + 2)
        except Exception as exc:
            result = exc
        return result, time.monotonic() - start

    outcomes = await asyncio.gather(*(outcome(call) for call in calls.values()))
    for what, (result, elapsed) in zip(calls, outcomes, strict=True):
        assert isinstance(result, AioClientsError), f"{what}: {result!r}"
        assert elapsed < ctx.timeout + 1, f"{what} took {elapsed:.1f}s"
    assert ctx.publish_async_pending == 0
    server.start()
    await _reconnected(ctx, wait_for)
    assert (await ctx.account_info()) is not None


# -- bad constructor and connect arguments ----------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": math.nan},
        {"max_pending": 0},
        {"max_pending": -5},
        {"domain": ""},
        {"domain": "a.b"},
        {"domain": "x", "api_prefix": "$JS.other.API"},
        {"api_prefix": ""},
        {"api_prefix": "a b"},
        {"api_prefix": "trailing."},
    ],
    ids=repr,
)
async def test_bad_context_arguments_raise_invalid_argument(
    nats_server: Server, other_nc: NATS, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InvalidArgumentError):
        JetStream(other_nc, **kwargs)
    with pytest.raises(InvalidArgumentError):
        await asyncio.wait_for(connect(nats_server.url, **kwargs), 5)


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout": "5"}, {"max_pending": "3"}, {"domain": 5}, {"api_prefix": 5}],
    ids=repr,
)
async def test_wrong_typed_context_arguments_raise_invalid_argument(
    other_nc: NATS, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InvalidArgumentError):
        JetStream(other_nc, **kwargs)


@pytest.mark.parametrize("servers", [123, None, "::::"], ids=repr)
async def test_bad_servers_raise_an_aioclients_error(servers: Any) -> None:
    with pytest.raises(AioClientsError):
        await asyncio.wait_for(connect(servers, timeout=0.5), 5)


async def test_an_empty_server_list_is_invalid_input() -> None:
    # Nothing to connect to is a mistake in the call, reported before any attempt.
    with pytest.raises(InvalidArgumentError, match="non-empty list"):
        await asyncio.wait_for(connect([], timeout=0.5), 5)


# -- stderr and logging -----------------------------------------------------------------------


NORMAL_RUN = """
import asyncio, gc, sys
from aioclients.jetstream import MessageNotFoundError, NoStreamResponseError, connect

async def main(url, name):
    async with await connect(url) as js:
        s = await js.create_stream(name, subjects=[name + ".>"], allow_direct=True)
        for i in range(50):
            await js.publish_async(f"{name}.{i % 5}", b"x")
        await js.publish_async_complete(timeout=5)
        await js.publish(name + ".0", b"y", msg_id="a")
        await js.publish(name + ".0", b"y", msg_id="a")
        await s.direct_get(1)
        async for m in s.direct_get_batch(batch=10):
            if m.seq == 3:
                break  # abandoned without aclose()
        async with s.direct_get_batch(batch=10) as b:
            async for m in b:
                break
        [m async for m in s.direct_get_last_for([name + ".>"], batch=2)]
        try:
            await s.direct_get(1000)
        except MessageNotFoundError:
            pass
        try:
            await js.publish(name + "_nostream.x", b"")
        except NoStreamResponseError:
            pass
        await js.delete_stream(name)
    gc.collect()
    await asyncio.sleep(0.05)

asyncio.run(main(sys.argv[1], sys.argv[2]))
gc.collect()
"""


async def test_nothing_is_printed_to_stderr_in_normal_operation(
    nats_server: Server, unique_name: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        NORMAL_RUN,
        nats_server.url,
        unique_name,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert err == b"", err.decode()
    assert out == b""


RESTART_RUN = """
import asyncio, logging
from aioclients.jetstream import connect
from aioclients.testing import NatsServer

logging.basicConfig(format="%(name)s|%(levelname)s|%(message)s", level=logging.DEBUG)
logging.getLogger("asyncio").setLevel(logging.WARNING)

async def main():
    with NatsServer() as server:
        js = await connect(server.url, timeout=1.0, reconnect_time_wait=0.1)
        await js.create_stream("L", subjects=["l.>"], storage="file", allow_direct=True)
        futures = [await js.publish_async("l.x", b"x") for _ in range(20)]
        server.restart()
        await asyncio.wait(futures, timeout=3)
        for future in futures:  # a careful caller looks at every outcome
            if future.done():
                future.exception()
        for _ in range(100):
            if js.nc.is_connected:
                break
            await asyncio.sleep(0.05)
        await js.publish("l.x", b"after", timeout=3)
        await js.close()

asyncio.run(main())
"""


@pytest.mark.fault
async def test_a_restart_is_reported_through_aioclients_loggers_only(
    own_server_allowed: None,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(RESTART_RUN),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 40)
    lines = err.decode().splitlines()
    assert proc.returncode == 0, "\n".join(lines)
    assert out == b""
    # Each log record starts with "name|LEVEL|"; other lines continue the record above.
    record = re.compile(r"([\w.]+)\|(DEBUG|INFO|WARNING|ERROR|CRITICAL)\|")
    assert not lines or record.match(lines[0]), "\n".join(lines)
    names = [m.group(1) for m in map(record.match, lines) if m]
    stray = sorted({n for n in names if not n.startswith("aioclients")})
    assert not stray, "logged outside the aioclients loggers: " + ", ".join(stray)
    levels = [m.group(2) for m in map(record.match, lines) if m]
    assert {"WARNING", "ERROR"} & set(levels), "the lost connection was not reported at all"


async def test_many_contexts_on_one_connection_neither_chain_nor_stay_alive(
    other_nc: NATS,
) -> None:
    import gc
    import weakref

    class Listener:
        def __init__(self) -> None:
            self.heard: list[str] = []

        def connection_lost(self) -> None:
            self.heard.append("lost")

        def connection_restored(self) -> None:
            self.heard.append("restored")

        def context_closed(self) -> None:
            self.heard.append("closed")

    # Each context (and each consume in it) listens for the connection dropping and
    # closing; thousands on one connection must not pile up callbacks (nor stay
    # alive through them).
    contexts = [JetStream(other_nc) for _ in range(3000)]
    for js in contexts:
        js._jsapi.add_listener(Listener())
    alive = weakref.ref(contexts[0])
    del contexts, js
    gc.collect()
    assert alive() is None
    kept = JetStream(other_nc)
    listener = Listener()
    kept._jsapi.add_listener(listener)
    requested = asyncio.Event()

    async def swallow(msg: NatsMsg) -> None:
        requested.set()  # and never answer

    await other_nc.subscribe("$SWALLOW.API.>", cb=swallow)
    js = JetStream(other_nc, api_prefix="$SWALLOW.API", timeout=60.0)
    waiting = asyncio.ensure_future(js.account_info())
    await asyncio.wait_for(requested.wait(), 10)
    await other_nc.close()  # closed by its owner: the request fails at once
    with pytest.raises(JetStreamClosedError):
        await asyncio.wait_for(waiting, 10)
    assert listener.heard == ["lost", "closed"]
