"""Every format with OpenTelemetry instrumentation on, in the driver and in Spark's
Python workers: the rows are the same.

The workers are instrumented by a ``sitecustomize.py`` on their ``PYTHONPATH``
(``spark.executorEnv.PYTHONPATH``), which writes a marker per process, so the test
knows the workers really ran instrumented; the driver (this process) is instrumented
too, so the messages the checks publish carry trace headers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _everywhere import check_jetstream, check_liftbridge, check_nsq, off_loop

pytest.importorskip("opentelemetry.sdk", reason="the test extra brings opentelemetry-sdk")

from aioclients import jetstream, liftbridge, nsq

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]

_SITECUSTOMIZE = """
import json, os

_markers = os.environ.get("AIOCLIENTS_TEST_OTEL_MARKERS")
if _markers:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from aioclients.telemetry import AioClientsInstrumentor

    class _ToFile(SpanExporter):
        def export(self, spans):
            with open(os.path.join(_markers, f"{os.getpid()}.spans"), "a") as out:
                for span in spans:
                    out.write(json.dumps(span.name) + "\\n")
            return SpanExportResult.SUCCESS

    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(_ToFile()))
    AioClientsInstrumentor().instrument(tracer_provider=_provider)
    open(os.path.join(_markers, f"{os.getpid()}.instrumented"), "w").close()
"""


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("otel-markers")


@pytest.fixture(scope="module")
def traced_spark(
    classic_spark: Any, markers: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources
    from aioclients.telemetry import AioClientsInstrumentor

    site = tmp_path_factory.mktemp("otel-site")
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    classic_spark.stop()  # one SparkContext per process
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aioclients-tests-otel")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.executorEnv.PYTHONPATH", f"{site}:{REPO}")
        .config("spark.executorEnv.AIOCLIENTS_TEST_OTEL_MARKERS", str(markers))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register_data_sources(session)
    from opentelemetry.sdk.trace import TracerProvider

    instrumentor = AioClientsInstrumentor()
    # the driver too: a recording provider, so that its publishes carry trace headers
    instrumentor.instrument(tracer_provider=TracerProvider())
    try:
        yield session
    finally:
        instrumentor.uninstrument()
        session.stop()


def _instrumented_workers(markers: Path) -> list[Path]:
    return list(markers.glob("*.instrumented"))


def _worker_spans(markers: Path) -> list[str]:
    return [
        json.loads(line)
        for path in markers.glob("*.spans")
        for line in path.read_text().splitlines()
    ]


async def test_jetstream(
    traced_spark: Any, nats_server: Any, unique_name: str, tmp_path: Path, markers: Path
) -> None:
    await check_jetstream(traced_spark, nats_server.url, unique_name, tmp_path)
    # the writer: rows in, the same data out
    name = f"{unique_name}_w"
    async with await jetstream.connect(nats_server.url) as js:
        await js.create_stream(name, subjects=[f"{name}.>"], allow_direct=True)
        try:
            rows = [(f"{name}.a", f"v{i}".encode()) for i in range(50)]

            def write_and_read() -> list[tuple[str, bytes]]:
                df = traced_spark.createDataFrame(rows, "subject string, data binary")
                # One partition: the order of several partitions' writes is the order
                # their tasks happen to run in.
                df.coalesce(1).write.format("jetstream").option("servers", nats_server.url).mode(
                    "append"
                ).save()
                back = (
                    traced_spark.read.format("jetstream")
                    .option("servers", nats_server.url)
                    .option("stream", name)
                    .load()
                    .orderBy("sequence")
                    .collect()
                )
                return [(r.subject, bytes(r.data)) for r in back]

            assert await off_loop(write_and_read) == rows
        finally:
            await js.delete_stream(name)
    assert _instrumented_workers(markers), "the Python workers ran instrumented"


async def test_liftbridge(
    traced_spark: Any, liftbridge_cluster: Any, unique_name: str, tmp_path: Path, markers: Path
) -> None:
    addresses = list(liftbridge_cluster.addresses)
    await check_liftbridge(traced_spark, addresses, unique_name, tmp_path)
    name = f"{unique_name}_w"
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(name, name)
        try:
            rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(40)]

            def write_and_read() -> list[tuple[bytes, bytes]]:
                df = traced_spark.createDataFrame(rows, "key binary, value binary")
                df.coalesce(1).write.format("liftbridge").option(
                    "brokers", ",".join(addresses)
                ).option("stream", name).mode("append").save()
                back = (
                    traced_spark.read.format("liftbridge")
                    .option("brokers", ",".join(addresses))
                    .option("stream", name)
                    .load()
                    .orderBy("offset")
                    .collect()
                )
                return [(bytes(r.key), bytes(r.value)) for r in back]

            assert await off_loop(write_and_read) == rows
        finally:
            await client.delete_stream(name)
    assert _instrumented_workers(markers)


async def test_nsq(
    traced_spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path, markers: Path
) -> None:
    nsqd = await nsqd_factory()
    await check_nsq(traced_spark, nsqd, unique_name[-60:], tmp_path)
    topic = f"w{unique_name[-50:]}"
    bodies = [f"b{i}".encode() for i in range(40)]
    async with nsq.Reader(topic, "check", nsqd_tcp_addresses=[nsqd.tcp_address]) as reader:

        def write() -> None:
            df = traced_spark.createDataFrame([(b,) for b in bodies], "data binary")
            df.write.format("nsq").option("nsqd", nsqd.tcp_address).option("topic", topic).mode(
                "append"
            ).save()

        await off_loop(write)
        got = []
        async with asyncio.timeout(60):
            async for msg in reader:
                got.append(msg.body)
                await msg.finish()
                if len(got) == len(bodies):
                    break
    assert sorted(got) == sorted(bodies)  # bodies unchanged: NSQ gets no trace headers
    assert _instrumented_workers(markers)
    spans = _worker_spans(markers)
    print(f"spans made in the workers: {len(spans)} ({sorted(set(spans))[:6]})")
