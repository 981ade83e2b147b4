"""A KV snapshot scan whose messages vanish while it reads them (an admin purge of
the bucket's stream, or max age without markers) ends with what it has, exact
and without duplicates, instead of waiting for deliveries that never come."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from aioclients.jetstream import JetStream, KeyValueEntry, KeyWatcher
from aioclients.jetstream import _kv as kv_module
from aioclients.jetstream import _ordered as ordered_module

pytestmark = pytest.mark.timeout(90)

#: More than one pull of a scan holds (a watch pulls 2000, keys() 20000), so
#: the rest of the snapshot is still on the server when the purge comes.
_WATCH_MESSAGES = 10_000
_KEYS = 20_600


async def _fill(js: JetStream, bucket: str, count: int, keys: int) -> None:
    for i in range(count):
        await js.publish_async(f"$KV.{bucket}.k{i % keys}", b"v%d" % i)
    await js.publish_async_complete(timeout=30)


async def _initial(
    watcher: KeyWatcher, first: KeyValueEntry
) -> tuple[list[KeyValueEntry], asyncio.Future[KeyValueEntry]]:
    """The watch's entries until ``initial_done`` (set while an entry is handed out,
    or while the watch waits), and its next read, already under way."""
    entries = [first]
    done = asyncio.ensure_future(watcher.initial_done.wait())
    step: asyncio.Future[KeyValueEntry] = asyncio.ensure_future(watcher.__anext__())
    try:
        while True:
            await asyncio.wait({step, done}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
            if step.done():
                entries.append(step.result())
                step = asyncio.ensure_future(watcher.__anext__())
                if watcher.initial_done.is_set():
                    return entries, step
                continue
            assert done.done(), "the watch's initial values never ended"
            return entries, step
    finally:
        done.cancel()


@pytest.mark.parametrize(
    ("include_history", "keys"),
    [(True, 200), (False, _WATCH_MESSAGES)],
    ids=["every-revision", "last-per-key"],
)
async def test_a_watch_whose_snapshot_is_purged_mid_scan_ends_its_initial_values(
    js: JetStream, unique_name: str, include_history: bool, keys: int
) -> None:
    kv = await js.create_key_value(unique_name, history=64)
    await _fill(js, unique_name, _WATCH_MESSAGES, keys)
    async with kv.watch(include_history=include_history) as watcher:
        first = await asyncio.wait_for(watcher.__anext__(), 10)
        assert first.revision == 1
        assert await kv.stream.purge() > 0
        entries, following = await _initial(watcher, first)
        revisions = [e.revision for e in entries]
        assert revisions == sorted(set(revisions))  # in order, no duplicates
        assert revisions == list(range(1, len(revisions) + 1))  # gapless up to the purge
        assert len(revisions) < _WATCH_MESSAGES  # the purge took the rest
        # The watch goes on: the next write is its next entry.
        revision = await kv.put("after", b"x")
        update = await asyncio.wait_for(following, 10)
        assert (update.key, update.revision) == ("after", revision)


async def test_keys_whose_snapshot_is_purged_mid_scan_end(
    js: JetStream, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Above the keys keys() holds: they are handed out as they are read.
    monkeypatch.setattr(kv_module, "_KEYS_HELD", _KEYS - 1)
    kv = await js.create_key_value(unique_name)
    await _fill(js, unique_name, _KEYS, _KEYS)
    keys: list[str] = []
    async with kv.keys() as lister:
        keys.append(await asyncio.wait_for(lister.__anext__(), 10))
        await kv.stream.purge()

        async def rest() -> None:
            async for key in lister:
                keys.append(key)

        await asyncio.wait_for(rest(), 20)
    assert len(keys) == len(set(keys))  # no duplicates
    assert 0 < len(keys) < _KEYS
    assert set(keys) <= {f"k{i}" for i in range(_KEYS)}


async def test_keys_held_whose_snapshot_is_purged_mid_scan_start_over_from_the_purge(
    js: JetStream, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the keys keys() holds, none is handed out before the read's end: the
    purge shows in the look after it, and the answer naming the subjects (none)
    is the snapshot."""
    kv = await js.create_key_value(unique_name)
    await _fill(js, unique_name, _KEYS, _KEYS)
    open_consumer = kv_module.open_ordered_consumer
    counted_subjects = kv._api.counted_subjects
    purged: list[int] = []
    steps: list[str] = []

    async def opened(*args: Any, **kwargs: Any) -> Any:
        oc = await open_consumer(*args, **kwargs)
        steps.append("consumer")
        if not purged:
            purged.append(await kv.stream.purge())  # before the consumer's first pull
        return oc

    async def named(*args: Any) -> Any:
        steps.append("named")
        return await counted_subjects(*args)

    monkeypatch.setattr(kv_module, "open_ordered_consumer", opened)
    monkeypatch.setattr(kv._api, "counted_subjects", named)
    keys = await asyncio.wait_for(_listed(kv.keys()), 20)
    assert purged == [_KEYS]
    # Named after the read that ended when its messages vanished, then read again.
    assert steps == ["consumer", "named", "consumer"]
    assert keys == []


async def _listed(lister: AsyncIterator[str]) -> list[str]:
    return [key async for key in lister]


async def test_a_watch_reset_whose_replacement_finds_the_rest_gone_ends_its_initial_values(
    js: JetStream, unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every revision: the server drops the watch's consumer mid-scan, and the rest
    of the snapshot goes between the replacement's creation (with it pending) and
    its first pull. The look for what is left starts after the last revision
    delivered, not at the watch's first: those delivered are still stored."""
    kv = await js.create_key_value(unique_name, history=64)
    early, late = 500, _WATCH_MESSAGES  # more than a pull holds after the early ones
    for i in range(early):
        await js.publish_async(f"$KV.{unique_name}.e.{i % 100}", b"e%d" % i)
    for i in range(late):
        await js.publish_async(f"$KV.{unique_name}.l.{i % 200}", b"l%d" % i)
    await js.publish_async_complete(timeout=30)
    upsert = ordered_module.upsert_consumer
    pending_at_creation: list[int] = []
    purged: list[int] = []

    async def creating(*args: Any, **kwargs: Any) -> Any:
        consumer = await upsert(*args, **kwargs)
        pending_at_creation.append(consumer.cached_info.num_pending)
        if len(pending_at_creation) == 2:  # the replacement, before its first pull
            purged.append(await kv.stream.purge(subject=f"$KV.{unique_name}.l.>"))
        return consumer

    monkeypatch.setattr(ordered_module, "upsert_consumer", creating)
    async with kv.watch(include_history=True) as watcher:
        first = await asyncio.wait_for(watcher.__anext__(), 10)
        entries = [first]
        while entries[-1].revision <= early:  # every early revision was delivered
            entries.append(await asyncio.wait_for(watcher.__anext__(), 10))
        (name,) = [name async for name in kv.stream.consumer_names()]
        await kv.stream.delete_consumer(name)  # the server drops it: the watch resets
        rest, following = await _initial(watcher, entries.pop())
        entries += rest
        assert len(pending_at_creation) == 2
        assert pending_at_creation[1] > 0  # the replacement had the rest pending...
        assert purged[0] > 0  # ...which went before it could send any
        revisions = [e.revision for e in entries]
        assert revisions == list(range(1, len(revisions) + 1))  # in order, gapless
        assert early < len(revisions) < early + late
        # The watch goes on: the next write is its next entry.
        revision = await kv.put("after", b"x")
        update = await asyncio.wait_for(following, 10)
        assert (update.key, update.revision) == ("after", revision)
