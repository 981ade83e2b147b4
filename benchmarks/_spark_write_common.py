"""Shared parts of the Spark writer benchmarks: the session, warm writes, the report.

Each benchmark measures a writer side by side with its reference (one asyncio
loop of ours publishing the same rows) in one run, for 1, 2 and 4 partitions:

- the input DataFrame is cached and counted first (only the write is measured);
- a warm-up write runs before the measured one, so that Spark's Python workers
  are started (``spark.python.worker.reuse``) and the first write does not pay
  for them;
- the reference runs right before each measured write (same machine state);
  each is repeated ``--rounds`` times; every round is printed, then the best
  of each side and their ratio;
- the floor: the same DataFrame written to a Python data source whose writer
  only iterates its Arrow batches (what any pyspark Python writer pays: the
  job, the tasks, the JVM-to-Python transfer, the commit), best of ``rounds``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _null_source() -> type:
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class NullWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NullSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "aioclients_bench_null"

        def writer(self, schema: Any, overwrite: bool) -> NullWriter:
            return NullWriter()

    return NullSource


def spark_session(master: str, app: str) -> Any:
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    spark.dataSource.register(_null_source())
    return spark


def null_write(df: Any) -> None:
    df.write.format("aioclients_bench_null").mode("append").save()


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def measure(
    *,
    title: str,
    count: int,
    partitions: list[int],
    rounds: int,
    make_df: Callable[[int], Any],
    reset: Callable[[], None],
    write: Callable[[Any], None],
    check: Callable[[], None],
    reference: Callable[[], float],
    reference_name: str,
    extra: Callable[[], str] | None = None,
) -> None:
    """Print rows/s of ``write`` against ``reference()`` (msgs/s), per partition count."""
    print(f"\n{title}: {count} rows per write, best of {rounds} round(s)")
    print(
        f"  {'partitions':>10} {'writer rows/s':>14} {reference_name + ' msgs/s':>28} {'ratio':>7}"
    )
    for parts in partitions:
        df = make_df(parts).cache()
        df.count()
        reset()
        write(df)  # warm-up: Python workers started, the plan compiled
        best_writer = best_reference = 0.0
        notes = ""
        for round_ in range(rounds):
            reset()
            reference_rate = reference()
            best_reference = max(best_reference, reference_rate)
            reset()
            elapsed = timed(lambda df=df: write(df))
            check()
            best_writer = max(best_writer, count / elapsed)
            if extra is not None:
                notes = extra()
            print(
                f"  {parts:>10} {count / elapsed:>14,.0f} {reference_rate:>28,.0f} "
                f"{count / elapsed / reference_rate:>6.2f}x  (round {round_ + 1})"
                f"{'  ' + notes if notes else ''}",
                flush=True,
            )
        null_write(df)
        floor = max(count / timed(lambda df=df: null_write(df)) for _ in range(rounds))
        df.unpersist()
        ratio = best_writer / best_reference if best_reference else float("nan")
        print(
            f"  {parts:>10} {best_writer:>14,.0f} {best_reference:>28,.0f} {ratio:>6.2f}x  (best)"
            f"  floor: an empty Python writer {floor:,.0f} rows/s",
            flush=True,
        )
