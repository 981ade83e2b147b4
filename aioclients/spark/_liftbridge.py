"""The ``liftbridge`` Spark data source (to be filled in once ``aioclients.liftbridge`` lands).

Contract (API.md "Spark"): options ``brokers``, ``stream``, ``partitions``,
``startingOffsets``, ``endingOffsets``, ``maxMessagesPerTrigger``; columns
``stream string, partition int, offset long, key binary, value binary,
timestamp timestamp, headers map<string,binary>``. ``data_source()`` returns
the class that ``register_data_sources`` registers.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from aioclients.spark._unavailable import unavailable_source

__all__ = ("data_source",)

FORMAT = "liftbridge"


def data_source() -> type[DataSource]:
    """The data source class for the ``liftbridge`` format."""
    return unavailable_source(FORMAT, "it needs aioclients.liftbridge, which is not built yet")
