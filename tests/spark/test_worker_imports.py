"""What a Python worker loads to run one format's reader or writer.

Spark's Python workers unpickle a data source class by reference, so each fresh
worker imports ``aioclients.spark`` and the module of that format. A jetstream
read must not pay for the other clients' modules and their libraries (grpc for
liftbridge, the nsq client): about half a second per fresh worker. Nor for nats-py
and aiohttp (about 0.3 s): jetstream tasks speak NATS through their own lean
connection (``aioclients.spark._direct_io``); only the planning processes, which look
streams and buckets up, use the client.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import EqualTo
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from aioclients import jetstream
from aioclients.spark import JETSTREAM_SCHEMA, JetStreamDataSource
from aioclients.spark._jetstream import JetStreamPushdownReader
from aioclients.spark._kv_table import KV_SCHEMA
from aioclients.spark._object_table import OBJECT_STORE_SCHEMA

pytestmark = pytest.mark.timeout(60)

OTHER_CLIENTS = ("grpc", "aioclients.liftbridge", "aioclients.nsq")


def loaded_after(module: str) -> list[str]:
    """The modules of ``OTHER_CLIENTS`` a fresh interpreter holds after importing ``module``."""
    names = " ".join(OTHER_CLIENTS)
    code = f"import sys, {module}\nprint(*(m for m in {names!r}.split() if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    return done.stdout.split()


@pytest.mark.parametrize(
    "module", ["aioclients.spark", "aioclients.spark._jetstream", "aioclients.spark._write_io"]
)
def test_a_jetstream_worker_loads_no_other_client(module: str) -> None:
    assert loaded_after(module) == []


def test_the_nsq_and_liftbridge_formats_still_load_their_clients() -> None:
    # The check above can fail: these modules do load them.
    assert loaded_after("aioclients.spark._nsq") == ["aioclients.nsq"]
    assert loaded_after("aioclients.spark._liftbridge") == ["grpc", "aioclients.liftbridge"]


# A Python worker's task, as pyspark runs it: the reader or writer (pickled by the
# planner, its class by reference), then read(partition) or write(batches).
_TASKS = """
import pickle, sys
rows = 0
for kind, obj, arg in pickle.loads(sys.stdin.buffer.read()):
    if kind == "read":
        rows += sum(batch.num_rows for batch in obj.read(arg))
    else:
        obj.write(iter([arg]))
print(rows, *(m for m in ("nats", "aiohttp") if m in sys.modules))
"""


def run_tasks(tasks: list[tuple[str, object, object]]) -> tuple[int, list[str]]:
    """Rows the read tasks yielded, and which of nats-py and aiohttp the worker loaded."""
    done = subprocess.run(
        [sys.executable, "-c", _TASKS],
        input=cloudpickle.dumps(tasks),
        capture_output=True,
        timeout=50,
        check=True,
    )
    rows, *loaded = done.stdout.decode().split()
    return int(rows), loaded


def _reads(reader: Any, partitions: list[Any]) -> list[tuple[str, object, object]]:
    return [("read", reader, partition) for partition in partitions]


async def test_jetstream_tasks_load_neither_nats_py_nor_aiohttp(
    js: jetstream.JetStream, nats_server: Any, unique_name: str
) -> None:
    """The jetstream reads and writes speak NATS themselves (aioclients.spark._direct_io):
    a fresh worker that runs them must not pay about 0.3 s for nats-py and aiohttp. (The
    planning processes still use the client: they look streams and buckets up.)"""
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], allow_direct=True)
    for i in range(30):
        await js.publish_async(f"{unique_name}.{i % 3}", b"m%d" % i)
    await js.publish_async_complete(timeout=30)
    bucket = await js.create_key_value(unique_name)
    await bucket.put("a", b"1")
    await bucket.put("b", b"2")
    stream = {"servers": nats_server.url, "stream": unique_name}
    kv = {"servers": nats_server.url, "bucket": unique_name}
    servers = {"servers": nats_server.url}

    def plan() -> list[tuple[str, object, object]]:  # what the planner processes do
        batch = JetStreamPushdownReader(stream, 2)  # register_data_sources' choice
        assert batch.pushFilters([EqualTo(("subject",), f"{unique_name}.1")]) == []
        streaming = JetStreamDataSource(stream).streamReader(JETSTREAM_SCHEMA)
        start = streaming.initialOffset()
        end = streaming.latestOffset(start, streaming.getDefaultReadLimit())
        table = JetStreamDataSource(kv).reader(KV_SCHEMA)
        written = pa.RecordBatch.from_pydict(
            {"subject": [f"{unique_name}.w"], "data": [b"w"]},
            schema=pa.schema([("subject", pa.string()), ("data", pa.binary())]),
        )
        put = pa.RecordBatch.from_pydict(
            {"key": ["c"], "value": [b"3"]},
            schema=pa.schema([("key", pa.string()), ("value", pa.binary())]),
        )
        write_schema = StructType(
            [StructField("subject", StringType()), StructField("data", BinaryType())]
        )
        put_schema = StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]
        )
        return [
            *_reads(batch, batch.partitions()),
            *_reads(streaming, streaming.partitions(start, end)),
            *_reads(table, table.partitions()),
            ("write", JetStreamDataSource(servers).writer(write_schema, False), written),
            ("write", JetStreamDataSource(kv).writer(put_schema, False), put),
        ]

    tasks = await asyncio.to_thread(plan)
    rows, loaded = await asyncio.to_thread(run_tasks, tasks)
    assert (rows, loaded) == (10 + 30 + 2, [])
    # The tasks ran: the write and the put arrived.
    assert (await js.stream(unique_name)).cached_info.state.last_seq == 31
    assert (await bucket.get("c")).value == b"3"


async def test_an_object_store_listing_task_still_loads_the_client(
    js: jetstream.JetStream, nats_server: Any, unique_name: str
) -> None:
    # The check above can fail: this task lists the store through the client.
    store = await js.create_object_store(unique_name)
    await store.put("o", b"data")
    options = {"servers": nats_server.url, "objectStore": unique_name}

    def plan() -> list[tuple[str, object, object]]:
        reader = JetStreamDataSource(options).reader(OBJECT_STORE_SCHEMA)
        return _reads(reader, reader.partitions())

    tasks = await asyncio.to_thread(plan)
    assert await asyncio.to_thread(run_tasks, tasks) == (1, ["nats", "aiohttp"])
