"""The ``$JS.API`` request layer against a real nats-server: the server's
version and API level (ADR-44), ``require`` and level-carrying requests, and
the handles that hang off the layer rather than the facade."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import nats
import pytest
from nats.aio.msg import Msg as NatsMsg

from aioclients import LocalProtocolError
from aioclients.jetstream import (
    ConsumerNotFoundError,
    JetStream,
    JetStreamClosedError,
    ServerTooOldError,
    StreamNameInUseError,
    StreamNotFoundError,
)

pytestmark = pytest.mark.timeout(60)


async def test_the_api_level_is_the_one_the_server_reports(js: JetStream) -> None:
    api = js._jsapi
    info = await js.account_info()
    level = await api.api_level()
    assert level == info.api["level"]
    assert level >= 1  # the server under test is 2.11 or newer
    version = api.server_version()
    assert version is not None
    server = js.nc.connected_server_version
    assert version == (server.major, server.minor, server.patch)


async def test_require_passes_what_the_server_has_and_names_what_it_lacks(js: JetStream) -> None:
    api = js._jsapi
    level = await api.api_level()
    version = api.server_version()
    assert version is not None
    await api.require("today's feature", level=level, version=version)
    with pytest.raises(ServerTooOldError) as raised:
        await api.require("tomorrow's feature", level=level + 1)
    text = str(raised.value)
    assert "tomorrow's feature needs JetStream API level" in text
    assert f"the server has API level {level}" in text
    with pytest.raises(ServerTooOldError, match=r"tomorrow's feature needs nats-server 99\.0\.0"):
        await api.require("tomorrow's feature", version=(99, 0, 0))


async def test_a_request_that_needs_a_higher_level_is_refused_naming_the_feature(
    js: JetStream,
) -> None:
    api = js._jsapi
    level = await api.api_level()
    # The server itself refuses it (ADR-44: Nats-Required-Api-Level, error 10185).
    with pytest.raises(ServerTooOldError) as raised:
        await api.request("STREAM.NAMES", {"offset": 0}, level=level + 1, feature="the lister")
    assert raised.value.err_code == 10185
    assert f"the lister needs JetStream API level {level + 1}" in str(raised.value)
    # At the server's own level the same request is served.
    answer = await api.request("STREAM.NAMES", {"offset": 0}, level=level, feature="the lister")
    assert "streams" in answer


async def test_a_server_that_reports_no_level_is_level_zero_and_asked_once(
    nats_server: object, unique_name: str
) -> None:
    # A server before 2.11 answers $JS.API.INFO without "api.level": a responder
    # under its own API prefix plays one on the real server.
    nc = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    prefix = f"OLD.{unique_name}.API"
    asked: list[str] = []

    async def old_server(msg: NatsMsg) -> None:
        asked.append(msg.subject)
        answer = {"type": "io.nats.jetstream.api.v1.account_info_response", "memory": 0}
        await nc.publish(msg.reply, json.dumps(answer).encode())

    sub = await nc.subscribe(f"{prefix}.INFO", cb=old_server)
    try:
        api = JetStream(nc, api_prefix=prefix, timeout=2.0)._jsapi
        assert await api.api_level() == 0
        assert await api.api_level() == 0
        assert asked == [f"{prefix}.INFO"]  # the level is kept for this server
        with pytest.raises(ServerTooOldError, match="the server has API level 0"):
            await api.require("a 2.11 feature", level=1)
        assert len(asked) == 1
    finally:
        await sub.unsubscribe()
        await nc.close()


async def test_require_on_a_closed_context_says_closed(js: JetStream) -> None:
    await js.close()
    with pytest.raises(JetStreamClosedError):
        await js._jsapi.require("anything", level=0)


async def test_the_handles_hold_the_request_layer_not_the_facade(
    js: JetStream, unique_name: str
) -> None:
    api = js._jsapi
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    consumer = await stream.create_consumer(durable_name="c")
    oc = await stream.ordered_consumer()
    kv = await js.create_key_value(unique_name)
    try:
        for handle in (stream, consumer, oc, kv, kv.stream):
            assert handle._api is api  # type: ignore[attr-defined]
            assert not any(value is js for value in vars(handle).values())
        await js.publish(f"{unique_name}.a", b"x")
        msg = await consumer.next(expires=5)
        assert msg._api is api
        await msg.ack()
    finally:
        await oc.close()
        await js.delete_key_value(unique_name)


async def test_not_found_and_name_in_use_name_the_stream_and_what_to_do(
    js: JetStream, unique_name: str
) -> None:
    # The server's text names nothing: "stream not found", "consumer not found".
    name = unique_name
    with pytest.raises(StreamNotFoundError) as missing:
        await js.stream(name)
    assert missing.value.description == "stream not found"  # still the server's text
    assert f"no stream {name!r}: create_stream({name!r}, subjects=[...])" in str(missing.value)
    with pytest.raises(StreamNotFoundError, match=f"no stream {name!r}"):
        await js.delete_stream(name)
    with pytest.raises(StreamNotFoundError, match=f"no stream {name!r}"):
        await js.consumer(name, "c")

    await js.create_stream(name, subjects=[f"{name}.>"])
    with pytest.raises(StreamNameInUseError) as in_use:
        await js.create_stream(name, subjects=[f"{name}.>"], max_msgs=10)
    assert (
        f"stream {name!r} exists with another configuration: update_stream({name!r}, ...) "
        f"changes it, delete_stream({name!r}) removes it"
    ) in str(in_use.value)
    for call in (js.consumer(name, "c"), js.delete_consumer(name, "c")):
        with pytest.raises(ConsumerNotFoundError, match=f"no consumer 'c' on stream {name!r}"):
            await call


async def test_a_context_used_on_another_event_loop_says_so_at_once(
    js: JetStream, unique_name: str
) -> None:
    # Its connection reads on the loop it connected on: a request from another loop
    # (a second asyncio.run, another thread) waited out its timeout, then said
    # "no reply in time".
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])

    def on_another_loop(call: Callable[[], Awaitable[object]]) -> BaseException | None:
        async def main() -> None:
            await call()

        try:
            asyncio.run(main())
        except BaseException as exc:  # checked on the test's loop
            return exc
        return None

    for call in (
        js.account_info,
        lambda: js.stream(unique_name),
        lambda: js.publish(f"{unique_name}.x", b"x", timeout=2.0),
    ):
        error = await asyncio.to_thread(on_another_loop, call)
        assert isinstance(error, LocalProtocolError), repr(error)
        assert "connected on another event loop" in str(error)
    await js.publish(f"{unique_name}.x", b"still usable on its own loop")
