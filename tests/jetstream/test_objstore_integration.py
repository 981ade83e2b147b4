"""Object Store (ADR-20) end to end on the real nats-server: puts and streaming
gets, metas, links, deletes, seals, snapshot listings, watches, broken objects
and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from consume_support import LoseOne

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream import (
    BucketNotFoundError,
    BucketSealedError,
    DigestMismatchError,
    JetStream,
    LinkIsABucketError,
    ObjectDeletedError,
    ObjectExistsError,
    ObjectIncompleteError,
    ObjectInfo,
    ObjectNotFoundError,
    ObjectStore,
    StreamNameInUseError,
    connect,
)
from aioclients.jetstream import _objstore as objstore_module

pytestmark = pytest.mark.timeout(60)

Waiter = Callable[..., Awaitable[None]]


@pytest.fixture
def bucket(unique_name: str) -> str:
    return unique_name.replace(".", "_")[-50:]


@pytest.fixture
async def store(js: JetStream, bucket: str) -> AsyncIterator[ObjectStore]:
    created = await js.create_object_store(bucket)
    try:
        yield created
    finally:
        with contextlib.suppress(BucketNotFoundError):
            await js.delete_object_store(bucket)


async def _pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def _messages(store: ObjectStore) -> int:
    return (await store.stream.info()).state.messages


# -- the store ---------------------------------------------------------------------------------


async def test_stores_are_created_opened_listed_and_deleted(js: JetStream, bucket: str) -> None:
    with pytest.raises(BucketNotFoundError):
        await js.object_store(bucket)
    store = await js.create_object_store(bucket, description="d", metadata={"team": "a"})
    try:
        assert store.bucket == bucket
        assert (await js.create_object_store(bucket, description="d")).bucket == bucket
        with pytest.raises(StreamNameInUseError):
            await js.create_object_store(bucket, storage="memory")
        assert (await js.object_store(bucket)).bucket == bucket
        assert bucket in [name async for name in js.object_store_names()]
        status = await store.status()
        assert status.bucket == bucket
        assert status.description == "d"
        assert status.metadata == {"team": "a"}
        assert not status.sealed
        assert status.storage == "file"
        config = status.stream_info.config
        assert config["subjects"] == [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"]
        assert config["allow_rollup_hdrs"] is True
        assert config["discard"] == "new"
    finally:
        await js.delete_object_store(bucket)
    with pytest.raises(BucketNotFoundError):
        await js.delete_object_store(bucket)
    with pytest.raises(InvalidArgumentError):
        await js.create_object_store("a.b")


# -- put and get -------------------------------------------------------------------------------


async def test_a_first_chunk_no_stream_took_is_sent_again_once_one_listens(
    js: JetStream, store: ObjectStore, bucket: str
) -> None:
    # What a cluster answers for a moment after the bucket is created: no responders
    # for its chunks. Here the stream does not take them until the first was refused.
    tried_again = asyncio.Event()

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "trying again" in record.getMessage():
                tried_again.set()

    logger = logging.getLogger("aioclients.jetstream.publish")
    handler, level = Retries(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        stream = f"OBJ_{bucket}"
        await js.update_stream(stream, subjects=[f"$O.{bucket}.M.>"])
        js._jsapi.acks.retry_attempts, js._jsapi.acks.retry_wait = 20, 0.5  # room for it
        data = os.urandom(50_000)
        task = asyncio.ensure_future(store.put("late", data, chunk_size=10_000))
        await asyncio.wait_for(tried_again.wait(), 10)
        assert not task.done()
        await js.update_stream(stream, subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"])
        info = await asyncio.wait_for(task, 30)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert info.chunks == 5
    assert await store.get_bytes("late") == data
    assert await _messages(store) == 6  # each chunk stored once, and the meta


async def test_meta_is_read_through_the_api_when_nobody_answers_direct_get(
    js: JetStream, store: ObjectStore, bucket: str
) -> None:
    # "No responders" to Direct Get while the bucket exists: what a cluster answers for
    # a moment after the bucket is created (its replicas' interest not known yet to the
    # server the client is on), or after allow_direct was turned off, as here, where a
    # server alone says it every time. The meta is read through the API instead.
    await store.put("a", b"x" * 10)
    await js.update_stream(f"OBJ_{bucket}", allow_direct=False)
    assert (await store.info("a")).size == 10
    assert await store.get_bytes("a") == b"x" * 10
    await store.put("b", b"yy")
    assert (await store.info("b")).size == 2
    with pytest.raises(ObjectNotFoundError):
        await store.info("missing")
    await js.delete_object_store(bucket)
    with pytest.raises(BucketNotFoundError):
        await store.info("a")


async def test_bytes_are_put_and_streamed_back_in_chunks(store: ObjectStore) -> None:
    data = os.urandom(300_000)
    info = await store.put(
        "dir/file one.bin",
        data,
        description="d",
        headers={"Content-Type": "application/octet-stream"},
        metadata={"k": "v"},
        chunk_size=64 * 1024,
    )
    assert (info.size, info.chunks) == (300_000, 5)
    assert info.digest.startswith("SHA-256=")
    assert info.modified.tzinfo is not None
    assert info.bucket == store.bucket
    async with store.get("dir/file one.bin") as obj:
        assert obj.info == info
        chunks = [chunk async for chunk in obj]
    assert [len(c) for c in chunks] == [65536] * 4 + [300_000 - 4 * 65536]
    assert b"".join(chunks) == data
    got = await store.info("dir/file one.bin")
    assert got.description == "d"
    assert got.headers == {"Content-Type": "application/octet-stream"}
    assert got.metadata == {"k": "v"}
    assert await store.get_bytes("dir/file one.bin") == data


async def test_files_and_async_iterables_are_read_in_chunks(store: ObjectStore) -> None:
    data = os.urandom(200_001)

    class CountingFile(io.BytesIO):
        largest = 0

        def read(self, size: int | None = -1) -> bytes:
            assert size is not None
            assert size > 0  # never read whole
            CountingFile.largest = max(CountingFile.largest, size)
            return super().read(size)

    class RawFile(io.RawIOBase):  # readinto only, short reads
        def __init__(self, data: bytes) -> None:
            self._f = io.BytesIO(data)

        def readinto(self, buffer: Any) -> int:
            return self._f.readinto(memoryview(buffer)[:12_345])

        def readable(self) -> bool:
            return True

    info = await store.put("file", CountingFile(data), chunk_size=50_000)
    assert CountingFile.largest == 50_000
    assert info.chunks == 5
    assert await store.get_bytes("file") == data
    raw = RawFile(data)
    raw.read = None  # type: ignore[method-assign]  # only readinto is left
    info = await store.put("raw", raw, chunk_size=50_000)
    assert info.chunks == 5
    assert await store.get_bytes("raw") == data
    # odd-sized pieces are cut into full chunks
    info = await store.put("iter", _pieces(data, 7_777), chunk_size=50_000)
    assert (info.size, info.chunks) == (200_001, 5)
    assert await store.get_bytes("iter") == data
    with pytest.raises(InvalidArgumentError):
        await store.put("bad", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.put("bad", 42)  # type: ignore[arg-type]


async def test_async_file_objects_are_awaited(store: ObjectStore) -> None:
    class AsyncFile:  # the shape of aiofiles' file objects
        def __init__(self, data: bytes) -> None:
            self._f = io.BytesIO(data)

        async def read(self, n: int = -1) -> bytes:
            return self._f.read(n)

    data = os.urandom(70_000)
    info = await store.put("async", AsyncFile(data), chunk_size=30_000)
    assert info.chunks == 3
    assert await store.get_bytes("async") == data


async def test_a_bare_async_for_cleans_up_when_left(store: ObjectStore, wait_for: Waiter) -> None:
    data = os.urandom(1_000_000)
    await store.put("o", data, chunk_size=10_000)
    async for chunk in store.get("o"):
        assert chunk == data[:10_000]
        break

    async def no_consumer() -> bool:
        return (await store.stream.info()).state.consumer_count == 0

    await wait_for(no_consumer, what="the get's consumer deleted")
    assert b"".join([c async for c in store.get("o")]) == data


async def test_an_empty_object(store: ObjectStore) -> None:
    info = await store.put("empty", b"")
    assert (info.size, info.chunks) == (0, 0)
    async with store.get("empty") as obj:
        assert [c async for c in obj] == []
    assert await store.get_bytes("empty") == b""


async def test_a_new_version_replaces_the_old_and_its_chunks_go(store: ObjectStore) -> None:
    await store.put("o", os.urandom(100_000), chunk_size=10_000)
    assert await _messages(store) == 11
    second = await store.put("o", b"v2")
    assert await store.get_bytes("o") == b"v2"
    assert await _messages(store) == 2  # one chunk, one meta: the old ten are purged
    assert (await store.info("o")).nuid == second.nuid


async def test_put_keeps_a_bounded_number_of_chunk_acks_in_flight(
    js: JetStream, store: ObjectStore
) -> None:
    chunk = 16 * 1024
    seen: list[int] = []

    async def source() -> AsyncIterator[bytes]:
        for _ in range(1500):  # 24 MiB
            seen.append(js._jsapi.acks.outstanding)
            yield b"x" * chunk

    info = await store.put("big", source(), chunk_size=chunk)
    assert info.chunks == 1500
    # the window: 8 MiB of chunks (512 of 16 KiB), never the whole object
    assert 0 < max(seen) <= 512


# -- metas, deletes, links, seal -----------------------------------------------------------------


async def test_missing_and_deleted_objects(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        await store.info("nope")
    with pytest.raises(ObjectNotFoundError):
        await store.get_bytes("nope")
    await store.put("gone", os.urandom(50_000), chunk_size=10_000)
    marker = await store.delete("gone")
    assert marker.deleted
    assert (marker.size, marker.chunks, marker.digest) == (0, 0, "")
    with pytest.raises(ObjectDeletedError):
        await store.info("gone")
    with pytest.raises(ObjectDeletedError):
        await store.get_bytes("gone")
    assert (await store.info("gone", show_deleted=True)).deleted
    assert await _messages(store) == 1  # chunks purged, the marker stays
    with pytest.raises(ObjectDeletedError):
        await store.delete("gone")


async def test_update_meta_changes_only_what_it_is_given(store: ObjectStore) -> None:
    data = os.urandom(1000)
    await store.put("a", data, description="d", headers={"H": "1"}, metadata={"m": "1"})
    info = await store.update_meta("a", description="d2")
    assert (info.description, info.headers, info.metadata) == ("d2", {"H": "1"}, {"m": "1"})
    info = await store.update_meta("a", metadata={"m": "2"})
    assert (info.description, info.metadata) == ("d2", {"m": "2"})
    renamed = await store.update_meta("a", new_name="b")
    assert renamed.name == "b"
    assert renamed.description == "d2"
    with pytest.raises(ObjectNotFoundError):
        await store.info("a")
    assert await store.get_bytes("b") == data
    await store.put("c", b"c")
    with pytest.raises(ObjectExistsError):
        await store.update_meta("b", new_name="c")
    assert [i.name async for i in store.list()] == ["b", "c"]


async def test_links_are_followed_and_bucket_links_refused(
    js: JetStream, store: ObjectStore, bucket: str
) -> None:
    other = await js.create_object_store(bucket + "_2")
    try:
        target = await other.put("t", b"target data")
        link = await store.add_link("to-t", target)
        assert link.link is not None
        assert (link.link.bucket, link.link.name) == (other.bucket, "t")
        assert await store.get_bytes("to-t") == b"target data"
        async with store.get("to-t") as obj:
            assert obj.info.name == "t"
        with pytest.raises(InvalidArgumentError):
            await store.add_link("link-to-link", link)
        blink = await store.add_bucket_link("all", other)
        assert blink.link is not None
        assert blink.link.name is None
        with pytest.raises(LinkIsABucketError):
            await store.get_bytes("all")
        await store.put("plain", b"p")
        with pytest.raises(ObjectExistsError):
            await store.add_link("plain", target)
    finally:
        await js.delete_object_store(bucket + "_2")


async def test_a_sealed_store_takes_no_writes(store: ObjectStore) -> None:
    await store.put("kept", b"kept")
    await store.seal()
    assert (await store.status()).sealed
    with pytest.raises(BucketSealedError):
        await store.put("new", b"x" * 1000)
    with pytest.raises(BucketSealedError):
        await store.delete("kept")
    with pytest.raises(BucketSealedError):
        await store.update_meta("kept", description="x")
    assert await store.get_bytes("kept") == b"kept"
    assert [i.name async for i in store.list()] == ["kept"]


# -- broken objects ------------------------------------------------------------------------------


async def test_a_missing_chunk_is_an_error_not_a_short_read(store: ObjectStore) -> None:
    info = await store.put("o", os.urandom(50_000), chunk_size=10_000)
    first = (await store.stream.get_msg(last_by_subj=f"$O.{store.bucket}.C.{info.nuid}")).seq
    await store.stream.delete_msg(first - 2)  # the third of five chunks
    with pytest.raises(ObjectIncompleteError, match="missing"):
        await store.get_bytes("o")


async def test_a_wrong_digest_is_a_digest_mismatch(js: JetStream, store: ObjectStore) -> None:
    await store.put("o", b"the data")
    info = await store.info("o")
    meta = (await store.stream.get_msg(last_by_subj=f"$O.{store.bucket}.M.bw==")).data
    forged = meta.replace(info.digest[8:].encode(), b"A" * 43 + b"=")
    await js.publish(f"$O.{store.bucket}.M.bw==", forged, headers={"Nats-Rollup": "sub"})
    async with store.get("o") as obj:
        with pytest.raises(DigestMismatchError):
            await obj.read()


async def test_an_object_deleted_while_read_is_a_typed_error(
    nats_server: object, store: ObjectStore
) -> None:
    data = os.urandom(12 * 1024 * 1024)
    await store.put("big", data)
    # A short request timeout: how long a get waits for a chunk before asking why.
    async with await connect(nats_server.url, timeout=1.0) as quick:  # type: ignore[attr-defined]
        mine = await quick.object_store(store.bucket)
        async with mine.get("big") as obj:
            first = await obj.__anext__()
            assert first == data[: len(first)]
            await store.delete("big")
            with pytest.raises((ObjectDeletedError, ObjectIncompleteError)):
                async for _ in obj:
                    pass


# -- cancellation --------------------------------------------------------------------------------


async def test_a_cancelled_get_leaves_no_consumer(store: ObjectStore, wait_for: Waiter) -> None:
    data = os.urandom(3 * 1024 * 1024)
    await store.put("o", data, chunk_size=32 * 1024)
    started = asyncio.Event()

    async def reader() -> None:
        async with store.get("o") as obj:
            async for _ in obj:
                started.set()
                await asyncio.Event().wait()  # a slow consumer of the chunks

    task = asyncio.create_task(reader())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def no_consumer() -> bool:
        return (await store.stream.info()).state.consumer_count == 0

    await wait_for(no_consumer, what="the get's consumer deleted")
    assert await store.get_bytes("o") == data


async def test_a_cancelled_put_keeps_the_old_version_and_purges_its_chunks(
    store: ObjectStore, wait_for: Waiter
) -> None:
    await store.put("o", b"version one")
    before = await _messages(store)
    halfway = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        for i in range(10):
            if i == 5:
                halfway.set()
                await asyncio.Event().wait()  # the producer stalls
            yield os.urandom(10_000)

    task = asyncio.create_task(store.put("o", source(), chunk_size=10_000))
    await asyncio.wait_for(halfway.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.get_bytes("o") == b"version one"

    async def purged() -> bool:
        return await _messages(store) == before

    await wait_for(purged, what="the unfinished put's chunks purged")


# -- list and watch ------------------------------------------------------------------------------


async def test_list_is_the_snapshot_at_its_start(store: ObjectStore) -> None:
    names = [f"o{i:03d}" for i in range(150)]
    for name in names:
        await store.put(name, name.encode())
    await store.put("deleted", b"x")
    await store.delete("deleted")
    listed: list[str] = []
    async with store.list() as infos:
        async for info in infos:
            if not listed:  # others write while the listing runs
                for i in range(20):
                    await store.put(f"new{i}", b"n")
            listed.append(info.name)
    assert listed == names
    everything = [i.name async for i in store.list(show_deleted=True)]
    assert "deleted" in everything
    assert "new19" in everything


async def test_list_gives_objects_rewritten_before_it_reached_them(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small pulls, so the listing is still on the first ones when the others
    # are rewritten: their metas of the start are gone (a meta is a rollup).
    monkeypatch.setattr(objstore_module, "_SCAN_BUFFER", 10)
    names = [f"o{i:03d}" for i in range(150)]
    for name in names:
        await store.put(name, name.encode())
    rewritten, deleted = names[100:110], names[120]
    listed: list[ObjectInfo] = []

    async def read() -> None:
        async with store.list() as infos:
            async for info in infos:
                if not listed:
                    for name in rewritten:
                        await store.put(name, b"again " + name.encode())
                    await store.delete(deleted)
                    await store.put("created.later", b"n")
                listed.append(info)

    # nats-server 2.15 sends nothing more to a last_per_subject consumer whose
    # unsent skip-list messages were replaced, until its pull expires: the
    # listing replaces the consumer instead of waiting that long.
    await asyncio.wait_for(read(), 15)
    got = [i.name for i in listed]
    assert len(got) == len(set(got)), "an object listed twice"
    assert set(got) == set(names) - {deleted}
    sizes = {i.name: i.size for i in listed}
    assert all(sizes[name] == len(b"again ") + len(name) for name in rewritten)


async def test_a_list_whose_store_is_purged_mid_scan_ends(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small pulls, so the rest of the snapshot is still on the server when the
    # purge comes: nothing will be delivered for it.
    monkeypatch.setattr(objstore_module, "_SCAN_BUFFER", 10)
    names = [f"o{i:03d}" for i in range(60)]
    for name in names:
        await store.put(name, name.encode())
    listed: list[str] = []
    async with store.list() as infos:
        listed.append((await asyncio.wait_for(infos.__anext__(), 10)).name)
        await store.stream.purge()

        async def rest() -> None:
            async for info in infos:
                listed.append(info.name)

        await asyncio.wait_for(rest(), 20)
    assert len(listed) == len(set(listed))
    assert 0 < len(listed) < len(names)
    assert set(listed) <= set(names)


async def test_list_and_watch_of_an_empty_store(store: ObjectStore) -> None:
    assert [i async for i in store.list()] == []
    async with store.watch() as watcher:
        assert watcher.initial_done.is_set()


async def test_watch_gives_the_current_metas_then_updates(store: ObjectStore) -> None:
    await store.put("a", b"1")
    await store.put("b", b"2")
    await store.put("a", b"3")
    async with store.watch() as watcher:
        first = await asyncio.wait_for(watcher.__anext__(), 10)
        second = await asyncio.wait_for(watcher.__anext__(), 10)
        assert [first.name, second.name] == ["b", "a"]
        assert watcher.initial_done.is_set()
        await store.put("c", b"4")
        await store.delete("b")
        update = await asyncio.wait_for(watcher.__anext__(), 10)
        deleted = await asyncio.wait_for(watcher.__anext__(), 10)
    assert (update.name, update.deleted) == ("c", False)
    assert (deleted.name, deleted.deleted) == ("b", True)


async def test_watch_gives_as_updates_what_a_replica_behind_the_look_had_not_applied(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look that ends the initial metas is the stream leader's, while the
    consumer (R1) may read a follower still catching up: played by a look one
    message ahead of the server (the delete of ``b``, landing once the initial
    metas are read). The delete comes as an update, not dropped."""
    await store.put("a", b"1")
    await store.put("b", b"2")
    real_last_seq = store._last_seq

    async def last_seq() -> int:
        return await real_last_seq() + 1

    monkeypatch.setattr(store, "_last_seq", last_seq)
    async with store.watch() as watcher:
        first = await asyncio.wait_for(watcher.__anext__(), 10)
        second = await asyncio.wait_for(watcher.__anext__(), 10)
        assert [first.name, second.name] == ["a", "b"]
        assert watcher.initial_done.is_set()
        await store.delete("b")
        await store.put("c", b"3")
        deleted = await asyncio.wait_for(watcher.__anext__(), 5)
        update = await asyncio.wait_for(watcher.__anext__(), 5)
    assert (deleted.name, deleted.deleted) == ("b", True)
    assert (update.name, update.deleted) == ("c", False)


