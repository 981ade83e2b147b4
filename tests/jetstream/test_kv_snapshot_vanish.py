"""A KV snapshot scan whose messages vanish while it reads them (an admin purge of
the bucket's stream, or max age without markers) ends with what it has, exact
and without duplicates, instead of waiting for deliveries that never come."""

from __future__ import annotations

import asyncio

import pytest

from aioclients.jetstream import JetStream, KeyValueEntry, KeyWatcher

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


async def test_keys_whose_snapshot_is_purged_mid_scan_end(js: JetStream, unique_name: str) -> None:
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
