"""``--loop asyncio|uvloop`` for every benchmark: the one place that picks the event loop.

    parser = argparse.ArgumentParser(...)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)        # prints the loop; worker processes inherit it
    run_async(main(args))      # instead of asyncio.run(main(args))

The choice travels to the benchmark's worker processes (a peer client run in a
process of its own) through ``$AIOCLIENTS_BENCH_LOOP``, so every client measured
in one run is on the same loop. Emulated servers started by the benchmarks stay
on asyncio's default loop: they are the fixed opponent, not what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import platform
from collections.abc import Coroutine
from typing import Any, TypeVar

LOOPS = ("asyncio", "uvloop")
LOOP_ENV = "AIOCLIENTS_BENCH_LOOP"

T = TypeVar("T")


def add_loop_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default=os.environ.get(LOOP_ENV) or "asyncio",
        help="event loop for the clients measured (default: asyncio's own)",
    )


def _check(name: str) -> None:
    if name not in LOOPS:
        raise SystemExit(f"--loop must be one of {', '.join(LOOPS)}, not {name!r}")
    if name == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise SystemExit(
                "--loop uvloop needs uvloop: pip install 'aioclients[uvloop]'"
            ) from None


def loop_label(name: str) -> str:
    if name == "uvloop":
        return f"uvloop {importlib.metadata.version('uvloop')}"
    return f"asyncio (CPython {platform.python_version()})"


def use_loop(name: str) -> None:
    """Run every later :func:`run_async` here, and in worker processes, on ``name``."""
    _check(name)  # fails now, clearly, when uvloop is missing
    os.environ[LOOP_ENV] = name
    print(f"event loop: {loop_label(name)}", flush=True)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on the loop chosen with :func:`use_loop` (or the env)."""
    name = os.environ.get(LOOP_ENV) or "asyncio"
    _check(name)
    if name == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)
