"""The ``nsq`` Spark data source (to be filled in once ``aioclients.nsq`` lands).

Contract (API.md "Spark"): writer options ``nsqd``, ``topic``; a ``data`` or
``body`` column; MPUB batches. ``data_source()`` returns the class that
``register_data_sources`` registers.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from aioclients.spark._unavailable import unavailable_source

__all__ = ("data_source",)

FORMAT = "nsq"


def data_source() -> type[DataSource]:
    """The data source class for the ``nsq`` format."""
    return unavailable_source(FORMAT, "it needs aioclients.nsq, which is not built yet")
