"""Data loss checks of the streaming and batch readers (pure: no pyspark, no I/O).

A read that should start at ``wanted`` (a JetStream sequence or a Liftbridge
offset) on a stream or partition whose oldest kept message is ``first_kept``
has lost ``wanted .. first_kept - 1``: retention, a purge or a deletion removed
them before Spark read them. As Spark's Kafka source does, the query then fails
(``failOnDataLoss``, default true) with :class:`DataLossError` naming the range
and the option, or, with ``failOnDataLoss=false``, logs a warning and goes on
from the first message kept.
"""

from __future__ import annotations

import logging

from aioclients.spark._errors import DataLossError

__all__ = ("OPTION", "lost_range", "report_data_loss")

#: The option's name, as users write it.
OPTION = "failOnDataLoss"


def lost_range(
    wanted: int, first_kept: int, last_wanted: int | None = None
) -> tuple[int, int] | None:
    """The range ``wanted .. first_kept - 1`` (capped at ``last_wanted``), or None when
    nothing the read needs is gone."""
    if first_kept <= wanted:
        return None
    last = first_kept - 1 if last_wanted is None else min(first_kept - 1, last_wanted)
    if last < wanted:
        return None
    return (wanted, last)


def report_data_loss(what: str, *, fail: bool, resume: str, log: logging.Logger) -> None:
    """Fail with :class:`DataLossError` (``fail``) or log a warning, about ``what``.

    Args:
        what: which messages are lost and why, e.g. ``"sequences 801..4000 of
            stream 'ORDERS' are no longer kept (retention, purge or deletion)"``.
        fail: the ``failOnDataLoss`` option.
        resume: where the read goes on with ``failOnDataLoss=false``.
        log: the source's logger.

    Raises:
        DataLossError: when ``fail``.
    """
    if fail:
        raise DataLossError(
            f"data loss: {what}. The query stops so that this is not missed; to go on "
            f'from {resume} instead, set .option("{OPTION}", "false") (or restore '
            "the messages, or give the stream a longer retention)"
        )
    log.warning("data loss: %s; going on from %s (%s is false)", what, resume, OPTION)