async def test_watch_options(store: ObjectStore) -> None:
    await store.put("a", b"1")
    await store.put("a", b"2")
    await store.put("gone", b"x")
    await store.delete("gone")
    async with store.watch(include_history=True) as watcher:
        seen: list[ObjectInfo] = []
        while not watcher.initial_done.is_set():
            seen.append(await asyncio.wait_for(watcher.__anext__(), 10))
    # rollup keeps one meta per name: history is the latest of each
    assert [(i.name, i.deleted) for i in seen] == [("a", False), ("gone", True)]
    async with store.watch(ignore_deletes=True, updates_only=True) as watcher:
        assert watcher.initial_done.is_set()
        await store.put("x", b"1")
        await store.delete("x")
        await store.put("y", b"1")
        got = [await asyncio.wait_for(watcher.__anext__(), 10) for _ in range(2)]
    assert [(i.name, i.deleted) for i in got] == [("x", False), ("y", False)]


# -- across ordered consumer resets ---------------------------------------------------------------


async def test_a_get_across_a_reset_is_exact(js: JetStream, store: ObjectStore) -> None:
    data = os.urandom(2 * 1024 * 1024)
    await store.put("o", data, chunk_size=16 * 1024)  # 128 chunks
    loss = LoseOne(js, consumer_seq=40)
    assert await store.get_bytes("o") == data
    assert loss.lost, "no chunk was lost: the test did not reset the get"


