"""Driver transcript tests: Reader and Producer against a scripted fake nsqd."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket

import pytest

from aioclients import InvalidArgumentError, LocalProtocolError, OperationTimeoutError
from aioclients.nsq import (
    Message,
    MessageRespondedError,
    NSQClosedError,
    NSQConnectError,
    NSQError,
    Producer,
    Reader,
)
from aioclients.nsq._io._compression import DeflateCodec, SnappyCodec
from aioclients.testing.nsqd import NsqdEmulator
from tests.nsq.fake_nsqd import FakeNsqd, frame, message_frame

MID1 = b"00000000000000a1"
MID2 = b"00000000000000a2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_reader_transcript_identify_sub_rdy_fin_cls() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=1) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"hello"))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            assert (msg.id, msg.body, msg.attempts) == (MID1, b"hello", 1)
            assert msg.nsqd_address == fake.address
            await msg.finish()
            await fake.wait_for(lambda c: b"FIN " + MID1 in c)
            assert msg.has_responded
            with pytest.raises(MessageRespondedError):
                await msg.finish()
        await fake.wait_for(lambda c: b"CLS" in c)
    assert fake.commands[0] == b"  V2"
    assert fake.commands[1] == b"IDENTIFY"
    identify = json.loads(fake.bodies[1] or b"")
    assert identify["feature_negotiation"] is True
    assert identify["heartbeat_interval"] == 30000
    assert identify["user_agent"].startswith("aioclients/")
    assert fake.commands[2:5] == [b"SUB t c", b"RDY 1", b"RDY 1"]  # refill after the message
    assert fake.commands[-2:] == [b"FIN " + MID1, b"CLS"]


async def test_reader_refills_to_its_share_and_requeues_with_delay() -> None:
    async with FakeNsqd() as fake:
        async with Reader(
            "t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=10, requeue_delay=2.0
        ) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"a", attempts=3))
            await fake.wait_for(lambda c: b"RDY 10" in c)
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            await msg.requeue()  # 2 s x 3 attempts
            await fake.wait_for(lambda c: b"REQ " + MID1 + b" 6000" in c)
            assert reader.statistics().in_backoff  # a failure engaged backoff
            await fake.wait_for(lambda c: c[-1] == b"RDY 0")
            stats = reader.statistics()
            assert stats.messages_requeued == 1
            assert stats.backoff_level == 1


async def test_requeue_without_backoff_and_explicit_delay() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=5) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"a"))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            with pytest.raises(InvalidArgumentError):
                await msg.requeue(-1.0)
            await msg.requeue(0.25, backoff=False)
            await fake.wait_for(lambda c: b"REQ " + MID1 + b" 250" in c)
            assert not reader.statistics().in_backoff


async def test_touch_only_when_asked() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address]) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"a"))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            await msg.touch()
            await msg.finish()
            await fake.wait_for(lambda c: b"FIN " + MID1 in c)
    touches = [c for c in fake.commands if c.startswith(b"TOUCH")]
    assert touches == [b"TOUCH " + MID1]


async def test_heartbeat_is_answered_with_nop() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address]):
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(frame(0, b"_heartbeat_"))
            await fake.wait_for(lambda c: b"NOP" in c)


async def test_max_attempts_gives_up_and_finishes() -> None:
    given_up = []
    async with FakeNsqd() as fake:
        async with Reader(
            "t", "c", nsqd_tcp_addresses=[fake.address], max_attempts=2, on_give_up=given_up.append
        ) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"old", attempts=3))
            await fake.wait_for(lambda c: b"FIN " + MID1 in c)  # frees the one RDY slot
            fake.send(message_frame(MID2, b"ok", 2))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            assert msg.id == MID2
            assert [m.id for m in given_up] == [MID1]
            assert reader.statistics().messages_given_up == 1


async def test_async_on_give_up_is_awaited() -> None:
    done = asyncio.Event()

    async def give_up(msg: object) -> None:
        done.set()

    async with FakeNsqd() as fake:
        async with Reader(
            "t", "c", nsqd_tcp_addresses=[fake.address], max_attempts=1, on_give_up=give_up
        ):
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"old", attempts=2))
            await asyncio.wait_for(done.wait(), 5)


async def test_run_finishes_on_success_and_requeues_on_exception() -> None:
    async with FakeNsqd() as fake:
        async with Reader(
            "t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=2, max_backoff_duration=0
        ) as reader:

            async def handler(msg: object) -> None:
                if getattr(msg, "body", b"") == b"bad":
                    raise ValueError("boom")

            runner = asyncio.ensure_future(reader.run(handler, concurrency=2))
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"good"))
            await fake.wait_for(lambda c: b"RDY 2" in c)
            fake.send(message_frame(MID2, b"bad"))
            await fake.wait_for(
                lambda c: b"FIN " + MID1 in c and any(x.startswith(b"REQ " + MID2) for x in c)
            )
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner


async def test_run_returns_when_the_reader_closes() -> None:
    async with FakeNsqd() as fake:
        reader = Reader("t", "c", nsqd_tcp_addresses=[fake.address])
        await reader.start()
        runner = asyncio.ensure_future(reader.run(lambda m: None))
        await fake.wait_for(lambda c: b"RDY 1" in c)
        await reader.close()
        await asyncio.wait_for(runner, 5)
        assert reader.closed
        with pytest.raises(NSQClosedError):
            await reader.start()


async def test_cancelled_iteration_leaves_the_reader_usable() -> None:
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address]) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            waiting = asyncio.ensure_future(reader.__anext__())
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            fake.send(message_frame(MID1, b"x"))
            msg = await asyncio.wait_for(reader.__anext__(), 5)
            assert msg.body == b"x"


async def test_unreachable_nsqd_is_a_clear_error_not_a_hang() -> None:
    reader = Reader("t", "c", nsqd_tcp_addresses=[f"127.0.0.1:{free_port()}"])
    with pytest.raises(NSQConnectError, match="could not connect"):
        await asyncio.wait_for(reader.start(), 10)
    assert reader.closed


async def test_silent_nsqd_times_out_the_handshake() -> None:
    async with FakeNsqd(silent=True) as fake:
        reader = Reader("t", "c", nsqd_tcp_addresses=[fake.address], connect_timeout=0.3)
        with pytest.raises(NSQConnectError, match="handshake"):
            await asyncio.wait_for(reader.start(), 10)


async def test_garbage_from_nsqd_fails_the_connection() -> None:
    async with FakeNsqd(identify_answer=b"\x00\x00\x00\x02\x00\x00\x00\x09??") as fake:

        def answer(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
            return b"\x00\x00\x00\x02garbage" if command == b"IDENTIFY" else None

        fake.on_command = answer
        reader = Reader("t", "c", nsqd_tcp_addresses=[fake.address])
        with pytest.raises(NSQConnectError, match="below the 4 bytes"):
            await asyncio.wait_for(reader.start(), 10)


async def test_sub_refused_raises_nsq_error_with_code() -> None:
    def answer(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        if command.startswith(b"SUB"):
            return frame(1, b"E_UNAUTHORIZED AUTH failed")
        return fake.default_answer(command, body)

    async with FakeNsqd(on_command=answer) as fake:
        reader = Reader("t", "c", nsqd_tcp_addresses=[fake.address])
        with pytest.raises(NSQError) as err:
            await reader.start()
        assert err.value.code == "E_UNAUTHORIZED"


async def test_auth_sent_when_required() -> None:
    answer = {"max_rdy_count": 100, "auth_required": True}
    async with FakeNsqd(identify_answer=answer) as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], auth_secret="pw"):
            await fake.wait_for(lambda c: b"RDY 1" in c)
    i = fake.commands.index(b"AUTH")
    assert fake.bodies[i] == b"pw"
    assert fake.commands[i + 1] == b"SUB t c"


def test_bad_reader_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="not valid for NSQ"):
        Reader("bad topic", "c", nsqd_tcp_addresses=["h:1"])
    with pytest.raises(InvalidArgumentError, match="nsqd_tcp_addresses or lookupd"):
        Reader("t", "c")
    with pytest.raises(InvalidArgumentError, match="host:port"):
        Reader("t", "c", nsqd_tcp_addresses=["nohost"])
    with pytest.raises(InvalidArgumentError, match="list of strings"):
        Reader("t", "c", nsqd_tcp_addresses="h:1")
    with pytest.raises(InvalidArgumentError, match="max_in_flight"):
        Reader("t", "c", nsqd_tcp_addresses=["h:1"], max_in_flight=-1)
    with pytest.raises(InvalidArgumentError, match="not both"):
        Reader("t", "c", nsqd_tcp_addresses=["h:1"], snappy=True, deflate=True)


# ---- Producer ---------------------------------------------------------------------------


async def test_producer_transcript_and_in_order_answers() -> None:
    async with FakeNsqd() as fake, Producer(fake.address) as producer:
        await asyncio.gather(
            producer.publish("t", b"one"),
            producer.mpublish("t", [b"a", b"b"]),
            producer.dpublish("t", b"later", 1.5),
        )
    assert fake.commands[1:5] == [b"IDENTIFY", b"PUB t", b"MPUB t", b"DPUB t 1500"]
    assert fake.bodies[2] == b"one"
    assert fake.bodies[3] == b"\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00\x00\x01b"


async def test_producer_error_then_reconnect() -> None:
    def answer(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        if body == b"reject":
            return frame(1, b"E_BAD_MESSAGE PUB message too big")
        return fake.default_answer(command, body)

    async with FakeNsqd(on_command=answer) as fake, Producer(fake.address) as producer:
        with pytest.raises(NSQError) as err:
            await producer.publish("t", b"reject")
        assert err.value.code == "E_BAD_MESSAGE"
        await producer.publish("t", b"fine")  # a new connection after the fatal error
    assert fake.commands.count(b"  V2") == 2


async def test_producer_bad_input_is_refused_before_sending() -> None:
    async with FakeNsqd() as fake, Producer(fake.address, max_message_size=4) as producer:
        with pytest.raises(InvalidArgumentError, match="not valid"):
            await producer.publish("no spaces", b"x")
        with pytest.raises(InvalidArgumentError, match="at least one body"):
            await producer.mpublish("t", [])
        with pytest.raises(InvalidArgumentError, match="maximum message size"):
            await producer.publish("t", b"12345")
        with pytest.raises(InvalidArgumentError, match="delay"):
            await producer.dpublish("t", b"x", -1)
    assert not any(c.startswith((b"PUB", b"MPUB", b"DPUB")) for c in fake.commands)


async def test_producer_timeout_and_unreachable() -> None:
    def answer(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        return fake.default_answer(command, body) if command == b"IDENTIFY" else None

    async with FakeNsqd(on_command=answer) as fake, Producer(fake.address, timeout=0.2) as producer:
        with pytest.raises(OperationTimeoutError):
            await producer.publish("t", b"x")
    with pytest.raises(NSQConnectError):
        await Producer(f"127.0.0.1:{free_port()}").publish("t", b"x")


async def test_producer_close_fails_later_calls() -> None:
    async with FakeNsqd() as fake:
        producer = Producer(fake.address)
        await producer.publish("t", b"x")
        await producer.close()
        with pytest.raises(NSQClosedError):
            await producer.publish("t", b"y")


# ---- codecs -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec_type", [DeflateCodec, SnappyCodec])
def test_codecs_round_trip_across_any_chunking(codec_type: type) -> None:
    sender = codec_type(6) if codec_type is DeflateCodec else codec_type()
    receiver = codec_type(6) if codec_type is DeflateCodec else codec_type()
    parts = [b"OK", b"x" * 100_000, bytes(range(256)) * 50]
    stream = b"".join(sender.encode(p) for p in parts)
    out = b""
    for i in range(0, len(stream), 777):
        out += b"".join(receiver.decode(stream[i : i + 777]))
    assert out == b"".join(parts)


async def test_cancelling_start_during_the_handshake_closes_everything() -> None:
    async with FakeNsqd(silent=True) as fake:
        reader = Reader("t", "c", nsqd_tcp_addresses=[fake.address])
        task = asyncio.ensure_future(reader.start())
        await fake.wait_for(lambda c: b"IDENTIFY" in c)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert reader.closed
        assert reader.statistics().connections == ()


async def test_cancelling_a_publish_keeps_answers_in_order() -> None:
    held: list[bytes] = []

    def answer(fake: FakeNsqd, command: bytes, body: bytes | None) -> bytes | None:
        if body == b"slow":
            held.append(body)
            return None  # answered later, by the test
        return fake.default_answer(command, body)

    async with FakeNsqd(on_command=answer) as fake, Producer(fake.address) as producer:
        slow = asyncio.ensure_future(producer.publish("t", b"slow"))
        await fake.wait_for(lambda c: b"PUB t" in c)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        fake.send(frame(0, b"OK"))  # the late answer to the cancelled PUB
        await asyncio.wait_for(producer.publish("t", b"next"), 5)
    assert held == [b"slow"]


async def test_a_redelivered_id_frees_both_slots() -> None:
    """nsqd re-delivers a timed-out message with the same id; answering both copies
    sends one FIN and leaves nothing counted in flight."""
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=2) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"x"))
            first = await asyncio.wait_for(reader.__anext__(), 5)
            fake.send(message_frame(MID1, b"x", attempts=2))
            second = await asyncio.wait_for(reader.__anext__(), 5)
            await second.finish()
            await first.finish()
            await fake.wait_for(lambda c: b"FIN " + MID1 in c)
            assert reader._dist is not None
            assert reader._dist.total_in_flight == 0
    assert fake.commands.count(b"FIN " + MID1) == 1


async def test_an_oversized_message_is_finished_and_given_up_and_the_connection_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    given_up: list[Message] = []
    big_id = b"00000000000000ff"
    async with FakeNsqd() as fake:
        async with Reader(
            "t",
            "c",
            nsqd_tcp_addresses=[fake.address],
            max_in_flight=3,
            max_message_size=10,
            on_give_up=given_up.append,
        ) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(MID1, b"small"))
            first = await asyncio.wait_for(reader.__anext__(), 5)
            await fake.wait_for(lambda c: b"RDY 3" in c)
            fake.send(message_frame(big_id, b"B" * 5000, attempts=2) + message_frame(MID2, b"next"))
            second = await asyncio.wait_for(reader.__anext__(), 5)
            assert (first.body, second.body) == (b"small", b"next")
            await fake.wait_for(lambda c: b"FIN " + big_id in c)
            await first.finish()
            await second.finish()
            await fake.wait_for(lambda c: b"FIN " + MID2 in c)
            stats = reader.statistics()
            assert stats.messages_given_up == 1
            assert len(stats.connections) == 1
    assert fake.commands.count(b"  V2") == 1  # never reconnected
    [msg] = given_up
    assert (msg.id, msg.body, msg.body_size, msg.attempts) == (big_id, b"", 5000, 2)
    assert msg.give_up_reason is not None
    assert "5000 bytes is larger than max_message_size=10" in msg.give_up_reason
    assert first.give_up_reason is None
    assert first.body_size == 5
    assert any("max_message_size=10" in r.getMessage() for r in caplog.records)


async def test_a_refused_connect_leaves_no_unretrieved_future(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = Producer(f"127.0.0.1:{free_port()}")
    with pytest.raises(NSQConnectError, match="could not connect"):
        await producer.publish("t", b"x")
    await producer.close()
    del producer
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_answers_go_out_together_unless_the_first_waited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FINs made while the application holds the loop are written in one go at the
    end of the loop iteration; once the first has waited EARLY_FLUSH_DELAY (the
    application works long on what it holds) they are written at the next answer."""
    from aioclients.nsq._io import _connection

    clock = [100.0]
    monkeypatch.setattr(_connection, "perf_counter", lambda: clock[0])
    mids = [b"00000000000000b%d" % i for i in range(4)]
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=4) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(mids[0], b"x"))
            await fake.wait_for(lambda c: b"RDY 4" in c)
            fake.send(b"".join(message_frame(m, b"x") for m in mids[1:]))
            held = [await asyncio.wait_for(reader.__anext__(), 5) for _ in range(4)]
            (conn,) = reader._conns.values()
            writes: list[bytes] = []
            data_to_send = conn.core.data_to_send

            def recording_data_to_send() -> bytes:
                data = data_to_send()
                writes.append(data)
                return data

            monkeypatch.setattr(conn.core, "data_to_send", recording_data_to_send)
            # no await that yields between these: the loop is held
            await held[0].finish()
            clock[0] += _connection.EARLY_FLUSH_DELAY / 2
            await held[1].finish()
            assert writes == []  # waiting for the end of the loop iteration
            clock[0] += _connection.EARLY_FLUSH_DELAY / 2
            await held[2].finish()  # the first has waited the delay: all three go now
            assert writes == [b"".join(b"FIN %b\n" % m for m in mids[:3])]
            await held[3].finish()
            assert len(writes) == 1
            await fake.wait_for(lambda c: b"FIN " + mids[3] in c)
            assert len(writes) == 2
    assert [c for c in fake.commands if c.startswith(b"FIN")] == [b"FIN " + m for m in mids]


