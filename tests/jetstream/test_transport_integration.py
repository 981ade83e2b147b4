"""The nats-py boundary: the synchronous delivery path and its fallback, owned vs
borrowed connections, and what happens to outstanding acks when the server goes away."""

from __future__ import annotations

import asyncio

import nats
import pytest

from aioclients import jetstream
from aioclients.jetstream import APITimeoutError, JetStream


@pytest.mark.parametrize("sync_delivery", [True, False], ids=["sync-sink", "nats-py-callback"])
async def test_publish_async_on_both_delivery_paths(
    nats_server: object, unique_name: str, sync_delivery: bool
) -> None:
    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        js._transport.sync_delivery = sync_delivery
        stream = await js.create_stream(
            unique_name, subjects=[f"{unique_name}.>"], allow_direct=True
        )
        futures = [await js.publish_async(f"{unique_name}.x", b"%d" % i) for i in range(500)]
        acks = await asyncio.gather(*futures)
        assert [a.seq for a in acks] == list(range(1, 501))
        got = [m.data async for m in stream.direct_get_batch(batch=500)]
        assert got == [b"%d" % i for i in range(500)]
        await js.delete_stream(unique_name)


async def test_borrowed_nats_py_client_is_not_closed_and_keeps_last_header(
    nats_server: object, unique_name: str
) -> None:
    nc = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    try:
        js = JetStream(nc)
        stream = await js.create_stream(unique_name, subjects=[unique_name], allow_direct=True)
        await js.publish(unique_name, b"v", headers={"K": ["1", "2"]})
        direct = await stream.direct_get(1)
        assert direct.headers == {"K": "2"}  # nats-py's parser keeps the last value
        leader = await stream.get_msg(1)
        assert leader.headers == {"K": ["1", "2"]}
        await js.delete_stream(unique_name)
        await js.close()
        assert not nc.is_closed
        with pytest.raises(jetstream.JetStreamClosedError):
            await js.account_info()
    finally:
        await nc.close()


async def test_ordered_reads_on_a_borrowed_nats_py_client(
    nats_server: object, unique_name: str
) -> None:
    """A client not opened by jetstream.connect() hands deliveries over as str
    (ours hands the bytes on the wire): ordered consumes, KV watch and keys() take
    both."""
    nc = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    try:
        js = JetStream(nc)
        stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
        for i in range(30):
            await js.publish(f"{unique_name}.s", b"%d" % i)
        oc = await stream.ordered_consumer()
        got = []
        async with oc.consume(max_messages=7) as messages:
            async for msg in messages:
                got.append((msg.subject, int(msg.data), msg.metadata.sequence.stream))
                if len(got) == 30:
                    break
        assert got == [(f"{unique_name}.s", i, i + 1) for i in range(30)]
        kv = await js.create_key_value(unique_name)
        for i in range(5):
            await kv.put(f"k{i}", b"v%d" % i)
        await kv.delete("k0")
        assert sorted([key async for key in kv.keys()]) == ["k1", "k2", "k3", "k4"]
        seen = {}
        async with kv.watch() as watcher:
            async for entry in watcher:
                seen[entry.key] = (entry.value, entry.operation)
                if watcher.initial_done.is_set():
                    break
        assert seen == {"k0": (b"", "DEL"), **{f"k{i}": (b"v%d" % i, "PUT") for i in range(1, 5)}}
        await js.delete_key_value(unique_name)
        await js.delete_stream(unique_name)
        await js.close()
    finally:
        await nc.close()


async def test_owned_connection_keeps_repeated_headers(
    nats_server: object, unique_name: str
) -> None:
    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        stream = await js.create_stream(unique_name, subjects=[unique_name], allow_direct=True)
        await js.publish(unique_name, b"v", headers={"K": ["1", "2"], "One": "x"})
        direct = await stream.direct_get(1)
        assert direct.headers == {"K": ["1", "2"], "One": "x"}
        await js.delete_stream(unique_name)
    assert js.nc.is_closed


@pytest.mark.fault
async def test_acks_lost_in_a_restart_fail_by_their_deadline(
    nats_server_private: object,
) -> None:
    server = nats_server_private
    async with await jetstream.connect(server.url, timeout=2.0) as js:  # type: ignore[attr-defined]
        await js.create_stream("R", subjects=["r"], storage="file")
        server.pause()  # type: ignore[attr-defined]
        try:
            futures = [await js.publish_async("r", b"x") for _ in range(20)]
            done, pending = await asyncio.wait(futures, timeout=10)
        finally:
            server.resume()  # type: ignore[attr-defined]
        assert not pending, "every ack future must settle by its deadline"
        for future in done:
            with pytest.raises(APITimeoutError):
                future.result()
        assert js.publish_async_pending == 0
        # The context is still usable once the server answers again.
        ack = await js.publish("r", b"after", timeout=5)
        assert ack.stream == "R"


