"""Every format on a ``local-cluster[2,1,1024]`` master: two executor JVMs with their
own Python workers, as on a real cluster (nothing is shared with the driver's
Python process but what Spark pickles). One session for the module (it takes
tens of seconds to start); the shared ``local[2]`` session is stopped meanwhile.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _everywhere import (
    check_jetstream,
    check_jetstream_pushdown,
    check_liftbridge,
    check_liftbridge_pushdown,
    check_nsq,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster_spark(classic_spark: Any) -> Iterator[Any]:
    import pyspark
    from pyspark.sql import SparkSession

    from aioclients.spark import register_data_sources

    classic_spark.stop()  # one SparkContext per process
    session = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("aioclients-tests-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        # The executors' Python workers import this checkout's aioclients.
        .config("spark.executorEnv.PYTHONPATH", str(REPO))
        .getOrCreate()
    )
    app = session.sparkContext.applicationId
    session.sparkContext.setLogLevel("ERROR")
    register_data_sources(session)
    try:
        yield session
    finally:
        session.stop()
        # The local cluster's worker keeps executor logs under SPARK_HOME/work.
        work = Path(pyspark.__file__).parent / "work"
        shutil.rmtree(work / app, ignore_errors=True)
        if work.is_dir() and not any(work.iterdir()):
            work.rmdir()


def test_the_session_has_two_executors(cluster_spark: Any) -> None:
    assert cluster_spark.sparkContext.master == "local-cluster[2,1,1024]"
    pids = (
        cluster_spark.sparkContext.parallelize(range(8), 8)
        .map(lambda _: __import__("os").getpid())
        .distinct()
        .collect()
    )
    assert len(pids) >= 2, "tasks ran in separate executor processes"


async def test_jetstream(
    cluster_spark: Any, nats_server: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_jetstream(cluster_spark, nats_server.url, unique_name, tmp_path)


async def test_liftbridge(
    cluster_spark: Any, liftbridge_cluster: Any, unique_name: str, tmp_path: Path
) -> None:
    await check_liftbridge(cluster_spark, list(liftbridge_cluster.addresses), unique_name, tmp_path)


async def test_nsq(cluster_spark: Any, nsqd_factory: Any, unique_name: str, tmp_path: Path) -> None:
    await check_nsq(cluster_spark, await nsqd_factory(), unique_name[-60:], tmp_path)


@pytest.mark.parametrize("partitions", [1, 3])
async def test_jetstream_pushdown(
    cluster_spark: Any, nats_server: Any, unique_name: str, partitions: int
) -> None:
    await check_jetstream_pushdown(cluster_spark, nats_server.url, unique_name, partitions)


async def test_liftbridge_pushdown(
    cluster_spark: Any, liftbridge_cluster: Any, unique_name: str
) -> None:
    await check_liftbridge_pushdown(cluster_spark, list(liftbridge_cluster.addresses), unique_name)