async def test_a_refill_rdy_goes_out_with_the_fins_of_its_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The RDY a read's messages make due is written with the FINs the application
    gives them in the same loop iteration: one write, the commands in the order
    they were made."""
    mids = [b"00000000000000c%d" % i for i in range(5)]
    async with FakeNsqd() as fake:
        async with Reader("t", "c", nsqd_tcp_addresses=[fake.address], max_in_flight=4) as reader:
            await fake.wait_for(lambda c: b"RDY 1" in c)
            fake.send(message_frame(mids[0], b"x"))
            await fake.wait_for(lambda c: b"RDY 4" in c)
            first = await asyncio.wait_for(reader.__anext__(), 5)
            await first.finish()
            await fake.wait_for(lambda c: b"FIN %b" % mids[0] in c)
            (conn,) = reader._conns.values()
            writes: list[bytes] = []
            data_to_send = conn.core.data_to_send

            def recording_data_to_send() -> bytes:
                data = data_to_send()
                writes.append(data)
                return data

            monkeypatch.setattr(conn.core, "data_to_send", recording_data_to_send)
            # 4 messages use up RDY 4: the read makes the refill due
            fake.send(b"".join(message_frame(m, b"x") for m in mids[1:]))
            for _ in range(4):
                msg = await reader.__anext__()  # waits for the read once, then queued
                await msg.finish()
            await fake.wait_for(lambda c: b"FIN %b" % mids[4] in c)
            assert writes == [b"RDY 4\n" + b"".join(b"FIN %b\n" % m for m in mids[1:])]


async def test_a_fin_queues_what_the_cores_fin_if_in_flight_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The responder's finish (the core's fin_if_in_flight and the connection's
    answered inlined, no call into either) answers and queues as the core's own
    call does: in flight or not, delivered again, on a closed connection; over
    seeded random sequences. The counts and the write it schedules follow."""
    import random

    from aioclients.nsq._io import _connection
    from aioclients.nsq._io._connection import NsqdConnection
    from aioclients.nsq._message import new_message
    from aioclients.nsq._protocol._connection import ConnectionCore, ConnectionState
    from aioclients.nsq._protocol._rdy import RdyDistributor
    from aioclients.nsq._responder import ReaderResponder

    class Owner:
        def __getattr__(self, name: str) -> object:
            return lambda *args: None

    def subscribed() -> ConnectionCore:
        core = ConnectionCore(identify={}, topic="t", channel="c")
        core.state = ConnectionState.SUBSCRIBED
        core.decoder.max_frame_size = 1 << 20
        core.rdy_allowance = 100
        return core

    monkeypatch.setattr(_connection, "perf_counter", lambda: 100.0)  # no early write
    mids = [b"%016d" % i for i in range(6)]
    for seed in range(40):
        rng = random.Random(seed)
        conn = NsqdConnection("127.0.0.1:1", subscribed(), Owner())  # type: ignore[arg-type]
        dist = RdyDistributor(100, rng=random.Random(0))
        dist.add_connection(conn.address, 2500, 0.0)
        responder = ReaderResponder(
            dist, lambda updates: None, lambda: 1.0, requeue_delay=1.0, max_requeue_delay=1.0
        )
        # the answer to nearly every message makes no call into the core or the
        # connection
        conn.core.fin_if_in_flight = lambda mid: pytest.fail("a call")  # type: ignore[method-assign]
        conn.answered = lambda: pytest.fail("a call")  # type: ignore[method-assign]
        reference = subscribed()
        finished = 0
        for _ in range(30):
            op, mid = (
                rng.choice(["deliver", "fin", "fin", "req", "take", "close"]),
                rng.choice(mids),
            )
            if op == "deliver":
                data = message_frame(mid, b"x")
                conn.core.receive_data(data, 1.0)
                reference.receive_data(data, 1.0)
                dist.on_message(conn.address, 1.0)
            elif op == "fin":
                queued = reference.fin_if_in_flight(mid)
                scheduled = conn._flush_scheduled
                msg = new_message(mid, b"x", 0, 1, conn, responder)
                assert responder.finish(msg) is None
                finished += queued is True
                # a FIN queued makes a write due (at the end of the loop iteration)
                assert conn._flush_scheduled is (scheduled or queued is True)
            elif (
                op == "req"
                and mid in reference.in_flight
                and reference.state is not (ConnectionState.CLOSED)
            ):
                conn.core.req(mid, 5)
                reference.req(mid, 5)
            elif op == "take":
                assert conn.core.data_to_send() == reference.data_to_send()
            elif op == "close" and rng.random() < 0.2:
                conn.core.connection_lost()
                reference.connection_lost()
            assert conn.core.in_flight == reference.in_flight
            assert conn.core.pending_bytes == reference.pending_bytes
        assert conn.core.data_to_send() == reference.data_to_send()
        assert conn.finished == responder.finished == finished


