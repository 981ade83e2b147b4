"""A registered format whose client is not part of this installation yet.

``register_data_sources`` registers every format it documents, so that
``spark.read.format("nsq")`` fails with a message saying what is missing
instead of Spark's generic "data source not found".
"""

from __future__ import annotations

from typing import Any, NoReturn

from pyspark.sql.datasource import DataSource

from aioclients.spark._errors import DataSourceUnavailableError

__all__ = ("unavailable_source",)


def unavailable_source(fmt: str, reason: str) -> type[DataSource]:
    """A data source class named ``fmt`` whose every use raises ``DataSourceUnavailableError``."""

    def fail(*_args: Any) -> NoReturn:
        raise DataSourceUnavailableError(
            f"the {fmt!r} data source is not available in this installation: {reason}"
        )

    def name(cls: type[DataSource]) -> str:
        return fmt

    return type(
        f"Unavailable{fmt.capitalize()}DataSource",
        (DataSource,),
        {
            "name": classmethod(name),
            "schema": fail,
            "reader": fail,
            "streamReader": fail,
            "writer": fail,
            "streamWriter": fail,
            "__doc__": f"Placeholder for the {fmt!r} format: every use raises.",
        },
    )
