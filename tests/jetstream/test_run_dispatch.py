"""Runs of deliveries: the transport hands a subscription registered with
``subscribe_runs`` the messages of one socket read together, in order, and the
pull driver under ordered consumers (``BatchStream``) handles a status message
among them in its place."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aioclients.jetstream import ConsumerDeletedError, JetStream, Msg
from aioclients.jetstream._consume import BatchStream
from aioclients.jetstream._message import keep_deliveries, keep_run, message_size
from aioclients.jetstream._protocol._pull import consume_options
from aioclients.jetstream._protocol._wire import MSG
from aioclients.jetstream._transport import NatsClient

pytestmark = pytest.mark.timeout(60)

Frames = list[tuple[Any, ...]]


async def test_a_burst_comes_as_runs_in_order_and_other_subscriptions_keep_their_place(
    js: JetStream, unique_name: str
) -> None:
    transport = js._transport
    calls: list[Frames] = []
    seen: list[tuple[str, bytes]] = []  # every delivery of both, in arrival order

    def runs_of_a(frames: Frames) -> None:
        calls.append(frames)
        seen.extend(("a", frame[5]) for frame in frames)

    def one_of_b(subject: Any, reply: Any, data: bytes, header: bytes | None) -> None:
        seen.append(("b", data))

    a = await transport.subscribe_runs(f"{unique_name}.a", runs_of_a)
    b = await transport.subscribe_raw(f"{unique_name}.b", one_of_b, as_bytes=True)
    await transport.round_trip(5)  # both SUBs are in place
    expected: list[tuple[str, bytes]] = []
    frames = []
    for i in range(300):
        which = "b" if i % 50 == 49 else "a"  # a run of a's, then one b, and again
        expected.append((which, b"%d" % i))
        frames.append(transport.frame(f"{unique_name}.{which}", b"%d" % i, "", None))
    transport.send_nowait(b"".join(frames))  # one write: the server answers in bursts
    await transport.round_trip(5)
    a.unsubscribe_nowait()
    b.unsubscribe_nowait()
    assert seen == expected
    assert max(len(frames) for frames in calls) > 1, "every delivery came alone"
    first = calls[0][0]
    assert first[0] == MSG
    assert first[1] == f"{unique_name}.a".encode()
    assert (first[3], first[4], first[5]) == (b"", None, b"0")
    assert js.nc.stats["in_msgs"] >= 300


def _delivery(seq: int) -> tuple[Any, ...]:
    reply = b"$JS.ACK.S.C.1.%d.%d.1764168000000000000.0" % (seq, seq)
    return (MSG, b"s.a", 1, reply, None, b"x")


def _status(line: bytes) -> tuple[Any, ...]:
    return (MSG, b"_INBOX.x", 1, b"", b"NATS/1.0 " + line + b"\r\n\r\n", b"")


async def test_a_status_inside_a_run_is_handled_in_its_place(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await stream.create_consumer(durable_name="c", ack_policy="none")
    order: list[Any] = []
    batch = BatchStream(
        js._jsapi, consumer, consume_options(max_messages=10), lambda f: order.append(list(f))
    )
    async with batch:
        handle_status = batch._on_status

        def on_status(header: bytes, now: float) -> None:
            order.append(header.split(b"\r\n")[0])
            handle_status(header, now)

        batch._on_status = on_status  # type: ignore[method-assign]
        d1, d2, d3 = _delivery(1), _delivery(2), _delivery(3)
        batch._on_run([d1, d2, _status(b"100 Idle Heartbeat"), d3])
        assert order == [[d1, d2], b"NATS/1.0 100 Idle Heartbeat", [d3]]
        assert await asyncio.wait_for(batch.next_batch(), 5) == 3
        # A terminal status ends the stream: what follows it is no longer taken.
        order.clear()
        batch._on_run([_delivery(4), _status(b"409 Consumer Deleted"), _delivery(5)])
        assert order == [[_delivery(4)], b"NATS/1.0 409 Consumer Deleted"]
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(batch.next_batch(), 5)


async def test_consume_takes_a_run_with_a_status_in_order(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await stream.create_consumer(durable_name="c", ack_policy="none")
    async with consumer.consume(max_messages=10) as messages:
        messages._on_run([_delivery(1), _delivery(2)])  # type: ignore[attr-defined]
        messages._on_run(  # type: ignore[attr-defined]
            [_delivery(3), _status(b"100 Idle Heartbeat"), _delivery(4)]
        )
        got = [await asyncio.wait_for(messages.__anext__(), 5) for _ in range(4)]
        assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4]
        assert got[0].subject == "s.a"
        assert messages.statistics().received == 4
        messages._on_run(  # type: ignore[attr-defined]
            [_delivery(5), _status(b"409 Consumer Deleted"), _delivery(6)]
        )
        # what came after the terminal status is not taken (as when each came alone)
        buffered = messages._buffer  # type: ignore[attr-defined]
        assert [m.metadata.sequence.stream for m in buffered] == [5]
        with pytest.raises(ConsumerDeletedError):
            await asyncio.wait_for(messages.__anext__(), 5)


#: a status whose pending header cannot be read (a line without ':'): handling it raises
_BAD_STATUS = (
    MSG,
    b"_INBOX.x",
    1,
    b"",
    b"NATS/1.0 100 Idle Heartbeat\r\nNats-Pending-Messages 5\r\n\r\n",
    b"",
)


async def test_a_status_that_cannot_be_handled_loses_only_itself(
    js: JetStream, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # As when each message came alone: the deliveries after it in the run are kept.
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await stream.create_consumer(durable_name="c", ack_policy="none")
    taken: list[Frames] = []
    batch = BatchStream(
        js._jsapi, consumer, consume_options(max_messages=10), lambda f: taken.append(list(f))
    )
    async with batch:
        d1, d2, d3 = _delivery(1), _delivery(2), _delivery(3)
        batch._on_run([d1, _BAD_STATUS, d2, d3])
        assert taken == [[d1], [d2, d3]]
        assert await asyncio.wait_for(batch.next_batch(), 5) == 3
    assert "message handler for b'_INBOX.x' failed" in caplog.text


async def test_consume_keeps_the_run_after_a_status_that_cannot_be_handled(
    js: JetStream, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    consumer = await stream.create_consumer(durable_name="c", ack_policy="none")
    async with consumer.consume(max_messages=10) as messages:
        messages._on_run(  # type: ignore[attr-defined]
            [_delivery(1), _BAD_STATUS, _delivery(2), _delivery(3)]
        )
        got = [await asyncio.wait_for(messages.__anext__(), 5) for _ in range(3)]
        assert [m.metadata.sequence.stream for m in got] == [1, 2, 3]
    assert "message handler for b'_INBOX.x' failed" in caplog.text


def _slots(msg: Msg) -> dict[str, object]:
    return {name: getattr(msg, name) for name in Msg.__slots__}


def test_keep_run_and_keep_deliveries_make_what_msg_makes() -> None:
    api: Any = object()
    header = b"NATS/1.0\r\nA: b\r\n\r\n"
    frames = [
        (MSG, b"s.a", 7, b"$JS.ACK.S.C.1.1.1.0.0", None, b"one"),
        (MSG, b"s.b", 7, b"$JS.ACK.S.C.1.2.2.0.0", header, b""),
    ]
    made = [Msg(api, s, r, d, h) for _, s, _, r, h, d in frames]
    kept: list[Msg] = []
    sizes = [len(s) + len(r) + len(d) + (len(h) if h else 0) for _, s, _, r, h, d in frames]
    assert [message_size(m) for m in made] == sizes
    assert keep_run(api, frames, kept.extend) == sum(sizes)
    assert [_slots(m) for m in kept] == [_slots(m) for m in made]
    assert keep_run(api, [], kept.extend) == 0
    assert len(kept) == 2

    columns: list[Msg] = []
    total = keep_deliveries(api, [b"s.a"], [b"$JS.ACK.S.C.1.1.1.0.0"], [b"one"], columns.extend)
    assert total == sizes[0]
    assert [_slots(m) for m in columns] == [_slots(made[0])]


async def test_consume_takes_a_read_of_deliveries_as_columns_making_the_same_msgs(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    count = 300
    payloads = [b"%d:" % i + b"p" * (i % 40) for i in range(count)]
    for i, payload in enumerate(payloads):
        await js.publish_async(f"{unique_name}.{i % 3}", payload)
    await js.publish_async_complete(10)  # no PubAck left to share a read with deliveries
    consumer = await stream.create_consumer(durable_name="c", ack_policy="none")
    runs: list[int] = []
    async with consumer.consume(max_messages=count) as messages:
        handlers = js.nc._deliveries_handlers  # type: ignore[attr-defined]
        ((sid, columns),) = handlers.items()  # the pull inbox's, before the pull goes out

        def spy(*run: Any) -> None:
            runs.append(len(run[2]))
            columns(*run)

        handlers[sid] = spy
        got = []
        async for msg in messages:
            # as Msg(...) makes it (compared before anything is read and cached)
            subject, reply = msg._subject, msg._reply  # type: ignore[attr-defined]
            made = Msg(js._jsapi, subject, reply, msg.data, None)
            assert _slots(msg) == _slots(made)
            got.append(msg)
            if len(got) == count:
                break
        assert messages.statistics().received == count
    assert max(runs, default=0) > 1, "no read came as columns"
    assert [m.data for m in got] == payloads
    assert [m.subject for m in got] == [f"{unique_name}.{i % 3}" for i in range(count)]
    assert [m.metadata.sequence.stream for m in got] == list(range(1, count + 1))
    assert all(m.headers is None for m in got)


def _wire(seq: int, payload: bytes = b"x" * 100) -> bytes:
    reply = b"$JS.ACK.S.C.1.%d.%d.1764168000000000000.0" % (seq, seq)
    return b"MSG s.a 7 %s %d\r\n%s\r\n" % (reply, len(payload), payload)


async def test_the_parser_hands_reads_of_deliveries_over_as_columns_else_as_frames() -> None:
    nc = NatsClient()  # not connected: its parser is fed by hand
    parser = nc._ps
    columns: list[tuple[Any, ...]] = []
    frames: list[Frames] = []
    nc._run_handlers[7] = lambda run: frames.append(list(run))
    nc._deliveries_handlers[7] = lambda *run: columns.append(run)
    plain = b"".join(_wire(seq) for seq in range(1, 41))  # 40 deliveries, > 4 KiB
    await parser.parse(plain)  # type: ignore[union-attr]
    assert frames == []
    ((subjects, replies, payloads),) = columns
    assert list(subjects) == [b"s.a"] * 40
    assert [r.split(b".")[5] for r in replies] == [b"%d" % seq for seq in range(1, 41)]
    assert list(payloads) == [b"x" * 100] * 40
    assert nc.stats["in_msgs"] == 40
    # Payloads holding CRLFs: the read goes to scan(), and so do the next 16 reads.
    crlf = b"".join(_wire(seq, b"a\r\nb" * 25) for seq in range(41, 81))
    await parser.parse(crlf)  # type: ignore[union-attr]
    assert [f[5] for f in frames[0]] == [b"a\r\nb" * 25] * 40
    for _ in range(16):
        await parser.parse(plain)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (1, 17)
    assert frames[-1] == [
        (MSG, b"s.a", 7, r, None, p) for r, p in zip(replies, payloads, strict=True)
    ]
    await parser.parse(plain)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (2, 17)
    # A small read refused costs little, and a read that does not start with a
    # delivery is refused before any split: the next read is tried as columns again.
    await parser.parse(_wire(1, b"\r\n") + _wire(2))  # type: ignore[union-attr]
    await parser.parse(plain)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (3, 18)
    nc._process_pong = _no_pong  # type: ignore[method-assign]
    await parser.parse(b"PONG\r\n" + plain)  # type: ignore[union-attr]
    await parser.parse(plain)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (4, 19)
    assert nc.stats["in_msgs"] == 40 * 22 + 2


async def _no_pong() -> None:
    pass


def _headed_wire(seq: int, body: bytes = b"") -> bytes:
    reply = b"$JS.ACK.S.C.1.%d.%d.1764168000000000000.0" % (seq, seq)
    header = b"NATS/1.0\r\nNats-Msg-Size: 100\r\n\r\n"
    size = len(header) + len(body)
    return b"HMSG $KV.b.k%d 7 %s %d %d\r\n%s%s\r\n" % (seq, reply, len(header), size, header, body)


async def test_the_parser_hands_reads_of_headed_deliveries_over_as_columns_else_as_frames() -> None:
    nc = NatsClient()  # not connected: its parser is fed by hand
    parser = nc._ps
    columns: list[tuple[Any, ...]] = []
    frames: list[Frames] = []
    nc._run_handlers[7] = lambda run: frames.append(list(run))
    nc._header_deliveries_handlers[7] = lambda *run: columns.append(run)
    headed = b"".join(_headed_wire(seq) for seq in range(1, 81))  # 80 deliveries, > 4 KiB
    await parser.parse(headed + b"PING"[:2])  # type: ignore[union-attr]
    assert frames == []
    ((subjects, replies, headers, payloads),) = columns
    assert list(subjects) == [b"$KV.b.k%d" % seq for seq in range(1, 81)]
    assert [r.split(b".")[5] for r in replies] == [b"%d" % seq for seq in range(1, 81)]
    assert list(headers) == [b"NATS/1.0\r\nNats-Msg-Size: 100\r\n\r\n"] * 80
    assert list(payloads) == [b""] * 80
    assert nc.stats["in_msgs"] == 80
    nc._process_ping = _no_pong  # type: ignore[method-assign]
    await parser.parse(b"NG\r\n")  # type: ignore[union-attr]  # the rest, read on
    # A body holding the joint: the read goes to scan(), and so do the next 16 reads.
    odd = b"".join(_headed_wire(seq, b"v\r\nHMSG x") for seq in range(1, 81))
    await parser.parse(odd)  # type: ignore[union-attr]
    assert [f[5] for f in frames[0]] == [b"v\r\nHMSG x"] * 80
    for _ in range(16):
        await parser.parse(headed)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (1, 17)
    assert frames[-1] == [
        (MSG, s, 7, r, h, p)
        for s, r, h, p in zip(subjects, replies, headers, payloads, strict=True)
    ]
    await parser.parse(headed)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (2, 17)
    # Without a handler of such columns, the run handler takes them as frames.
    del nc._header_deliveries_handlers[7]
    await parser.parse(headed)  # type: ignore[union-attr]
    assert (len(columns), len(frames)) == (2, 18)
    assert frames[-1] == frames[-2]
    assert nc.stats["in_msgs"] == 80 * 20


@pytest.mark.parametrize("headers_only", [False, True])
async def test_an_ordered_consume_takes_reads_as_columns_yielding_the_same(
    js: JetStream, unique_name: str, headers_only: bool
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    count = 300
    payloads = [b"%d:" % i + b"p" * (i % 40) for i in range(count)]
    for i, payload in enumerate(payloads):
        await js.publish_async(f"{unique_name}.{i % 3}", payload)
    await js.publish_async_complete(10)  # no PubAck left to share a read with deliveries
    oc = await stream.ordered_consumer(headers_only=headers_only)
    runs: list[int] = []
    kind = "_header_deliveries_handlers" if headers_only else "_deliveries_handlers"
    handlers = getattr(js.nc, kind)
    real_setitem = type(handlers).__setitem__

    class Spying(dict[int, Any]):
        def __setitem__(self, sid: int, columns: Any) -> None:
            def spy(*run: Any) -> None:
                runs.append(len(run[0]))
                columns(*run)

            real_setitem(self, sid, spy)

    setattr(js.nc, kind, Spying(handlers))
    got = []
    async with oc.consume(max_messages=count) as messages:
        async for msg in messages:
            got.append(msg)
            if len(got) == count:
                break
    assert max(runs, default=0) > 1, "no read came as columns"
    assert [m.metadata.sequence.stream for m in got] == list(range(1, count + 1))
    assert [m.subject for m in got] == [f"{unique_name}.{i % 3}" for i in range(count)]
    if headers_only:
        assert [m.data for m in got] == [b""] * count
        assert [m.headers["Nats-Msg-Size"] for m in got] == [  # type: ignore[index]
            str(len(p)) for p in payloads
        ]
    else:
        assert [m.data for m in got] == payloads
        assert all(m.headers is None for m in got)
