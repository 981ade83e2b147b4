"""Object Store listings as tables (the ``jetstream`` format with ``objectStore``) on
local[2], against the real nats-server: one row per object, as ``ObjectStore.list``
gives them, for stores written by us and by nats-py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import nats
import pytest

from aioclients import jetstream

pytestmark = pytest.mark.spark

T = TypeVar("T")


class Stores:
    """Run Object Store operations from synchronous Spark tests; delete them after."""

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

    def delete_all(self) -> None:
        async def go(js: jetstream.JetStream) -> None:
            for name in self.created:
                with contextlib.suppress(jetstream.StreamNotFoundError):
                    await js.delete_stream(f"OBJ_{name}")

        self.run(go)


@pytest.fixture
def stores(nats_server: Any, unique_name: str) -> Iterator[Stores]:
    helper = Stores(nats_server.url, unique_name.replace(".", "_")[-40:])
    try:
        yield helper
    finally:
        helper.delete_all()


def read(spark: Any, url: str, store: str, **options: object) -> Any:
    reader = spark.read.format("jetstream").option("servers", url).option("objectStore", store)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def listed(infos: list[jetstream.ObjectInfo]) -> dict[str, tuple[Any, ...]]:
    return {
        i.name: (i.size, i.chunks, i.digest or None, i.deleted, i.description, i.nuid)
        for i in infos
    }


def rows_of(df: Any) -> dict[str, tuple[Any, ...]]:
    return {
        r["name"]: (r["size"], r["chunks"], r["digest"], r["deleted"], r["description"], r["nuid"])
        for r in df.collect()
    }


def test_the_listing_is_what_list_gives(spark: Any, stores: Stores) -> None:
    name = stores.name("files")
    other = stores.name("other")

    async def fill(js: jetstream.JetStream) -> tuple[list[Any], list[Any]]:
        store = await js.create_object_store(name)
        elsewhere = await js.create_object_store(other)
        a = await store.put("a.txt", b"alpha" * 1000, chunk_size=1024, metadata={"k": "v"})
        await store.put("b.bin", b"", description="empty")
        await store.put("gone", b"soon deleted")
        await store.delete("gone")
        await store.add_link("to-a", a)
        await store.add_bucket_link("to-other", elsewhere)
        live = [i async for i in store.list()]
        everything = [i async for i in store.list(show_deleted=True)]
        return live, everything

    live, everything = stores.run(fill)
    assert {i.name for i in live} == {"a.txt", "b.bin", "to-a", "to-other"}
    assert len(everything) == len(live) + 1

    df = read(spark, stores.url, name)
    assert rows_of(df) == listed(live)
    rows = {r["name"]: r for r in df.collect()}
    assert rows["a.txt"]["metadata"] == {"k": "v"}
    assert rows["a.txt"]["digest"].startswith("SHA-256=")
    assert rows["to-a"]["link"] == f"{name}/a.txt"
    assert rows["to-other"]["link"] == other
    assert rows["a.txt"]["link"] is None
    assert rows["a.txt"]["modified"] is not None

    with_deleted = read(spark, stores.url, name, showDeleted="true", batchSize=1)
    assert rows_of(with_deleted) == listed(everything)
    assert rows_of(with_deleted)["gone"][3] is True


def test_a_store_written_by_nats_py(spark: Any, stores: Stores) -> None:
    name = stores.name("nats_py")

    async def fill() -> None:
        nc = await nats.connect(stores.url)
        try:
            obs = await nc.jetstream().create_object_store(name)
            await obs.put("report.csv", b"x,y\n1,2\n" * 100)
            await obs.put("notes", b"hello")
        finally:
            await nc.close()

    asyncio.run(fill())

    async def ours(js: jetstream.JetStream) -> list[Any]:
        store = await js.object_store(name)
        return [i async for i in store.list()]

    df = read(spark, stores.url, name)
    assert rows_of(df) == listed(stores.run(ours))
    assert {r["name"]: r["size"] for r in df.collect()} == {"report.csv": 800, "notes": 5}


def test_bad_object_store_options(spark: Any, stores: Stores) -> None:
    url = stores.url
    missing = stores.name("missing")
    df = spark.createDataFrame([("k", b"v")], "key string, value binary")
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: read(spark, url, missing).collect(), "no Object Store"),
        (lambda: read(spark, url, "a.b").collect(), "not a store name"),
        (lambda: read(spark, url, missing, stream="X").collect(), "unknown option"),
        (lambda: read(spark, url, missing, bucket="cfg").collect(), "give one"),
        (
            lambda: (
                spark.readStream.format("jetstream")
                .option("servers", url)
                .option("objectStore", missing)
                .load()
                .writeStream.format("noop")
                .start()
                .awaitTermination(60)
            ),
            "spark.read only",
        ),
        (
            lambda: (
                df.write.format("jetstream")
                .option("servers", url)
                .option("objectStore", missing)
                .mode("append")
                .save()
            ),
            "spark.read only",
        ),
    ]
    for call, expected in cases:
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - Spark wraps our error
            call()
        assert expected in str(excinfo.value), (expected, str(excinfo.value)[:2000])
