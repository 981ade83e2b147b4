"""Key-Value buckets as tables (the ``jetstream`` format with ``bucket``) on local[2],
against the real nats-server: the live keys, their history, the change feed, and
puts, with buckets shared with ``KeyValue`` and nats-py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from nats.js.api import KeyValueConfig

from aioclients import jetstream
from aioclients.spark._kv_table import KeyValueBatchReader

pytestmark = pytest.mark.spark

T = TypeVar("T")


class Buckets:
    """Run bucket operations from synchronous Spark tests; delete the buckets after."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self.created: list[str] = []

    def name(self, suffix: str) -> str:
        name = f"{self.prefix}_{suffix}"
        self.created.append(name)
        return name

    def run(self, body: Callable[[jetstream.JetStream], Awaitable[T]]) -> T:
        async def go() -> T:
            async with await jetstream.connect(self.url) as js:
                return await body(js)

        return asyncio.run(go())

    def run_nats_py(self, body: Callable[[Any], Awaitable[T]]) -> T:
        async def go() -> T:
            nc = await nats.connect(self.url)
            try:
                return await body(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())

    def delete_all(self) -> None:
        async def go(js: jetstream.JetStream) -> None:
            for name in self.created:
                with contextlib.suppress(jetstream.StreamNotFoundError):
                    await js.delete_stream(f"KV_{name}")

        self.run(go)


@pytest.fixture
def buckets(nats_server: Any, unique_name: str) -> Iterator[Buckets]:
    helper = Buckets(nats_server.url, unique_name)
    try:
        yield helper
    finally:
        helper.delete_all()


def read(spark: Any, url: str, bucket: str, **options: object) -> Any:
    reader = spark.read.format("jetstream").option("servers", url).option("bucket", bucket)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def table(df: Any) -> dict[str, tuple[bytes, int, str]]:
    return {r.key: (bytes(r.value), r.revision, r.operation) for r in df.collect()}


def test_the_live_keys_at_their_latest_revision(spark: Any, buckets: Buckets) -> None:
    name = buckets.name("cfg")

    async def fill(js: jetstream.JetStream) -> dict[str, jetstream.KeyValueEntry]:
        kv = await js.create_key_value(name, history=5)
        await kv.put("app.color", b"red")
        await kv.put("app.size", b"10")
        await kv.put("app.color", b"blue")
        await kv.put("gone", b"x")
        await kv.delete("gone")
        await kv.put("purged", b"y")
        await kv.purge("purged")
        await kv.put("back", b"1")
        await kv.delete("back")
        await kv.put("back", b"2")
        await kv.put("empty", b"")
        return {k: await kv.get(k) for k in ("app.color", "app.size", "back", "empty")}

    entries = buckets.run(fill)
    df = read(spark, buckets.url, name)
    assert df.columns == ["key", "value", "revision", "created", "operation"]
    rows = {r.key: r for r in df.collect()}
    assert sorted(rows) == ["app.color", "app.size", "back", "empty"]
    for key, entry in entries.items():
        row = rows[key]
        assert bytes(row.value) == entry.value
        assert row.revision == entry.revision
        assert row.operation == "PUT"
        assert row.created == entry.created.replace(tzinfo=None)  # session time zone: UTC


def test_history_reads_every_kept_revision_with_markers(spark: Any, buckets: Buckets) -> None:
    name = buckets.name("hist")

    async def fill(js: jetstream.JetStream) -> list[tuple[str, int, str, bytes]]:
        kv = await js.create_key_value(name, history=3)
        for i in range(5):
            await kv.put("k", b"%d" % i)  # only the last 3 are kept
        await kv.put("d", b"x")
        await kv.delete("d")
        await kv.put("p", b"y")
        await kv.purge("p")  # the purge marker replaces p's history
        out = []
        for key in ("k", "d", "p"):
            for e in await kv.history(key):
                out.append((e.key, e.revision, e.operation, e.value))
        return out

    kept = buckets.run(fill)
    df = read(spark, buckets.url, name, history="true")
    got = sorted((r.key, r.revision, r.operation, bytes(r.value)) for r in df.collect())
    assert got == sorted(kept)
    assert {op for _, _, op, _ in got} == {"PUT", "DEL", "PURGE"}
    assert [v for k, _, _, v in got if k == "k"] == [b"2", b"3", b"4"]


def test_a_large_bucket_is_split_in_multi_last_requests_of_1024_keys(
    spark: Any, buckets: Buckets
) -> None:
    name = buckets.name("big")

    async def fill(js: jetstream.JetStream) -> None:
        await js.create_key_value(name)
        for i in range(2600):
            await js.publish_async(f"$KV.{name}.key{i:05d}", b"v%d" % i)
        await js.publish_async_complete(timeout=30)

    buckets.run(fill)
    df = read(spark, buckets.url, name, numPartitions=2)
    assert df.rdd.getNumPartitions() == 2
    rows = table(df)
    assert len(rows) == 2600
    assert rows["key02599"][0] == b"v2599"


