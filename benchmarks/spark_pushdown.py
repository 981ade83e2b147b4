"""Filter pushdown of the ``jetstream`` Spark data source: the same query pushed and not.

Fills a stream with ``--count`` 100-byte messages over ``--subjects`` subjects
(round robin), then times two batch queries on ``--master`` (default ``local[2]``),
each written twice: in a form Spark pushes to the reader, and in a form it cannot
push (so the whole stream is read and Spark filters it):

- one subject: ``subject = 'pushbench.42'`` against ``concat(subject, '') = ...``;
- the newest 1%: ``timestamp >= <time of the message at 99%>`` against
  ``timestamp + interval 0 seconds >= ...``.

Every query reads a fresh DataFrame (pyspark 4.3.0 reuses a pushed read for a later
query on the same one). The two forms alternate for ``--rounds`` rounds after one
warm-up each; the best time of each is reported with the speed-up. A floor is timed
in the same rounds: the same query over a Python data source that reads nothing and
yields the same number of rows at once (what any pyspark Python data source query
with pushdown costs: planning in Python processes, one of them for pushFilters, a
task, a Python worker). A control is timed in the same rounds too: the same pushed
query, with as many partitions as Spark planned for it, of a second stream that holds
only the rows it selects (the same subjects and payloads: the 1% matching the subject,
or the newest 1% with the time bound at the first of them), so that nats-server walks
nothing it does not send: the best this reader can do, whatever the server. The control
less the floor is the reader's own cost; the pushed time less the control, what the
rest of the stream costs the server. Next to the pushed time: the CPU seconds
nats-server spent in the pushed query's rounds (fewest and most), what its filtered
walk costs; it needs the server's pid (the benchmark's own server, or ``--server-pid``
with ``--nats-url``).

    python benchmarks/spark_pushdown.py                  # 1M messages, 100 subjects
    python benchmarks/spark_pushdown.py --count 200000   # a quicker run
    python benchmarks/spark_pushdown.py --payload 1000   # 1 KB messages
    python benchmarks/spark_pushdown.py --loop uvloop    # the fill on uvloop
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any

from _floor import server_cpu
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

STREAM = "SPARK_PUSHDOWN_BENCH"
#: The controls: streams of only what a query selects, stored under the main
#: stream's subjects (a subject transform) so that their rows are the same.
SUBJECT_CONTROL = "SPARK_PUSHDOWN_CONTROL_SUBJECT"
TIME_CONTROL = "SPARK_PUSHDOWN_CONTROL_TIME"
ONE = 42  # the subject query's subject: pushbench.42


def floor_source(rows: int) -> type:
    """A Python data source that yields ``rows`` rows of the jetstream schema at once."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from aioclients.spark import JETSTREAM_SCHEMA

    class FloorReader(DataSourceReader):
        def pushFilters(self, filters: list[Any]) -> list[Any]:
            # Pushes nothing, but has pyspark plan the query as it plans a jetstream
            # read: with the Python process that calls pushFilters.
            return list(filters)

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(rows)]

        def read(self, partition: InputPartition) -> object:
            n = partition.value
            yield pa.RecordBatch.from_pydict(
                {
                    "subject": pa.array(["pushbench.42"] * n),
                    "sequence": pa.array(range(n), pa.int64()),
                    "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
                    "headers": pa.nulls(n, pa.map_(pa.string(), pa.string())),
                    "data": pa.array([b"x"] * n, pa.binary()),
                }
            )

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "pushbench_floor"

        def schema(self) -> object:
            return JETSTREAM_SCHEMA

        def reader(self, schema: object) -> FloorReader:
            return FloorReader()

    return FloorSource


async def fill(
    url: str, count: int, subjects: int, storage: str, payload: bytes
) -> tuple[str, str]:
    """Fill the stream and the controls; return the time of the message at 99% (for
    the time query) and of the time control's first message."""
    async with await jetstream.connect(url, timeout=30) as js:
        for name in (STREAM, SUBJECT_CONTROL, TIME_CONTROL):
            try:
                await js.delete_stream(name)
            except jetstream.StreamNotFoundError:
                pass
        await js.create_stream(STREAM, subjects=["pushbench.>"], storage=storage, allow_direct=True)
        start = time.perf_counter()
        for i in range(count):
            await js.publish_async(f"pushbench.{i % subjects}", payload)
        await js.publish_async_complete(timeout=300)
        print(f"filled {count} messages in {time.perf_counter() - start:.1f}s", flush=True)
        stream = await js.stream(STREAM)
        newest = count - count // 100  # the index of the first of the newest 1%
        cut = (await stream.direct_get(newest + 1)).time
        controls = (
            (SUBJECT_CONTROL, "pushctl.subject", range(ONE, count, subjects)),
            (TIME_CONTROL, "pushctl.time", range(newest, count)),
        )
        for name, prefix, indexes in controls:
            await js.create_stream(
                name,
                subjects=[f"{prefix}.>"],
                subject_transform={"src": f"{prefix}.>", "dest": "pushbench.>"},
                storage=storage,
                allow_direct=True,
            )
            for i in indexes:
                await js.publish_async(f"{prefix}.{i % subjects}", payload)
            await js.publish_async_complete(timeout=300)
        control_cut = (await (await js.stream(TIME_CONTROL)).direct_get(1)).time
    return _sql_time(cut), _sql_time(control_cut)


def _sql_time(when: datetime) -> str:
    return when.astimezone(timezone.utc).replace(tzinfo=None).isoformat(sep=" ")


