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
import math
import os
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


async def _serve(brokers: int, advertise: list[str]) -> None:
    from aioclients.testing import LiftbridgeCluster, NatsServer

    with NatsServer(jetstream=False) as nats:
        async with LiftbridgeCluster(brokers, nats_url=nats.url) as cluster:
            # Brokers may give another address as theirs (a proxy in front of them).
            for index, address in enumerate(advertise):
                cluster.advertise(index, address)
            print(json.dumps({"addresses": cluster.addresses}), flush=True)
            # Run until the parent closes our stdin.
            await asyncio.to_thread(sys.stdin.read)


_EMULATOR_PID: int | None = None  # the emulator's process, while one runs


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used so far (None: not on Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


def emulator_cpu() -> float | None:
    """CPU seconds the emulator process has used so far (None: not ours, or not Linux).

    Read from /proc; it leaves out the nats-server, which is a process of its own.
    """
    if _EMULATOR_PID is None:
        return None
    return process_cpu(_EMULATOR_PID)


def stop_child(proc: subprocess.Popen[str]) -> None:
    """End a child that runs until its stdin closes (killed after 30 s)."""
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def emulated_cluster(
    addresses: list[str] | None, brokers: int = 1, advertise: list[str] = ()
) -> Iterator[list[str]]:
    """The given addresses, or an emulated cluster started in a child process (whose
    brokers give ``advertise[i]`` as their address in the metadata, where given)."""
    global _EMULATOR_PID
    if addresses:
        yield addresses
        return
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "liftbridge_common.py"), "serve", str(brokers), *advertise],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the emulated cluster did not start")
        _EMULATOR_PID = proc.pid
        yield list(json.loads(line)["addresses"])
    finally:
        _EMULATOR_PID = None
        stop_child(proc)


Result = tuple[float, float, float]  # msgs/s, client and emulator CPU us per message


def measured(n: int, thunk: Callable[[], float]) -> tuple[float, float]:
    """Run ``thunk`` (returns msgs/s); also return this process's CPU time per message (us)."""
    cpu = time.process_time()
    rate = thunk()
    return rate, (time.process_time() - cpu) / n * 1e6


def with_emulator_cpu(n: int, thunk: Callable[[], tuple[float, float]]) -> Result:
    """Run ``thunk`` (returns msgs/s and client CPU us/msg); add the emulator's CPU us/msg.

    The emulator's figure is nan when it runs elsewhere (--addresses).
    """
    before = emulator_cpu()
    rate, cpu = thunk()
    after = emulator_cpu()
    emu = (after - before) / n * 1e6 if before is not None and after is not None else math.nan
    return rate, cpu, emu


def best(results: dict[str, Result], key: str, result: Result) -> None:
    """Keep the round with the highest msgs/s."""
    if result[0] > results.get(key, (0.0, 0.0, 0.0))[0]:
        results[key] = result


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


def report(rows: list[tuple[str, Result, Result | None]]) -> None:
    """Print msgs/s and CPU per message, ours and gufo's, and the throughput ratio.

    "client CPU" is the measuring process's own CPU time per message; "emulator CPU"
    is the emulated cluster's process during the same run (nats-server not counted).
    On a busy machine they are steadier than msgs/s, and they show which side is
    the bottleneck.
    """
    print(
        f"{'scenario':<30}{'aioclients':>11}{'gufo':>8}{'ratio':>7}"
        f"{'client CPU us/msg':>19}{'gufo':>6}{'emulator CPU us/msg':>21}{'gufo':>6}"
    )
    for name, (ours, ours_cpu, ours_emu), theirs in rows:
        t = f"{theirs[0]:,.0f}" if theirs else "-"
        r = f"{ours / theirs[0]:.2f}x" if theirs else "-"
        tc = f"{theirs[1]:.0f}" if theirs else "-"
        te = f"{theirs[2]:.0f}" if theirs else "-"
        print(
            f"{name:<30}{ours:>11,.0f}{t:>8}{r:>7}{ours_cpu:>19.0f}{tc:>6}{ours_emu:>21.0f}{te:>6}"
        )


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        asyncio.run(_serve(int(sys.argv[2]) if len(sys.argv) > 2 else 1, sys.argv[3:]))
    else:
        sys.exit(__doc__)
