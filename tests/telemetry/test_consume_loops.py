"""The per-message receive paths of consume loops, instrumented: every message of
several pulls (RDY windows) gets its span, in order, and two loops read and settled in
turn keep their own attributes (the instrumentation keeps the last stream's aside)."""

from __future__ import annotations

import asyncio
import uuid

from otel_support import Otel

from aioclients.jetstream import JetStream
from aioclients.nsq import Producer, Reader


async def test_jetstream_consume_spans_every_message_of_many_pulls_in_order(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    acks = [await js.publish(f"{unique_name}.data", b"%d" % i) for i in range(35)]
    consumer = await js.create_consumer(unique_name, durable_name="pulls", ack_policy="none")
    got = []
    # ten messages per pull: the stream pulls again from the instrumented fast path
    async with consumer.consume(max_messages=10) as messages:
        async with asyncio.timeout(20):
            async for msg in messages:
                got.append(msg.data)
                if len(got) == 35:
                    break
    assert got == [b"%d" % i for i in range(35)]
    receives = otel.spans(f"receive {unique_name}")
    ids = [span.attributes["messaging.message.id"] for span in receives]  # type: ignore[index]
    assert ids == [str(ack.seq) for ack in acks]
    for span in receives:
        assert span.attributes is not None
        assert span.attributes["messaging.consumer.group.name"] == "pulls"
    assert otel.total("messaging.client.consumed.messages") == 35


async def test_jetstream_streams_read_and_acked_in_turn_keep_their_own_attributes(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    names = [f"{unique_name}A", f"{unique_name}B"]
    for name in names:
        await js.create_stream(name, subjects=[f"{name}.>"])
        for i in range(6):
            await js.publish(f"{name}.data", b"%d" % i)
    first = await js.create_consumer(names[0], durable_name="first", ack_policy="explicit")
    second = await js.create_consumer(names[1], durable_name="second", ack_policy="explicit")
    async with first.consume(max_messages=4) as one, second.consume(max_messages=4) as two:
        async with asyncio.timeout(20):
            for _ in range(6):
                await (await one.__anext__()).ack()
                await (await two.__anext__()).ack()
    for name, group in zip(names, ("first", "second"), strict=True):
        receives = otel.spans(f"receive {name}")
        acks = otel.spans(f"ack {name}")
        assert len(receives) == len(acks) == 6
        for span in receives + acks:
            assert span.attributes is not None
            assert span.attributes["messaging.destination.name"] == name
            assert span.attributes["messaging.consumer.group.name"] == group
        counted = otel.total(
            "messaging.client.consumed.messages",
            messaging__destination__name=name,
            messaging__consumer__group__name=group,
        )
        assert counted == 6


async def test_nsq_readers_read_in_turn_keep_their_own_attributes(nsqd: object, otel: Otel) -> None:
    tcp: str = nsqd.tcp_address  # type: ignore[attr-defined]
    topics = {channel: f"otel_{uuid.uuid4().hex[:10]}" for channel in ("left", "right")}
    async with Producer(tcp) as producer:
        for topic in topics.values():
            await producer.mpublish(topic, [b"%d" % i for i in range(10)])
    # a small max_in_flight makes several RDY windows, so that messages come both
    # queued and awaited
    async with (
        Reader(topics["left"], "left", nsqd_tcp_addresses=[tcp], max_in_flight=3) as left,
        Reader(topics["right"], "right", nsqd_tcp_addresses=[tcp], max_in_flight=3) as right,
    ):
        async with asyncio.timeout(20):
            for _ in range(10):
                for reader in (left, right):
                    msg = await reader.__anext__()
                    await msg.finish()
    for channel, topic in topics.items():
        receives = otel.spans(f"receive {topic}")
        finishes = otel.spans(f"finish {topic}")
        assert len(receives) == len(finishes) == 10
        for span in receives + finishes:
            assert span.attributes is not None
            assert span.attributes["messaging.destination.name"] == topic
            assert span.attributes["messaging.consumer.group.name"] == channel
        ids = [s.attributes["messaging.message.id"] for s in receives]  # type: ignore[index]
        assert sorted(ids) == sorted(s.attributes["messaging.message.id"] for s in finishes)  # type: ignore[index]
        assert len(set(ids)) == 10
        counted = otel.total(
            "messaging.client.consumed.messages",
            messaging__destination__name=topic,
            messaging__consumer__group__name=channel,
        )
        assert counted == 10
