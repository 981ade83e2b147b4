"""Filter pushdown of the jetstream and liftbridge batch readers on the local[2] session:
every pushed shape gives the rows of the same query written so that Spark cannot push
it, and ``explain`` reports what was pushed. The same checks run on local-cluster
(test_local_cluster.py), whose executors are JVMs of their own as on a standalone cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from _everywhere import check_jetstream_pushdown, check_liftbridge_pushdown, pushed_filters
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThanOrEqual

from aioclients import jetstream
from aioclients.spark import _jetstream, _stream_read, register_data_sources
from aioclients.spark._jetstream import JetStreamPushdownReader, SequenceRange, read_partition
from aioclients.spark._protocol import _partitions
from aioclients.spark._pushdown import CONF
from aioclients.spark._stream_read import expected_rows as _jetstream_expected_rows

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("partitions", [1, 3])
async def test_jetstream_shapes(
    spark: Any, nats_server: Any, unique_name: str, partitions: int
) -> None:
    """Also split: each partition's filtered passes stop at its own range's end."""
    await check_jetstream_pushdown(spark, nats_server.url, unique_name, partitions)


async def test_liftbridge_shapes(spark: Any, liftbridge_cluster: Any, unique_name: str) -> None:
    await check_liftbridge_pushdown(spark, list(liftbridge_cluster.addresses), unique_name)


@pytest.fixture
def small_stream(nats_server: Any, unique_name: str) -> Iterator[str]:
    async def create() -> None:
        async with await jetstream.connect(nats_server.url) as js:
            await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
            for i in range(10):
                await js.publish(f"{unique_name}.{i % 2}", b"x")

    async def delete() -> None:
        async with await jetstream.connect(nats_server.url) as js:
            await js.delete_stream(unique_name)

    asyncio.run(create())
    yield unique_name
    asyncio.run(delete())


def test_register_turns_pushdown_on_so_reads_keep_working(
    spark: Any, nats_server: Any, small_stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """pyspark refuses a reader that defines pushFilters while the setting is off (its
    default), for every batch read, filtered or not: registering switches it on."""

    def load() -> Any:
        reader = spark.read.format("jetstream").option("servers", nats_server.url)
        return reader.option("stream", small_stream).load()

    spark.conf.set(CONF, "false")
    try:
        with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
            load().count()
        with caplog.at_level("INFO", logger="aioclients.spark"):
            register_data_sources(spark)
        assert spark.conf.get(CONF) == "true"
        [said] = [r.getMessage() for r in caplog.records if CONF in r.getMessage()]
        assert "true (it was false)" in said, "registering says that it turned it on"
        assert load().count() == 10
        assert load().where(f"subject = '{small_stream}.1'").count() == 5
    finally:
        register_data_sources(spark)


def test_registering_without_pushdown_leaves_the_setting_alone(
    spark: Any, nats_server: Any, small_stream: str
) -> None:
    def load() -> Any:
        reader = spark.read.format("jetstream").option("servers", nats_server.url)
        return reader.option("stream", small_stream).load()

    spark.conf.set(CONF, "false")
    try:
        register_data_sources(spark, filter_pushdown=False)
        assert spark.conf.get(CONF) == "false"
        filtered = load().where(f"subject = '{small_stream}.1' AND sequence > 2")
        assert filtered.count() == 4
        assert "EqualTo" not in pushed_filters(filtered)
    finally:
        register_data_sources(spark)
    filtered = load().where(f"subject = '{small_stream}.1' AND sequence > 2")
    assert f"EqualTo(subject,{small_stream}.1)" in pushed_filters(filtered)
    assert filtered.count() == 4


async def test_default_partitions_follow_what_the_read_is_expected_to_yield(
    js: jetstream.JetStream, nats_server: Any, unique_name: str
) -> None:
    """Planning code called directly (as Spark's planner process does): without the
    numPartitions option a read gets one partition per 20,000 expected messages, at most
    the session's parallelism; pushed filters make reads small."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(45_000):
        await js.publish_async(f"{unique_name}.{'ab'[i % 2]}", b"x")
    await js.publish_async_complete(timeout=60)

    def parts(*filters: Any, parallelism: int = 8, **options: str) -> int:
        given = {"servers": nats_server.url, "stream": unique_name, **options}
        reader = JetStreamPushdownReader(given, parallelism)
        assert reader.pushFilters(list(filters)) == []
        return len(reader.partitions())

    subject_a = EqualTo(("subject",), f"{unique_name}.a")
    assert await asyncio.to_thread(parts) == 3
    assert await asyncio.to_thread(parts, parallelism=2) == 2
    assert await asyncio.to_thread(parts, subject_a) == 2
    assert await asyncio.to_thread(parts, LessThanOrEqual(("sequence",), 100)) == 1
    assert await asyncio.to_thread(parts, subject_a, numPartitions="5") == 5


async def test_a_narrow_selection_over_a_wide_range_is_split_by_the_servers_walk(
    js: jetstream.JetStream,
    nats_server: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One subject of 100 yields few rows, but each filtered pass makes the server walk
    its whole range: a wide range gets every core (the walk per partition made small
    here), without the count of matches when it cannot change the answer, and the
    partitions together yield exactly the rows of one."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(2_000):
        await js.publish_async(f"{unique_name}.{i % 100}", str(i).encode())
    await js.publish_async_complete(timeout=60)
    monkeypatch.setattr(_partitions, "WALK_PER_PARTITION", 500)
    counted: list[tuple[int, int]] = []

    async def expected_rows(config: Any, subjects: Any, first: int, last: int) -> int:
        counted.append((first, last))
        return await _jetstream_expected_rows(config, subjects, first, last)

    monkeypatch.setattr(_jetstream, "expected_rows", expected_rows)
    given = {"servers": nats_server.url, "stream": unique_name}

    def plan(*filters: Any, parallelism: int, **options: str) -> list[SequenceRange]:
        reader = JetStreamPushdownReader({**given, **options}, parallelism)
        assert reader.pushFilters(list(filters)) == []
        return reader.partitions()

    def read(partitions: list[SequenceRange]) -> list[tuple[str, int, bytes]]:
        rows = []
        for partition in partitions:
            for batch in read_partition(partition):
                got = batch.to_pydict()
                rows += zip(got["subject"], got["sequence"], got["data"], strict=True)
        return rows

    subject = EqualTo(("subject",), f"{unique_name}.42")
    split = await asyncio.to_thread(plan, subject, parallelism=2)
    assert len(split) == 2
    assert not counted, "the walk alone asks for both cores: the matches are not counted"
    split = await asyncio.to_thread(plan, subject, parallelism=8)
    assert len(split) == 4, "2,000 messages walked: four partitions"
    assert counted == [(1, 2_000)], "fewer than 8: the matches are counted"
    one = await asyncio.to_thread(plan, subject, parallelism=8, numPartitions="1")
    assert len(one) == 1
    rows = await asyncio.to_thread(read, split)
    assert rows == await asyncio.to_thread(read, one)
    assert [seq for _, seq, _ in rows] == list(range(43, 2_001, 100))
    two = In(("subject",), (f"{unique_name}.7", f"{unique_name}.8"))
    split = await asyncio.to_thread(plan, two, parallelism=8)
    assert len(split) == 8, "two passes over the range: twice the walk"
    assert sorted(await asyncio.to_thread(read, split)) == sorted(
        await asyncio.to_thread(read, await asyncio.to_thread(plan, two, parallelism=1))
    )
    narrow = LessThanOrEqual(("sequence",), 400)
    assert len(await asyncio.to_thread(plan, subject, narrow, parallelism=8)) == 1


async def test_only_ranges_that_end_before_the_streams_end_count_their_matches(
    js: jetstream.JetStream,
    nats_server: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A filtered pass counts its range's matches so that no request reaches past the
    range; the range that ends at the stream's end (when planned) has nothing past it
    and reads without the count, two requests fewer. Rows stored after planning are not
    read, and the partitions yield exactly the rows of one."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(2_000):
        await js.publish_async(f"{unique_name}.{i % 100}", str(i).encode())
    await js.publish_async_complete(timeout=60)
    monkeypatch.setattr(_partitions, "WALK_PER_PARTITION", 500)
    counted: list[tuple[int, int]] = []
    count_in_range = _stream_read.count_in_range

    async def counting(conn: Any, stream: str, subject: str, first: int, last: int) -> int:
        counted.append((first, last))
        return await count_in_range(conn, stream, subject, first, last)

    monkeypatch.setattr(_stream_read, "count_in_range", counting)
    given = {"servers": nats_server.url, "stream": unique_name}

    def plan(*filters: Any, **options: str) -> list[SequenceRange]:
        reader = JetStreamPushdownReader({**given, **options}, 4)
        assert reader.pushFilters(list(filters)) == []
        return reader.partitions()

    def read(partitions: list[SequenceRange]) -> list[int]:
        return [s for p in partitions for b in read_partition(p) for s in b["sequence"].to_pylist()]

    subject = EqualTo(("subject",), f"{unique_name}.42")
    split = await asyncio.to_thread(plan, subject)
    assert [(p.first, p.last, p.to_end) for p in split] == [
        (1, 500, False),
        (501, 1000, False),
        (1001, 1500, False),
        (1501, 2000, True),
    ]
    for i in range(2_000, 2_300):  # stored after planning: not read
        await js.publish_async(f"{unique_name}.{i % 100}", str(i).encode())
    await js.publish_async_complete(timeout=60)
    assert await asyncio.to_thread(read, split) == list(range(43, 2_001, 100))
    assert counted == [(1, 500), (501, 1000), (1001, 1500)]
    counted.clear()
    # Ending before the stream's end (an option, or a pushed bound): counted.
    bounded = await asyncio.to_thread(plan, subject, endSequence="2000")
    assert not any(p.to_end for p in bounded)
    assert await asyncio.to_thread(read, bounded) == list(range(43, 2_001, 100))
    assert sorted(counted) == [(p.first, p.last) for p in bounded]
    one = await asyncio.to_thread(plan, subject, numPartitions="1")
    assert [(p.first, p.last, p.to_end) for p in one] == [(1, 2_300, True)]
    assert await asyncio.to_thread(read, one) == list(range(43, 2_301, 100))


async def test_a_time_bound_is_planned_on_the_connection_that_looks_the_stream_up(
    js: jetstream.JetStream,
    nats_server: Any,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planning a pushed ``timestamp >=`` read connects once: the stream lookup and the
    Direct Get ``start_time`` lookup share it."""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(100):
        await js.publish_async(f"{unique_name}.{i % 2}", b"x")
    await js.publish_async_complete(timeout=60)
    cut = (await (await js.stream(unique_name)).direct_get(91)).time
    connects: list[object] = []
    connect = jetstream.connect

    async def counting(*args: Any, **kwargs: Any) -> Any:
        connects.append(args)
        return await connect(*args, **kwargs)

    monkeypatch.setattr(_stream_read.jetstream, "connect", counting)

    def plan() -> list[SequenceRange]:
        given = {"servers": nats_server.url, "stream": unique_name}
        reader = JetStreamPushdownReader(given, 2)
        assert reader.pushFilters([GreaterThanOrEqual(("timestamp",), cut)]) == []
        return reader.partitions()

    partitions = await asyncio.to_thread(plan)
    assert len(connects) == 1
    assert [(p.first, p.last) for p in partitions] == [(91, 100)]


def test_a_session_that_registers_the_class_itself_reads_as_before(
    spark: Any, nats_server: Any, small_stream: str
) -> None:
    """``JetStreamDataSource`` is public: registered directly on a session that never
    heard of the pushdown setting, it reads (without pushing anything)."""
    from aioclients.spark import JetStreamDataSource

    spark.conf.set(CONF, "false")
    try:
        spark.dataSource.register(JetStreamDataSource)
        df = spark.read.format("jetstream").option("servers", nats_server.url)
        df = df.option("stream", small_stream).load().where(f"subject = '{small_stream}.1'")
        assert df.count() == 5
        assert "EqualTo" not in pushed_filters(df)
    finally:
        register_data_sources(spark)
