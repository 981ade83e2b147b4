"""Data source options: Spark hands every option over as a string (keys lower-cased).

Each reader turns what it needs into typed values here, once, on the driver;
a bad or missing option fails with :class:`DataSourceOptionError` naming the
option and showing a value that works.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from aioclients._core import redact_url
from aioclients.spark._errors import DataSourceOptionError

__all__ = ("OptionReader",)


class OptionReader:
    """Typed access to one data source's options.

    Args:
        options: the options as Spark passes them (string values).
        fmt: the format name, for messages (``"jetstream"``).
    """

    def __init__(self, options: Mapping[str, str], fmt: str) -> None:
        # Spark lower-cases option names; so do we, for direct callers.
        self._options = {str(k).lower(): v for k, v in options.items()}
        self._fmt = fmt

    def _example(self, name: str, example: str) -> str:
        return f'.option("{name}", "{example}")'

    def get(self, name: str) -> str | None:
        value = self._options.get(name.lower())
        if value is None:
            return None
        value = str(value).strip()
        return value or None

    def required(self, name: str, example: str, what: str) -> str:
        value = self.get(name)
        if value is None:
            raise DataSourceOptionError(
                f"the {self._fmt} data source needs the option {name!r} ({what}); "
                f"add {self._example(name, example)}"
            )
        return value

    def servers(self, name: str = "servers", example: str = "nats://127.0.0.1:4222") -> list[str]:
        """A comma-separated list of server URLs."""
        raw = self.required(name, example, "comma-separated server URLs")
        urls = [u.strip() for u in raw.split(",") if u.strip()]
        for url in urls:
            scheme, sep, rest = url.partition("://")
            if not sep:
                url = f"nats://{url}"
                scheme, _, rest = url.partition("://")
            if scheme not in ("nats", "tls") or not rest:
                raise DataSourceOptionError(
                    f"option {name!r}: {redact_url(url)!r} is not a NATS URL; "
                    f"use {self._example(name, example)}"
                )
        return [u if "://" in u else f"nats://{u}" for u in urls]

    def integer(
        self, name: str, *, default: int | None, minimum: int, example: str = "1000"
    ) -> int | None:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise DataSourceOptionError(
                f"option {name!r} must be an integer >= {minimum}, got {value!r}; "
                f"e.g. {self._example(name, example)}"
            )
        return number

    def seconds(self, name: str, *, default: float) -> float:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise DataSourceOptionError(
                f"option {name!r} must be a number of seconds > 0, got {value!r}; "
                f"e.g. {self._example(name, '30')}"
            )
        return number

    def sequence(self, name: str, *, words: tuple[str, ...] = ()) -> int | str | None:
        """A stream sequence (an integer >= 1), or one of ``words`` (e.g. ``earliest``)."""
        value = self.get(name)
        if value is None:
            return None
        if value.lower() in words:
            return value.lower()
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            choices = " or ".join([*(repr(w) for w in words), "a sequence >= 1"])
            raise DataSourceOptionError(
                f"option {name!r} must be {choices}, got {value!r}; e.g. {self._example(name, '1')}"
            )
        return number

    def boolean(self, name: str, *, default: bool) -> bool:
        """``true`` or ``false`` (any case)."""
        value = self.get(name)
        if value is None:
            return default
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise DataSourceOptionError(
            f"option {name!r} must be 'true' or 'false', got {value!r}; "
            f"e.g. {self._example(name, 'false')}"
        )

    def unknown(self, known: set[str]) -> list[str]:
        """Option names outside ``known`` (lower-cased), for a warning or an error."""
        lowered = {k.lower() for k in known}
        return sorted(k for k in self._options if k not in lowered)
