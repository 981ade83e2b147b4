"""Filter pushdown of the jetstream and liftbridge batch readers on the local[2] session:
every pushed shape gives the rows of the same query written so that Spark cannot push
it, and ``explain`` reports what was pushed. The same checks run on local-cluster
(test_local_cluster.py) and on a standalone cluster (test_standalone_cluster.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from _everywhere import (
    check_jetstream_pushdown,
    check_liftbridge_pushdown,
    off_loop,
    pushed_filters,
)

from aioclients import jetstream
from aioclients.spark._pushdown import CONF

pytestmark = pytest.mark.spark


async def test_jetstream_shapes(spark: Any, nats_server: Any, unique_name: str) -> None:
    await check_jetstream_pushdown(spark, nats_server.url, unique_name)


async def test_liftbridge_shapes(spark: Any, liftbridge_cluster: Any, unique_name: str) -> None:
    await check_liftbridge_pushdown(spark, list(liftbridge_cluster.addresses), unique_name)
