"""End-to-end: Reader, Producer and HTTPProducer against nsqd and nsqlookupd.

Run against the emulators by default, or real servers named by
AIOCLIENTS_TEST_NSQD_TCP / _NSQD_HTTP / _NSQLOOKUPD_HTTP (tests needing several nsqd,
or stopping one, skip themselves then; the external nsqd must register with the
external nsqlookupd). Tests that restart one nsqd run then on a real nsqd of their
own when AIOCLIENTS_TEST_NSQ_BIN_DIR names the binaries.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from aioclients.nsq import (
    HTTPProducer,
    Message,
    NSQConnectError,
    NSQError,
    Producer,
    Reader,
    _producer,
)
from tests.nsq.nsq_processes import BIN_DIR_ENV, nsq_bin_dir, nsqd_server, tls_server_context

WaitFor = Callable[..., Awaitable[None]]


@pytest.fixture
async def restartable_nsqd(nsqd: Any) -> AsyncIterator[Any]:
    """The ``nsqd`` fixture, or, when that is an external nsqd (which a test may not
    stop), a real nsqd of the test's own from ``$AIOCLIENTS_TEST_NSQ_BIN_DIR``."""
    if not getattr(nsqd, "external", False):
        yield nsqd
        return
    if nsq_bin_dir() is None:
        pytest.skip(
            f"stops an nsqd; cannot with an external one (set {BIN_DIR_ENV} to run it "
            "on a real nsqd of its own)"
        )
    async with nsqd_server() as server:
        yield server


def topic_name() -> str:
    return f"it_{uuid.uuid4().hex[:12]}"


async def cluster(nsqd: Any, nsqd_factory: Any, n: int) -> list[Any]:
    """``n`` nsqd (the ``nsqd`` fixture plus emulators), or only the external one."""
    if getattr(nsqd, "external", False):
        return [nsqd]
    return [nsqd] + [await nsqd_factory() for _ in range(n - 1)]


def link(lookupd: Any, servers: list[Any]) -> None:
    for server in servers:
        lookupd.register(server)


