"""The jetstream Spark data source against the real nats-server, on a local[2] session."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aioclients import jetstream
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = pytest.mark.spark

Server = NatsServer | ExternalServer


class Streams:
    """Create streams (and publish to them) from synchronous Spark tests; delete them after."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self.created: list[str] = []

    def create(self, suffix: str = "S", **config: Any) -> str:
        name = f"{self.prefix}_{suffix}"
        config.setdefault("allow_direct", True)

        async def go() -> None:
            async with await jetstream.connect(self.url) as js:
                await js.create_stream(name, subjects=[f"{name}.>"], **config)

        asyncio.run(go())
        self.created.append(name)
        return name

    def publish(
        self, messages: list[tuple[str, bytes, dict[str, str | list[str]] | None]]
    ) -> list[int]:
        async def go() -> list[int]:
            async with await jetstream.connect(self.url) as js:
                futures = [
                    await js.publish_async(subject, data, headers=headers)
                    for subject, data, headers in messages
                ]
                return [(await f).seq for f in futures]

        return asyncio.run(go())

    def fetch_all(self, name: str) -> list[jetstream.StoredMessage]:
        async def go() -> list[jetstream.StoredMessage]:
            async with await jetstream.connect(self.url) as js:
                stream = await js.stream(name)
                last = stream.cached_info.state.last_seq
                out: list[jetstream.StoredMessage] = []
                seq = 1
                while seq <= last:
                    batch = stream.direct_get_batch(batch=1000, seq=seq)
                    async for msg in batch:
                        out.append(msg)
                        seq = msg.seq + 1
                    if not batch.num_pending:
                        break
                return out

        return asyncio.run(go())

    def delete_all(self) -> None:
        async def go() -> None:
            async with await jetstream.connect(self.url) as js:
                for name in self.created:
                    with contextlib.suppress(jetstream.StreamNotFoundError):
                        await js.delete_stream(name)

        asyncio.run(go())


@pytest.fixture
def streams(nats_server: Server, unique_name: str) -> Iterator[Streams]:
    helper = Streams(nats_server.url, unique_name)
    try:
        yield helper
    finally:
        helper.delete_all()


def _reader(spark: Any, url: str, stream: str, **options: object) -> Any:
    reader = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _orders(name: str, count: int) -> list[tuple[str, bytes, dict[str, str | list[str]] | None]]:
    out: list[tuple[str, bytes, dict[str, str | list[str]] | None]] = []
    for i in range(count):
        region = ("emea", "amer", "apac")[i % 3]
        headers: dict[str, str | list[str]] | None = None
        if i % 10 == 0:
            headers = {"Order-Id": f"o-{i}", "Tag": ["a", "b"]}
        out.append((f"{name}.{region}", json.dumps({"i": i}).encode(), headers))
    return out


def test_batch_read_equals_what_was_published(spark: Any, streams: Streams) -> None:
    name = streams.create()
    published = _orders(name, 500)
    seqs = streams.publish(published)
    stored = {m.seq: m for m in streams.fetch_all(name)}

    df = _reader(spark, streams.url, name, numPartitions=3)
    assert df.rdd.getNumPartitions() == 3
    rows = sorted(df.collect(), key=lambda r: r.sequence)

    assert [r.sequence for r in rows] == seqs
    for row, (subject, data, headers) in zip(rows, published, strict=True):
        assert row.subject == subject
        assert bytes(row.data) == data
        expected = None
        if headers is not None:
            expected = {"Order-Id": headers["Order-Id"], "Tag": "a, b"}
        assert row.headers == expected
        # Spark hands out naive datetimes in the session time zone (UTC here).
        stamp = stored[row.sequence].time.replace(tzinfo=None)
        assert row.timestamp == stamp


def test_sequence_range_and_subject_filter(spark: Any, streams: Streams) -> None:
    name = streams.create()
    streams.publish(_orders(name, 300))

    ranged = _reader(spark, streams.url, name, startSequence=50, endSequence=149, numPartitions=4)
    assert sorted(r.sequence for r in ranged.select("sequence").collect()) == list(range(50, 150))

    # The filter with a range that ends before the stream does: the last batch is cut
    # at endSequence exactly even though later messages match too.
    filtered = _reader(spark, streams.url, name, subject=f"{name}.amer", endSequence=200)
    got = sorted((r.sequence, r.subject) for r in filtered.select("sequence", "subject").collect())
    expected = [(seq, f"{name}.amer") for seq in range(2, 201, 3)]
    assert got == expected


