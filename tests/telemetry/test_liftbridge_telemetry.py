"""Liftbridge spans, links and metrics against the emulated cluster."""

from __future__ import annotations

import asyncio

from opentelemetry.trace import SpanKind, StatusCode
from otel_support import Otel, hex_ids

from aioclients.liftbridge import (
    LiftbridgeClosedError,
    StartPosition,
    StopPosition,
    connect,
)
from aioclients.telemetry import context_of
from aioclients.testing._liftbridge_fixtures import skip_without_cursors


async def test_publish_subscribe_and_context_of(
    liftbridge_cluster: object, unique_name: str, otel: Otel
) -> None:
    addresses = liftbridge_cluster.addresses  # type: ignore[attr-defined]
    stream = f"s_{unique_name}"
    async with await connect(addresses) as client:
        await client.create_stream(f"subj.{unique_name}", stream)
        with otel.tracer.start_as_current_span("request") as request:
            ack = await client.publish(stream, b"one", headers={"mine": b"1"})
            future = await client.publish_async(stream, b"two")
            ack2 = await future
            await client.publish_to_subject(f"subj.{unique_name}", b"three")
        await asyncio.sleep(0)  # publish_async's span ends in the ack's done callback
        sends = otel.spans(f"send {stream}")
        assert len(sends) == 2
        (to_subject,) = otel.spans(f"send subj.{unique_name}")
        for span in [*sends, to_subject]:
            assert span.kind is SpanKind.PRODUCER
            assert span.parent is not None
            assert span.parent.span_id == request.get_span_context().span_id
            assert span.attributes is not None
            assert span.attributes["messaging.system"] == "liftbridge"
            assert span.attributes["messaging.operation.type"] == "send"
        assert ack is not None
        assert ack2 is not None
        assert [s.attributes["messaging.message.id"] for s in sends] == [  # type: ignore[index]
            str(ack.offset),
            str(ack2.offset),
        ]
        assert sends[0].attributes["messaging.destination.partition.id"] == "0"  # type: ignore[index]
        assert otel.total("messaging.client.sent.messages") == 3

        got = []
        async with client.subscribe(
            stream, start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
        ) as sub:
            async for msg in sub:
                got.append(msg)
        assert [m.value for m in got] == [b"one", b"two", b"three"]
        assert got[0].headers["mine"] == b"1"
        receives = otel.spans(f"receive {stream}")
        assert len(receives) == 3
        for receive, msg, producer in zip(receives, got, [*sends, to_subject], strict=True):
            assert receive.kind is SpanKind.CLIENT
            assert receive.attributes is not None
            assert receive.attributes["messaging.message.id"] == str(msg.offset)
            assert receive.attributes["messaging.destination.partition.id"] == "0"
            (link,) = receive.links
            assert (link.context.trace_id, link.context.span_id) == hex_ids(producer)
            with otel.tracer.start_as_current_span("handle", context=context_of(msg)) as handle:
                pass
            assert handle.parent is not None
            assert (handle.get_span_context().trace_id, handle.parent.span_id) == hex_ids(producer)
        assert otel.total("messaging.client.consumed.messages") == 3


async def test_group_consumer_spans_only_what_the_application_takes(
    liftbridge_cluster: object, unique_name: str, otel: Otel
) -> None:
    addresses = liftbridge_cluster.addresses  # type: ignore[attr-defined]
    await skip_without_cursors(addresses)
    stream = f"g_{unique_name}"
    async with await connect(addresses) as client:
        await client.create_stream(f"gsubj.{unique_name}", stream)
        for i in range(5):
            await client.publish(stream, b"%d" % i)
        otel.exporter.clear()
        async with client.consumer(
            "grp", [stream], auto_offset=StartPosition.EARLIEST, checkpoint_interval=None
        ) as member:
            taken = []
            async for msg in member:
                taken.append(msg.value)
                if len(taken) == 5:
                    break
            # the member's own subscription read each message before the
            # application took it: those reads make no span, only the takes do
            assert taken == [b"0", b"1", b"2", b"3", b"4"]
            receives = otel.spans(f"receive {stream}")
            assert len(receives) == 5
            for span in receives:
                assert span.attributes is not None
                assert span.attributes["messaging.consumer.group.name"] == "grp"
                assert len(span.links) == 1


async def test_publish_on_a_closed_client(
    liftbridge_cluster: object, unique_name: str, otel: Otel
) -> None:
    client = await connect(liftbridge_cluster.addresses)  # type: ignore[attr-defined]
    await client.close()
    try:
        await client.publish(f"x_{unique_name}", b"v")
    except LiftbridgeClosedError:
        pass
    else:  # pragma: no cover - the assertion below reports it
        raise AssertionError("publish on a closed client did not fail")
    span = otel.one(f"send x_{unique_name}")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "LiftbridgeClosedError"
