"""``KeyValue.watch(resume_from_revision=...)`` (nats.go's ``ResumeFromRevision``) on a
real nats-server: every revision from the given one on, the initial values those
stored at the start, and a replaced consumer going on after the last delivery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from consume_support import LoseOne

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream import (
    ConsumerReset,
    JetStream,
    KeyValue,
    KeyValueEntry,
)

pytestmark = pytest.mark.timeout(60)


async def _next(watcher: AsyncIterator[KeyValueEntry]) -> KeyValueEntry:
    return await asyncio.wait_for(watcher.__anext__(), 5)


async def test_watch_resumed_gives_every_revision_from_it_then_changes(kv: KeyValue) -> None:
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    start = await kv.put("b", b"1")
    await kv.put("a", b"3")
    await kv.delete("b")
    await kv.put("c", b"1")
    async with kv.watch(resume_from_revision=start) as watcher:
        initial = []
        for _ in range(3):
            initial.append(await _next(watcher))
            assert not watcher.initial_done.is_set()
        initial.append(await _next(watcher))
        assert watcher.initial_done.is_set()
        put = await kv.put("a", b"4")
        update = await _next(watcher)
    assert [(e.key, e.value, e.operation, e.revision) for e in initial] == [
        ("b", b"1", "PUT", start),
        ("a", b"3", "PUT", start + 1),
        ("b", b"", "DEL", start + 2),
        ("c", b"1", "PUT", start + 3),
    ]
    assert (update.key, update.value, update.revision) == ("a", b"4", put)


async def test_watch_resumed_with_filters_and_history_gives_the_same(kv: KeyValue) -> None:
    await kv.put("x.1", b"0")
    start = await kv.put("x.1", b"1")
    await kv.put("y.1", b"1")
    await kv.put("x.2", b"1")
    await kv.put("x.1", b"2")
    for include_history in (False, True):
        async with kv.watch(
            "x.*", include_history=include_history, resume_from_revision=start
        ) as watcher:
            got = [await _next(watcher) for _ in range(3)]
            assert watcher.initial_done.is_set()
        assert [(e.key, e.value) for e in got] == [("x.1", b"1"), ("x.2", b"1"), ("x.1", b"2")]


async def test_watch_resumed_at_the_last_revision_or_past_it(kv: KeyValue) -> None:
    await kv.put("a", b"1")
    last = await kv.put("a", b"2")
    async with kv.watch(resume_from_revision=last) as watcher:
        assert not watcher.initial_done.is_set()
        entry = await _next(watcher)
        assert (entry.value, entry.revision) == (b"2", last)
        assert watcher.initial_done.is_set()
    # Past the end: nothing at the start, then only revisions from it on.
    async with kv.watch(resume_from_revision=last + 2) as watcher:
        assert watcher.initial_done.is_set()
        await kv.put("a", b"before")
        put = await kv.put("a", b"at")
        entry = await _next(watcher)
        assert (entry.value, entry.revision) == (b"at", put)


async def test_watch_resumed_on_an_empty_bucket_waits(kv: KeyValue) -> None:
    async with kv.watch(resume_from_revision=1) as watcher:
        assert watcher.initial_done.is_set()
        put = await kv.put("k", b"v")
        assert (await _next(watcher)).revision == put == 1


@pytest.mark.parametrize("rev", [0, -1, True, False, 2.0, "3", [1]])
async def test_watch_resumed_from_a_bad_revision_is_refused(kv: KeyValue, rev: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="resume_from_revision"):
        kv.watch(resume_from_revision=rev)


async def test_watch_resumed_with_updates_only_is_refused(kv: KeyValue) -> None:
    with pytest.raises(InvalidArgumentError, match="updates_only"):
        kv.watch(updates_only=True, resume_from_revision=1)


@pytest.mark.parametrize(
    ("initial", "lost_at"),
    [(4, 2), (4, 8), (0, 3)],
    ids=["among-initial-values", "among-updates", "past-the-end"],
)
async def test_watch_resumed_goes_on_after_a_reset_from_its_last_delivery(
    js: JetStream, kv: KeyValue, initial: int, lost_at: int
) -> None:
    """A delivery is lost (while the initial values are read, or among the updates,
    also of a watch resumed past the end): the replaced consumer starts after the
    last revision delivered, not at the revision the watch was resumed from. Every
    revision from that one comes once, in order."""
    revisions = [await kv.put(f"k{i % 3}", b"%d" % i) for i in range(6)]
    start = revisions[-initial] if initial else revisions[-1] + 1
    loss = LoseOne(js, consumer_seq=lost_at)
    events: list[object] = []
    got: list[int] = []
    async with kv.watch(resume_from_revision=start, on_event=events.append) as watcher:
        for _ in range(initial):
            got.append((await _next(watcher)).revision)
        assert watcher.initial_done.is_set()
        revisions += [await kv.put(f"k{i % 3}", b"u%d" % i) for i in range(8)]
        for _ in range(8):
            got.append((await _next(watcher)).revision)
        more = await kv.put("last", b"1")
        got.append((await _next(watcher)).revision)
    assert loss.lost, "no delivery was lost: the test did not reset the watch"
    assert any(isinstance(e, ConsumerReset) for e in events)
    assert got == [r for r in revisions if r >= start] + [more]
