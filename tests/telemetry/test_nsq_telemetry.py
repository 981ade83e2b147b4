"""NSQ spans and metrics against the nsqd emulator (or $AIOCLIENTS_TEST_NSQD_TCP)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Otel

from aioclients.nsq import HTTPProducer, Message, MessageRespondedError, Producer, Reader
from aioclients.telemetry import context_of


def _topic() -> str:
    return f"otel_{uuid.uuid4().hex[:10]}"


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


async def test_publishes_are_producer_spans_and_bodies_are_unchanged(
    nsqd: object, otel: Otel
) -> None:
    tcp: str = nsqd.tcp_address  # type: ignore[attr-defined]
    http: str = nsqd.http_address  # type: ignore[attr-defined]
    topic = _topic()
    with otel.tracer.start_as_current_span("request") as request:
        async with Producer(tcp) as producer:
            await producer.publish(topic, b"one")
            await producer.mpublish(topic, iter([b"two", b"three"]))  # any iterable
            await producer.dpublish(topic, b"four", 0.0)
        async with HTTPProducer(http) as web:
            await web.publish(topic, b"five")
            await web.mpublish(topic, [b"six", b"seven"])
    sends = otel.spans(f"send {topic}")
    assert len(sends) == 5
    for span in sends:
        assert span.kind is SpanKind.PRODUCER
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.attributes is not None
        assert span.attributes["messaging.system"] == "nsq"
        assert span.attributes["messaging.operation.type"] == "send"
        assert span.attributes["messaging.destination.name"] == topic
        assert span.attributes["server.address"] == "127.0.0.1"
    ports = [s.attributes["server.port"] for s in sends]  # type: ignore[index]
    assert ports == [_port(tcp)] * 3 + [_port(http)] * 2
    counts = [s.attributes.get("messaging.batch.message_count") for s in sends]  # type: ignore[union-attr]
    assert counts == [None, 2, None, None, 2]
    assert otel.total("messaging.client.sent.messages", messaging__destination__name=topic) == 7

    bodies = []
    async with Reader(topic, "ch", nsqd_tcp_addresses=[tcp], max_in_flight=10) as reader:
        async for msg in reader:
            bodies.append(msg.body)
            await msg.finish()
            if len(bodies) == 7:
                break
    # NSQ has no headers: the bodies are what was published, nothing added
    assert sorted(bodies) == sorted([b"one", b"two", b"three", b"four", b"five", b"six", b"seven"])


async def test_reader_receives_and_settles(nsqd: object, otel: Otel) -> None:
    tcp: str = nsqd.tcp_address  # type: ignore[attr-defined]
    topic = _topic()
    async with Producer(tcp) as producer:
        await producer.mpublish(topic, [b"a", b"b"])
    ids = []
    async with Reader(topic, "workers", nsqd_tcp_addresses=[tcp], max_in_flight=5) as reader:
        async for msg in reader:
            ids.append(msg.id.decode())
            if msg.body == b"a":
                await msg.finish()
                with pytest.raises(MessageRespondedError):
                    await msg.finish()  # a failed settle
            else:
                await msg.requeue(0, backoff=False)
            if len(ids) == 2:
                break
        assert context_of(msg) is not None  # NSQ carries no context: an empty one
    receives = otel.spans(f"receive {topic}")
    assert [s.attributes["messaging.message.id"] for s in receives] == ids  # type: ignore[index]
    for span in receives:
        assert span.kind is SpanKind.CLIENT
        assert span.links == ()  # no headers, so nothing to link to
        assert span.attributes is not None
        assert span.attributes["messaging.consumer.group.name"] == "workers"
        assert span.attributes["server.port"] == _port(tcp)
    (finished,) = otel.spans(f"finish {topic}")
    assert finished.status.status_code is StatusCode.UNSET
    assert finished.attributes is not None
    assert finished.attributes["messaging.operation.type"] == "settle"
    # answering twice fails; the span says so (the message was answered already,
    # so its topic is no longer looked up)
    (again,) = [
        s
        for s in otel.spans()
        if s.name.startswith("finish") and s.status.status_code is StatusCode.ERROR
    ]
    assert again.attributes is not None
    assert again.attributes["error.type"] == "MessageRespondedError"
    assert again.attributes["messaging.message.id"] == finished.attributes["messaging.message.id"]
    (requeue,) = otel.spans(f"requeue {topic}")
    assert requeue.attributes is not None
    assert requeue.attributes["messaging.operation.type"] == "settle"
    assert requeue.attributes["messaging.consumer.group.name"] == "workers"
    assert otel.total("messaging.client.consumed.messages", messaging__destination__name=topic) == 2


async def test_run_makes_a_process_span_around_the_handler(nsqd: object, otel: Otel) -> None:
    tcp: str = nsqd.tcp_address  # type: ignore[attr-defined]
    topic = _topic()
    async with Producer(tcp) as producer:
        await producer.mpublish(topic, [b"ok", b"fail"])
    done = asyncio.Event()
    seen: list[bytes] = []

    async def handler(msg: Message) -> None:
        with otel.tracer.start_as_current_span("work"):
            seen.append(msg.body)
        if len(seen) >= 3:
            done.set()
        if msg.body == b"fail" and msg.attempts == 1:
            raise ValueError("try again")

    async with Reader(
        topic,
        "ch",
        nsqd_tcp_addresses=[tcp],
        max_in_flight=2,
        requeue_delay=0.0,
        max_backoff_duration=0.0,
    ) as reader:
        task = asyncio.ensure_future(reader.run(handler, concurrency=1))
        await asyncio.wait_for(done.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    processes = otel.spans(f"process {topic}")
    assert len(processes) == 3
    works = otel.spans("work")
    for process, work in zip(processes, works, strict=True):
        assert process.kind is SpanKind.CONSUMER
        assert work.parent is not None
        assert work.parent.span_id == process.context.span_id
    failed = [p for p in processes if p.status.status_code is StatusCode.ERROR]
    assert len(failed) == 1
    assert failed[0].attributes is not None
    assert failed[0].attributes["error.type"] == "ValueError"
    # run() answered for the handler: its FINs after success are not the user's and
    # make no span (the process span is the message's one span); its REQ after the
    # failure does. No receive spans under run(): the process span stands for them.
    assert otel.spans(f"finish {topic}") == []
    (requeue,) = otel.spans(f"requeue {topic}")
    assert requeue.attributes is not None
    assert (
        requeue.attributes["messaging.message.id"] == failed[0].attributes["messaging.message.id"]
    )
    assert otel.spans(f"receive {topic}") == []
    # Each delivery is counted once as consumed, receive span or not.
    assert otel.total("messaging.client.consumed.messages", messaging__destination__name=topic) == 3
    # The handlers' durations are processing, kept apart from the client operations
    # (the conventions' messaging.process.duration), the failed one with error.type.
    process_points = [
        p
        for p in otel.points("messaging.process.duration")
        if p.attributes.get("messaging.destination.name") == topic
    ]
    assert sum(p.count for p in process_points) == 3
    assert {p.attributes["messaging.operation.type"] for p in process_points} == {"process"}
    assert sum(p.count for p in process_points if "error.type" in p.attributes) == 1
    assert not [
        p
        for p in otel.points("messaging.client.operation.duration")
        if p.attributes.get("messaging.operation.type") == "process"
    ]


async def test_run_handler_that_finishes_itself_makes_a_settle_span(
    nsqd: object, otel: Otel
) -> None:
    tcp: str = nsqd.tcp_address  # type: ignore[attr-defined]
    topic = _topic()
    async with Producer(tcp) as producer:
        await producer.publish(topic, b"one")
    done = asyncio.Event()

    other_topic = _topic()
    async with Producer(tcp) as producer:
        await producer.publish(other_topic, b"elsewhere")

    async def handler(msg: Message) -> None:
        await msg.finish()  # the user's own FIN: a settle span, inside the process span
        # Another Reader iterated inside the handler still makes its receive span.
        async with Reader(other_topic, "ch", nsqd_tcp_addresses=[tcp]) as other:
            got = await asyncio.wait_for(other.__anext__(), 30)
            await got.finish()
        done.set()

    async with Reader(topic, "ch", nsqd_tcp_addresses=[tcp]) as reader:
        task = asyncio.ensure_future(reader.run(handler, concurrency=1))
        await asyncio.wait_for(done.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    (process,) = otel.spans(f"process {topic}")
    (finish,) = otel.spans(f"finish {topic}")
    assert finish.parent is not None
    assert finish.parent.span_id == process.context.span_id
    (other_receive,) = otel.spans(f"receive {other_topic}")
    assert other_receive.parent is not None
    assert other_receive.parent.span_id == process.context.span_id
    # Outside run(), the same Reader's async for still makes receive spans.
    async with Producer(tcp) as producer:
        await producer.publish(topic, b"two")
    async with Reader(topic, "ch", nsqd_tcp_addresses=[tcp]) as reader:
        msg = await asyncio.wait_for(reader.__anext__(), 30)
        await msg.finish()
    assert len(otel.spans(f"receive {topic}")) == 1
