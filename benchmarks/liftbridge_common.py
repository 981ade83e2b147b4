"""Shared parts of the Liftbridge benchmarks: an emulated cluster in its own process,
and gufo-liftbridge runs in their own processes.

The emulator (``aioclients.testing.LiftbridgeCluster`` on a nats-server) runs in
a child process so that it does not share a CPU with the client being measured.
gufo-liftbridge runs in a child process too, so each client has a process to itself.

    python benchmarks/liftbridge_common.py serve   # prints {"addresses": [...]}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAYLOAD = b"x" * 100


def gufo_available() -> bool:
    try:
        import gufo.liftbridge.client  # noqa: F401
    except ImportError:
        return False
    return True


async def _serve(brokers: int) -> None:
    from aioclients.testing import LiftbridgeCluster, NatsServer

    with NatsServer(jetstream=False) as nats:
        async with LiftbridgeCluster(brokers, nats_url=nats.url) as cluster:
            print(json.dumps({"addresses": cluster.addresses}), flush=True)
            # Run until the parent closes our stdin.
            await asyncio.to_thread(sys.stdin.read)


@contextlib.contextmanager
def emulated_cluster(addresses: list[str] | None, brokers: int = 1) -> Iterator[list[str]]:
    """The given addresses, or an emulated cluster started in a child process."""
    if addresses:
        yield addresses
        return
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "liftbridge_common.py"), "serve", str(brokers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the emulated cluster did not start")
        yield list(json.loads(line)["addresses"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measured(n: int, thunk: Callable[[], float]) -> tuple[float, float]:
    """Run ``thunk`` (returns msgs/s); also return this process's CPU time per message (us)."""
    cpu = time.process_time()
    rate = thunk()
    return rate, (time.process_time() - cpu) / n * 1e6


def run_worker(script: str, *args: str) -> tuple[float, float]:
    """Run ``script --worker args...`` in a child process; it prints "rate cpu_us_per_msg"."""
    out = subprocess.run(
        [sys.executable, str(HERE / script), "--worker", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    rate, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu)


Result = tuple[float, float]  # msgs/s, client CPU us per message


def report(rows: list[tuple[str, Result, Result | None]]) -> None:
    """Print msgs/s and client CPU per message, ours and gufo's, and the throughput ratio.

    The CPU column is the measuring process's own CPU time per message (the cluster
    runs elsewhere): on a busy machine it is steadier than msgs/s.
    """
    print(
        f"{'scenario':<30}{'aioclients':>12}{'gufo':>10}{'ratio':>8}"
        f"{'CPU us/msg ours':>17}{'gufo':>7}"
    )
    for name, (ours, ours_cpu), theirs in rows:
        t = f"{theirs[0]:,.0f}" if theirs else "-"
        r = f"{ours / theirs[0]:.2f}x" if theirs else "-"
        tc = f"{theirs[1]:.0f}" if theirs else "-"
        print(f"{name:<30}{ours:>12,.0f}{t:>10}{r:>8}{ours_cpu:>17.0f}{tc:>7}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        asyncio.run(_serve(int(sys.argv[2]) if len(sys.argv) > 2 else 1))
    else:
        sys.exit(__doc__)
