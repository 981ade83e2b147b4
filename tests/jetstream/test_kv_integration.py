"""JetStream Key-Value (ADR-8) on a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg as NatsMsg
from support import PROBE, ApiRequests, Server, server_of, until_visible

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream import (
    BucketNotFoundError,
    JetStream,
    JetStreamError,
    KeyDeletedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyValue,
    KeyValueEntry,
    KeyWrongRevisionError,
    StreamNameInUseError,
    StreamNotFoundError,
    connect,
)
from aioclients.jetstream import _kv as kv_module

pytestmark = pytest.mark.timeout(60)


async def _collect(it: AsyncIterator[str]) -> list[str]:
    return sorted([k async for k in it])


async def test_bucket_is_a_stream_laid_out_as_adr8_says(js: JetStream, kv: KeyValue) -> None:
    info = await js.stream_info(f"KV_{kv.bucket}")
    cfg = info.config
    assert cfg["subjects"] == [f"$KV.{kv.bucket}.>"]
    assert cfg["max_msgs_per_subject"] == 5
    assert cfg["allow_direct"] is True
    assert cfg["allow_rollup_hdrs"] is True
    assert cfg["deny_delete"] is True
    assert cfg["discard"] == "new"
    # Same settings again: the same bucket; other settings: refused.
    again = await js.create_key_value(kv.bucket, history=5)
    assert again.bucket == kv.bucket
    with pytest.raises(StreamNameInUseError, match="other settings"):
        await js.create_key_value(kv.bucket, history=2)
    assert (await js.key_value(kv.bucket)).bucket == kv.bucket


async def test_missing_bucket(js: JetStream, bucket: str) -> None:
    with pytest.raises(BucketNotFoundError, match="create_key_value"):
        await js.key_value(bucket)
    with pytest.raises(BucketNotFoundError):
        await js.delete_key_value(bucket)


async def test_get_reads_through_the_api_when_nobody_answers_direct_get(
    js: JetStream, kv: KeyValue
) -> None:
    # "No responders" to Direct Get while the bucket exists: what a cluster answers for
    # a moment after the bucket is created (its replicas' interest not known yet to the
    # server the client is on), or after allow_direct was turned off, as here, where a
    # server alone says it every time. The value is read through the API instead.
    first = await kv.put("k", b"1")
    await kv.put("k", b"2")
    await js.update_stream(f"KV_{kv.bucket}", allow_direct=False)
    assert (await kv.get("k")).value == b"2"
    entry = await kv.get("k", revision=first)
    assert (entry.value, entry.revision) == (b"1", first)
    with pytest.raises(KeyNotFoundError):
        await kv.get("missing")
    await js.delete_key_value(kv.bucket)
    with pytest.raises(BucketNotFoundError):
        await kv.get("k")


async def test_put_get_delete_purge(kv: KeyValue) -> None:
    r1 = await kv.put("db.url", b"postgres://a")
    r2 = await kv.put("db.url", b"postgres://b")
    assert r2 > r1
    entry = await kv.get("db.url")
    assert (entry.key, entry.value, entry.revision, entry.operation) == (
        "db.url",
        b"postgres://b",
        r2,
        "PUT",
    )
    assert entry.bucket == kv.bucket
    assert entry.created.tzinfo is not None
    assert (await kv.get("db.url", revision=r1)).value == b"postgres://a"
    with pytest.raises(KeyNotFoundError):
        await kv.get("nope")
    await kv.put("other", b"x")
    with pytest.raises(KeyNotFoundError, match="not a revision"):
        await kv.get("other", revision=r1)
    await kv.delete("db.url")
    with pytest.raises(KeyDeletedError) as deleted:
        await kv.get("db.url")
    assert isinstance(deleted.value, KeyNotFoundError)
    marker = deleted.value.entry
    assert isinstance(marker, KeyValueEntry)
    assert marker.operation == "DEL"
    with pytest.raises(KeyDeletedError):
        await kv.get("db.url", revision=marker.revision)
    assert len(await kv.history("db.url")) == 3
    await kv.purge("db.url")
    history = await kv.history("db.url")
    assert [e.operation for e in history] == ["PURGE"]  # the rollup dropped the rest
    with pytest.raises(KeyDeletedError):
        await kv.get("db.url")


async def test_a_got_entry_is_the_frozen_entry_of_its_fields(kv: KeyValue) -> None:
    """The usual get makes its entry inline (see _kv._entry_shell): the same
    KeyValueEntry, equal, hashed, shown and frozen as the one constructed from its
    fields, with its raw headers kept."""
    import dataclasses

    revision = await kv.put("shell.k", b"v1")
    got = await kv.get("shell.k")
    assert kv_module._SHELL is not None  # the inline path is on
    assert type(got) is KeyValueEntry
    plain = KeyValueEntry(kv.bucket, "shell.k", b"v1", revision, got.created, 0, "PUT")
    assert got == plain
    assert hash(got) == hash(plain)
    assert repr(got) == repr(plain)
    assert (got.delta, got.operation) == (0, "PUT")
    assert isinstance(got._headers, bytes)
    assert b"Nats-Sequence" in got._headers
    assert [e.created for e in await kv.history("shell.k")] == [got.created]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.value = b"other"  # type: ignore[misc]


async def test_create_and_update_follow_revisions(kv: KeyValue) -> None:
    r1 = await kv.create("k", b"1")
    with pytest.raises(KeyExistsError):
        await kv.create("k", b"again")
    r2 = await kv.update("k", b"2", r1)
    with pytest.raises(KeyWrongRevisionError):
        await kv.update("k", b"3", r1)
    with pytest.raises(KeyWrongRevisionError):
        await kv.delete("k", last=r1)
    await kv.delete("k", last=r2)
    r3 = await kv.create("k", b"after delete")
    assert (await kv.get("k")).value == b"after delete"
    await kv.purge("k", last=r3)
    await kv.create("k", b"after purge")
    with pytest.raises(KeyWrongRevisionError):
        await kv.purge("k", last=r3)
    assert (await kv.get("k")).value == b"after purge"


async def test_history_keeps_the_configured_revisions_with_deltas(kv: KeyValue) -> None:
    for i in range(7):
        await kv.put("h", str(i).encode())
    history = await kv.history("h")
    assert [e.value for e in history] == [b"2", b"3", b"4", b"5", b"6"]
    assert [e.delta for e in history] == [4, 3, 2, 1, 0]
    with pytest.raises(KeyNotFoundError):
        await kv.history("never")


async def test_keys_leave_out_deleted_and_purged_keys_and_take_filters(kv: KeyValue) -> None:
    assert await _collect(kv.keys()) == []
    for key in ("a.1", "a.2", "b.1", "c", "gone", "purged"):
        await kv.put(key, b"v")
    await kv.delete("gone")
    await kv.purge("purged")
    assert await _collect(kv.keys()) == ["a.1", "a.2", "b.1", "c"]
    assert await _collect(kv.keys("a.*")) == ["a.1", "a.2"]
    assert await _collect(kv.keys("a.>", "c")) == ["a.1", "a.2", "c"]
    with pytest.raises(InvalidArgumentError):
        kv.keys("a.>.b")


async def test_keys_of_a_bucket_beyond_one_multi_last_answer(kv: KeyValue, js: JetStream) -> None:
    futures = [await js.publish_async(f"$KV.{kv.bucket}.k{i}", b"v") for i in range(1500)]
    await asyncio.gather(*futures)
    await kv.delete("k7")
    keys = await _collect(kv.keys())
    assert len(keys) == 1499
    assert "k7" not in keys


async def test_keys_beyond_one_multi_last_answer_when_the_last_messages_are_markers(
    kv: KeyValue, js: JetStream
) -> None:
    """The consumer-read listing ends on the last key present at the start even
    when that one (and whole reads' worth of messages before it) are delete or
    purge markers, which yield no key."""
    futures = [await js.publish_async(f"$KV.{kv.bucket}.k{i}", b"v") for i in range(1200)]
    await asyncio.gather(*futures)
    await kv.purge("k3")
    for i in range(600, 1200):  # ~90 kB of markers at the end: more than one read
        await kv.delete(f"k{i}")
    keys = await asyncio.wait_for(_collect(kv.keys()), 10)
    assert len(keys) == 599
    assert "k3" not in keys
    assert "k600" not in keys
    assert "k1199" not in keys
    assert len(set(keys)) == 599


async def test_status(kv: KeyValue) -> None:
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    status = await kv.status()
    assert (status.bucket, status.values, status.history, status.ttl) == (kv.bucket, 2, 5, 0.0)
    assert status.backing_store == "JetStream"


async def test_invalid_keys_and_buckets_fail_before_any_request(
    nats_server: object, bucket: str
) -> None:
    js = await connect(nats_server.url)  # type: ignore[attr-defined]
    kv = await js.create_key_value(bucket)
    try:
        await js.close()  # a request now would fail with JetStreamClosedError
        for call in (
            kv.get("bad key"),
            kv.put(".x", b""),
            kv.create("x.", b""),
            kv.update("a*b", b"", 1),
            kv.delete(">"),
            kv.purge("a..b"),
            kv.history(""),
            js.create_key_value("a.b"),
            js.key_value("a b"),
            js.delete_key_value("*"),
        ):
            with pytest.raises(InvalidArgumentError):
                await call
        with pytest.raises(InvalidArgumentError):
            kv.watch("a.>.b")
    finally:
        js2 = await connect(nats_server.url)  # type: ignore[attr-defined]
        await js2.delete_key_value(bucket)
        await js2.close()


# -- watch -----------------------------------------------------------------------------------


async def _next(watcher: AsyncIterator[KeyValueEntry]) -> KeyValueEntry:
    return await asyncio.wait_for(watcher.__anext__(), 5)


async def test_watch_gives_current_values_then_changes(kv: KeyValue) -> None:
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    await kv.put("b", b"1")
    await kv.delete("b")
    await kv.put("c", b"1")
    async with kv.watch() as watcher:
        initial = [await _next(watcher) for _ in range(3)]
        assert [(e.key, e.value, e.operation) for e in initial] == [
            ("a", b"2", "PUT"),
            ("b", b"", "DEL"),
            ("c", b"1", "PUT"),
        ]
        assert [e.delta for e in initial] == [2, 1, 0]
        await asyncio.wait_for(watcher.initial_done.wait(), 1)
        await kv.put("a", b"3")
        await kv.purge("c")
        changed = [await _next(watcher) for _ in range(2)]
        assert [(e.key, e.value, e.operation) for e in changed] == [
            ("a", b"3", "PUT"),
            ("c", b"", "PURGE"),
        ]


async def test_watch_gives_as_updates_what_a_replica_behind_the_look_had_not_applied(
    kv: KeyValue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a cluster the look that gives the initial values' end is the stream
    leader's, while the consumer (R1) may be placed on a follower still catching
    up: its skip list ends before that sequence. Played here by a look reporting
    one message more than the server holds (a delete of ``k5``, which lands once
    the initial values are read). The initial values are the follower's; the
    delete then comes as an update, not dropped as if the initial values had
    shown it."""
    for i in range(10):
        await kv.put(f"k{i}", b"v")
    real_last_seq = kv_module._last_seq

    async def last_seq(handle: KeyValue) -> int:
        return await real_last_seq(handle) + 1

    monkeypatch.setattr(kv_module, "_last_seq", last_seq)
    async with kv.watch() as watcher:
        initial = [await _next(watcher) for _ in range(10)]
        assert watcher.initial_done.is_set()
        assert [e.key for e in initial] == [f"k{i}" for i in range(10)]
        await kv.delete("k5")
        put = await kv.put("k3", b"w")
        updates = [await _next(watcher) for _ in range(2)]
    assert [(e.key, e.operation, e.revision) for e in updates] == [
        ("k5", "DEL", put - 1),
        ("k3", "PUT", put),
    ]


async def test_watch_of_an_empty_bucket_is_initially_done_at_once(kv: KeyValue) -> None:
    async with kv.watch() as watcher:
        assert watcher.initial_done.is_set()
        await kv.put("x", b"1")
        assert (await _next(watcher)).key == "x"


async def test_watch_options(kv: KeyValue) -> None:
    await kv.put("a.1", b"1")
    await kv.put("a.1", b"2")
    await kv.put("b.1", b"x")
    await kv.delete("a.1")
    await kv.put("a.2", b"big value")
    async with kv.watch("a.*", include_history=True) as watcher:
        got = [await _next(watcher) for _ in range(4)]
        assert [(e.key, e.operation) for e in got] == [
            ("a.1", "PUT"),
            ("a.1", "PUT"),
            ("a.1", "DEL"),
            ("a.2", "PUT"),
        ]
        assert watcher.initial_done.is_set()
    async with kv.watch(ignore_deletes=True, meta_only=True) as watcher:
        got = [await _next(watcher) for _ in range(2)]
        assert [(e.key, e.value) for e in got] == [("b.1", b""), ("a.2", b"")]
        assert watcher.initial_done.is_set()
    async with kv.watch(["b.*"], updates_only=True) as watcher:
        assert watcher.initial_done.is_set()
        await kv.put("a.3", b"not watched")
        await kv.put("b.2", b"new")
        entry = await _next(watcher)
        assert (entry.key, entry.value) == ("b.2", b"new")
    with pytest.raises(InvalidArgumentError):
        kv.watch(include_history=True, updates_only=True)


async def test_watch_set_initial_done_only_after_the_last_initial_value(kv: KeyValue) -> None:
    for i in range(50):
        await kv.put(f"k{i}", b"v")
    async with kv.watch() as watcher:
        for i in range(49):
            await _next(watcher)
            assert not watcher.initial_done.is_set(), i
        await _next(watcher)
        assert watcher.initial_done.is_set()


def _watch_makers(monkeypatch: pytest.MonkeyPatch, runs: list[bool]) -> list[list[int]]:
    """Each watch opened next takes its entries a run at a time (the first of
    ``runs``, taken as it opens: ``True``) or strictly one by one (``False``); the
    list for each counts its one-by-one makes."""
    real = kv_module.OrderedItems
    counts: list[list[int]] = []

    def items(oc: Any, options: Any, make: Any, *args: Any, **kwargs: Any) -> Any:
        calls = [0]
        counts.append(calls)

        def counted(*fields: Any) -> Any:
            calls[0] += 1
            return make(*fields)

        if not runs.pop(0):
            kwargs["make_run"] = None
        return real(oc, options, counted, *args, **kwargs)

    monkeypatch.setattr(kv_module, "OrderedItems", items)
    return counts


def _fields(entry: KeyValueEntry) -> tuple[Any, ...]:
    return (
        entry.bucket,
        entry.key,
        entry.value,
        entry.revision,
        entry.created,
        entry.delta,
        entry.operation,
        entry._headers,
    )


@pytest.mark.parametrize("meta_only", [False, True])
async def test_watch_makes_a_run_of_entries_at_once_as_one_by_one(
    js: JetStream, kv: KeyValue, monkeypatch: pytest.MonkeyPatch, meta_only: bool
) -> None:
    """Values with and without headers of their own, markers between them, and
    updates: the entries of a watch that makes whole runs at once are those of one
    that makes each alone (their times too), and few are made alone."""
    n = 600
    prefix = f"$KV.{kv.bucket}."
    for i in range(n):
        headers = {"X-Trace": str(i)} if i % 7 == 0 else None
        await js.publish_async(f"{prefix}k.{i}", b"v%d" % i, headers=headers)
    await js.publish_async_complete(timeout=30)
    for i in range(0, n, 50):
        await kv.delete(f"k.{i}")
    await kv.purge("k.1")
    counts = _watch_makers(monkeypatch, [True, False])
    initial: list[list[KeyValueEntry]] = [[], []]
    async with kv.watch(meta_only=meta_only) as by_runs, kv.watch(meta_only=meta_only) as alone:
        for got, watcher in zip(initial, (by_runs, alone), strict=True):
            while not watcher.initial_done.is_set():
                got.append(await _next(watcher))
        for i in range(300):
            await js.publish_async(f"{prefix}u.{i}", b"u%d" % i)
        await js.publish_async_complete(timeout=30)
        await kv.delete("k.3")
        updates = [[await _next(w) for _ in range(301)] for w in (by_runs, alone)]
    assert len(initial[0]) == n
    assert list(map(_fields, initial[0])) == list(map(_fields, initial[1]))
    # (how much is pending at each update depends on when it was delivered)
    assert [_fields(e)[:5] + _fields(e)[6:] for e in updates[0]] == [
        _fields(e)[:5] + _fields(e)[6:] for e in updates[1]
    ]
    assert updates[0][-1].operation == "DEL"
    assert [e.key for e in initial[0] if e.operation != "PUT"] == [
        f"k.{i}" for i in range(0, n, 50)
    ] + ["k.1"]
    for entry in initial[0][100:110]:
        assert entry.created == (await kv.get(entry.key, revision=entry.revision)).created
    values = [e for e in initial[0] if e.operation == "PUT"]
    assert [e.value for e in values] == [
        b"" if meta_only else b"v" + e.key[2:].encode() for e in values
    ]
    assert [e._headers is not None for e in values] == [
        meta_only or int(e.key[2:]) % 7 == 0 for e in values
    ]
    assert counts[1][0] == n + 301
    assert counts[0][0] < 10  # the one that ends the snapshot, and a few more


async def test_leaving_a_bare_async_for_over_a_watch_ends_it(
    js: JetStream, kv: KeyValue, wait_for: object
) -> None:
    for i in range(5):
        await kv.put(f"k{i}", b"v")
    got = 0
    async for _ in kv.watch():  # no ``async with``
        got += 1
        if got == 2:
            break

    async def no_consumers() -> bool:
        return [n async for n in js.consumer_names(f"KV_{kv.bucket}")] == []

    await wait_for(no_consumers, timeout=5, what="the watch's consumer deletion")  # type: ignore[operator]


async def test_a_deleted_bucket_is_reported_as_such(js: JetStream, bucket: str) -> None:
    kv = await js.create_key_value(bucket)
    await kv.put("a", b"1")
    await js.delete_key_value(bucket)
    with pytest.raises(BucketNotFoundError):
        await kv.get("a")
    with pytest.raises(BucketNotFoundError):
        await kv.put("a", b"2")
    with pytest.raises(BucketNotFoundError):
        await kv.status()
    with pytest.raises(BucketNotFoundError):
        async with kv.watch():
            pass


async def test_keys_of_a_large_bucket_skip_the_multi_last_the_server_would_refuse(
    kv: KeyValue, js: JetStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle that saw more subjects than one multi_last answer takes lists every
    key through its consumer at once; one that saw few tries multi_last first, and
    a count gone stale only costs time: the keys are the same."""
    futures = [await js.publish_async(f"$KV.{kv.bucket}.k{i}", b"v") for i in range(1100)]
    await asyncio.gather(*futures)
    multi_lasts: list[list[str]] = []

    def spy(handle: KeyValue) -> None:
        stream = handle.stream
        direct_get_last_for = stream.direct_get_last_for

        def counted(subjects: list[str]) -> object:
            multi_lasts.append(list(subjects))
            return direct_get_last_for(subjects)

        monkeypatch.setattr(stream, "direct_get_last_for", counted)

    spy(kv)  # bound while the bucket was empty: tries multi_last, refused
    assert len(await _collect(kv.keys())) == 1100
    assert len(multi_lasts) == 1
    assert len(await _collect(kv.keys())) == 1100  # it learnt
    assert len(multi_lasts) == 1
    fresh = await js.key_value(kv.bucket)  # bound on a large bucket
    spy(fresh)
    assert len(await _collect(fresh.keys())) == 1100
    assert len(multi_lasts) == 1
    assert await _collect(fresh.keys("k7", "k1099")) == ["k1099", "k7"]
    assert len(multi_lasts) == 2  # a filtered listing still tries it
    await fresh.stream.purge()
    await fresh.put("a", b"1")
    await fresh.put("b", b"2")
    assert await _collect(fresh.keys()) == ["a", "b"]  # stale count: the consumer
    assert len(multi_lasts) == 2
    assert await _collect(fresh.keys()) == ["a", "b"]  # and multi_last again
    assert len(multi_lasts) == 3


async def _past_multi_last(js: JetStream, kv: KeyValue) -> None:
    """1,100 keys ``k0``..``k1099``, listed once: the handle lists them through its
    consumer from then on (past the 1,024 keys of one multi_last answer)."""
    futures = [await js.publish_async(f"$KV.{kv.bucket}.k{i}", b"v") for i in range(1100)]
    await asyncio.gather(*futures)
    assert len(await _collect(kv.keys())) == 1100


async def test_keys_of_a_bucket_nobody_writes_name_no_subjects(
    kv: KeyValue, js: JetStream, nats_server: Server
) -> None:
    """Unchanged from the first look at the stream to a second one after the read,
    the bucket was the start's all along: its consumer's skip list named the keys,
    and the server is not asked to name them (some 100 ms of its CPU per 100,000)."""
    await _past_multi_last(js, kv)
    spy = await ApiRequests.open(server_of(js), f"KV_{kv.bucket}")
    try:
        keys = [key async for key in kv.keys()]
        assert await spy.kinds(js) == ["info", "create", "info"]
    finally:
        await spy.close()
    assert sorted(keys) == sorted(f"k{i}" for i in range(1100))
    assert len(keys) == 1100


async def test_keys_of_a_bucket_above_the_keys_held_name_them_at_once(
    kv: KeyValue, js: JetStream, nats_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the keys ``keys()`` holds, the subjects are named while the consumer
    is read, as keys are handed out only after that answer."""
    await _past_multi_last(js, kv)
    monkeypatch.setattr(kv_module, "_KEYS_HELD", 1000)
    spy = await ApiRequests.open(server_of(js), f"KV_{kv.bucket}")
    try:
        keys = await _collect(kv.keys())
        assert await spy.kinds(js) == ["info", "create", "named"]
    finally:
        await spy.close()
    assert keys == sorted(f"k{i}" for i in range(1100))


@pytest.mark.parametrize("write", ["put", "re-put", "deleted", "purged"])
async def test_keys_start_over_from_the_named_subjects_when_written_to_while_read(
    kv: KeyValue, js: JetStream, nats_server: Server, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """keys() takes its snapshot's sequence from a first look at the stream, creates
    its consumer, reads it, and looks again. A write after the consumer's creation
    (a removal without one too) shows in that look: the subjects are named then,
    and that answer is the snapshot, read by a consumer created after it: the key
    removed meanwhile is left out, the one created meanwhile is listed, each key
    once."""
    await _past_multi_last(js, kv)
    open_consumer = kv_module.open_ordered_consumer
    written: list[str] = []

    async def opened(*args: Any, **kwargs: Any) -> Any:
        oc = await open_consumer(*args, **kwargs)
        if not written:
            written.append(write)
            if write == "put":
                await kv.put("new", b"1")
            elif write == "re-put":
                await kv.put("k5", b"2")
            elif write == "deleted":
                await kv.delete("k5")  # the consumer still delivers k5's value
            else:  # removed, nothing appended
                await kv.stream.purge(subject=f"$KV.{kv.bucket}.k5")
        return oc

    monkeypatch.setattr(kv_module, "open_ordered_consumer", opened)
    spy = await ApiRequests.open(server_of(js), f"KV_{kv.bucket}")
    try:
        keys = [k async for k in kv.keys()]
        kinds = await spy.kinds(js)
    finally:
        await spy.close()
    # The look, the consumer (replaced when the purge leaves it stuck), the second
    # look, the subjects named, and a new consumer.
    assert kinds[:2] == ["info", "create"]
    assert kinds.count("named") == 1
    at = kinds.index("named")
    assert kinds[at - 1 :] == ["info", "named", "create"]
    assert len(keys) == len(set(keys))
    expected = {f"k{i}" for i in range(1100)}
    if write == "put":
        expected.add("new")
    elif write in ("deleted", "purged"):
        expected.discard("k5")
    assert set(keys) == expected


# Stamps of the usual reply's form: one on a day every month has (left unread until
# asked for), one on a late day (read at once), and one on a day its month lacks.
_STAMPS = {
    "2024-01-02T03:04:05.123456789Z": datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc),
    "2024-01-31T03:04:05.654321Z": datetime(2024, 1, 31, 3, 4, 5, 654321, tzinfo=timezone.utc),
    "2023-02-29T03:04:05.123456Z": None,
}


@pytest.mark.parametrize("stamp", list(_STAMPS))
async def test_the_usual_reply_s_stamp_reads_as_its_time_or_fails_the_get(
    nats_server: Server, js: JetStream, bucket: str, stamp: str
) -> None:
    """A Direct Get reply in the usual form, from a responder standing in for the
    server (its bucket's stream has no allow_direct, so the server stays silent):
    get reads its revision and time, or raises where the stamp is no time."""
    await js.create_stream(f"KV_{bucket}", subjects=[f"$KV.{bucket}.>"])
    kv = await js.key_value(bucket)
    kv._direct = True  # as for a bucket whose stream the responder serves

    async def answer(msg: NatsMsg) -> None:
        if msg.data == PROBE:
            await other.publish(msg.reply, b"")
            return
        headers = {
            "Nats-Stream": f"KV_{bucket}",
            "Nats-Subject": f"$KV.{bucket}.k",
            "Nats-Sequence": "42",
            "Nats-Time-Stamp": stamp,
        }
        await other.publish(msg.reply, b"value", headers=headers)

    other = await nats.connect(nats_server.url)
    try:
        await other.subscribe(f"$JS.API.DIRECT.GET.KV_{bucket}.>", cb=answer)
        await until_visible(js.nc, f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.k")
        expected = _STAMPS[stamp]
        if expected is None:
            with pytest.raises(ValueError, match="day is out of range"):
                await kv.get("k")
            return
        entry = await kv.get("k")
        assert (entry.revision, entry.value, entry.operation) == (42, b"value", "PUT")
        assert entry.created == expected
        assert entry == KeyValueEntry(bucket, "k", b"value", 42, expected, 0, "PUT")
    finally:
        await other.close()


@pytest.mark.parametrize(
    ("behind", "filters"),
    [("a delete", ()), ("every message", ()), ("a delete", ("*",))],
    ids=["a delete", "every message", "a delete, filtered"],
)
async def test_keys_read_again_when_the_consumer_saw_a_replica_behind_the_look(
    kv: KeyValue,
    js: JetStream,
    monkeypatch: pytest.MonkeyPatch,
    behind: str,
    filters: tuple[str, ...],
) -> None:
    """In a cluster the first look at the stream is the leader's, while the R1
    consumer may be placed on a follower still catching up: its skip list is older
    than the look (a key deleted before the look shows its earlier value, a key
    put shows not at all), though a second look shows the stream unchanged.
    Played here by a look that reports one message more than the server holds
    until the consumer has been read, when that message lands: a delete of
    ``k5``, or the only put of a bucket purged before. The consumer did not
    deliver the message at the look's last sequence (with a filter, the newest
    message on it, which the leader gives before the second look): it is read
    again. (A filtered listing of a purged bucket takes a multi_last answer, not
    a consumer.)"""
    await _past_multi_last(js, kv)
    if behind == "every message":
        await kv.stream.purge()
    real_info = kv._api.stream_info
    real_get_msg = kv._stream.get_msg
    looks: list[str] = []
    caught_up = False

    async def catch_up() -> None:
        nonlocal caught_up
        if not caught_up:  # the follower catches up
            caught_up = True
            if behind == "a delete":
                await kv.delete("k5")
            else:
                await kv.put("new", b"1")

    async def stream_info(name: str, **kwargs: Any) -> Any:
        if kwargs:
            return await real_info(name, **kwargs)
        looks.append("info")
        if len(looks) == 1:  # the leader's look, a message ahead of the follower
            info = await real_info(name)
            state = dataclasses.replace(
                info.state,
                last_seq=info.state.last_seq + 1,
                messages=info.state.messages + 1,
            )
            return dataclasses.replace(info, state=state)
        await catch_up()
        return await real_info(name)

    async def get_msg(*args: Any, **kwargs: Any) -> Any:
        await catch_up()
        return await real_get_msg(*args, **kwargs)

    monkeypatch.setattr(kv._api, "stream_info", stream_info)
    monkeypatch.setattr(kv._stream, "get_msg", get_msg)
    keys = await _collect(kv.keys(*filters))
    if behind == "a delete":
        assert keys == sorted(f"k{i}" for i in range(1100) if i != 5)
    else:
        assert keys == ["new"]
    assert looks == ["info", "info", "info"]  # the second consumer's read looked again


async def test_keys_give_up_with_an_error_on_a_replica_that_stays_behind(
    kv: KeyValue, js: JetStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look that always reports one message more than any consumer delivers (a
    replica that never catches up): a few consumers are read, then keys() fails
    with a clear error, no key handed out, not a hang and not a wrong list."""
    await _past_multi_last(js, kv)
    real_info = kv._api.stream_info
    opened: list[int] = []
    real_open = kv_module.open_ordered_consumer

    async def stream_info(name: str, **kwargs: Any) -> Any:
        info = await real_info(name, **kwargs)
        if kwargs:
            return info
        state = dataclasses.replace(
            info.state, last_seq=info.state.last_seq + 1, messages=info.state.messages + 1
        )
        return dataclasses.replace(info, state=state)

    async def open_consumer(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return await real_open(*args, **kwargs)

    monkeypatch.setattr(kv._api, "stream_info", stream_info)
    monkeypatch.setattr(kv_module, "open_ordered_consumer", open_consumer)
    monkeypatch.setattr(kv_module, "_REPLICA_BEHIND_WAIT", 0.001)
    lister = kv.keys()
    with pytest.raises(JetStreamError, match="read a replica behind the stream leader"):
        await lister.__anext__()  # the first key: none is handed out
    await lister.aclose()
    assert len(opened) == kv_module._REPLICA_BEHIND_TRIES + 1


async def test_bucket_options_of_nats_go_reach_the_server(
    js: JetStream, bucket: str, nats_server: Any
) -> None:
    # nats.go v1.53 CreateKeyValue(KeyValueConfig{Compression, Metadata, RePublish})
    # stores these in the bucket's stream; a bucket made here reads the same to it.
    nc = await nats.connect(nats_server.url)
    try:
        republished = await nc.subscribe(f"rp.{bucket}.>")
        await nc.flush()
        kv = await js.create_key_value(
            bucket,
            compression=True,
            metadata={"team": "a"},
            republish={"src": ">", "dest": f"rp.{bucket}.>"},
        )
        cfg = (await js.stream_info(f"KV_{bucket}")).config
        assert cfg["compression"] == "s2"
        assert cfg["metadata"]["team"] == "a"
        assert cfg["republish"] == {"src": ">", "dest": f"rp.{bucket}.>"}
        status = await kv.status()
        assert status.compressed is True
        assert status.metadata == {"team": "a"}
        await kv.put("k", b"v")
        msg = await republished.next_msg(timeout=5)
        assert (msg.subject, msg.data) == (f"rp.{bucket}.$KV.{bucket}.k", b"v")
        # The same settings again: the same bucket.
        again = await js.create_key_value(
            bucket,
            compression=True,
            metadata={"team": "a"},
            republish={"src": ">", "dest": f"rp.{bucket}.>"},
        )
        assert (await again.get("k")).value == b"v"
        # Other settings: refused, as nats.go's CreateKeyValue is (ErrBucketExists).
        with pytest.raises(StreamNameInUseError, match="other settings"):
            await js.create_key_value(
                bucket, metadata={"team": "a"}, republish={"src": ">", "dest": f"rp.{bucket}.>"}
            )
        with pytest.raises(StreamNameInUseError, match="other settings"):
            await js.create_key_value(bucket, compression=True, metadata={"team": "a"})
    finally:
        await nc.close()
        await js.delete_key_value(bucket)


async def test_mirror_and_sourced_buckets(js: JetStream, bucket: str) -> None:
    origin, mirror, sourced = f"{bucket}_o", f"{bucket}_m", f"{bucket}_s"
    try:
        kv = await js.create_key_value(origin)
        await kv.put("a", b"1")
        await js.create_key_value(mirror, mirror=origin)
        cfg = (await js.stream_info(f"KV_{mirror}")).config
        assert cfg["mirror"]["name"] == f"KV_{origin}"
        assert cfg["mirror_direct"] is True
        assert "subjects" not in cfg
        # A write through the mirror lands in the origin, as nats.go's Put does.
        through = await js.key_value(mirror)
        revision = await through.put("b", b"2")
        got = await kv.get("b")
        assert (got.value, got.revision) == (b"2", revision)
        dst = await js.create_key_value(sourced, sources=[origin])
        cfg = (await js.stream_info(f"KV_{sourced}")).config
        assert cfg["subjects"] == [f"$KV.{sourced}.>"]
        assert cfg["sources"][0]["subject_transforms"] == [
            {"src": f"$KV.{origin}.>", "dest": f"$KV.{sourced}.>"}
        ]
        # The source's key arrives under this bucket's subjects.
        async with dst.watch() as watcher:
            entry = await asyncio.wait_for(anext(aiter(watcher)), 10)
        assert (entry.bucket, entry.key, entry.value) == (sourced, "a", b"1")
    finally:
        for name in (sourced, mirror, origin):
            with contextlib.suppress(BucketNotFoundError):
                await js.delete_key_value(name)


async def test_purge_deletes_leaves_what_nats_go_leaves(js: JetStream, kv: KeyValue) -> None:
    # The layouts nats.go v1.53's PurgeDeletes leaves on the same bucket: young
    # markers stay alone (the revisions before them go); with a negative
    # threshold (here <= 0) the markers go too.
    for key in ("a", "b", "c"):
        await kv.put(key, b"1")
        await kv.put(key, b"2")
    await kv.delete("a")
    await kv.purge("b")
    stream = await js.stream(f"KV_{kv.bucket}")
    assert (await stream.info()).state.messages == 6  # the purge removed b's two
    await kv.purge_deletes()
    assert (await stream.info()).state.messages == 4
    assert [e.operation for e in await kv.history("a")] == ["DEL"]
    assert [e.operation for e in await kv.history("b")] == ["PURGE"]
    assert [e.value for e in await kv.history("c")] == [b"1", b"2"]
    with pytest.raises(KeyDeletedError):
        await kv.get("a")
    await kv.purge_deletes(older_than=0)
    assert (await stream.info()).state.messages == 2
    for key in ("a", "b"):
        with pytest.raises(KeyNotFoundError) as info:
            await kv.get(key)
        assert not isinstance(info.value, KeyDeletedError)
        with pytest.raises(KeyNotFoundError):
            await kv.history(key)
    assert await _collect(kv.keys()) == ["c"]
    with pytest.raises(InvalidArgumentError, match="older_than"):
        await kv.purge_deletes(older_than="1h")  # type: ignore[arg-type]


async def test_key_value_store_names(js: JetStream, bucket: str) -> None:
    # nats.go KeyValueStoreNames: streams with $KV.*.> subjects named KV_<bucket>
    # (a mirror bucket has no subjects of its own, so it is not listed).
    one, two, mirror = f"{bucket}_1", f"{bucket}_2", f"{bucket}_m"
    try:
        await js.create_key_value(one)
        await js.create_key_value(two)
        await js.create_key_value(mirror, mirror=one)
        await js.create_stream(f"{bucket}_plain", subjects=[f"{bucket}.plain.>"])
        names = [n async for n in js.key_value_store_names() if n.startswith(bucket)]
        assert sorted(names) == [one, two]
    finally:
        for name in (mirror, one, two):
            with contextlib.suppress(BucketNotFoundError):
                await js.delete_key_value(name)
        with contextlib.suppress(StreamNotFoundError):
            await js.delete_stream(f"{bucket}_plain")
