"""Every format over Spark Connect (``SparkSession.builder.remote("local[2]")``, the
a local Spark Connect server. One session for the module; the shared ``local[2]``
session is stopped meanwhile (one SparkContext per process).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "pyspark.sql.connect.session",
    reason="Spark Connect needs pyspark[connect] (grpcio-status, googleapis-common-protos, "
    "zstandard): pip install 'aioclients[spark]'",
    exc_type=ImportError,
)

from _everywhere import check_jetstream, check_liftbridge, check_nsq

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def connect_spark(classic_spark: Any) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    classic_spark.stop()  # the local Connect server makes its own SparkContext
    session = (
        SparkSession.builder.remote("local[2]")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register_data_sources(session)
    try:
        yield session
    finally:
        session.stop()


def test_the_session_is_a_spark_connect_session(connect_spark: Any) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(connect_spark, ConnectSession)


async def test_jetstream(
    connect_spark: Any, nats_server: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_jetstream(connect_spark, nats_server.url, unique_name, tmp_path)


async def test_liftbridge(
    connect_spark: Any, liftbridge_cluster: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_liftbridge(connect_spark, list(liftbridge_cluster.addresses), unique_name, tmp_path)


async def test_nsq(connect_spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path) -> None:
    await check_nsq(connect_spark, await nsqd_factory(), unique_name[-60:], tmp_path)
