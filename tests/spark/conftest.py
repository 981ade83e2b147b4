"""One local SparkSession for the Spark tests (starting Spark takes seconds).

The classic ``local[2]`` session is made on first use and kept; modules that need
a Spark of their own (``local-cluster``, Spark Connect: one SparkContext per
process) stop it with ``classic_spark.stop()`` and the next test that asks for
``spark`` gets a new one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

# Executors of a local-cluster master connect back to the driver: keep every Spark
# address on loopback (the machine's hostname may resolve elsewhere). Set before
# the JVM starts, so its child processes inherit it.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Python workers must run this interpreter (the one with pyarrow and aioclients).
os.environ["PYSPARK_PYTHON"] = sys.executable


class ClassicSpark:
    """The shared ``local[2]`` session, (re)built on demand."""

    def __init__(self) -> None:
        self.session: Any = None

    def get(self) -> Any:
        if self.session is None:
            from pyspark.sql import SparkSession

            from aioclients.spark import register_data_sources

            session = (
                SparkSession.builder.master("local[2]")
                .appName("aioclients-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.default.parallelism", "2")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.python.worker.reuse", "true")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            session.sparkContext.setLogLevel("ERROR")
            register_data_sources(session)
            self.session = session
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None


@pytest.fixture(scope="session")
def classic_spark() -> Iterator[ClassicSpark]:
    holder = ClassicSpark()
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture
def spark(classic_spark: ClassicSpark) -> Any:
    """``local[2]`` with the UI off and two shuffle partitions, data sources registered."""
    return classic_spark.get()