def test_a_read_is_the_bucket_as_of_planning(buckets: Buckets) -> None:
    """Planning code called directly (as Spark's planner process does): a partition reads
    the values as of the stream's sequence when it was planned, so a retried task reads
    the same rows even when the bucket changed meanwhile."""
    name = buckets.name("snap")

    async def fill(js: jetstream.JetStream) -> None:
        kv = await js.create_key_value(name, history=2)
        await kv.put("a", b"1")
        await kv.put("b", b"1")

    buckets.run(fill)
    reader = KeyValueBatchReader({"servers": buckets.url, "bucket": name}, 2)
    partitions = reader.partitions()

    async def change(js: jetstream.JetStream) -> None:
        kv = await js.key_value(name)
        await kv.put("a", b"2")
        await kv.delete("b")
        await kv.put("c", b"new")

    buckets.run(change)
    rows = sorted(
        (r["key"], r["value"]) for p in partitions for b in reader.read(p) for r in b.to_pylist()
    )
    assert rows == [("a", b"1"), ("b", b"1")]


def test_buckets_written_by_nats_py(spark: Any, buckets: Buckets) -> None:
    name = buckets.name("py")

    async def fill(js: Any) -> int:
        kv = await js.create_key_value(KeyValueConfig(bucket=name, history=4, direct=True))
        await kv.put("one", b"1")
        await kv.put("two", b"2")
        await kv.put("one", b"11")
        await kv.delete("two")
        await kv.put("three", b"3")
        await kv.purge("three")
        await kv.put("four", b"4")
        return int((await kv.get("one")).revision)

    revision = buckets.run_nats_py(fill)
    assert table(read(spark, buckets.url, name)) == {
        "one": (b"11", revision, "PUT"),
        "four": (b"4", revision + 4, "PUT"),  # after a delete, a put and a purge
    }
    history = read(spark, buckets.url, name, history="true").collect()
    assert sorted((r.key, r.operation) for r in history) == [
        ("four", "PUT"),
        ("one", "PUT"),
        ("one", "PUT"),
        ("three", "PURGE"),
        ("two", "DEL"),
        ("two", "PUT"),
    ]


def test_a_bucket_without_direct_get_names_the_fix(spark: Any, buckets: Buckets) -> None:
    name = buckets.name("nodirect")
    # nats-py creates buckets without allow_direct unless asked.
    buckets.run_nats_py(lambda js: js.create_key_value(KeyValueConfig(bucket=name)))
    with pytest.raises(Exception, match=r"allow_direct=True"):
        read(spark, buckets.url, name).collect()


def test_writes_are_puts_that_kv_and_nats_py_read(spark: Any, buckets: Buckets) -> None:
    name = buckets.name("w")
    buckets.run(lambda js: js.create_key_value(name, history=10))
    rows = [("a", "1"), ("b", "2"), ("a", "3"), ("c.d", "4"), ("a", "5")]
    df = spark.createDataFrame(rows, "key string, value string").coalesce(1)
    df.write.format("jetstream").option("servers", buckets.url).option("bucket", name).mode(
        "append"
    ).save()

    async def ours(js: jetstream.JetStream) -> dict[str, tuple[bytes, list[bytes]]]:
        kv = await js.key_value(name)
        out = {}
        for key in ("a", "b", "c.d"):
            out[key] = ((await kv.get(key)).value, [e.value for e in await kv.history(key)])
        return out

    async def theirs(js: Any) -> dict[str, bytes]:
        kv = await js.key_value(name)
        return {key: (await kv.get(key)).value for key in ("a", "b", "c.d")}

    got = buckets.run(ours)
    assert got["a"] == (b"5", [b"1", b"3", b"5"]), "rows of a task are put in order"
    assert got["b"][0] == b"2"
    assert got["c.d"][0] == b"4"
    assert buckets.run_nats_py(theirs) == {"a": b"5", "b": b"2", "c.d": b"4"}
    binary = spark.createDataFrame([("bin", bytearray(b"\x00\xff"))], "key string, value binary")
    binary.write.format("jetstream").option("servers", buckets.url).option("bucket", name).mode(
        "append"
    ).save()
    assert table(read(spark, buckets.url, name))["bin"][0] == b"\x00\xff"


@pytest.mark.parametrize(
    ("rows", "schema", "expected"),
    [
        ([("ok", "1"), ("bad key", "2")], "key string, value string", "row 1 has the key"),
        ([("a..b", "1")], "key string, value string", "is not a key"),
        ([(None, "1")], "key string, value string", "is not a key"),
        ([("k", None)], "key string, value string", "null value"),
        ([("k", "1", "x")], "key string, value string, extra string", "exactly the columns"),
        ([(1, "1")], "key int, value string", "column 'key' must be string"),
    ],
)
def test_bad_rows_fail_the_write(
    spark: Any, buckets: Buckets, rows: list[Any], schema: str, expected: str
) -> None:
    name = buckets.name("bad")
    buckets.run(lambda js: js.create_key_value(name))
    df = spark.createDataFrame(rows, schema).coalesce(1)
    with pytest.raises(Exception, match=expected):
        df.write.format("jetstream").option("servers", buckets.url).option("bucket", name).mode(
            "append"
        ).save()