async def test_abandoned_batch_iteration_releases_its_subscription(
    nats_server: object, unique_name: str
) -> None:
    import gc

    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        stream = await js.create_stream(unique_name, subjects=[unique_name], allow_direct=True)
        for _ in range(20):
            await js.publish_async(unique_name, b"x")
        await js.publish_async_complete(timeout=5)
        subs_before = len(js.nc._subs)
        batch = stream.direct_get_batch(batch=20)
        async for msg in batch:
            assert len(js.nc._subs) == subs_before + 1
            if msg.seq == 3:
                break  # no aclose(): the caller just walks away
        del batch, msg
        gc.collect()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while len(js.nc._subs) != subs_before:
            assert loop.time() < deadline, "the reply subscription was never released"
            await asyncio.sleep(0.01)  # let the loop run the generator's finalizer
        await js.delete_stream(unique_name)


async def test_concurrent_first_publishes_share_one_ack_subscription(
    nats_server: object, unique_name: str
) -> None:
    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        await js.create_stream(unique_name, subjects=[unique_name])
        subs_before = len(js.nc._subs)
        acks = await asyncio.gather(*(js.publish(unique_name, b"%d" % i) for i in range(50)))
        assert sorted(a.seq for a in acks) == list(range(1, 51))
        assert len(js.nc._subs) == subs_before + 1
        await js.delete_stream(unique_name)


async def test_direct_get_last_by_wildcard_subject(nats_server: object, unique_name: str) -> None:
    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        stream = await js.create_stream(
            unique_name, subjects=[f"{unique_name}.>"], allow_direct=True
        )
        await js.publish(f"{unique_name}.a", b"1")
        await js.publish(f"{unique_name}.b", b"2")
        await js.publish(f"{unique_name}.a.x", b"3")
        newest = await stream.direct_get(last_by_subj=f"{unique_name}.*")
        assert (newest.subject, newest.data) == (f"{unique_name}.b", b"2")
        deepest = await stream.direct_get(last_by_subj=f"{unique_name}.>")
        assert (deepest.subject, deepest.seq) == (f"{unique_name}.a.x", 3)
        await js.delete_stream(unique_name)


async def test_publish_acks_and_api_replies_come_raw_and_keep_nats_py_s_msg_shape(
    nats_server: object, unique_name: str
) -> None:
    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
        ack = await js.publish(f"{unique_name}.a", b"x")
        assert ack.seq == 1
        handlers = js.nc._raw_handlers
        for mux in (js._requests, js._acks):
            assert mux._sub is not None
            assert mux._sub._sub._id in handlers  # taken raw, not through nats-py's Msg path
        reply = await js._requests.request(f"$JS.API.STREAM.INFO.{unique_name}", b"", 5, "info")
        assert isinstance(reply, nats.aio.msg.Msg)
        assert reply.headers is None
        assert b'"config"' in reply.data
        with pytest.raises(jetstream.NoStreamResponseError):  # a 503 status reply, decoded
            await js.publish(f"nowhere.{unique_name}", b"x", timeout=5)
        await js.delete_stream(unique_name)


async def test_a_raw_request_takes_only_the_reply_on_its_own_inbox(
    nats_server: object, unique_name: str
) -> None:
    """Raw requests (Direct Get) and the others share one counter, under two inboxes:
    a message on the other inbox that carries a raw request's number is not its reply."""
    async with await jetstream.connect(nats_server.url) as js:  # type: ignore[attr-defined]
        mux = js._requests
        nc = js.nc
        await mux.request("$JS.API.INFO", b"", 5, "info")  # the other inbox, open
        asked = await nc.subscribe(f"{unique_name}.q")
        task = asyncio.create_task(mux.request_raw(f"{unique_name}.q", 5, "q"))
        request = await asked.next_msg(timeout=5)
        number = request.reply.rsplit(".", 1)[1]
        assert mux._prefix
        assert not request.reply.startswith(mux._prefix)
        await nc.publish(mux._prefix + number, b"stray")
        await nc.flush(timeout=5)  # the stray is read (and dropped) before the PONG
        assert not task.done()
        await nc.publish(request.reply, b"answer")
        assert await asyncio.wait_for(task, 5) == (None, b"answer")
        assert mux.outstanding == 0