def test_deleted_messages_and_small_batches(spark: Any, streams: Streams) -> None:
    name = streams.create()
    streams.publish(_orders(name, 60))

    async def delete_some() -> None:
        async with await jetstream.connect(streams.url) as js:
            stream = await js.stream(name)
            for seq in (1, 2, 10, 11, 12, 30, 60):
                await stream.delete_msg(seq)

    asyncio.run(delete_some())
    df = _reader(spark, streams.url, name, batchSize=4, numPartitions=2)
    expected = [s for s in range(1, 61) if s not in {1, 2, 10, 11, 12, 30, 60}]
    assert sorted(r.sequence for r in df.select("sequence").collect()) == expected


def test_empty_stream_reads_no_rows(spark: Any, streams: Streams) -> None:
    name = streams.create()
    assert _reader(spark, streams.url, name).count() == 0


def _error_text(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return str(excinfo.value)


def test_bad_options_fail_clearly(spark: Any, streams: Streams) -> None:
    name = streams.create()
    url = streams.url
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: spark.read.format("jetstream").option("stream", name).load(), "'servers'"),
        (lambda: spark.read.format("jetstream").option("servers", url).load(), "'stream'"),
        (lambda: _reader(spark, url, f"{name}_missing"), "there is no stream"),
        (lambda: _reader(spark, url, name, startSequence="zero"), "'startSequence'"),
        (lambda: _reader(spark, url, name, endSequence=0), "'endSequence'"),
        (lambda: _reader(spark, url, name, startSequence=9, endSequence=3), "after 'endSequence'"),
        (lambda: _reader(spark, url, name, numPartitions="many"), "'numPartitions'"),
        (lambda: _reader(spark, url, name, batchSize=-1), "'batchSize'"),
        (lambda: _reader(spark, url, name, timeout="soon"), "'timeout'"),
        (lambda: _reader(spark, url, name, stream_name="x"), "unknown option"),
        (lambda: _reader(spark, "http://nowhere", name), "not a NATS URL"),
    ]
    for load, expected in cases:
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - Spark wraps our error
            load().collect()
        assert expected in _error_text(excinfo), (expected, _error_text(excinfo)[:2000])


def test_stream_without_allow_direct_names_the_fix(spark: Any, streams: Streams) -> None:
    name = streams.create(allow_direct=False)
    with pytest.raises(Exception, match=r"allow_direct=True"):
        _reader(spark, streams.url, name).collect()


def test_batch_reading_nsq_fails_saying_why(spark: Any) -> None:
    # NSQ keeps no log that Spark could plan a batch read from: only readStream exists.
    with pytest.raises(Exception, match="'nsq' data source is not available for batch reads"):
        spark.read.format("nsq").load().collect()


# -- streaming ------------------------------------------------------------------------------


