"""NSQ consume from a deep channel: aioclients next to nsq's bench_reader and a floor, in one run.

Like-for-like with nsq v1.3.0's ``bench/bench_reader`` (go-nsq's wire code, one
goroutine per core): --connections connections to one real nsqd, RDY --rdy on
each, a FIN per message, 100-byte messages filled into a fresh topic (through
nsqd's HTTP ``/mpub``, not timed) before each client reads it:

- ``aioclients``: one ``Reader(max_in_flight=rdy)`` per connection, in one loop,
  ``async for msg in reader: await msg.finish()`` until --count in all;
- ``bench_reader``: given with --go-bin, run as a process of its own for
  --go-runfor seconds (it runs for a time, not a count) with ``--rdy --size 100``;
  its ``ops/s`` is taken. The fill is --count messages (and 10 RDY-fulls per
  connection more, so that no reader drains the channel and waits for nsqd's
  output buffer timeout at its end), more than it can read in that time (a run
  that drained the channel is flagged);
- ``floor``: a bare ``asyncio.Protocol`` per connection in the same loop: ``SUB``,
  ``RDY``, find each frame, write ``FIN <id>`` per message (one write per read);
  no message object, no iterator. What a Python consumer costs at least here.

Every round is printed, then the best msgs/s and the lowest CPU time per message
of the consumer (this process, or bench_reader's) and of nsqd (from
``/proc/<pid>/stat`` with --nsqd-pid), and the median (and range) of the rounds
with the median of the per-round ratios to bench_reader (a round's clients ran
seconds apart, so a paired ratio is steadier on a shared machine).

    python benchmarks/nsq_consume_go.py --nsqd-tcp 127.0.0.1:4150 \\
        --nsqd-http 127.0.0.1:4151 --nsqd-pid PID --go-bin /path/to/bench_reader \\
        --count 300000 --rounds 3 --loop uvloop
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import statistics
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import cast

from _loop import add_loop_argument, run_async, use_loop
from _nsq_common import PAYLOAD
from nsq_consume import fill

from aioclients.nsq import Reader

_TICK = os.sysconf("SC_CLK_TCK")
_SPARE = 10  # RDY-fulls per connection filled beyond --count
_SIZE = struct.Struct(">l")


def _proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (nan if unknown)."""
    if pid is None:
        return math.nan
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


Result = tuple[float, float, int]  # msgs/s, client CPU seconds, messages read


async def ours(args: argparse.Namespace, topic: str) -> Result:
    total = 0
    done = asyncio.get_running_loop().create_future()

    async def one(reader: Reader) -> None:
        nonlocal total
        async for msg in reader:
            await msg.finish()
            total += 1
            if total >= args.count:
                if not done.done():
                    done.set_result(time.perf_counter())
                return

    readers = [
        Reader(topic, "bench", nsqd_tcp_addresses=[args.nsqd_tcp], max_in_flight=args.rdy)
        for _ in range(args.connections)
    ]
    cpu = time.process_time()
    start = time.perf_counter()
    for reader in readers:
        await reader.start()
    tasks = [asyncio.create_task(one(reader)) for reader in readers]
    try:
        end = await asyncio.wait_for(done, args.timeout)
        cpu = time.process_time() - cpu
    except asyncio.TimeoutError:
        raise SystemExit(f"aioclients read {total} of {args.count} messages") from None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(reader.close() for reader in readers), return_exceptions=True)
    return total / (end - start), cpu, total


class _FloorProtocol(asyncio.Protocol):
    """Just enough NSQ: V2, SUB, RDY, and a FIN per message."""

    def __init__(self, topic: str, rdy: int, count: list[int], done: asyncio.Future[float]):
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.hello = b"  V2SUB %s bench\nRDY %d\n" % (topic.encode(), rdy)
        self.count = count  # [read so far, wanted], shared by the connections
        self.done = done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # cast, not isinstance: uvloop's transports are not asyncio.Transport subclasses
        self.transport = cast("asyncio.Transport", transport)
        self.transport.write(self.hello)

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        size = len(buf)
        fins = []
        while size - pos >= 8:
            (length,) = _SIZE.unpack_from(buf, pos)
            end = pos + 4 + length
            if end > size:
                break
            if buf[pos + 7] == 2:  # a message: timestamp 8, attempts 2, id 16, body
                fins.append(b"FIN %s\n" % buf[pos + 18 : pos + 34])
            elif buf[pos + 8 : end] == b"_heartbeat_":
                fins.append(b"NOP\n")
            pos = end
        self.buffer = buf[pos:]
        if fins:
            assert self.transport is not None
            self.transport.write(b"".join(fins))
            count = self.count
            count[0] += len(fins)
            if count[0] >= count[1] and not self.done.done():
                self.done.set_result(time.perf_counter())


async def floor(args: argparse.Namespace, topic: str) -> Result:
    loop = asyncio.get_running_loop()
    host, port = args.nsqd_tcp.rsplit(":", 1)
    done: asyncio.Future[float] = loop.create_future()
    count = [0, args.count]
    cpu = time.process_time()
    start = time.perf_counter()
    connections = [
        await loop.create_connection(
            lambda: _FloorProtocol(topic, args.rdy, count, done), host, int(port)
        )
        for _ in range(args.connections)
    ]
    try:
        end = await asyncio.wait_for(done, args.timeout)
    except asyncio.TimeoutError:
        raise SystemExit(f"the floor read {count[0]} of {args.count} messages") from None
    cpu = time.process_time() - cpu
    for transport, _ in connections:
        transport.write(b"CLS\n")
        transport.close()
    return count[0] / (end - start), cpu, count[0]


