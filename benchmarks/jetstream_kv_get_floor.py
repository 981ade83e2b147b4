"""What one KV ``get`` round trip costs in Python on this machine, side by side in one run.

Fills a bucket (file storage, history 1) with --keys keys of 100-byte values, then
gets random existing keys one after the other, each as a Direct Get in the
subject-appended form (``$JS.API.DIRECT.GET.KV_<b>.$KV.<b>.<key>``) with:

- ``floor``: a bare ``asyncio.Protocol`` on its own socket: one ``PUB`` per get,
  the ``HMSG`` reply resolves a future straight from ``data_received`` (no
  parsing beyond finding the frame's end). Nothing a client can do is cheaper.
- ``nats-py request``: nats-py's ``nc.request`` on the same subject (no KV decoding).
- ``aioclients kv.get`` and ``nats-py kv.get``: the full calls.

Each runs --rounds times, interleaved; every round is printed, then the best, and
the CPU per get of this process (in Python and in the kernel) and of the server (ours, or the
--url server's with --server-pid), the median of the rounds.

    python benchmarks/jetstream_kv_get_floor.py --keys 100000 --gets 20000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import nats
from _floor import FloorProtocol, open_floor, server_cpu
from _loop import add_loop_argument, run_async, use_loop

# The bucket, its filling and the two kv.get loops are jetstream_kv.py's, so both
# scripts measure the same gets.
from jetstream_kv import BUCKET, fill, ours_get, sample, theirs_get

from aioclients.testing import NatsServer

SUBJECT = f"$JS.API.DIRECT.GET.KV_{BUCKET}.$KV.{BUCKET}."


class _FloorProtocol(FloorProtocol):
    """One outstanding request at a time; its reply resolves ``waiter``."""

    def __init__(self) -> None:
        super().__init__()
        self.waiter: asyncio.Future[bytes] | None = None

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        while True:
            end = buf.find(b"\r\n")
            if end < 0:
                break
            line = buf[:end]
            if line.startswith(b"HMSG") or line.startswith(b"MSG"):
                total = int(line.rsplit(b" ", 1)[1])
                if len(buf) < end + 2 + total + 2:
                    break
                body = buf[end + 2 : end + 2 + total]
                buf = buf[end + 2 + total + 2 :]
                waiter = self.waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(body)
                continue
            buf = buf[end + 2 :]
            self.control(line)
        self.buffer = buf


async def floor_get(url: str, names: list[str]) -> float:
    loop = asyncio.get_running_loop()
    transport, proto = await open_floor(url, _FloorProtocol)
    subjects = [(SUBJECT + key).encode() for key in names]
    start = time.perf_counter()
    for i, subject in enumerate(subjects):
        waiter = loop.create_future()
        proto.waiter = waiter
        transport.write(b"PUB %s _FLOOR.%d 0\r\n\r\n" % (subject, i))
        body = await waiter
        assert b"Nats-Sequence" in body, body[:100]
    elapsed = time.perf_counter() - start
    transport.close()
    return len(names) / elapsed


async def nats_py_request(url: str, names: list[str]) -> float:
    nc = await nats.connect(url)
    subjects = [SUBJECT + key for key in names]
    start = time.perf_counter()
    for subject in subjects:
        await nc.request(subject, b"", timeout=5)
    elapsed = time.perf_counter() - start
    await nc.close()
    return len(names) / elapsed


async def run(url: str, keys: int, gets: int, rounds: int, server_pid: int | None) -> None:
    await fill(url, keys)
    names = sample(keys, gets)
    runs: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("floor (asyncio.Protocol)", lambda: floor_get(url, names)),
        ("nats-py nc.request", lambda: nats_py_request(url, names)),
        ("aioclients kv.get", lambda: ours_get(url, names)),
        ("nats-py kv.get", lambda: theirs_get(url, names)),
    ]
    results: dict[str, list[float]] = {name: [] for name, _ in runs}
    # CPU per get (us) of this process and of the server, each round
    user: dict[str, list[float]] = {name: [] for name, _ in runs}
    kernel: dict[str, list[float]] = {name: [] for name, _ in runs}
    server: dict[str, list[float]] = {name: [] for name, _ in runs}
    for _ in range(rounds):
        for name, fn in runs:
            cpu, at_server = os.times(), server_cpu(server_pid)
            results[name].append(await fn())
            now = os.times()
            user[name].append((now.user - cpu.user) * 1e6 / gets)
            kernel[name].append((now.system - cpu.system) * 1e6 / gets)
            server[name].append((server_cpu(server_pid) - at_server) * 1e6 / gets)
    print(f"{'client':<26} {'best':>9} {'us/get':>7}   rounds")
    for name, rates in results.items():
        best = max(rates)
        every = " ".join(f"{r:.0f}" for r in rates)
        print(f"{name:<26} {best:>7.0f}/s {1e6 / best:>7.1f}   {every}")
    # What the round trip's time is made of: the client's CPU (in Python, and in the
    # kernel: the socket calls) and the server's, per get, the median of the rounds.
    print(f"{'CPU us per get (median)':<26} {'client':>7} {'kernel':>7} {'server':>7}")
    for name in results:
        print(
            f"{name:<26} {statistics.median(user[name]):>7.1f} "
            f"{statistics.median(kernel[name]):>7.1f} {statistics.median(server[name]):>7.1f}"
        )
    ours, theirs = max(results["aioclients kv.get"]), max(results["nats-py kv.get"])
    floor = max(results["floor (asyncio.Protocol)"])
    print(f"kv.get ratio aioclients/nats-py: {ours / theirs:.2f}x")
    # time per get over the floor's (best rounds): the goal is <= 1.15x
    print(
        f"kv.get time per get vs the floor's: aioclients {floor / ours:.2f}x, "
        f"nats-py {floor / theirs:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--gets", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server-pid", type=int, help="the --url server's pid, for its CPU")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.keys, args.gets, args.rounds, args.server_pid))
        return
    with NatsServer() as server:
        assert server._proc is not None
        run_async(run(server.url, args.keys, args.gets, args.rounds, server._proc.pid))


if __name__ == "__main__":
    main()
