"""PySpark data sources for JetStream, Liftbridge and NSQ.

    from aioclients.spark import register_data_sources

    register_data_sources(spark)
    df = (spark.read.format("jetstream")
          .option("servers", "nats://127.0.0.1:4222").option("stream", "ORDERS").load())

Needs the ``spark`` extra (``pip install "aioclients[spark]"``: pyspark with
pyarrow, pandas < 3). Formats and options: docs/spark.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"aioclients.spark needs pyspark and pyarrow ({exc}); "
        'install them with: pip install "aioclients[spark]"'
    ) from exc

from aioclients._errors import name_public_module as _name_public_module
from aioclients.spark._errors import (
    DataLossError,
    DataSourceOptionError,
    DataSourceUnavailableError,
    PublishFailedError,
)
from aioclients.spark._jetstream import JETSTREAM_SCHEMA, JetStreamDataSource
from aioclients.spark._pushdown import CONF as PUSHDOWN_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = (
    "JETSTREAM_SCHEMA",
    "DataLossError",
    "DataSourceOptionError",
    "DataSourceUnavailableError",
    "JetStreamDataSource",
    "PublishFailedError",
    "register_data_sources",
)

log = logging.getLogger("aioclients.spark")

#: The formats ``register_data_sources`` registers.
FORMATS = ("jetstream", "liftbridge", "nsq")


def _default_parallelism(spark: SparkSession) -> int:
    try:
        value = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        return JetStreamDataSource.default_partitions
    return max(1, value)


def register_data_sources(spark: SparkSession, *, filter_pushdown: bool = True) -> None:
    """Register the ``jetstream``, ``liftbridge`` and ``nsq`` formats with ``spark``.

    ``jetstream`` and ``liftbridge`` read and write; ``nsq`` writes and reads as a
    stream (a batch read fails with ``DataSourceUnavailableError``, saying why: NSQ
    keeps no log).

    The ``jetstream`` source's default ``numPartitions`` becomes the session's
    default parallelism.

    Batch reads of ``jetstream`` and ``liftbridge`` take filter pushdown. pyspark
    calls a reader's ``pushFilters`` only when the session's
    ``spark.sql.python.filterPushdown.enabled`` is true (false by default) and
    refuses, for every batch read, a reader that defines it while it is false; so
    this sets it to true (and logs that it did, when it was not). With
    ``filter_pushdown=False`` the setting is left alone and the readers push
    nothing: every filter runs in Spark, as before pushdown existed.

    Args:
        spark: the active ``SparkSession`` (classic or Spark Connect).
        filter_pushdown: push filters down to the servers (see above).
    """
    # Imported here, not with the package: a Python worker that unpickles a
    # jetstream reader imports this package, and the liftbridge (grpc) and nsq
    # (aiohttp) modules would add about half a second to each fresh worker.
    from aioclients.spark import _liftbridge, _nsq

    parallelism = _default_parallelism(spark)
    if filter_pushdown:
        _enable_filter_pushdown(spark)
    # Subclasses made here (so pickled by value, with their class attributes) carry
    # the session's parallelism and the pushdown choice to the planner processes.
    module = __name__ + "._session"
    jetstream_source = type(
        "JetStreamDataSource",
        (JetStreamDataSource,),
        {
            "default_partitions": parallelism,
            "filter_pushdown": filter_pushdown,
            "__module__": module,
        },
    )
    liftbridge_source = type(
        "LiftbridgeDataSource",
        (_liftbridge.LiftbridgeDataSource,),
        {"filter_pushdown": filter_pushdown, "__module__": module},
    )
    for source in (jetstream_source, liftbridge_source, _nsq.data_source()):
        spark.dataSource.register(source)


def _enable_filter_pushdown(spark: SparkSession) -> None:
    current = spark.conf.get(PUSHDOWN_CONF, None)
    if str(current).lower() != "true":
        spark.conf.set(PUSHDOWN_CONF, "true")
        log.info(
            "set %s=true (it was %s) so that the jetstream and liftbridge batch readers "
            "can push filters down; register_data_sources(spark, filter_pushdown=False) "
            "leaves it alone",
            PUSHDOWN_CONF,
            current,
        )


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles.
_name_public_module(__name__, globals())