async def test_a_reset_mid_list_keeps_it_exact(js: JetStream, store: ObjectStore) -> None:
    names = {f"o{i:04d}" for i in range(600)}
    for name in sorted(names):
        await store.put(name, b"v0")
    for name in sorted(names)[::2]:
        await store.put(name, b"v1")  # a newer meta, later in the stream
    for name in sorted(names)[::5]:
        await store.delete(name)
    holding = {n for i, n in enumerate(sorted(names)) if i % 5}
    loss = LoseOne(js, consumer_seq=150)
    listed = [info.name async for info in store.list()]
    assert loss.lost, "no meta was lost: the test did not reset the listing"
    assert len(listed) == len(set(listed)), "an object listed twice"
    assert set(listed) == holding


async def test_a_reset_mid_watch_keeps_the_initial_metas_exact(
    js: JetStream, store: ObjectStore
) -> None:
    names = [f"o{i:04d}" for i in range(400)]
    for name in names:
        await store.put(name, b"v0")
    for name in names[::2]:
        await store.put(name, b"v1")
    loss = LoseOne(js, consumer_seq=120)
    initial: list[str] = []
    async with store.watch() as watcher:
        async for info in watcher:
            initial.append(info.name)
            if watcher.initial_done.is_set():
                break
        await store.put("late", b"x")
        late = await asyncio.wait_for(watcher.__anext__(), 10)
    assert loss.lost, "no meta was lost: the test did not reset the watch"
    assert sorted(initial) == names
    assert late.name == "late"
