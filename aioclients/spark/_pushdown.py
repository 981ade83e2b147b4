"""pyspark's pushdown filters as the pure :class:`Predicate` of ``_protocol._pushdown``.

pyspark 4.1+ calls ``DataSourceReader.pushFilters(filters)`` with the AND-ed
conjuncts of a query's ``WHERE`` clause, only when the session's
``spark.sql.python.filterPushdown.enabled`` is true; a reader that defines
``pushFilters`` while it is false is refused for every batch read
(``DATA_SOURCE_PUSHDOWN_DISABLED``). :func:`aioclients.spark.register_data_sources`
turns it on (see there).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from aioclients.spark._protocol._pushdown import Op, Predicate

__all__ = ("CONF", "to_predicate")

#: The session setting without which pyspark never calls ``pushFilters``.
CONF = "spark.sql.python.filterPushdown.enabled"

_BINARY: dict[type[Filter], Op] = {
    EqualTo: Op.EQ,
    GreaterThan: Op.GT,
    GreaterThanOrEqual: Op.GE,
    LessThan: Op.LT,
    LessThanOrEqual: Op.LE,
    StringStartsWith: Op.STARTS_WITH,
}


def to_predicate(f: Filter) -> Predicate | None:
    """``f`` as a predicate on a top-level column, or ``None`` (negations, nested columns...)."""
    attribute = getattr(f, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None
    column = str(attribute[0])
    kind = type(f)
    if kind in _BINARY:
        value = getattr(f, "value", None)
        return None if value is None else Predicate(column, _BINARY[kind], value)
    if kind is EqualNullSafe:
        # Our columns are never null where a predicate is pushed: <=> is =.
        value = getattr(f, "value", None)
        return None if value is None else Predicate(column, Op.EQ, value)
    if kind is In:
        values = getattr(f, "value", None)
        if not isinstance(values, (list, tuple)):
            return None
        return Predicate(column, Op.IN, tuple(values))
    if kind is IsNotNull:
        return Predicate(column, Op.NOT_NULL)
    if kind is IsNull:
        return Predicate(column, Op.IS_NULL)
    return None
