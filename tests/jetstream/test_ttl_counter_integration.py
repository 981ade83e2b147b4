"""Per-message TTL (ADR-43), Key-Value TTLs and limit markers (ADR-48) and counters
(ADR-49) against the real nats-server. Expiry is waited for as a condition with a
deadline; TTLs are the server's minimum, one second."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream import (
    DirectGetUnavailableError,
    JetStream,
    JetStreamError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyValueEntry,
    MessageNotFoundError,
)

pytestmark = pytest.mark.timeout(60)

WaitFor = Callable[..., Awaitable[None]]


async def _gone(js: JetStream, stream: str, seq: int) -> bool:
    try:
        await js._jsapi.request(f"STREAM.MSG.GET.{stream}", {"seq": seq})
    except MessageNotFoundError:
        return True
    return False


# -- per-message TTL ---------------------------------------------------------------------------


async def test_a_message_with_a_ttl_goes_when_it_ends(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_msg_ttl=True)
    assert stream.cached_info.config["allow_msg_ttl"] is True
    short = await js.publish(f"{unique_name}.a", b"short", ttl=1)
    kept = await js.publish(f"{unique_name}.a", b"kept", ttl="never")
    later = await (await js.publish_async(f"{unique_name}.b", b"later", ttl=1.5))
    stored = await stream.get_msg(later.seq)
    assert stored.headers is not None
    assert stored.headers["Nats-TTL"] == "1.5s"  # as nats.go writes it
    await wait_for(lambda: _gone(js, unique_name, short.seq), timeout=15, what="the 1 s TTL")
    await wait_for(lambda: _gone(js, unique_name, later.seq), timeout=15, what="the 1.5 s TTL")
    assert (await stream.get_msg(kept.seq)).data == b"kept"


async def test_never_outlives_the_streams_max_age(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    stream = await js.create_stream(
        unique_name, subjects=[f"{unique_name}.>"], allow_msg_ttl=True, max_age=1
    )
    plain = await js.publish(f"{unique_name}.a", b"plain")
    kept = await js.publish(f"{unique_name}.a", b"kept", ttl="never")
    await wait_for(lambda: _gone(js, unique_name, plain.seq), timeout=15, what="max_age")
    assert (await stream.get_msg(kept.seq)).data == b"kept"


async def test_a_ttl_under_a_second_is_refused_before_anything_is_sent(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_msg_ttl=True)
    for bad in (0.5, 0, -3, "1s", True):
        with pytest.raises(InvalidArgumentError, match="ttl"):
            await js.publish(f"{unique_name}.a", b"x", ttl=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="ttl"):
            await js.publish_async(f"{unique_name}.a", b"x", ttl=bad)  # type: ignore[arg-type]
    assert (await stream.info()).state.last_seq == 0


async def test_a_ttl_on_a_stream_without_allow_msg_ttl_is_the_servers_error(
    js: JetStream, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(JetStreamError) as raised:
        await js.publish(f"{unique_name}.a", b"x", ttl=2)
    assert raised.value.err_code == 10166  # per-message TTL is disabled


async def test_the_2_11_and_2_12_stream_options_pass_through(
    js: JetStream, unique_name: str
) -> None:
    stream = await js.create_stream(
        unique_name,
        subjects=[f"{unique_name}.>"],
        allow_msg_ttl=True,
        subject_delete_marker_ttl=2.5,
        allow_atomic=True,
        allow_msg_schedules=True,
    )
    config = stream.cached_info.config
    assert config["allow_msg_ttl"] is True
    assert config["subject_delete_marker_ttl"] == 2.5  # nanoseconds on the wire
    assert config["allow_atomic"] is True
    assert config["allow_msg_schedules"] is True
    updated = await js.update_stream(unique_name, subject_delete_marker_ttl=4)
    assert updated.cached_info.config["subject_delete_marker_ttl"] == 4.0
    counter = await js.create_stream(
        f"{unique_name}_c", subjects=[f"{unique_name}c.>"], allow_msg_counter=True
    )
    assert counter.cached_info.config["allow_msg_counter"] is True


# -- Key-Value TTLs and limit markers (ADR-48) --------------------------------------------------


async def _read_state(kv: object, key: str) -> str:
    try:
        await kv.get(key)  # type: ignore[attr-defined]
    except KeyDeletedError:
        return "deleted"
    except KeyNotFoundError:
        return "not found"
    return "value"


async def test_a_key_with_a_ttl_reads_deleted_then_not_found_and_a_watch_sees_the_marker(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    kv = await js.create_key_value(unique_name, limit_marker_ttl=2)
    info = kv.stream.cached_info.config
    assert info["allow_msg_ttl"] is True
    assert info["subject_delete_marker_ttl"] == 2.0
    assert (await kv.status()).limit_marker_ttl == 2.0
    # The same settings give the same bucket back.
    assert (await js.create_key_value(unique_name, limit_marker_ttl=2)).bucket == unique_name
    async with kv.watch("k") as watcher:
        await asyncio.wait_for(watcher.initial_done.wait(), 5)
        revision = await kv.create("k", b"v", ttl=1)
        put = await asyncio.wait_for(watcher.__anext__(), 5)
        assert (put.operation, put.revision) == ("PUT", revision)
        marker: KeyValueEntry = await asyncio.wait_for(watcher.__anext__(), 15)
        assert marker.key == "k"
        assert marker.operation == "PURGE"
        assert marker.revision > revision
        # The marker lives 2 s: read at once, the key is deleted, the marker its entry.
        with pytest.raises(KeyDeletedError) as deleted:
            await kv.get("k")
        assert deleted.value.entry.revision == marker.revision
        assert deleted.value.entry.operation == "PURGE"
    # While the marker lives the key reads as deleted; after it, as not found.
    states: list[str] = []

    async def not_found() -> bool:
        state = await _read_state(kv, "k")
        if not states or states[-1] != state:
            states.append(state)
        return state == "not found"

    await wait_for(not_found, timeout=15, what="the limit marker's end")
    assert states[-1] == "not found"
    assert "value" not in states
    # The key is free again: create takes it.
    assert await kv.create("k", b"again") > 0


async def test_a_bucket_max_age_leaves_a_marker_a_watch_sees(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    kv = await js.create_key_value(unique_name, ttl=1, limit_marker_ttl=1)
    async with kv.watch() as watcher:
        await asyncio.wait_for(watcher.initial_done.wait(), 5)
        await kv.put("old", b"v")
        assert (await asyncio.wait_for(watcher.__anext__(), 5)).operation == "PUT"
        marker = await asyncio.wait_for(watcher.__anext__(), 15)
        assert (marker.key, marker.operation) == ("old", "PURGE")
        headers = marker._headers
        assert isinstance(headers, bytes)
        assert b"Nats-Marker-Reason: MaxAge" in headers

    async def not_found() -> bool:
        return await _read_state(kv, "old") == "not found"

    await wait_for(not_found, timeout=15, what="the max-age marker's end")


async def test_a_purge_with_a_ttl_goes_itself(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    kv = await js.create_key_value(unique_name, limit_marker_ttl=1)
    await kv.put("k", b"v1")
    await kv.put("k", b"v2")
    await kv.purge("k", ttl=1)
    with pytest.raises(KeyDeletedError):
        await kv.get("k")

    async def not_found() -> bool:
        return await _read_state(kv, "k") == "not found"

    await wait_for(not_found, timeout=15, what="the purge marker's TTL")
    assert (await kv.status()).values == 0


async def test_a_per_key_ttl_needs_limit_markers_and_a_good_value(
    js: JetStream, unique_name: str
) -> None:
    kv = await js.create_key_value(unique_name)
    assert (await kv.status()).limit_marker_ttl == 0.0
    with pytest.raises(InvalidArgumentError, match="limit_marker_ttl"):
        await kv.create("k", b"v", ttl=5)
    with pytest.raises(InvalidArgumentError, match="limit_marker_ttl"):
        await kv.purge("k", ttl=5)
    marked = await js.create_key_value(f"{unique_name}m", limit_marker_ttl=5)
    with pytest.raises(InvalidArgumentError, match="at least 1 second"):
        await marked.create("k", b"v", ttl=0.2)
    assert (await kv.status()).values == 0
    assert (await marked.status()).values == 0
    await js.delete_key_value(f"{unique_name}m")


# -- counters (ADR-49) ----------------------------------------------------------------------


async def test_counters_add_any_size_and_read_back(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(
        unique_name, subjects=[f"{unique_name}.>"], allow_msg_counter=True, allow_direct=True
    )
    a, b = f"{unique_name}.a", f"{unique_name}.b"
    assert await js.counter_add(a) == 1
    assert await js.counter_add(a, 41) == 42
    assert await js.counter_add(a, -50) == -8
    huge = 10**40 + 7
    assert await js.counter_add(b, huge) == huge
    assert await js.counter_add(b, huge, timeout=5) == 2 * huge
    assert await js.counter_add(b, 0) == 2 * huge
    assert await stream.counter_value(a) == -8
    assert await stream.counter_value(b) == 2 * huge
    assert dict([item async for item in stream.counter_values(f"{unique_name}.*")]) == {
        a: -8,
        b: 2 * huge,
    }
    assert [item async for item in stream.counter_values([b])] == [(b, 2 * huge)]
    assert [item async for item in stream.counter_values(a)] == [(a, -8)]
    with pytest.raises(MessageNotFoundError):
        await stream.counter_value(f"{unique_name}.none")
    for bad in (1.5, "1", True, None):
        with pytest.raises(InvalidArgumentError, match="delta"):
            await js.counter_add(a, bad)  # type: ignore[arg-type]
    assert await stream.counter_value(a) == -8


async def test_counter_reads_say_they_need_allow_direct(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(
        unique_name, subjects=[f"{unique_name}.>"], allow_msg_counter=True
    )
    assert await js.counter_add(f"{unique_name}.a", 3) == 3
    with pytest.raises(DirectGetUnavailableError, match=r"allow_direct=True"):
        await stream.counter_value(f"{unique_name}.a")
    with pytest.raises(DirectGetUnavailableError, match=r"allow_direct=True"):
        async for _ in stream.counter_values(f"{unique_name}.>"):
            pass


async def test_an_increment_on_a_plain_stream_is_the_servers_error(
    js: JetStream, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(JetStreamError) as raised:
        await js.counter_add(f"{unique_name}.a", 1)
    assert raised.value.err_code is not None