def measure(
    url: str,
    count: int,
    subjects: int,
    cuts: tuple[str, str],
    rounds: int,
    master: str,
    server_pid: int | None,
) -> None:
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("aioclients-spark-pushdown-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    spark.dataSource.register(floor_source(count // 100))
    one = f"pushbench.{ONE}"
    cut, control_cut = cuts
    # name: (pushed, not pushed, rows expected, control stream, the control's query)
    queries = {
        "one subject of 100": (
            f"subject = '{one}'",
            f"concat(subject, '') = '{one}'",
            count // subjects + (1 if ONE < count % subjects else 0),
            SUBJECT_CONTROL,
            f"subject = '{one}'",
        ),
        "timestamp >= newest 1%": (
            f"timestamp >= timestamp'{cut}'",
            f"timestamp + interval 0 seconds >= timestamp'{cut}'",
            None,
            TIME_CONTROL,
            f"timestamp >= timestamp'{control_cut}'",
        ),
    }

    def load(where: str, fmt: str, stream: str, options: dict[str, str]) -> Any:
        reader = spark.read.format(fmt).option("servers", url).option("stream", stream)
        return reader.options(**options).load().where(where)  # a fresh DataFrame per query

    def timed(
        where: str,
        fmt: str = "jetstream",
        stream: str = STREAM,
        options: dict[str, str] | None = None,
    ) -> tuple[float, int]:
        nonlocal server_seconds
        df = load(where, fmt, stream, options or {})
        at_server = server_cpu(server_pid)
        start = time.perf_counter()
        rows = df.count()
        seconds = time.perf_counter() - start
        server_seconds = server_cpu(server_pid) - at_server
        return seconds, rows

    server_seconds = math.nan

    floor = "sequence >= 0"
    results = {}
    try:
        for name, (pushed, plain, expected, control_stream, control_where) in queries.items():
            # The control is read in as many partitions as the pushed query (a small
            # read would get fewer): the same plan, less the server's walk.
            parts = load(pushed, "jetstream", STREAM, {}).rdd.getNumPartitions()
            control = {"numPartitions": str(parts)}
            timed(pushed)  # warm-up: starts the Python workers
            timed(plain)
            timed(control_where, stream=control_stream, options=control)
            timed(floor, "pushbench_floor")
            best_pushed = best_plain = best_control = best_floor = float("inf")
            server: list[float] = []
            for _ in range(rounds):
                seconds, rows_pushed = timed(pushed)
                best_pushed = min(best_pushed, seconds)
                server.append(server_seconds)
                seconds, rows_plain = timed(plain)
                best_plain = min(best_plain, seconds)
                seconds, rows_control = timed(control_where, stream=control_stream, options=control)
                best_control = min(best_control, seconds)
                best_floor = min(best_floor, timed(floor, "pushbench_floor")[0])
                if (
                    rows_pushed != rows_plain
                    or rows_control != rows_pushed
                    or (expected is not None and rows_pushed != expected)
                ):
                    raise SystemExit(
                        f"{name}: {rows_pushed} rows pushed, {rows_plain} not, "
                        f"{rows_control} in the control"
                    )
            results[name] = (
                rows_pushed,
                parts,
                best_plain,
                best_pushed,
                best_control,
                best_floor,
                server,
            )
    finally:
        spark.stop()
    print(f"\n{count} messages over {subjects} subjects, {master}, best of {rounds} rounds")
    print(
        f"{'query':<24} {'rows':>7} {'parts':>5} {'not pushed':>11} {'pushed':>8}"
        f" {'speed-up':>9} {'control':>8} {'floor':>7} {'server CPU':>12}"
    )
    for name, (rows, parts, plain_s, pushed_s, control_s, floor_s, server) in results.items():
        ratio = plain_s / pushed_s
        print(
            f"{name:<24} {rows:>7} {parts:>5} {plain_s:>10.2f}s {pushed_s:>7.2f}s "
            f"{ratio:>8.1f}x {control_s:>7.2f}s {floor_s:>6.2f}s "
            f"{min(server):>5.2f}-{max(server):.2f}s"
        )
    print("parts: the partitions Spark planned for the pushed query (and the control)")
    print(
        "control: the pushed query over a stream of only the rows it selects "
        "(the server walks nothing else)"
    )
    print(
        "floor: the same count over a Python data source that pushes nothing and yields "
        "its rows at once"
    )
    print("server CPU: nats-server's CPU seconds in each round's pushed query, fewest-most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--storage", default="file", choices=("file", "memory"))
    parser.add_argument("--payload", type=int, default=100, help="bytes per message")
    parser.add_argument("--nats-url", help="an existing nats-server with JetStream")
    parser.add_argument("--server-pid", type=int, help="the --nats-url server's pid, for its CPU")
    add_loop_argument(parser)  # the fill's loop; Spark's workers run their own
    args = parser.parse_args()
    use_loop(args.loop)
    started = datetime.now(timezone.utc)
    if args.nats_url:
        payload = b"x" * args.payload
        cuts = run_async(fill(args.nats_url, args.count, args.subjects, args.storage, payload))
        measure(
            args.nats_url,
            args.count,
            args.subjects,
            cuts,
            args.rounds,
            args.master,
            args.server_pid,
        )
    else:
        with NatsServer() as server:
            payload = b"x" * args.payload
            cuts = run_async(fill(server.url, args.count, args.subjects, args.storage, payload))
            assert server._proc is not None
            pid = server._proc.pid
            measure(server.url, args.count, args.subjects, cuts, args.rounds, args.master, pid)
    print(f"(run took {(datetime.now(timezone.utc) - started).total_seconds():.0f}s)")


if __name__ == "__main__":
    main()
