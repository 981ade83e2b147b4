"""JetStream spans, links and metrics against a real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from opentelemetry import propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from otel_support import Otel, hex_ids
from test_fast_paths import OwnHeaderPropagator

from aioclients.jetstream import (
    JetStream,
    JetStreamClosedError,
    MessageAlreadyAckedError,
    NoStreamResponseError,
    connect,
)
from aioclients.telemetry import context_of
from aioclients.testing import FaultProxy, NatsServer


async def _stream(js: JetStream, name: str) -> str:
    await js.create_stream(name, subjects=[f"{name}.>"])
    return f"{name}.data"


def _server_port(js: JetStream) -> int:
    url = js.nc.connected_url
    assert url is not None
    return int(url.port or 4222)


async def test_publish_is_a_producer_span_whose_context_travels_in_the_headers(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    with otel.tracer.start_as_current_span("request") as request:
        ack = await js.publish(subject, b"hello", headers={"X-Mine": "1"})
    send = otel.one(f"send {subject}")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "nats",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": subject,
        "messaging.message.id": str(ack.seq),
        "server.address": "127.0.0.1",
        "server.port": _server_port(js),
    }
    # publish runs publish_async inside: still one span
    assert [s.name for s in otel.spans()] == [f"send {subject}", "request"]

    stored = await (await js.stream(unique_name)).get_msg(ack.seq)
    assert stored.data == b"hello"
    assert stored.headers is not None
    assert stored.headers["X-Mine"] == "1"
    trace_id, span_id = hex_ids(send)
    assert stored.headers["traceparent"].startswith(f"00-{trace_id:032x}-{span_id:016x}-")

    assert otel.total("messaging.client.sent.messages", messaging__destination__name=subject) == 1
    (duration,) = [
        p
        for p in otel.points("messaging.client.operation.duration")
        if p.attributes["messaging.operation.type"] == "send"
    ]
    assert duration.count == 1
    assert "messaging.message.id" not in duration.attributes  # no per-message series


async def test_consume_receives_ack_settles_and_links_to_the_producer(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    acks = [await js.publish(subject, b"m%d" % i) for i in range(3)]
    sends = {span.attributes["messaging.message.id"]: span for span in otel.spans()}  # type: ignore[index]
    consumer = await js.create_consumer(unique_name, durable_name="workers")
    got = []
    async with consumer.consume() as messages:
        async for msg in messages:
            with otel.tracer.start_as_current_span("handle", context=context_of(msg)):
                await msg.ack()
            got.append(msg.data)
            if len(got) == 3:
                break
    assert got == [b"m0", b"m1", b"m2"]

    receives = otel.spans(f"receive {unique_name}")
    assert len(receives) == 3
    for receive, ack in zip(receives, acks, strict=True):
        assert receive.kind is SpanKind.CLIENT
        attrs = dict(receive.attributes or {})
        assert attrs["messaging.operation.type"] == "receive"
        assert attrs["messaging.destination.name"] == unique_name
        assert attrs["messaging.consumer.group.name"] == "workers"
        assert attrs["messaging.message.id"] == str(ack.seq)
        assert attrs["server.port"] == _server_port(js)
        (link,) = receive.links
        assert (link.context.trace_id, link.context.span_id) == hex_ids(sends[str(ack.seq)])

    handles = otel.spans("handle")
    settles = otel.spans(f"ack {unique_name}")
    assert len(handles) == len(settles) == 3
    for handle, settle, ack in zip(handles, settles, acks, strict=True):
        send = sends[str(ack.seq)]
        # context_of: the handler's span is the send span's child, in its trace
        assert handle.parent is not None
        assert (handle.context.trace_id, handle.parent.span_id) == hex_ids(send)
        # the ack is made inside the handler's span
        assert settle.parent is not None
        assert settle.parent.span_id == handle.context.span_id
        assert settle.kind is SpanKind.CLIENT
        assert settle.attributes is not None
        assert settle.attributes["messaging.operation.type"] == "settle"
        assert settle.attributes["messaging.operation.name"] == "ack"
        assert settle.attributes["messaging.message.id"] == str(ack.seq)

    consumed = otel.total(
        "messaging.client.consumed.messages", messaging__destination__name=unique_name
    )
    assert consumed == 3
    settle_points = [
        p
        for p in otel.points("messaging.client.operation.duration")
        if p.attributes["messaging.operation.type"] == "settle"
    ]
    assert sum(p.count for p in settle_points) == 3


async def test_receive_and_ack_spans_read_the_reply_without_decoding_it(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    """The spans take the message id from the ack subject as it came off the wire:
    the reply stays bytes (not decoded for the span, not encoded again for the ack)."""
    subject = await _stream(js, unique_name)
    acks = [await js.publish(subject, b"m%d" % i) for i in range(2)]
    consumer = await js.create_consumer(unique_name, durable_name="raw")
    got = []
    async with consumer.consume() as messages:
        async for msg in messages:
            await msg.ack()
            got.append(msg)
            if len(got) == 2:
                break
    assert [type(msg._reply) for msg in got] == [bytes, bytes]
    ids = [str(ack.seq) for ack in acks]
    for name in (f"receive {unique_name}", f"ack {unique_name}"):
        spans = otel.spans(name)
        assert [s.attributes["messaging.message.id"] for s in spans] == ids  # type: ignore[index]
        assert all(s.attributes["messaging.consumer.group.name"] == "raw" for s in spans)  # type: ignore[index]
    # what the spans read is what the metadata says
    assert [msg.metadata.sequence.stream for msg in got] == [ack.seq for ack in acks]


async def test_fetch_is_one_batch_span_linked_to_every_message(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    for i in range(4):
        await js.publish(subject, b"%d" % i)
    sends = otel.spans(f"send {subject}")
    consumer = await js.create_consumer(unique_name, durable_name="batch", ack_policy="none")
    async with consumer.fetch(4, expires=5) as batch:
        got = [msg.data async for msg in batch]
    assert got == [b"0", b"1", b"2", b"3"]
    receive = otel.one(f"receive {unique_name}")
    assert receive.attributes is not None
    assert receive.attributes["messaging.batch.message_count"] == 4
    assert "messaging.message.id" not in receive.attributes
    assert [(link.context.trace_id, link.context.span_id) for link in receive.links] == [
        hex_ids(s) for s in sends
    ]
    assert [link.attributes["messaging.message.id"] for link in receive.links] == [
        "1",
        "2",
        "3",
        "4",
    ]
    assert otel.total("messaging.client.consumed.messages") == 4


async def test_a_bare_fetch_loop_left_early_still_ends_its_span(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    for i in range(3):
        await js.publish(subject, b"%d" % i)
    consumer = await js.create_consumer(unique_name, durable_name="bare", ack_policy="none")
    async for _ in consumer.fetch(3, expires=5):
        break
    receive = otel.one(f"receive {unique_name}")
    assert receive.attributes is not None
    assert receive.attributes["messaging.batch.message_count"] == 1


async def test_next_and_a_bare_consume_loop_make_one_span_per_message(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    for i in range(3):
        await js.publish(subject, b"%d" % i)
    consumer = await js.create_consumer(unique_name, durable_name="next", ack_policy="none")
    msg = await consumer.next(expires=5)
    assert msg.data == b"0"
    async for msg in consumer.consume():
        if msg.data == b"2":
            break
    receives = otel.spans(f"receive {unique_name}")
    assert [s.attributes["messaging.message.id"] for s in receives] == ["1", "2", "3"]  # type: ignore[index]
    assert all("messaging.batch.message_count" not in (s.attributes or {}) for s in receives)


async def test_ordered_consume_and_fetch(js: JetStream, unique_name: str, otel: Otel) -> None:
    subject = await _stream(js, unique_name)
    for i in range(3):
        await js.publish(subject, b"%d" % i)
    oc = await js.ordered_consumer(unique_name)
    async with oc.consume() as messages:
        async for msg in messages:
            if msg.data == b"2":
                break
    per_message = otel.spans(f"receive {unique_name}")
    assert len(per_message) == 3
    # an ordered consumer's server-side consumer changes on every reset: no group
    assert all("messaging.consumer.group.name" not in (s.attributes or {}) for s in per_message)
    otel.exporter.clear()
    oc2 = await js.ordered_consumer(unique_name)
    async with oc2.fetch(3, expires=5) as batch:
        assert [m.data async for m in batch] == [b"0", b"1", b"2"]
    batch_span = otel.one(f"receive {unique_name}")  # the inner plain fetch makes none
    assert batch_span.attributes is not None
    assert batch_span.attributes["messaging.batch.message_count"] == 3
    assert len(batch_span.links) == 3
    await oc.close()
    await oc2.close()


async def test_publish_async_span_lasts_until_the_ack(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    future = await js.publish_async(subject, b"x")
    ack = await future
    await asyncio.sleep(0)  # the done callback runs on the next loop turn
    send = otel.one(f"send {subject}")
    assert send.attributes is not None
    assert send.attributes["messaging.message.id"] == str(ack.seq)
    assert send.status.status_code is StatusCode.UNSET

    failed = await js.publish_async(f"{unique_name}_nostream.x", b"x")
    with pytest.raises(NoStreamResponseError):
        await failed
    await asyncio.sleep(0)
    error = otel.one(f"send {unique_name}_nostream.x")
    assert error.status.status_code is StatusCode.ERROR
    assert error.attributes is not None
    assert error.attributes["error.type"] == "NoStreamResponseError"
    assert otel.total("messaging.client.sent.messages", error__type="NoStreamResponseError") == 1


async def test_key_value_put_and_context_of_an_entry(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    kv = await js.create_key_value(unique_name)
    with otel.tracer.start_as_current_span("request"):
        revision = await kv.put("config.a", b"1")
    send = otel.one(f"send KV_{unique_name}")  # the bucket's stream, not the key
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert send.attributes["messaging.message.id"] == str(revision)
    assert len(otel.spans()) == 2  # kv.put's own publish makes no second span

    entry = await kv.get("config.a")
    assert entry.value == b"1"
    context = context_of(entry)
    with otel.tracer.start_as_current_span("apply", context=context) as apply:
        pass
    assert apply.parent is not None
    assert (apply.get_span_context().trace_id, apply.parent.span_id) == hex_ids(send)

    async with kv.watch("config.>") as watcher:
        watched = await watcher.__anext__()
    assert watched == entry  # the carried headers take no part in equality
    assert trace_of(watched) == hex_ids(send)
    history = await kv.history("config.a")
    assert trace_of(history[0]) == hex_ids(send)
    assert "_headers" not in repr(entry)


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 (a plain attribute, no event to wait on)
            await asyncio.sleep(0.01)


def trace_of(obj: object) -> tuple[int, int]:
    context = trace.get_current_span(context_of(obj)).get_span_context()
    return context.trace_id, context.span_id


async def test_context_of_a_message_without_context_is_empty(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    otel_free = await connect(js.nc.connected_url.geturl())  # type: ignore[union-attr]
    try:
        # published through nats-py directly: no headers at all
        await otel_free.nc.publish(subject, b"plain")
        await otel_free.nc.flush()
    finally:
        await otel_free.close()
    consumer = await js.create_consumer(unique_name, durable_name="plain", ack_policy="none")
    msg = await consumer.next(expires=5)
    assert trace_of(msg) == (0, 0)
    (receive,) = otel.spans(f"receive {unique_name}")
    assert receive.links == ()
    with pytest.raises(TypeError, match="context_of"):
        context_of(b"bytes")


async def test_a_failed_ack_sets_the_settle_span_status(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    await js.publish(subject, b"x")
    consumer = await js.create_consumer(unique_name, durable_name="twice")
    msg = await consumer.next(expires=5)
    await msg.ack()
    with pytest.raises(MessageAlreadyAckedError):
        await msg.ack()
    first, second = otel.spans(f"ack {unique_name}")
    assert first.status.status_code is StatusCode.UNSET
    assert second.status.status_code is StatusCode.ERROR
    assert second.attributes is not None
    assert second.attributes["error.type"] == "MessageAlreadyAckedError"
    assert [e.name for e in second.events] == ["exception"]


async def test_publish_on_a_closed_client(
    nats_server: object, unique_name: str, otel: Otel
) -> None:
    js = await connect(nats_server.url)  # type: ignore[attr-defined]
    await js.close()
    with pytest.raises(JetStreamClosedError):
        await js.publish(f"{unique_name}.x", b"x")
    span = otel.one(f"send {unique_name}.x")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "JetStreamClosedError"
    assert otel.total("messaging.client.sent.messages", error__type="JetStreamClosedError") == 1


async def test_a_cancelled_publish_ends_its_span(
    nats_server: object, unique_name: str, otel: Otel
) -> None:
    target = urlsplit(nats_server.url).netloc  # type: ignore[attr-defined]
    async with FaultProxy(target) as proxy:
        js = await connect(f"nats://{proxy.address}")
        try:
            await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
            proxy.freeze()  # the ack never comes
            task = asyncio.ensure_future(js.publish(f"{unique_name}.x", b"x", timeout=30))
            await wait_until(lambda: js.publish_async_pending == 1)  # sent, awaiting its ack
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            span = otel.one(f"send {unique_name}.x")
            assert span.end_time is not None
            assert span.attributes is not None
            assert span.attributes["error.type"] == "CancelledError"
            proxy.thaw()
            await js.delete_stream(unique_name)
        finally:
            await js.close()


async def test_receive_links_the_messages_that_carry_a_context_in_any_header_case(
    js: JetStream, unique_name: str, otel: Otel
) -> None:
    subject = await _stream(js, unique_name)
    contexts = [f"00-{'%032x' % (0xA0 + i)}-{'%016x' % (0xB0 + i)}-01" for i in range(2)]
    otel_free = await connect(js.nc.connected_url.geturl())  # type: ignore[union-attr]
    try:
        # published through nats-py directly: the headers are exactly these
        await otel_free.nc.publish(subject, b"go", headers={"Traceparent": contexts[0]})
        await otel_free.nc.publish(subject, b"other", headers={"X-Mine": "1"})
        await otel_free.nc.publish(subject, b"own", headers={"X-Own-Trace": contexts[1]})
        await otel_free.nc.flush()
    finally:
        await otel_free.close()

    async def receive_all(durable: str) -> list[tuple[int, int] | None]:
        consumer = await js.create_consumer(unique_name, durable_name=durable, ack_policy="none")
        for _ in range(3):
            await consumer.next(expires=5)
        spans = [s for s in otel.spans(f"receive {unique_name}") if s not in seen]
        seen.extend(spans)
        links = []
        for span in spans:
            assert len(span.links) <= 1
            links.append(
                (span.links[0].context.trace_id, span.links[0].context.span_id)
                if span.links
                else None
            )
        return links

    seen: list[object] = []
    expected = [(0xA0, 0xB0), None, (0xA1, 0xB1)]
    # the default propagator (W3C): the header other than its own is not read
    assert await receive_all("w3c") == [expected[0], None, None]
    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), OwnHeaderPropagator()])
    )
    try:
        # a propagator that reads another header is always asked
        assert await receive_all("own") == expected
    finally:
        propagate.set_global_textmap(saved)


@pytest.mark.usefixtures("own_server_allowed")
async def test_settle_spans_follow_the_connection_to_another_server(
    unique_name: str, otel: Otel
) -> None:
    with NatsServer() as first, NatsServer() as second:
        js = await connect(
            [first.url, second.url],
            dont_randomize=True,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=-1,
        )
        try:
            subject = await _stream(js, unique_name)
            await js.publish(subject, b"1")
            await js.publish(subject, b"2")
            consumer = await js.create_consumer(unique_name, durable_name="moving")
            one = await consumer.next(expires=5)
            two = await consumer.next(expires=5)
            await one.ack()
            first_port = _server_port(js)
            first.stop()
            await wait_until(
                lambda: (
                    not js.nc.is_closed and js.nc.is_connected and _server_port(js) != first_port
                )
            )
            await two.ack()  # to a server that knows nothing of it: only the span matters
        finally:
            await js.close()
    acks = otel.spans(f"ack {unique_name}")
    assert [s.attributes["server.port"] for s in acks] == [  # type: ignore[index]
        int(urlsplit(first.url).port or 0),
        int(urlsplit(second.url).port or 0),
    ]
