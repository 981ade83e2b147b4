"""KV listings are snapshots (issue 26), on a real nats-server: ``keys()`` and
``watch()``'s initial values give each key that held a value when the call started
exactly once while other tasks write, on buckets below and above the 1,024 keys of
one ``multi_last`` answer, and across a reset of the ordered consumer mid-scan."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from consume_support import LoseOne

from aioclients.jetstream import BucketNotFoundError, ConsumerReset, JetStream, KeyValue

pytestmark = pytest.mark.timeout(90)


async def _open(js: JetStream, bucket: str, n: int, history: int) -> KeyValue:
    kv = await js.create_key_value(bucket, history=history)
    for i in range(n):
        await js.publish_async(f"$KV.{bucket}.k.{i}", b"v0")
    await js.publish_async_complete(timeout=30)
    return kv


@contextlib.asynccontextmanager
async def _cleanup(js: JetStream, bucket: str) -> AsyncIterator[None]:
    try:
        yield
    finally:
        with contextlib.suppress(BucketNotFoundError):
            await js.delete_key_value(bucket)


class Writers:
    """Tasks that keep writing a bucket until stopped: re-puts of the ``hot`` keys
    (from before the listing starts), and, once ``after_start()`` is called, new
    keys and deletes of the ``doomed`` keys."""

    def __init__(self, js: JetStream, kv: KeyValue, hot: list[str], doomed: list[str]) -> None:
        self.js = js
        self.kv = kv
        self.hot = hot
        self.doomed = doomed
        self.stop = asyncio.Event()
        self.writes = 0
        self.created: list[str] = []
        self.deleted: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._going = asyncio.Event()

    async def _reput(self, offset: int) -> None:
        # Bursts of pipelined publishes to the keys' subjects: puts as fast as the
        # server takes them.
        js, prefix = self.js, f"$KV.{self.kv.bucket}."
        for burst in itertools.count():
            if self.stop.is_set():
                return
            acks = [
                await js.publish_async(prefix + self.hot[(offset + burst * 64 + i) % len(self.hot)])
                for i in range(64)
            ]
            await asyncio.wait_for(asyncio.gather(*acks), 10)
            self.writes += len(acks)
            if self.writes >= 500:
                self._going.set()

    async def _create_and_delete(self) -> None:
        for i in itertools.count():
            if self.stop.is_set():
                return
            key = f"new.{i}"
            await self.kv.put(key, b"n")
            self.created.append(key)
            if i < len(self.doomed):
                await self.kv.delete(self.doomed[i])
                self.deleted.append(self.doomed[i])

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._reput(k * 7919)) for k in range(3)]
        await asyncio.wait_for(self._going.wait(), 10)  # they are writing

    def after_start(self) -> None:
        self._tasks.append(asyncio.create_task(self._create_and_delete()))

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*self._tasks), 10)


@pytest.mark.parametrize(
    ("n", "direct", "filters"),
    [
        (300, True, ()),
        (3000, True, ()),
        (30_000, True, ()),
        (3000, False, ()),  # keys re-put before the scan reached them: read one by one
        (3000, True, ("k.*", "other.>")),  # two filters: the start's subjects matched here
    ],
)
async def test_keys_lists_each_key_once_while_others_write(
    js: JetStream, bucket: str, n: int, direct: bool, filters: tuple[str, ...]
) -> None:
    async with _cleanup(js, bucket):
        kv = await _open(js, bucket, n, history=1)
        if not direct:  # as nats-py makes buckets: no Direct Get
            await js.update_stream(f"KV_{bucket}", allow_direct=False)
            kv = await js.key_value(bucket)
        everything = [f"k.{i}" for i in range(n)]
        hot, doomed = everything[: n // 3], everything[n // 3 : n // 3 + 50]
        untouched = set(everything) - set(hot) - set(doomed)
        writers = Writers(js, kv, hot, doomed)
        await writers.start()
        listed: list[str] = []
        try:
            async with kv.keys(*filters) as keys:
                async for key in keys:
                    if not listed:
                        writers.after_start()  # the snapshot is taken by now
                    listed.append(key)
                    if len(listed) > 2 * n:
                        break  # far too many already: fail below, don't run on
                    await asyncio.sleep(0)  # let the writers in between keys
        finally:
            await writers.close()
        assert writers.created  # keys were created during the listing...
        assert len(listed) == len(set(listed)), f"{len(listed) - len(set(listed))} listed twice"
        assert not set(listed) & set(writers.created), "a key created after the start"
        assert set(listed) <= set(everything)
        assert untouched <= set(listed), "a key nobody wrote is missing"
        # A re-put key held a value all along: it is listed even when its value of
        # the start was replaced before the scan reached it.
        missing = set(everything) - set(writers.deleted) - set(listed)
        assert not missing, f"{len(missing)} keys never deleted are missing"


@pytest.mark.parametrize("n", [300, 3000])
async def test_watch_gives_each_key_once_before_initial_done_while_others_write(
    js: JetStream, bucket: str, n: int
) -> None:
    async with _cleanup(js, bucket):
        kv = await _open(js, bucket, n, history=1)
        everything = [f"k.{i}" for i in range(n)]
        hot, doomed = everything[: n // 3], everything[n // 3 : n // 3 + 50]
        untouched = set(everything) - set(hot) - set(doomed)
        writers = Writers(js, kv, hot, doomed)
        await writers.start()
        initial: list[str] = []
        flipped = False  # the entry during which initial_done was set: either kind
        updates = 0
        try:
            async with kv.watch() as watcher:
                writers.after_start()  # the snapshot is taken by now
                async for entry in watcher:
                    if flipped:
                        updates += 1
                        if updates >= 20:
                            break  # updates come after the initial values
                    elif watcher.initial_done.is_set():
                        flipped = True
                    else:
                        initial.append(entry.key)
                        if len(initial) > 2 * n:
                            break  # far too many already: fail below, don't run on
        finally:
            await writers.close()
        assert flipped, "initial_done was never set"
        assert len(initial) == len(set(initial)), "a key given twice as an initial value"
        assert not set(initial) & set(writers.created), "a key created after the start"
        assert len(untouched - set(initial)) <= 1, "a key nobody wrote is missing"
        assert updates == 20


async def _bucket_with_deleted_keys(
    js: JetStream, bucket: str, n: int
) -> tuple[KeyValue, set[str]]:
    """``n`` keys, two revisions each (history 5); then every third key is deleted:
    its last message is a marker, its older values still stored after the place
    where the scan is interrupted."""
    kv = await _open(js, bucket, n, history=5)
    for i in range(n):
        await js.publish_async(f"$KV.{bucket}.k.{i}", b"v1")
    await js.publish_async_complete(timeout=30)
    deleted = set()
    for i in range(0, n, 3):
        await kv.delete(f"k.{i}")
        deleted.add(f"k.{i}")
    return kv, {f"k.{i}" for i in range(n)} - deleted


async def test_a_reset_mid_keys_starts_last_per_subject_over(js: JetStream, bucket: str) -> None:
    async with _cleanup(js, bucket):
        kv, holding = await _bucket_with_deleted_keys(js, bucket, 3000)
        loss = LoseOne(js, consumer_seq=700)
        listed = [key async for key in kv.keys()]
        assert loss.lost, "no delivery was lost: the test did not reset the scan"
        assert len(listed) == len(set(listed)), "a key listed twice"
        assert set(listed) == holding, sorted(set(listed) ^ holding)[:10]


async def test_a_reset_mid_watch_keeps_the_initial_values_exact(js: JetStream, bucket: str) -> None:
    async with _cleanup(js, bucket):
        kv, holding = await _bucket_with_deleted_keys(js, bucket, 3000)
        loss = LoseOne(js, consumer_seq=700)
        events: list[object] = []
        initial: dict[str, tuple[str, bytes]] = {}
        twice: list[str] = []
        late: list[tuple[str, int]] = []
        revisions: list[int] = []
        async with kv.watch(on_event=events.append) as watcher:
            async for entry in watcher:
                if revisions:
                    late.append((entry.key, entry.revision))
                    if len(late) == 2:
                        break
                    continue
                if entry.key in initial:
                    twice.append(entry.key)
                initial[entry.key] = (entry.operation, entry.value)
                if watcher.initial_done.is_set():
                    # Then two updates, both given, in order, after the initial values.
                    revisions += [await kv.put("late", b"1"), await kv.put("late", b"2")]
        assert loss.lost, "no delivery was lost: the test did not reset the watch"
        assert any(isinstance(e, ConsumerReset) for e in events)
        assert not twice, f"given twice before initial_done: {twice[:5]}"
        puts = {k for k, (op, _) in initial.items() if op == "PUT"}
        assert puts == holding
        assert all(value == b"v1" for op, value in initial.values() if op == "PUT")
        assert late == [("late", r) for r in revisions]


@pytest.mark.parametrize(("direct", "reset"), [(True, False), (False, False), (False, True)])
async def test_history_is_the_snapshot_at_its_start_while_others_write(
    js: JetStream, bucket: str, direct: bool, reset: bool
) -> None:
    # Other keys are re-put all along; the moment history() has taken its snapshot
    # (the stream's last sequence), 40 more revisions of the key are stored.
    # It gives the 20 revisions of the start, each once, in order, none later
    # (history 64: none is removed meanwhile). Without Direct Get history() reads
    # an ordered consumer, here also replaced in the middle.
    async with _cleanup(js, bucket):
        kv = await _open(js, bucket, 300, history=64)
        if not direct:
            await js.update_stream(f"KV_{bucket}", allow_direct=False)
            kv = await js.key_value(bucket)
        at_start = [await kv.put("h", b"%d" % i) for i in range(20)]
        later: list[Any] = []
        starts: list[int] = []
        stream_info = kv._api.stream_info

        async def spied(name: str, **kwargs: Any) -> Any:
            info = await stream_info(name, **kwargs)
            starts.append(info.state.last_seq)  # the snapshot history() reads
            acks = [await js.publish_async(f"$KV.{bucket}.h", b"later") for _ in range(40)]
            later.extend(await asyncio.wait_for(asyncio.gather(*acks), 10))  # stored now
            return info

        writers = Writers(js, kv, [f"k.{i}" for i in range(300)], [])
        await writers.start()
        loss = LoseOne(js, consumer_seq=10) if reset else None
        kv._api.stream_info = spied  # type: ignore[method-assign]
        try:
            entries = await kv.history("h")
        finally:
            kv._api.stream_info = stream_info  # type: ignore[method-assign]
            await writers.close()
        assert len(starts) == 1
        assert len(later) == 40
        assert min(ack.seq for ack in later) > starts[0]
        assert [e.revision for e in entries] == at_start
        assert [e.delta for e in entries] == list(range(19, -1, -1))
        assert len(await kv.history("h")) == 60  # the later ones are there
        if loss is not None:
            assert loss.lost, "no delivery was lost: the test did not reset the read"


async def test_history_of_a_key_replaced_before_the_read_gives_the_newer_revisions(
    js: JetStream, bucket: str
) -> None:
    # Every revision kept when history() takes its snapshot is replaced before the
    # read reaches it (history 5, 8 more puts): the key still has revisions, so
    # they come back (all newer than the snapshot), not KeyNotFoundError.
    async with _cleanup(js, bucket):
        kv = await js.create_key_value(bucket, history=5)
        for i in range(3):
            await kv.put("h", b"%d" % i)
        later: list[int] = []
        starts: list[int] = []
        stream_info = kv._api.stream_info

        async def spied(name: str, **kwargs: Any) -> Any:
            info = await stream_info(name, **kwargs)
            starts.append(info.state.last_seq)
            later.extend([await kv.put("h", b"later %d" % i) for i in range(8)])
            return info

        kv._api.stream_info = spied  # type: ignore[method-assign]
        try:
            entries = await kv.history("h")
        finally:
            kv._api.stream_info = stream_info  # type: ignore[method-assign]
        assert starts == [3]
        assert [e.revision for e in entries] == later[-5:]
        assert [e.value for e in entries] == [b"later %d" % i for i in range(3, 8)]
        assert [e.delta for e in entries] == [4, 3, 2, 1, 0]