async def publish_spread(
    servers: list[Any], topic: str, count: int, batch: int = 500
) -> set[bytes]:
    bodies = [b"m%06d" % i for i in range(count)]
    producers = [Producer(s.tcp_address) for s in servers]
    try:
        for i in range(0, count, batch):
            await producers[(i // batch) % len(producers)].mpublish(topic, bodies[i : i + batch])
    finally:
        for p in producers:
            await p.close()
    return set(bodies)


async def test_three_nsqd_behind_a_lookupd_every_message_finished_once(
    nsqd: Any, nsqd_factory: Any, nsqlookupd: Any, wait_for: WaitFor
) -> None:
    servers = await cluster(nsqd, nsqd_factory, 3)
    link(nsqlookupd, servers)
    topic = topic_name()
    expected = await publish_spread(servers, topic, 20_000)
    seen: list[bytes] = []
    async with Reader(
        topic,
        "ch",
        lookupd_http_addresses=[nsqlookupd.http_address],
        max_in_flight=50,
        lookupd_poll_interval=0.5,
    ) as reader:

        async def all_connected() -> bool:  # a real nsqd registers with lookupd a bit later
            return len(reader.statistics().connections) == len(servers)

        await wait_for(all_connected, timeout=10, what="a connection to every nsqd")

        async def consume() -> None:
            async for msg in reader:
                seen.append(msg.body)
                await msg.finish()
                if len(seen) == len(expected):
                    break

        await asyncio.wait_for(consume(), 60)
        stats = reader.statistics()
        assert stats.messages_finished == len(expected)
        assert stats.total_rdy <= 50
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected


async def test_failing_handler_engages_backoff_and_recovers(nsqd: Any, wait_for: WaitFor) -> None:
    topic = topic_name()
    async with Producer(nsqd.tcp_address) as producer:
        await producer.mpublish(topic, [b"%d" % i for i in range(20)])
    failures = 3
    done: set[bytes] = set()
    saw_backoff = asyncio.Event()

    async with Reader(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=5,
        requeue_delay=0.0,
        max_backoff_duration=0.4,
        backoff_multiplier=0.05,
    ) as reader:

        async def handler(msg: Message) -> None:
            nonlocal failures
            if failures:
                failures -= 1
                if reader.statistics().in_backoff:
                    saw_backoff.set()
                raise RuntimeError("downstream is down")
            done.add(msg.body)

        async def check_backoff() -> bool:
            if reader.statistics().in_backoff:
                saw_backoff.set()
            return len(done) == 20 and not reader.statistics().in_backoff

        runner = asyncio.ensure_future(reader.run(handler))
        try:
            await wait_for(check_backoff, timeout=20, interval=0.01, what="all 20 handled")
        finally:
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
        stats = reader.statistics()
    assert saw_backoff.is_set()
    assert stats.backoff_level == 0
    assert stats.messages_requeued == 3
    assert stats.total_rdy == 5  # full flow again


async def test_max_attempts_calls_on_give_up(nsqd: Any, wait_for: WaitFor) -> None:
    topic = topic_name()
    given_up: list[Message] = []
    async with Producer(nsqd.tcp_address) as producer:
        await producer.publish(topic, b"poison")
    async with Reader(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_attempts=3,
        requeue_delay=0.0,
        max_backoff_duration=0,
        on_give_up=given_up.append,
    ) as reader:

        async def handler(msg: Message) -> None:
            raise ValueError("always fails")

        runner = asyncio.ensure_future(reader.run(handler))

        async def gave_up() -> bool:
            return bool(given_up)

        try:
            await wait_for(gave_up, timeout=10, what="on_give_up")
        finally:
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
        stats = reader.statistics()
    assert [(m.body, m.attempts) for m in given_up] == [(b"poison", 4)]
    assert stats.messages_requeued == 3
    assert stats.messages_given_up == 1


@pytest.mark.fault
async def test_stopped_nsqd_is_dropped_and_rediscovered(
    nsqd: Any, nsqd_factory: Any, nsqlookupd: Any, wait_for: WaitFor
) -> None:
    if getattr(nsqd, "external", False) or getattr(nsqlookupd, "external", False):
        pytest.skip(
            "stops an nsqd; cannot with external servers (test_kill_nsqd.py kills and "
            "restarts one of two real nsqd under a real nsqlookupd instead)"
        )
    other = await nsqd_factory()
    link(nsqlookupd, [nsqd, other])
    topic = topic_name()
    for server in (nsqd, other):
        async with Producer(server.tcp_address) as p:
            await p.publish(topic, b"warm-up")
    async with Reader(
        topic,
        "ch",
        lookupd_http_addresses=[nsqlookupd.http_address],
        max_in_flight=10,
        lookupd_poll_interval=0.1,
        lookupd_poll_jitter=0.1,
    ) as reader:
        runner = asyncio.ensure_future(reader.run(lambda m: None))

        async def connections(n: int) -> bool:
            return len(reader.statistics().connections) == n

        try:
            await wait_for(lambda: connections(2), timeout=10, what="two connections")
            await other.stop()
            await wait_for(lambda: connections(1), timeout=10, what="the stopped nsqd dropped")
            await other.start()
            await wait_for(lambda: connections(2), timeout=10, what="the nsqd rediscovered")
            async with Producer(other.tcp_address) as p:
                await p.publish(topic, b"after")

            async def consumed() -> bool:
                return reader.statistics().messages_finished >= 3

            await wait_for(consumed, timeout=10, what="the message published after the restart")
        finally:
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner


@pytest.mark.fault
async def test_direct_nsqd_reconnects_with_backoff(
    restartable_nsqd: Any, wait_for: WaitFor
) -> None:
    nsqd = restartable_nsqd
    topic = topic_name()
    async with Reader(
        topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], reconnect_delay=0.05
    ) as reader:
        await nsqd.stop()

        async def count(n: int) -> bool:
            return len(reader.statistics().connections) == n

        await wait_for(lambda: count(0), timeout=10, what="connection dropped")
        await nsqd.start()
        await wait_for(lambda: count(1), timeout=10, what="reconnected")
        async with Producer(nsqd.tcp_address) as p:
            await p.publish(topic, b"back")
        msg = await asyncio.wait_for(reader.__anext__(), 10)
        await msg.finish()
        assert msg.body == b"back"


async def test_thirty_nsqd_with_max_in_flight_five_all_drained(
    nsqd: Any, nsqd_factory: Any, nsqlookupd: Any, wait_for: WaitFor
) -> None:
    if getattr(nsqd, "external", False):
        pytest.skip("starts 30 nsqd")
    servers = await cluster(nsqd, nsqd_factory, 30)
    link(nsqlookupd, servers)
    topic = topic_name()
    expected = await publish_spread(servers, topic, 300, batch=10)
    seen: set[bytes] = set()
    async with Reader(
        topic,
        "ch",
        lookupd_http_addresses=[nsqlookupd.http_address],
        max_in_flight=5,
        low_rdy_idle_timeout=0.1,
    ) as reader:
        assert len(reader.statistics().connections) == 30

        async def handler(msg: Message) -> None:
            seen.add(msg.body)
            assert reader.statistics().total_rdy <= 5

        runner = asyncio.ensure_future(reader.run(handler))

        async def drained() -> bool:
            return seen == expected

        try:
            await wait_for(drained, timeout=60, what="all 300 messages from 30 nsqd")
        finally:
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
        assert reader.statistics().messages_finished == 300


async def test_http_producer_pub_mpub_defer(nsqd: Any) -> None:
    topic = topic_name()
    async with HTTPProducer(nsqd.http_address, max_message_size=4 * 1024 * 1024) as hp:
        await hp.publish(topic, b"one")
        await hp.mpublish(topic, [b"two", b"three"])
        await hp.dpublish(topic, b"four", 0.05)
        with pytest.raises(NSQError):
            await hp.publish(topic, b"x" * (2 * 1024 * 1024 + 1))  # nsqd: MSG_TOO_BIG
    got: set[bytes] = set()
    async with Reader(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=4) as r:
        async for msg in r:
            got.add(msg.body)
            await msg.finish()
            if len(got) == 4:
                break
    assert got == {b"one", b"two", b"three", b"four"}


@pytest.mark.parametrize("codec", ["deflate", "snappy"])
async def test_compressed_connections(nsqd: Any, codec: str) -> None:
    server = nsqd  # nsqd (and the emulator) offer deflate and snappy by default
    topic = topic_name()
    kwargs = {codec: True}
    async with Producer(server.tcp_address, **kwargs) as producer:
        await producer.mpublish(topic, [b"z" * 5000, b"small"])
    async with Reader(
        topic, "ch", nsqd_tcp_addresses=[server.tcp_address], max_in_flight=2, **kwargs
    ) as r:
        bodies = []
        async for msg in r:
            bodies.append(msg.body)
            await msg.finish()
            if len(bodies) == 2:
                break
    assert sorted(bodies) == [b"small", b"z" * 5000]


async def test_tls_and_auth() -> None:
    """On the emulator, or on a real nsqd of its own with AIOCLIENTS_TEST_NSQ_BIN_DIR."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = tls_server_context(ca.issue_cert("127.0.0.1"))
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    async with nsqd_server(tls=server_ctx, auth_secret="open-sesame") as server:
        await _tls_and_auth(server.tcp_address, client_ctx)


async def _tls_and_auth(address: str, client_ctx: ssl.SSLContext) -> None:
    topic = topic_name()
    async with Producer(address, tls=client_ctx, auth_secret="open-sesame") as p:
        await p.publish(topic, b"secret")
    async with Reader(
        topic,
        "ch",
        nsqd_tcp_addresses=[address],
        tls=client_ctx,
        auth_secret="open-sesame",
    ) as r:
        msg = await asyncio.wait_for(r.__anext__(), 10)
        await msg.finish()
        assert msg.body == b"secret"
    async with Reader(  # TLS, then deflate on top of it, then AUTH
        topic,
        "ch2",
        nsqd_tcp_addresses=[address],
        tls=client_ctx,
        deflate=True,
        auth_secret="open-sesame",
    ) as r:
        async with Producer(address, tls=client_ctx, auth_secret="open-sesame") as p:
            await p.publish(topic, b"compressed and encrypted")
        msg = await asyncio.wait_for(r.__anext__(), 10)
        await msg.finish()
        assert msg.body == b"compressed and encrypted"
    with pytest.raises(NSQError) as err:
        async with Producer(address, tls=client_ctx, auth_secret="wrong") as p:
            await p.publish(topic, b"x")
    assert err.value.code in ("E_AUTH_FAILED", "E_UNAUTHORIZED")


async def test_a_failed_tls_handshake_leaves_no_unretrieved_future(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """nsqd's certificate is not trusted: the publish fails with NSQConnectError, and
    the loss of the connection, reported after that, finds no handshake waiter to fail
    (asyncio would log "Future exception was never retrieved"). On the emulator, or on
    a real nsqd of its own with AIOCLIENTS_TEST_NSQ_BIN_DIR."""
    trustme = pytest.importorskip("trustme")
    server_ctx = tls_server_context(trustme.CA().issue_cert("127.0.0.1"))
    untrusting_ctx = ssl.create_default_context()
    trustme.CA().configure_trust(untrusting_ctx)  # another CA
    opened: list[_producer.NsqdConnection] = []

    class RecordedConnection(_producer.NsqdConnection):
        async def open(self, timeout: float) -> None:
            opened.append(self)
            await super().open(timeout)

    monkeypatch.setattr(_producer, "NsqdConnection", RecordedConnection)
    async with nsqd_server(tls=server_ctx) as server:
        producer = Producer(server.tcp_address, tls=untrusting_ctx)
        with pytest.raises(NSQConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await producer.publish(topic_name(), b"x")
        await producer.close()
        [conn] = opened
        await asyncio.wait_for(conn.wait_closed(), 10)
    del conn
    opened.clear()
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_old_lookupd_answer_shape_is_understood(nsqd: Any) -> None:
    """An nsqlookupd < 1.0 wraps its answer in {"status_code", "status_txt", "data"}."""
    from aiohttp import web

    host, port = nsqd.tcp_address.rsplit(":", 1)
    topic = topic_name()

    async def lookup(request: web.Request) -> web.Response:
        assert request.query["topic"] == topic
        producer = {"broadcast_address": host, "tcp_port": int(port), "http_port": 1}
        data = {"channels": [], "producers": [producer]}
        return web.json_response({"status_code": 200, "status_txt": "OK", "data": data})

    app = web.Application()
    app.router.add_get("/lookup", lookup)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        lookupd_port = runner.addresses[0][1]
        async with Producer(nsqd.tcp_address) as p:
            await p.publish(topic, b"via old lookupd")
        async with Reader(
            topic, "ch", lookupd_http_addresses=[f"127.0.0.1:{lookupd_port}"]
        ) as reader:
            msg = await asyncio.wait_for(reader.__anext__(), 10)
            await msg.finish()
            assert msg.body == b"via old lookupd"
    finally:
        await runner.cleanup()


async def test_unreachable_lookupd_is_a_clear_error() -> None:
    from aioclients.nsq import NSQConnectError

    with pytest.raises(NSQConnectError, match="no nsqlookupd answered"):
        async with Reader("t", "c", lookupd_http_addresses=["127.0.0.1:1"], connect_timeout=2):
            pass


async def test_set_max_in_flight_at_run_time_and_is_starved(nsqd: Any, wait_for: WaitFor) -> None:
    topic = topic_name()
    async with Producer(nsqd.tcp_address) as p:
        await p.mpublish(topic, [b"%d" % i for i in range(30)])
    async with Reader(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=4) as r:
        held = [await asyncio.wait_for(r.__anext__(), 10) for _ in range(4)]

        async def starved() -> bool:
            return r.is_starved()

        await wait_for(starved, timeout=5, what="is_starved with 4 of 4 in flight")
        assert r.statistics().in_flight == 4
        r.set_max_in_flight(10)
        assert r.statistics().total_rdy == 10
        held += [await asyncio.wait_for(r.__anext__(), 10) for _ in range(6)]
        assert r.statistics().in_flight == 10
        r.set_max_in_flight(0)
        assert r.statistics().total_rdy == 0
        for msg in held:
            await msg.finish()
        assert not r.is_starved()
        assert r.statistics().messages_finished == 10


@pytest.mark.fault
async def test_producer_reconnects_after_nsqd_restarts(restartable_nsqd: Any) -> None:
    nsqd = restartable_nsqd
    from aioclients.nsq import NSQConnectError

    topic = topic_name()
    async with Producer(nsqd.tcp_address) as producer:
        await producer.publish(topic, b"before")
        await nsqd.stop()
        with pytest.raises(NSQConnectError):
            await producer.publish(topic, b"while down")
        await nsqd.start()
        await producer.publish(topic, b"after")


@pytest.mark.fault
@pytest.mark.parametrize("command", ["PUB", "MPUB", "DPUB"])
async def test_producer_reconnects_after_a_fatal_publish_error(nsqd: Any, command: str) -> None:
    if getattr(nsqd, "external", False):
        pytest.skip("injects a server-side failure; cannot with an external nsqd")
    topic = topic_name()
    calls = {
        "PUB": lambda p: p.publish(topic, b"x"),
        "MPUB": lambda p: p.mpublish(topic, [b"x", b"y"]),
        "DPUB": lambda p: p.dpublish(topic, b"x", 0.01),
    }
    async with Producer(nsqd.tcp_address) as producer:
        nsqd.fail_next(command)
        with pytest.raises(NSQError) as err:
            await calls[command](producer)
        assert err.value.code == f"E_{command}_FAILED"
        await calls[command](producer)  # a fresh connection


async def test_close_leaves_unanswered_messages_to_time_out(nsqd: Any) -> None:
    # msg_timeout=1 s (nsqd's minimum) through IDENTIFY, so a real nsqd can run it too;
    # there the timeout of a new channel may fire up to ~5 s late: wait up to 15 s.
    topic = topic_name()
    async with Producer(nsqd.tcp_address) as p:
        await p.publish(topic, b"held")
    async with Reader(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], msg_timeout=1.0) as first:
        held = await asyncio.wait_for(first.__anext__(), 10)
        assert held.attempts == 1
    await held.finish()  # after close: nothing is sent, nsqd times the message out
    async with Reader(topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address]) as second:
        again = await asyncio.wait_for(second.__anext__(), 15)
        await again.finish()
    assert (again.id, again.attempts) == (held.id, 2)


@pytest.mark.parametrize("codec", [None, "deflate", "snappy"])
async def test_an_oversized_message_does_not_strand_the_others(
    nsqd: Any, codec: str | None
) -> None:
    """nsqd accepts bodies up to its --max-msg-size; a Reader with a smaller
    max_message_size finishes and gives up the large one, delivers the others in
    flight with it, and keeps its connection (also behind a decompressor)."""
    topic = topic_name()
    bodies = [b"a", bytes(range(256)) * 200, b"c", b"d", b"e"]
    async with Producer(nsqd.tcp_address) as producer:
        await producer.mpublish(topic, bodies)
    given_up: list[Message] = []
    async with Reader(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        max_in_flight=5,
        max_message_size=1000,
        on_give_up=given_up.append,
        deflate=codec == "deflate",
        snappy=codec == "snappy",
    ) as reader:
        [conn] = reader._conns.values()
        got = []
        while len(got) < 4:
            msg = await asyncio.wait_for(reader.__anext__(), 10)
            got.append(msg.body)
            await msg.finish()
        stats = reader.statistics()
        assert list(reader._conns.values()) == [conn]
        assert not conn.lost
    assert sorted(got) == [b"a", b"c", b"d", b"e"]
    assert [(m.body, m.body_size) for m in given_up] == [(b"", 51_200)]
    assert stats.messages_given_up == 1
    assert stats.messages_finished == 5  # the large one was finished too
    assert stats.in_flight == 0


# -- settings nsqd refuses (real nsqd: heartbeat_interval below 1 s is E_BAD_BODY) ------


async def test_heartbeat_below_nsqds_minimum_is_a_clear_error(nsqd: Any) -> None:
    topic = topic_name()
    with pytest.raises(NSQError, match=r"heartbeat interval \(500\) is invalid.*from 1 s") as info:
        async with Reader(
            topic, "ch", nsqd_tcp_addresses=[nsqd.tcp_address], heartbeat_interval=0.5
        ):
            pass
    assert (info.value.code, info.value.settings_refused) == ("E_BAD_BODY", True)
    producer = Producer(nsqd.tcp_address, heartbeat_interval=0.5)
    try:
        with pytest.raises(NSQError, match="from 1 s") as info:
            await producer.publish(topic, b"x")
        assert info.value.settings_refused
    finally:
        await producer.close()


async def test_discovered_nsqd_refusing_the_settings_fails_the_start(
    nsqd: Any, nsqlookupd: Any, wait_for: WaitFor
) -> None:
    topic = topic_name()
    nsqlookupd.register(nsqd)
    async with Producer(nsqd.tcp_address) as producer:
        await producer.publish(topic, b"x")
    await wait_for_lookup(nsqlookupd, topic, wait_for)
    reader = Reader(
        topic, "ch", lookupd_http_addresses=[nsqlookupd.http_address], heartbeat_interval=0.5
    )
    with pytest.raises(NSQError, match="from 1 s") as info:
        await asyncio.wait_for(reader.start(), 10)
    assert info.value.settings_refused
    assert reader.closed


async def test_nsqd_discovered_later_refusing_the_settings_ends_the_iteration(
    nsqd: Any, nsqlookupd: Any, wait_for: WaitFor
) -> None:
    """Not retried at every lookupd poll: the Reader's iteration ends with the error."""
    topic = topic_name()
    nsqlookupd.register(nsqd)
    async with Reader(
        topic,
        "ch",
        lookupd_http_addresses=[nsqlookupd.http_address],
        heartbeat_interval=0.5,
        lookupd_poll_interval=0.2,
    ) as reader:
        async with Producer(nsqd.tcp_address) as producer:
            await producer.publish(topic, b"x")  # now nsqlookupd knows an nsqd for it
        with pytest.raises(NSQError, match="from 1 s") as info:
            await asyncio.wait_for(reader.__anext__(), 15)
        assert info.value.settings_refused
        with pytest.raises(NSQError):  # and again: the Reader stays stopped
            await asyncio.wait_for(reader.__anext__(), 10)


@pytest.mark.fault
async def test_reconnect_to_an_nsqd_now_refusing_the_settings_ends_the_iteration(
    nsqd_factory: Any, wait_for: WaitFor
) -> None:
    """Emulator only: the nsqd must come back with a stricter heartbeat minimum."""
    nsqd = await nsqd_factory(min_heartbeat_interval=0.1)
    topic = topic_name()
    async with Reader(
        topic,
        "ch",
        nsqd_tcp_addresses=[nsqd.tcp_address],
        heartbeat_interval=0.5,
        reconnect_delay=0.05,
    ) as reader:
        assert len(reader.statistics().connections) == 1
        await nsqd.stop()
        nsqd.min_heartbeat_interval = 1.0
        await nsqd.start()
        with pytest.raises(NSQError, match="from 1 s"):
            await asyncio.wait_for(reader.__anext__(), 10)


async def wait_for_lookup(lookupd: Any, topic: str, wait_for: WaitFor) -> None:
    """A real nsqd registers a new topic with its nsqlookupd a moment later."""
    import aiohttp

    async with aiohttp.ClientSession() as session:

        async def listed() -> bool:
            url = f"http://{lookupd.http_address}/lookup?topic={topic}"
            async with session.get(url) as resp:
                return resp.status == 200 and bool((await resp.json())["producers"])

        await wait_for(listed, timeout=10, what=f"nsqlookupd lists {topic}")