async def test_a_producer_used_on_another_event_loop_says_so_at_once() -> None:
    # A Producer connected in one asyncio.run and used in the next waited for an
    # answer its loop would never read (until its timeout, 30 s by default).
    async with NsqdEmulator() as nsqd:
        producer = Producer(nsqd.tcp_address, timeout=5.0)
        await producer.publish("t", b"on the loop it connected on")

        def on_another_loop() -> BaseException | None:
            try:
                asyncio.run(producer.publish("t", b"elsewhere"))
            except BaseException as exc:  # the error, to be checked on the test's loop
                return exc
            return None

        error = await asyncio.to_thread(on_another_loop)
        assert isinstance(error, LocalProtocolError), repr(error)
        assert "connected on another event loop" in str(error)
        await producer.publish("t", b"still usable on its own loop")
        await producer.close()


async def test_leaving_a_received_message_unanswered_is_logged_at_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # nsqd redelivers it only after its msg_timeout (60 s): say so, since nothing else
    # shows why the message came back a minute later. Buffered messages, which the
    # application never saw, are not its doing and are not counted.
    caplog.set_level(logging.WARNING, logger="aioclients.nsq")
    async with NsqdEmulator() as nsqd:
        async with Producer(nsqd.tcp_address) as producer:
            await producer.mpublish("finished", [b"a", b"b", b"c"])
            await producer.publish("forgotten", b"d")
        nsqd_addresses = [nsqd.tcp_address]
        async with Reader(
            "finished", "c", nsqd_tcp_addresses=nsqd_addresses, max_in_flight=10
        ) as reader:
            async for msg in reader:
                await msg.finish()
                break
        assert not [rec for rec in caplog.records if "neither finished" in rec.message]
        async with Reader("forgotten", "c", nsqd_tcp_addresses=nsqd_addresses) as reader:
            async for _msg in reader:
                break  # forgot _msg.finish()
    [record] = [rec for rec in caplog.records if "neither finished" in rec.message]
    assert record.levelno == logging.WARNING
    assert record.message.startswith("closing with 1 message(s) received but neither")
