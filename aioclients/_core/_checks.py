"""Argument checks shared by every protocol package: bad input fails at the call
with an ``InvalidArgumentError`` that names the argument, never deeper inside."""

from __future__ import annotations

from aioclients._errors import InvalidArgumentError

__all__ = ("check_int",)


def check_int(name: str, value: object, *, minimum: int) -> int:
    """Return ``value`` if it is an int (not a bool) >= ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value
