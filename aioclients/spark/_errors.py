"""Errors of the Spark connectors (no pyspark import, so the pure parts can use them)."""

from __future__ import annotations

from aioclients._errors import AioClientsError, InvalidArgumentError

__all__ = (
    "DataLossError",
    "DataSourceOptionError",
    "DataSourceUnavailableError",
    "PublishFailedError",
)


class DataSourceOptionError(InvalidArgumentError):
    """A data source option is missing or has a value that cannot be used.

    The message names the option and shows a value that works.
    """


class DataSourceUnavailableError(AioClientsError):
    """The format is registered but its client is not part of this installation yet."""


class PublishFailedError(AioClientsError):
    """A Spark write task could not publish every row: the task fails, nothing is dropped."""

    retriable = True


class DataLossError(AioClientsError):
    """Messages a read should have covered are no longer kept by the server.

    Retention, a purge or a deletion removed them (or the stream was deleted and
    recreated) before Spark read them. The message names the lost range; set
    ``failOnDataLoss`` to ``false`` to go on from the first message still kept.
    """