def _stream_to_files(
    spark: Any, url: str, name: str, out: Path, checkpoint: Path, **options: object
) -> None:
    reader = spark.readStream.format("jetstream").option("servers", url).option("stream", name)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (
        reader.load()
        .selectExpr("sequence", "subject", "cast(data as string) as data")
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


def test_stream_restarted_from_checkpoint_yields_every_message_once(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    name = streams.create()
    streams.publish(_orders(name, 120))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    # maxMessagesPerTrigger splits the backlog into several micro-batches.
    _stream_to_files(spark, streams.url, name, out, checkpoint, maxMessagesPerTrigger=50)
    first_run = spark.read.json(str(out)).count()
    assert first_run == 120

    streams.publish(_orders(name, 80))
    _stream_to_files(spark, streams.url, name, out, checkpoint, maxMessagesPerTrigger=50)

    rows = spark.read.json(str(out)).select("sequence").collect()
    sequences = sorted(r.sequence for r in rows)
    assert sequences == list(range(1, 201)), "every message exactly once"
    commits = sorted(p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    # 120 in batches of <= 50, then 80 in batches of <= 50: at least 3 + 2 micro-batches.
    assert len(commits) >= 5


def test_stream_offsets_are_plain_sequences(spark: Any, streams: Streams, tmp_path: Path) -> None:
    name = streams.create()
    streams.publish(_orders(name, 30))
    checkpoint = tmp_path / "checkpoint"
    _stream_to_files(spark, streams.url, name, tmp_path / "out", checkpoint, startSequence=11)
    assert spark.read.json(str(tmp_path / "out")).count() == 20
    logs = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    last = max(logs, key=lambda p: int(p.name))
    offset = json.loads(last.read_text().strip().splitlines()[-1])
    # "created" tells a recreated stream (sequences restarting at 1) from the same one.
    assert offset == {"stream": name, "sequence": 30, "created": offset["created"]}
    assert isinstance(offset["created"], str)


# -- failOnDataLoss -------------------------------------------------------------------------


def _numbered(name: str, first: int, count: int) -> list[tuple[str, bytes, None]]:
    return [(f"{name}.n", str(i).encode(), None) for i in range(first, first + count)]


def _stream_reader(url: str, name: str, **options: object) -> Any:
    from aioclients.spark._jetstream import JetStreamStreamReader

    opts = {"servers": url, "stream": name, **{k: str(v) for k, v in options.items()}}
    return JetStreamStreamReader(opts, default_partitions=2)


@pytest.mark.slow
def test_retention_past_the_checkpoint_fails_the_query_naming_the_range(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    # The scenario: checkpointed at 800 on max_msgs=1000, then 4200 more.
    name = streams.create(max_msgs=1000)
    streams.publish(_numbered(name, 1, 800))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    _stream_to_files(spark, streams.url, name, out, checkpoint)
    assert spark.read.json(str(out)).count() == 800
    streams.publish(_numbered(name, 801, 4200))  # the stream keeps 4001..5000

    with pytest.raises(Exception, match=r"sequences 801\.\.4000 .*failOnDataLoss") as info:
        _stream_to_files(spark, streams.url, name, out, checkpoint)
    assert "DataLossError" in str(info.value)
    assert spark.read.json(str(out)).count() == 800, "nothing read past the loss"

    _stream_to_files(spark, streams.url, name, out, checkpoint, failOnDataLoss="false")
    sequences = sorted(r.sequence for r in spark.read.json(str(out)).collect())
    assert sequences == [*range(1, 801), *range(4001, 5001)]


def test_data_loss_with_fail_false_warns_and_goes_on_from_the_first_kept(
    streams: Streams, caplog: pytest.LogCaptureFixture
) -> None:
    name = streams.create(max_msgs=100)
    streams.publish(_numbered(name, 1, 50))
    reader = _stream_reader(streams.url, name, failOnDataLoss="false", maxMessagesPerTrigger=30)
    start = reader.initialOffset()
    assert start["sequence"] == 0
    streams.publish(_numbered(name, 51, 150))  # keeps 101..200
    with caplog.at_level("WARNING", logger="aioclients.spark.jetstream"):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["sequence"] == 130, "maxMessagesPerTrigger counts from the first kept"
    [record] = [r for r in caplog.records if "data loss" in r.getMessage()]
    assert "sequences 1..100" in record.getMessage()
    assert record.name == "aioclients.spark.jetstream"
    parts = reader.partitions(start, end)
    assert (parts[0].first, parts[-1].last) == (101, 130), "only what is kept is split"
    rows = [
        seq
        for part in parts
        for batch in reader.read(part)
        for seq in batch.column("sequence").to_pylist()
    ]
    assert rows == list(range(101, 131))


def test_stream_recreated_under_the_query_is_data_loss(streams: Streams) -> None:
    from aioclients.spark import DataLossError

    name = streams.create()
    streams.publish(_numbered(name, 1, 40))
    reader = _stream_reader(streams.url, name)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["sequence"] == 40
    reader.commit(end)

    streams.delete_all()
    streams.create()
    streams.publish(_numbered(name, 1, 60))  # more than before: only "created" tells
    with pytest.raises(DataLossError, match=r"deleted and recreated.*failOnDataLoss"):
        reader.latestOffset(end, reader.getDefaultReadLimit())

    lenient = _stream_reader(streams.url, name, failOnDataLoss="false")
    new_end = lenient.latestOffset(end, lenient.getDefaultReadLimit())
    assert new_end["sequence"] == 60
    assert new_end["created"] != end["created"]
    parts = lenient.partitions(end, new_end)
    assert (parts[0].first, parts[-1].last) == (1, 60), "the new stream from its beginning"


def test_batch_start_below_the_first_kept_says_so(
    spark: Any, streams: Streams, caplog: pytest.LogCaptureFixture
) -> None:
    from aioclients.spark._jetstream import JetStreamBatchReader

    name = streams.create(max_msgs=50)
    streams.publish(_numbered(name, 1, 120))  # keeps 71..120
    with pytest.raises(Exception, match=r"sequences 10\.\.70 .*failOnDataLoss"):
        _reader(spark, streams.url, name, startSequence=10).collect()

    options = {"servers": streams.url, "stream": name, "startSequence": "10"}
    with caplog.at_level("WARNING", logger="aioclients.spark.jetstream"):
        reader = JetStreamBatchReader({**options, "failOnDataLoss": "false"}, 2)
        assert reader.partitions()[0].first == 71
    assert any("sequences 10..70" in r.getMessage() for r in caplog.records)
    df = _reader(spark, streams.url, name, startSequence=10, failOnDataLoss="false")
    assert sorted(r.sequence for r in df.collect()) == list(range(71, 121))
    # Reading from the first kept sequence (or without startSequence) is no loss.
    assert _reader(spark, streams.url, name, startSequence=71).count() == 50


# -- writing --------------------------------------------------------------------------------


def test_writer_round_trips_and_dedupes_by_msg_id(spark: Any, streams: Streams) -> None:
    name = streams.create(duplicate_window=60)
    rows = [
        (f"{name}.out.{i % 2}", f"payload-{i}".encode(), f"id-{i}", {"K": f"v{i}"})
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows, "subject string, data binary, msg_id string, headers map<string,string>"
    )
    df.write.format("jetstream").option("servers", streams.url).mode("append").save()
    # The same rows again (a retried job): every one is a duplicate.
    df.write.format("jetstream").option("servers", streams.url).mode("append").save()

    stored = streams.fetch_all(name)
    assert len(stored) == 40
    by_data = {m.data: m for m in stored}
    for subject, data, msg_id, headers in rows:
        msg = by_data[data]
        assert msg.subject == subject
        assert msg.headers is not None
        assert msg.headers["Nats-Msg-Id"] == msg_id
        assert msg.headers["K"] == headers["K"]

    # Read back through the source: the Nats-Msg-Id header shows up in the headers map.
    back = _reader(spark, streams.url, name).collect()
    assert sorted(bytes(r.data) for r in back) == sorted(r[1] for r in rows)
    assert all(r.headers["Nats-Msg-Id"].startswith("id-") for r in back)


def test_writer_with_subject_option_and_string_data(spark: Any, streams: Streams) -> None:
    name = streams.create()
    df = spark.createDataFrame([(f"text-{i}",) for i in range(10)], "data string")
    df.write.format("jetstream").option("servers", streams.url).option(
        "subject", f"{name}.fixed"
    ).mode("append").save()
    stored = streams.fetch_all(name)
    assert sorted(m.data for m in stored) == sorted(f"text-{i}".encode() for i in range(10))
    assert {m.subject for m in stored} == {f"{name}.fixed"}


def test_writer_fails_the_task_when_a_publish_fails(spark: Any, streams: Streams) -> None:
    name = streams.create()
    df = spark.createDataFrame(
        [(f"{name}.ok", b"1"), (f"{name}_nostream.x", b"2")], "subject string, data binary"
    )
    with pytest.raises(Exception, match=r"publish\(es\) failed"):
        df.write.format("jetstream").option("servers", streams.url).mode("append").save()


def test_writer_bad_input_fails_clearly(spark: Any, streams: Streams) -> None:
    name = streams.create()
    url = streams.url
    cases = [
        (spark.createDataFrame([("x",)], "data string"), {}, "needs a subject"),
        (spark.createDataFrame([(1,)], "data int"), {"subject": f"{name}.x"}, "'data' column"),
        (
            spark.createDataFrame([(b"x", "y")], "data binary, extra string"),
            {"subject": f"{name}.x"},
            "unexpected column",
        ),
        (
            spark.createDataFrame([(b"x",)], "data binary"),
            {"subject": f"{name}.x", "servers": ""},
            "'servers'",
        ),
    ]
    for df, options, expected in cases:
        writer = df.write.format("jetstream").option("servers", url).mode("append")
        for key, value in options.items():
            writer = writer.option(key, value)
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - Spark wraps our error
            writer.save()
        assert expected in str(excinfo.value), (expected, str(excinfo.value)[:2000])
    overwrite = spark.createDataFrame([(b"x",)], "data binary").write.format("jetstream")
    with pytest.raises(Exception, match=r"mode\('append'\)"):
        overwrite.option("servers", url).option("subject", f"{name}.x").mode("overwrite").save()


def test_stream_writer_publishes_each_micro_batch(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    source = streams.create("SRC")
    sink = streams.create("SINK", duplicate_window=60)
    streams.publish(_orders(source, 30))
    query = (
        spark.readStream.format("jetstream")
        .option("servers", streams.url)
        .option("stream", source)
        .load()
        .selectExpr(
            f"concat('{sink}.copy.', cast(sequence as string)) as subject",
            "data",
            "cast(sequence as string) as msg_id",
        )
        .writeStream.format("jetstream")
        .option("servers", streams.url)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(240)
    finally:
        query.stop()
    stored = streams.fetch_all(sink)
    assert sorted(int(m.subject.rsplit(".", 1)[1]) for m in stored) == list(range(1, 31))


def test_stream_reader_on_a_missing_stream_fails_the_query(
    spark: Any, streams: Streams, tmp_path: Path
) -> None:
    with pytest.raises(Exception, match="there is no stream"):
        _stream_to_files(
            spark,
            streams.url,
            f"{streams.prefix}_missing",
            tmp_path / "out",
            tmp_path / "checkpoint",
        )
