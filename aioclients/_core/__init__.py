"""Shared pure helpers: no I/O, no clock, no global randomness.

Time is passed in as ``now`` and chance as an injected ``random.Random``, so
that every protocol core built on these helpers is deterministic under test.
"""

from aioclients._core._backoff import Backoff
from aioclients._core._checks import check_float, check_int
from aioclients._core._deadline import Deadline
from aioclients._core._redact import redact_text, redact_url

__all__ = ("Backoff", "Deadline", "check_float", "check_int", "redact_text", "redact_url")
