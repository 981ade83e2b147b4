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
from collections.abc import Iterator
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


def run_worker(script: str, *args: str) -> float:
    """Run ``script --worker args...`` in a child process; it prints a rate (msgs/s)."""
    out = subprocess.run(
        [sys.executable, str(HERE / script), "--worker", *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return float(out.stdout.strip().splitlines()[-1])


def report(rows: list[tuple[str, float, float | None]]) -> None:
    """Print ``scenario, ours, theirs, ratio`` rows."""
    print(f"{'scenario':<34}{'aioclients':>14}{'gufo':>14}{'ratio':>9}")
    for name, ours, theirs in rows:
        t = f"{theirs:,.0f}" if theirs else "-"
        r = f"{ours / theirs:.2f}x" if theirs else "-"
        print(f"{name:<34}{ours:>14,.0f}{t:>14}{r:>9}")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        asyncio.run(_serve(int(sys.argv[2]) if len(sys.argv) > 2 else 1))
    else:
        sys.exit(__doc__)
