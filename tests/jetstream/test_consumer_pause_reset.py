"""Consumer pause/resume (nats-server 2.11), reset (2.14), stream lookup by subject
and create-or-update of streams, against a real nats-server."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import nats
import pytest
from nats.aio.msg import Msg as NatsMsg
from support import WaitFor

from aioclients import InvalidArgumentError
from aioclients.jetstream import (
    ConsumerInfo,
    ConsumerNotFoundError,
    ConsumerPause,
    HeartbeatMissed,
    JetStream,
    JetStreamError,
    ServerTooOldError,
    StatusWarning,
    Stream,
    StreamNotFoundError,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def stream(js: JetStream, unique_name: str) -> Stream:
    s = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    for i in range(5):
        await js.publish(f"{unique_name}.a", b"m%d" % i)
    return s


async def _applied(
    wait_for: WaitFor, js: JetStream, stream: str, name: str, paused: bool
) -> ConsumerInfo:
    """The consumer's info once it shows ``paused`` (the test fails after 10 s).

    A single server has applied a pause when it answers. A cluster answers once the
    change is proposed, and the consumer's leader applies it a moment later.
    """
    info = await js.consumer_info(stream, name)

    async def shown() -> bool:
        nonlocal info
        info = await js.consumer_info(stream, name)
        return info.paused is paused

    await wait_for(shown, what=f"the consumer's info to show paused={paused}")
    return info


def _later(seconds: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


# -- pause / resume ------------------------------------------------------------------------


async def test_pause_and_resume_report_the_pause(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    await stream.create_consumer(durable_name="c")
    until = _later(120)
    paused = await js.pause_consumer(stream.name, "c", until)
    assert isinstance(paused, ConsumerPause)
    assert paused.paused is True
    assert paused.pause_until is not None
    assert abs((paused.pause_until - until).total_seconds()) < 0.001
    assert paused.pause_remaining is not None
    assert 100 < paused.pause_remaining <= 120
    info = await _applied(wait_for, js, stream.name, "c", True)
    assert info.pause_remaining is not None
    assert 100 < info.pause_remaining <= 120
    assert info.config.pause_until == paused.pause_until

    resumed = await js.resume_consumer(stream.name, "c")
    assert (resumed.paused, resumed.pause_until, resumed.pause_remaining) == (False, None, None)
    info = await _applied(wait_for, js, stream.name, "c", False)
    assert info.pause_remaining is None


async def test_consumer_handle_pauses_and_a_past_time_resumes(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    consumer = await stream.create_consumer(durable_name="c")
    assert (await consumer.pause(_later(60))).paused is True
    assert (await consumer.pause(_later(-60))).paused is False
    await _applied(wait_for, js, stream.name, "c", False)
    assert (await consumer.pause(_later(60))).paused is True
    assert (await consumer.resume()).paused is False


async def test_create_consumer_paused(js: JetStream, stream: Stream) -> None:
    consumer = await js.create_consumer(stream.name, durable_name="c", pause_until=_later(60))
    assert consumer.cached_info.paused is True
    assert consumer.cached_info.pause_remaining is not None


async def test_naive_datetimes_are_refused_before_sending(js: JetStream, stream: Stream) -> None:
    await stream.create_consumer(durable_name="c")
    naive = datetime.now() + timedelta(minutes=1)  # naive on purpose
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        await js.pause_consumer(stream.name, "c", naive)
    with pytest.raises(InvalidArgumentError, match="aware datetime"):
        await js.pause_consumer(stream.name, "c", 60)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        await js.create_consumer(stream.name, durable_name="d", pause_until=naive)
    assert (await js.consumer_info(stream.name, "c")).paused is False


async def test_pause_of_a_missing_consumer(js: JetStream, stream: Stream) -> None:
    with pytest.raises(ConsumerNotFoundError):
        await js.pause_consumer(stream.name, "nope", _later(60))


async def test_a_paused_consumer_waits_quietly_then_delivers_when_resumed(
    js: JetStream, stream: Stream, wait_for: WaitFor
) -> None:
    consumer = await stream.create_consumer(durable_name="c")
    await consumer.pause(_later(300))
    await _applied(wait_for, js, stream.name, "c", True)
    events: list[object] = []
    got: list[bytes] = []
    resumed = asyncio.Event()
    async with consumer.consume(
        expires=2, idle_heartbeat=0.5, max_messages=10, on_event=events.append
    ) as messages:

        async def read() -> None:
            async for msg in messages:
                assert resumed.is_set(), "delivered while paused"
                got.append(msg.data)
                await msg.ack()
                if len(got) == 5:
                    return

        reader = asyncio.create_task(read())
        # Several pulls expire and several heartbeat intervals pass while paused.
        done, _ = await asyncio.wait({reader}, timeout=3.5)
        assert not done
        stats = messages.statistics()
        assert stats.received == 0
        assert stats.pulls >= 2
        resumed.set()
        await consumer.resume()
        await asyncio.wait_for(reader, 10)
    assert got == [b"m%d" % i for i in range(5)]
    assert not [e for e in events if isinstance(e, (HeartbeatMissed, StatusWarning))]


# -- reset -------------------------------------------------------------------------------------


async def test_reset_goes_back_to_the_ack_floor(js: JetStream, stream: Stream) -> None:
    consumer = await stream.create_consumer(durable_name="c", ack_policy="explicit")
    async with consumer.fetch(5, expires=5) as batch:
        msgs = [m async for m in batch]
    assert len(msgs) == 5
    for m in msgs[:2]:
        await m.ack_sync()  # ack floor: stream seq 2; 3..5 delivered, not acked
    info = await js.reset_consumer(stream.name, "c")
    assert isinstance(info, ConsumerInfo)
    assert info.raw["reset_seq"] == 3
    assert info.ack_floor.stream_seq == 2
    again = await consumer.next(expires=5)
    assert again.metadata.sequence.stream == 3
    assert again.data == b"m2"


async def test_reset_to_a_sequence(js: JetStream, stream: Stream) -> None:
    consumer = await stream.create_consumer(durable_name="c", ack_policy="explicit")
    info = await consumer.reset(seq=4)
    assert info.raw["reset_seq"] == 4
    msg = await consumer.next(expires=5)
    assert msg.metadata.sequence.stream == 4
    with pytest.raises(InvalidArgumentError):
        await js.reset_consumer(stream.name, "c", seq=0)


async def test_reset_that_the_deliver_policy_forbids(js: JetStream, stream: Stream) -> None:
    await stream.create_consumer(
        durable_name="c", deliver_policy="by_start_sequence", opt_start_seq=3
    )
    with pytest.raises(JetStreamError) as raised:
        await js.reset_consumer(stream.name, "c", seq=1)
    assert raised.value.err_code == 10204


async def test_reset_of_a_missing_consumer_fails_fast(js: JetStream, stream: Stream) -> None:
    # nats-server sends no reply at all to this request; it must not become a timeout.
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ConsumerNotFoundError):
        await js.reset_consumer(stream.name, "missing")
    assert loop.time() - started < js.timeout / 2
    with pytest.raises(StreamNotFoundError):
        await js.reset_consumer(f"{stream.name}_nope", "missing")


async def _old_server_context(
    nats_server: object, unique_name: str, level: int
) -> tuple[JetStream, object, list[str]]:
    nc = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    prefix = f"OLD.{unique_name}.API"
    asked: list[str] = []

    async def old_server(msg: NatsMsg) -> None:
        asked.append(msg.subject)
        if msg.subject.endswith(".INFO"):
            answer = {"type": "io.nats.jetstream.api.v1.account_info_response"}
            answer["api"] = {"level": level}  # type: ignore[assignment]
            await nc.publish(msg.reply, json.dumps(answer).encode())

    await nc.subscribe(f"{prefix}.>", cb=old_server)
    return JetStream(nc, api_prefix=prefix, timeout=2.0), nc, asked


async def test_older_servers_say_what_they_lack(nats_server: object, unique_name: str) -> None:
    js, nc, asked = await _old_server_context(nats_server, unique_name, level=3)  # 2.13
    try:
        with pytest.raises(ServerTooOldError, match="consumer reset needs JetStream API level 4"):
            await js.reset_consumer("S", "c")
        assert asked == [f"OLD.{unique_name}.API.INFO"]  # nothing else was sent
    finally:
        await nc.close()  # type: ignore[attr-defined]
    js, nc, asked = await _old_server_context(nats_server, unique_name, level=0)  # 2.10
    try:
        with pytest.raises(ServerTooOldError, match="consumer pause needs JetStream API level 1"):
            await js.pause_consumer("S", "c", _later(5))
        with pytest.raises(ServerTooOldError, match="consumer resume"):
            await js.resume_consumer("S", "c")
        assert asked == [f"OLD.{unique_name}.API.INFO"]
    finally:
        await nc.close()  # type: ignore[attr-defined]


# -- streams ---------------------------------------------------------------------------------


async def test_stream_name_by_subject(js: JetStream, stream: Stream) -> None:
    assert await js.stream_name_by_subject(f"{stream.name}.a") == stream.name
    assert await js.stream_name_by_subject(f"{stream.name}.*") == stream.name
    with pytest.raises(StreamNotFoundError):
        await js.stream_name_by_subject(f"{stream.name}_nothing.here")
    with pytest.raises(InvalidArgumentError):
        await js.stream_name_by_subject("bad subject")


async def test_create_or_update_stream(js: JetStream, unique_name: str) -> None:
    created = await js.create_or_update_stream(unique_name, subjects=[f"{unique_name}.>"])
    assert created.cached_info.config.subjects == [f"{unique_name}.>"]
    updated = await js.create_or_update_stream(unique_name, max_msgs=10)
    assert updated.cached_info.config.max_msgs == 10
    assert updated.cached_info.config.subjects == [f"{unique_name}.>"]  # kept
    again = await js.create_or_update_stream(
        unique_name, subjects=[f"{unique_name}.>", f"{unique_name}_b"]
    )
    assert again.cached_info.config.subjects == [f"{unique_name}.>", f"{unique_name}_b"]
    assert again.cached_info.config.max_msgs == 10
