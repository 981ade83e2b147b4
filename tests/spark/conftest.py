"""One local SparkSession for every Spark test (starting Spark takes seconds)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """``local[2]`` with the UI off and two shuffle partitions, data sources registered."""
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    # Python workers must run this interpreter (the one with pyarrow and aioclients).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aioclients-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register_data_sources(session)
    try:
        yield session
    finally:
        session.stop()
