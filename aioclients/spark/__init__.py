"""PySpark data sources for JetStream, Liftbridge and NSQ.

    from aioclients.spark import register_data_sources

    register_data_sources(spark)
    df = (spark.read.format("jetstream")
          .option("servers", "nats://127.0.0.1:4222").option("stream", "ORDERS").load())

Needs the ``spark`` extra (``pip install "aioclients[spark]"``: pyspark with
pyarrow, pandas < 3). Formats and options: docs/spark.md.
"""

from __future__ import annotations

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
from aioclients.spark import _liftbridge, _nsq
from aioclients.spark._errors import (
    DataLossError,
    DataSourceOptionError,
    DataSourceUnavailableError,
    PublishFailedError,
)
from aioclients.spark._jetstream import JETSTREAM_SCHEMA, JetStreamDataSource

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

#: The formats ``register_data_sources`` registers.
FORMATS = ("jetstream", "liftbridge", "nsq")


def _default_parallelism(spark: SparkSession) -> int:
    try:
        value = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        return JetStreamDataSource.default_partitions
    return max(1, value)


def register_data_sources(spark: SparkSession) -> None:
    """Register the ``jetstream``, ``liftbridge`` and ``nsq`` formats with ``spark``.

    ``jetstream`` and ``liftbridge`` read and write; ``nsq`` writes and reads as a
    stream (a batch read fails with ``DataSourceUnavailableError``, saying why: NSQ
    keeps no log).

    The ``jetstream`` source's default ``numPartitions`` becomes the session's
    default parallelism.

    Args:
        spark: the active ``SparkSession``.
    """
    parallelism = _default_parallelism(spark)
    # A subclass made here (so pickled by value, with its class attribute) carries
    # the session's parallelism to the planner processes.
    jetstream_source = type(
        "JetStreamDataSource",
        (JetStreamDataSource,),
        {"default_partitions": parallelism, "__module__": __name__ + "._session"},
    )
    for source in (jetstream_source, _liftbridge.data_source(), _nsq.data_source()):
        spark.dataSource.register(source)


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles.
_name_public_module(__name__, globals())