def test_bad_bucket_options(spark: Any, buckets: Buckets) -> None:
    url = buckets.url
    missing = buckets.name("missing")
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: read(spark, url, missing).collect(), "no Key-Value bucket"),
        (lambda: read(spark, url, "a.b").collect(), "not a bucket name"),
        (lambda: read(spark, url, missing, stream="X").collect(), "unknown option"),
        (lambda: read(spark, url, missing, history="maybe").collect(), "'history'"),
        (
            lambda: (
                df.write.format("jetstream")
                .option("servers", url)
                .option("bucket", missing)
                .mode("append")
                .save()
            ),
            "no Key-Value bucket",
        ),
    ]
    for call, expected in cases:
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - Spark wraps our error
            call()
        assert expected in str(excinfo.value), (expected, str(excinfo.value)[:2000])


def json_rows(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(directory.glob("part-*.json")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return rows


def test_change_feed_from_a_checkpoint_delivers_every_change_once(
    spark: Any, buckets: Buckets, tmp_path: Path
) -> None:
    name = buckets.name("feed")
    out, checkpoint = tmp_path / "out", tmp_path / "cp"

    def run_feed() -> None:
        query = (
            spark.readStream.format("jetstream")
            .option("servers", buckets.url)
            .option("bucket", name)
            .option("maxMessagesPerTrigger", "3")
            .load()
            .selectExpr("key", "cast(value as string) as value", "revision", "operation")
            .writeStream.format("json")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(240), "the availableNow query did not finish"
        finally:
            query.stop()
        assert query.exception() is None

    async def first(js: jetstream.JetStream) -> None:
        kv = await js.create_key_value(name, history=2)
        for i in range(5):
            await kv.put(f"k{i}", b"%d" % i)
        await kv.put("k0", b"again")

    async def second(js: jetstream.JetStream) -> None:
        kv = await js.key_value(name)
        await kv.delete("k1")
        await kv.purge("k2")
        await kv.put("k5", b"5")

    buckets.run(first)
    run_feed()
    rows = sorted(json_rows(out), key=lambda r: r["revision"])
    assert [(r["key"], r["revision"]) for r in rows] == [
        ("k0", 1), ("k1", 2), ("k2", 3), ("k3", 4), ("k4", 5), ("k0", 6)
    ]  # fmt: skip
    buckets.run(second)
    run_feed()
    rows = sorted(json_rows(out), key=lambda r: r["revision"])
    assert [r["revision"] for r in rows] == list(range(1, 10)), "every change once"
    assert [(r["key"], r["operation"], r["value"]) for r in rows[6:]] == [
        ("k1", "DEL", ""),
        ("k2", "PURGE", ""),
        ("k5", "PUT", "5"),
    ]


def test_change_feed_goes_on_when_a_bucket_replaced_revisions_before_the_read(
    spark: Any, buckets: Buckets, tmp_path: Path
) -> None:
    """history=1: rewriting a key removes its older revision; a feed that had not read
    it yet goes on with the newer one (not data loss for a bucket)."""
    name = buckets.name("lag")
    out, checkpoint = tmp_path / "out", tmp_path / "cp"

    def run_feed() -> None:
        query = (
            spark.readStream.format("jetstream")
            .option("servers", buckets.url)
            .option("bucket", name)
            .load()
            .writeStream.format("json")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(240)
        finally:
            query.stop()
        assert query.exception() is None

    async def put(js: jetstream.JetStream, *pairs: tuple[str, bytes]) -> None:
        kv = await js.create_key_value(name)
        for key, value in pairs:
            await kv.put(key, value)

    buckets.run(lambda js: put(js, ("a", b"1"), ("b", b"1")))
    run_feed()
    buckets.run(lambda js: put(js, ("a", b"2"), ("b", b"2"), ("a", b"3")))  # a=2 replaced
    run_feed()
    rows = sorted((r["key"], r["revision"]) for r in json_rows(out))
    assert rows == [("a", 1), ("a", 5), ("b", 2), ("b", 4)]


def test_a_put_the_server_refuses_fails_the_write(spark: Any, buckets: Buckets) -> None:
    name = buckets.name("small")
    buckets.run(lambda js: js.create_key_value(name, max_value_size=16))
    df = spark.createDataFrame([("ok", "short"), ("big", "x" * 100)], "key string, value string")
    with pytest.raises(Exception, match="publish\\(es\\) failed"):
        df.coalesce(1).write.format("jetstream").option("servers", buckets.url).option(
            "bucket", name
        ).mode("append").save()
