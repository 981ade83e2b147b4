"""``KeyValue.get`` on a real nats-server: a plain value's reply is read whole, in
one match, at the socket's read callback; every other reply (not found, deleted,
a value with headers of its own, a large value, replies that come together) is
read as before, with the same entries and errors."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from support import Server

from aioclients.jetstream import (
    BucketNotFoundError,
    JetStream,
    KeyDeletedError,
    KeyNotFoundError,
    KeyValue,
    KeyValueEntry,
)
from aioclients.jetstream._publisher import ReplyMux

pytestmark = pytest.mark.timeout(60)


class _Recording:
    """A reply's future, recording the payload of the groups it is given."""

    def __init__(self, future: Any, seen: list[bytes]) -> None:
        self._future = future
        self._seen = seen

    def done(self) -> bool:
        return bool(self._future.done())

    def set_result(self, groups: tuple[Any, ...]) -> None:
        if groups[0] is not None:  # read whole (a reply read otherwise has no subject)
            self._seen.append(groups[-1])
        self._future.set_result(groups)


class _RecordingTable(dict[Any, Any]):
    """A table of outstanding requests whose entries, taken out by a reply, record
    the payloads of the replies read whole."""

    def __init__(self, seen: list[bytes]) -> None:
        super().__init__()
        self._seen = seen

    def pop(self, key: Any, *default: Any) -> Any:
        entry = super().pop(key, *default)
        if entry is None or not isinstance(key, str):
            return entry
        return (_Recording(entry[0], self._seen), *entry[1:])


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The payloads of the replies read whole (the raw inbox opens after this)."""
    seen: list[bytes] = []
    original = ReplyMux._ensure_raw_open

    async def spy(self: ReplyMux[Any]) -> None:
        if self._raw_sub is None:
            table = _RecordingTable(seen)
            table.update(self._pending)
            self._pending = table
        await original(self)

    monkeypatch.setattr(ReplyMux, "_ensure_raw_open", spy)
    return seen


@pytest.fixture
async def kv(js: JetStream, unique_name: str) -> AsyncIterator[KeyValue]:
    bucket = unique_name.replace(".", "_")[-60:]
    store = await js.create_key_value(bucket, history=3)
    try:
        yield store
    finally:
        with contextlib.suppress(BucketNotFoundError):
            await js.delete_key_value(bucket)


async def same_as_the_general_reading(kv: KeyValue, got: KeyValueEntry) -> None:
    """The entry a get by revision (the general reading of a stored message) makes."""
    general = await kv.get(got.key, revision=got.revision)
    assert got == general
    assert (got.created, got.value, got._headers is not None) == (
        general.created,
        general.value,
        True,
    )


async def test_a_plain_value_is_read_whole(js: JetStream, kv: KeyValue, whole: list[bytes]) -> None:
    revision = await kv.put("a", b"one")
    await kv.get("a")  # the first get opens the inbox (and may take the slow way)
    whole.clear()
    got = await kv.get("a")
    assert whole == [b"one"]
    assert (got.key, got.value, got.revision, got.operation, got.delta) == (
        "a",
        b"one",
        revision,
        "PUT",
        0,
    )
    assert type(got.revision) is int
    await same_as_the_general_reading(kv, got)
    assert js._requests.outstanding == 0


@pytest.mark.parametrize(
    "value",
    [b"", b"\r\n", b"v\r\nHMSG _INBOX.x.1 1 2 2\r\nab\r\n", bytes(range(256)) * 4],
    ids=["empty", "crlf", "a frame inside", "every byte"],
)
async def test_values_of_any_bytes_are_read_whole(
    kv: KeyValue, whole: list[bytes], value: bytes
) -> None:
    await kv.put("k", value)
    await kv.get("k")
    whole.clear()
    got = await kv.get("k")
    assert got.value == value
    assert whole == [value]
    await same_as_the_general_reading(kv, got)


async def test_other_replies_are_read_as_before(
    js: JetStream, kv: KeyValue, whole: list[bytes]
) -> None:
    await kv.put("a", b"one")
    await kv.get("a")
    await kv.put("gone", b"x")
    await kv.delete("gone")
    await kv.put("purged", b"x")
    await kv.purge("purged")
    await js.publish(f"$KV.{kv.bucket}.traced", b"mine", headers={"X-Trace": "t1"})
    large = bytes(range(256)) * 1024  # 256 KiB: more than one read
    await kv.put("large", large)
    whole.clear()
    with pytest.raises(KeyNotFoundError):
        await kv.get("missing")
    with pytest.raises(KeyDeletedError) as deleted:
        await kv.get("gone")
    assert deleted.value.entry.operation == "DEL"  # type: ignore[attr-defined]
    with pytest.raises(KeyDeletedError) as purged:
        await kv.get("purged")
    assert purged.value.entry.operation == "PURGE"  # type: ignore[attr-defined]
    traced = await kv.get("traced")
    assert traced.value == b"mine"
    assert isinstance(traced._headers, bytes)
    assert b"X-Trace: t1" in traced._headers
    await same_as_the_general_reading(kv, traced)
    got = await kv.get("large")
    assert got.value == large
    await same_as_the_general_reading(kv, got)
    assert b"mine" not in whole  # headers of its own
    assert b"" not in whole  # statuses, markers
    assert (await kv.get("a")).value == b"one"
    assert whole[-1:] == [b"one"]
    assert js._requests.outstanding == 0


async def test_gets_whose_replies_come_together_are_each_answered(
    kv: KeyValue, whole: list[bytes]
) -> None:
    for i in range(50):
        await kv.put(f"k{i}", b"v%d" % i)
    await kv.get("k0")
    for _ in range(3):
        got = await asyncio.gather(*(kv.get(f"k{i}") for i in range(50)))
        assert [e.value for e in got] == [b"v%d" % i for i in range(50)]
        assert [e.key for e in got] == [f"k{i}" for i in range(50)]


async def test_two_contexts_on_one_connection_each_get_their_own_replies(
    js: JetStream, kv: KeyValue, whole: list[bytes]
) -> None:
    """One connection, two request layers: the first raw inbox opened reads replies
    whole, the other's as before; closing the first hands the reading on."""
    await kv.put("a", b"one")
    first, second = JetStream(js.nc), JetStream(js.nc)
    mine = await first.key_value(kv.bucket)
    theirs = await second.key_value(kv.bucket)
    await mine.get("a")
    await theirs.get("a")
    whole.clear()
    assert (await mine.get("a")).value == b"one"
    assert (await theirs.get("a")).value == b"one"
    assert whole == [b"one"]  # the first context's only
    await first._requests.close()
    whole.clear()
    assert (await theirs.get("a")).value == b"one"
    assert whole == [b"one"]
    await second._requests.close()


async def test_a_context_over_a_plain_nats_py_client_gets_as_before(
    nats_server: Server, kv: KeyValue, whole: list[bytes]
) -> None:
    await kv.put("a", b"one")
    nc = await nats.connect(nats_server.url)
    try:
        theirs = await JetStream(nc).key_value(kv.bucket)
        for _ in range(3):
            assert (await theirs.get("a")).value == b"one"
        with pytest.raises(KeyNotFoundError):
            await theirs.get("missing")
        assert whole == []
    finally:
        await nc.close()
