"""TTL publishes, KV writes with a TTL and counters while the clients are
instrumented: the wrappers pass the new arguments through, and the send spans
still carry their context in the stored message's headers."""

from __future__ import annotations

import pytest
from otel_support import Otel

from aioclients.jetstream import JetStream

pytestmark = pytest.mark.timeout(60)


async def test_ttl_and_counter_calls_work_instrumented(
    otel: Otel, js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_msg_ttl=True)
    ack = await js.publish(f"{unique_name}.a", b"x", ttl=1.5)
    stored = await stream.get_msg(ack.seq)
    assert stored.headers is not None
    assert stored.headers["Nats-TTL"] == "1.5s"  # as nats.go writes it
    assert "traceparent" in stored.headers
    future = await js.publish_async(f"{unique_name}.a", b"y", ttl="never")
    assert (await stream.get_msg((await future).seq)).headers["Nats-TTL"] == "never"  # type: ignore[index]

    kv = await js.create_key_value(unique_name, limit_marker_ttl=5)
    revision = await kv.create("k", b"v", ttl=2)
    entry = await kv.get("k")
    assert entry.revision == revision
    await kv.purge("k", ttl=2)
    history = await kv.history("k")
    assert history[-1].operation == "PURGE"

    counters = await js.create_stream(
        f"{unique_name}_c",
        subjects=[f"{unique_name}c.>"],
        allow_msg_counter=True,
        allow_direct=True,
    )
    assert await js.counter_add(f"{unique_name}c.n", 2) == 2
    assert await counters.counter_value(f"{unique_name}c.n") == 2
    names = [span.name for span in otel.exporter.get_finished_spans()]
    assert any(name.startswith("send") for name in names)
    increment = otel.one(f"send {unique_name}c.n")
    assert dict(increment.attributes or {})["messaging.destination.name"] == f"{unique_name}c.n"
    assert (
        otel.total(
            "messaging.client.sent.messages", messaging__destination__name=f"{unique_name}c.n"
        )
        == 1
    )
    await js.delete_key_value(unique_name)
