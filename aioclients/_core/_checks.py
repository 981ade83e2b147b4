"""Argument checks shared by every protocol package: bad input fails at the call
with an ``InvalidArgumentError`` that names the argument, never deeper inside."""

from __future__ import annotations

import math

from aioclients._errors import InvalidArgumentError

__all__ = ("check_float", "check_int")


def _show(value: object) -> str:
    """A short repr for an error message (a huge string must not flood it)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` if it is an int (not a bool) >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an int >= {minimum}, got {_show(value)}")
    return value


def check_float(
    name: str, value: object, *, minimum: float = 0.0, inclusive: bool = False
) -> float:
    """Return ``value`` as a float if it is a finite int or float (not a bool) above
    ``minimum`` (or equal to it when ``inclusive``)."""
    number = float("nan")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range
            pass
    if not math.isfinite(number) or number < minimum or (number == minimum and not inclusive):
        bound = f"{'>=' if inclusive else '>'} {minimum:g}"
        raise InvalidArgumentError(f"{name} must be a finite number {bound}, got {_show(value)}")
    return number