_OPS = re.compile(rb"([0-9.]+)ops/s")


async def go(args: argparse.Namespace, topic: str) -> Result:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = await asyncio.create_subprocess_exec(
        args.go_bin,
        f"--nsqd-tcp-address={args.nsqd_tcp}",
        f"--topic={topic}",
        "--channel=bench",
        f"--runfor={args.go_runfor}s",
        f"--size={len(PAYLOAD)}",
        f"--rdy={args.rdy}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = _OPS.search(out)
    if proc.returncode or found is None:
        raise SystemExit(f"{args.go_bin} failed ({proc.returncode}): {out.decode()}")
    rate = float(found.group(1))
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return rate, cpu, round(rate * args.go_runfor)


async def _http(http: str, method: str, target: str) -> bytes:
    host, port = http.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"{method} {target} HTTP/1.1\r\nHost: {http}\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
    )
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def delete_topic(http: str, topic: str) -> None:
    # nsqd 1.3.0 can panic (inFlightPqueue.Remove from FinishMessage) when a topic is
    # deleted while it still reads the FINs of a reader that has just closed its
    # connection, so wait until the channel has no client left (at most 10 s).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = await _http(http, "GET", f"/stats?format=json&topic={topic}")
        stats = json.loads(answer.partition(b"\r\n\r\n")[2] or b"{}")
        topics = stats.get("topics") or []
        if not any(c.get("clients") for t in topics for c in t.get("channels") or []):
            break
        await asyncio.sleep(0.05)
    await _http(http, "POST", f"/topic/delete?topic={topic}")


async def run(args: argparse.Namespace) -> None:
    clients: list[tuple[str, Callable[[argparse.Namespace, str], Awaitable[Result]]]] = [
        ("aioclients", ours),
        ("floor", floor),
    ]
    if args.go_bin:
        clients.insert(1, ("bench_reader", go))
    best: dict[str, float] = {}
    cpu: dict[str, tuple[float, float]] = {}
    rounds: dict[str, list[tuple[float, float, float]]] = {}  # msgs/s, client, nsqd us/msg
    for number in range(1, args.rounds + 1):
        for name, fn in clients:
            topic = f"bench_go_{uuid.uuid4().hex[:8]}"
            # More than a reader takes: a channel drained to its last message holds
            # the tail back until nsqd's output buffer timeout (250 ms by default),
            # which would round a reader's time up to the next quarter second.
            await fill(args.nsqd_http, topic, args.count + _SPARE * args.connections * args.rdy)
            server = _proc_cpu(args.nsqd_pid)
            rate, client_cpu, read = await fn(args, topic)
            server = _proc_cpu(args.nsqd_pid) - server
            await delete_topic(args.nsqd_http, topic)
            per = (client_cpu / read * 1e6, server / read * 1e6)
            best[name] = max(best.get(name, 0.0), rate)
            old = cpu.get(name, (math.inf, math.inf))
            cpu[name] = (min(old[0], per[0]), min(old[1], per[1]))
            rounds.setdefault(name, []).append((rate, per[0], per[1]))
            drained = " (drained the channel: raise --count)" if read >= args.count * 0.95 else ""
            print(
                f"round {number} {name:<13} {rate:>9.0f} msgs/s  CPU us/msg: "
                f"client {per[0]:5.2f} nsqd {per[1]:5.2f}"
                + (drained if name == "bench_reader" else ""),
                flush=True,
            )
    go_rate = best.get("bench_reader", math.nan)
    print(
        f"\nbest of {args.rounds}, {args.connections} connections x RDY {args.rdy}:\n"
        f"{'client':<14}{'msgs/s':>10}  {'/ bench_reader':>14}  {'/ floor':>7}"
        f"  {'client us/msg':>13}  {'nsqd us/msg':>11}"
    )
    for name, _ in clients:
        rate = best[name]
        print(
            f"{name:<14}{rate:>10.0f}  {rate / go_rate:>13.2f}x  {rate / best['floor']:>6.2f}x"
            f"  {cpu[name][0]:>13.2f}  {cpu[name][1]:>11.2f}"
        )
    print(
        f"\nmedian (range) of {args.rounds} rounds; the ratio is the median of each "
        "round's ratio to bench_reader's:"
    )
    for name, _ in clients:
        got = rounds[name]
        paired = [r[0] / g[0] for r, g in zip(got, rounds.get("bench_reader", []), strict=False)]
        ratio = f"{statistics.median(paired):.2f}x" if paired else "-"
        print(
            f"{name:<14}{_median_range([r[0] for r in got], '{:,.0f}'):>26} msgs/s"
            f"  {ratio:>6}  client {_median_range([r[1] for r in got], '{:.2f}'):>19} us"
            f"  nsqd {_median_range([r[2] for r in got], '{:.2f}'):>19} us"
        )


def _median_range(values: list[float], fmt: str) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{fmt.format(mid)} ({fmt.format(low)}-{fmt.format(high)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp", required=True, help="a real nsqd's TCP address")
    parser.add_argument("--nsqd-http", required=True, help="the same nsqd's HTTP address")
    parser.add_argument("--nsqd-pid", type=int, help="its pid, for its CPU time")
    parser.add_argument("--go-bin", help="nsq's bench_reader (see the docstring)")
    parser.add_argument("--go-runfor", type=float, default=0.4, help="bench_reader's seconds")
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--rdy", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per round")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    run_async(run(args))


if __name__ == "__main__":
    main()
