"""publish_batch and publish_schedule under the instrumentor, against a real
nats-server: one send span for a batch, its context in every message's headers; a
send span for a schedule, its context in the messages the schedule produces."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Otel, hex_ids

from aioclients.jetstream import BatchAbortedError, JetStream


async def test_a_batch_is_one_producer_span_whose_context_every_message_carries(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_atomic=True)
    own = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"
    batch = (
        m
        for m in [
            (f"{unique_name}.a", b"1"),
            (f"{unique_name}.b", b"2", {"X-Mine": "1"}),
            (f"{unique_name}.a", b"3", {"traceparent": own}),
        ]
    )
    with otel.tracer.start_as_current_span("request") as request:
        ack = await js.publish_batch(batch)  # any iterable
    assert ack.count == 3
    send = otel.one(f"send {unique_name}.a")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    attributes = dict(send.attributes or {})
    assert attributes["messaging.batch.message_count"] == 3
    assert attributes["messaging.destination.name"] == f"{unique_name}.a"
    assert (
        otel.total(
            "messaging.client.sent.messages", messaging__destination__name=f"{unique_name}.a"
        )
        == 3
    )

    stream = await js.stream(unique_name)
    stored = [await stream.get_msg(seq) for seq in (1, 2, 3)]
    trace_id, span_id = hex_ids(send)
    ours = f"00-{trace_id:032x}-{span_id:016x}-"
    assert stored[0].headers is not None
    assert stored[0].headers["traceparent"].startswith(ours)
    assert stored[1].headers is not None
    assert stored[1].headers["traceparent"].startswith(ours)
    assert stored[1].headers["X-Mine"] == "1"
    assert stored[2].headers is not None
    assert stored[2].headers["traceparent"] == own


async def test_a_refused_batch_is_a_failed_span(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])  # no allow_atomic
    with pytest.raises(BatchAbortedError):
        await js.publish_batch([(f"{unique_name}.a", b"1"), (f"{unique_name}.a", b"2")])
    send = otel.one(f"send {unique_name}.a")
    assert send.status.status_code is StatusCode.ERROR
    assert dict(send.attributes or {})["error.type"].endswith("BatchAbortedError")


async def test_a_schedule_is_a_send_span_its_messages_carry(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_msg_schedules=True)
    schedule, target = f"{unique_name}.sched", f"{unique_name}.out"
    when = datetime.now(timezone.utc) + timedelta(seconds=1)
    with otel.tracer.start_as_current_span("request") as request:
        ack = await js.publish_schedule(schedule, b"later", target=target, at=when)
    send = otel.one(f"send {schedule}")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {})["messaging.message.id"] == str(ack.seq)

    consumer = await js.create_consumer(unique_name, filter_subject=target, ack_policy="none")
    produced = await asyncio.wait_for(consumer.next(expires=10), 15)
    trace_id, span_id = hex_ids(send)
    assert produced.headers is not None
    assert produced.headers["traceparent"].startswith(f"00-{trace_id:032x}-{span_id:016x}-")
