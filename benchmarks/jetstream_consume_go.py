"""JetStream consume: aioclients next to nats.go's ``jetstream`` Consume and a floor, in one run.

Reads a file stream of --count 100-byte messages (``BENCHC``, as
``jetstream_consume.py`` fills it) through a fresh consumer per round, ack policy
none and explicit (an ack per message), with:

- ``aioclients``: ``async for msg in consumer.consume(max_messages=1000)``;
- ``nats.go``: a Go program using nats.go's ``jetstream`` package
  (``Consumer.Consume(handler, PullMaxMessages(1000))``), given with --go-bin and
  run once per round as a process of its own (flags ``--url --count --rounds 1
  --ack none|explicit``, printing ``... <rate> msgs/s``); skipped without --go-bin;
- ``floor``: a bare ``asyncio.Protocol`` in the same loop that pulls 1000 at a time
  like ``consume()``, finds each message's control line and payload, and for
  explicit acks writes ``PUB <reply> 0`` per message; no message object, no
  buffer, no iterator. What a Python consumer costs at least on this loop.

Each round runs them in turn; every round is printed, then the best msgs/s and the
lowest CPU time per message of the consumer process and of nats-server (read from
``/proc/<pid>/stat``; the server is ours unless --url is given, then pass
--server-pid to see its CPU).

    python benchmarks/jetstream_consume_go.py --count 200000 --rounds 3 \\
        --go-bin /path/to/jsconsume --loop uvloop
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import resource
import time
from collections.abc import Awaitable, Callable
from typing import cast
from urllib.parse import urlparse

from _floor import server_cpu
from _loop import add_loop_argument, run_async, use_loop
from jetstream_consume import STREAM, fill_stream

from aioclients import jetstream
from aioclients.testing import NatsServer

_round = 0


def _durable(prefix: str) -> str:
    global _round
    _round += 1
    return f"{prefix}{os.getpid()}_{_round}"


async def ours(url: str, n: int, ack: bool) -> tuple[float, float]:
    async with await jetstream.connect(url) as js:
        stream = await js.stream(STREAM)
        consumer = await stream.create_consumer(
            durable_name=_durable("ours"), ack_policy="explicit" if ack else "none"
        )
        got = 0
        cpu = time.process_time()
        start = time.perf_counter()
        async with consumer.consume(max_messages=1000) as messages:
            async for msg in messages:
                if ack:
                    await msg.ack()
                got += 1
                if got == n:
                    break
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        await consumer.delete()
    return n / elapsed, cpu


def undelivered(headers: bytes, batch: int) -> int:
    """How many of a pull's ``batch`` a status frame (its header block) says will
    not come: its Nats-Pending-Messages (408 at the pull's expiry, 409 Message Size
    Exceeds MaxBytes), the whole batch when it has none (a pull refused outright:
    400, 409 Exceeded MaxWaiting ...), none for a 100 (heartbeat, flow control).
    """
    lines = headers.split(b"\r\n")
    if lines[0][9:12] == b"100":
        return 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"nats-pending-messages":
            return int(value)
    return batch


class _FloorProtocol(asyncio.Protocol):
    """Just enough NATS to pull a consumer: CONNECT, SUB, pulls of 1000, acks."""

    def __init__(self, n: int, ack: bool, pull: bytes) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.n = n
        self.ack = ack
        self.pull = pull
        self.got = 0
        self.outstanding = 0
        #: set by start(); until then data_received pulls nothing
        self.started = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # cast, not isinstance: uvloop's transports are not asyncio.Transport subclasses
        self.transport = cast("asyncio.Transport", transport)

    def start(self) -> None:
        """CONNECT and SUB, then the first two pulls, in that order on the wire.

        The server's INFO can reach data_received before the caller of
        create_connection resumes (uvloop does that). A pull written from there
        went ahead of the SUB, and when the consumer checked the pull's reply
        subject for interest before the server had read the SUB, it dropped the
        pull without a word: no messages, no 408. The floor then counted 1000
        it would never get, and stopped at exactly 2000.
        """
        assert self.transport is not None
        # headers: statuses (408, 409) come as HMSG; without it the server strips
        # their headers and a status reads as an empty message.
        self.transport.write(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\nSUB _FLOOR.in 1\r\n'
        )
        self.started = True
        self.send_pull()
        self.send_pull()

    def send_pull(self) -> None:
        assert self.transport is not None
        self.transport.write(self.pull)
        self.outstanding += 1000

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        size = len(buf)
        find = buf.find
        acks = []
        got = 0
        ended = 0
        while True:
            eol = find(b"\r\n", pos)
            if eol < 0:
                break
            if buf.startswith(b"MSG ", pos):
                args = buf[pos + 4 : eol].split()
                end = eol + 2 + int(args[-1])
                if end + 2 > size:
                    break
                got += 1
                if self.ack and len(args) == 4:
                    acks.append(b"PUB %s 0\r\n\r\n" % args[2])
                pos = end + 2
            elif buf.startswith(b"HMSG ", pos):
                # A status: a pull ended short, or was refused.
                end = eol + 2 + int(buf[pos:eol].split()[-1])
                if end + 2 > size:
                    break
                ended += undelivered(buf[eol + 2 : end], 1000)
                pos = end + 2
            else:
                pos = eol + 2  # +OK, PING (none while the pulls keep it busy)
        self.buffer = buf[pos:]
        assert self.transport is not None
        if acks:
            self.transport.write(b"".join(acks))
        self.got += got
        self.outstanding -= got + ended
        if self.got >= self.n:
            if not self.done.done():
                self.done.set_result(None)
        elif self.started and self.outstanding <= 500:
            self.send_pull()


async def floor(url: str, n: int, ack: bool) -> tuple[float, float]:
    durable = _durable("floor")
    async with await jetstream.connect(url) as js:
        stream = await js.stream(STREAM)
        consumer = await stream.create_consumer(
            durable_name=durable, ack_policy="explicit" if ack else "none"
        )
        # Pulls expire (5 s) like consume()'s: a pull that ends short says so with
        # a status (408), and the floor pulls again.
        body = b'{"batch":1000,"expires":5000000000}'
        pull = b"PUB $JS.API.CONSUMER.MSG.NEXT.%s.%s _FLOOR.in %d\r\n%s\r\n" % (
            STREAM.encode(),
            durable.encode(),
            len(body),
            body,
        )
        address = urlparse(url)
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_connection(
            lambda: _FloorProtocol(n, ack, pull), address.hostname, address.port
        )
        cpu = time.process_time()
        start = time.perf_counter()
        protocol.start()
        try:
            await asyncio.wait_for(protocol.done, 120)
        except asyncio.TimeoutError:
            raise SystemExit(f"the floor read {protocol.got} of {n} messages") from None
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        transport.close()
        await consumer.delete()
    return n / elapsed, cpu


_RATE = re.compile(rb"([0-9.]+) msgs/s")


def go_runner(go_bin: str) -> Callable[[str, int, bool], Awaitable[tuple[float, float]]]:
    async def go(url: str, n: int, ack: bool) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = await asyncio.create_subprocess_exec(
            go_bin,
            "--url",
            url,
            "--count",
            str(n),
            "--rounds",
            "1",
            "--ack",
            "explicit" if ack else "none",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        found = _RATE.search(out)
        if proc.returncode or found is None:
            raise SystemExit(f"{go_bin} failed ({proc.returncode}): {out.decode()}")
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return float(found.group(1)), cpu

    return go


Scenario = Callable[[str, int, bool], Awaitable[tuple[float, float]]]


async def run(args: argparse.Namespace, url: str, server_pid: int | None) -> None:
    if not args.no_fill:
        print(f"filling a file stream with {args.count} messages ...", flush=True)
        await fill_stream(url, args.count)
    clients: list[tuple[str, Scenario]] = [("aioclients", ours), ("floor", floor)]
    if args.go_bin:
        clients.insert(1, ("nats.go", go_runner(args.go_bin)))
    best: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], tuple[float, float]] = {}
    for number in range(1, args.rounds + 1):
        for mode in ("none", "explicit"):
            for name, fn in clients:
                server = server_cpu(server_pid)
                rate, client_cpu = await fn(url, args.count, mode == "explicit")
                server = server_cpu(server_pid) - server
                per = (client_cpu / args.count * 1e6, server / args.count * 1e6)
                key = (mode, name)
                best[key] = max(best.get(key, 0.0), rate)
                old = cpu.get(key, (math.inf, math.inf))
                cpu[key] = (min(old[0], per[0]), min(old[1], per[1]))
                print(
                    f"round {number} ack {mode:<8} {name:<10} {rate:>9.0f} msgs/s  "
                    f"CPU us/msg: client {per[0]:5.2f} server {per[1]:5.2f}",
                    flush=True,
                )
    print(
        f"\nbest of {args.rounds} ({args.count} messages):\n"
        f"{'ack':<9}{'client':<11}{'msgs/s':>10}  {'/ nats.go':>9}  {'/ floor':>7}"
        f"  {'client us/msg':>13}  {'server us/msg':>13}"
    )
    for mode in ("none", "explicit"):
        go = best.get((mode, "nats.go"), math.nan)
        bottom = best[(mode, "floor")]
        for name, _ in clients:
            rate = best[(mode, name)]
            client_cpu, server = cpu[(mode, name)]
            print(
                f"{mode:<9}{name:<11}{rate:>10.0f}  {rate / go:>8.2f}x  {rate / bottom:>6.2f}x"
                f"  {client_cpu:>13.2f}  {server:>13.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--server-pid", type=int, help="its pid, for its CPU time")
    parser.add_argument("--go-bin", help="the nats.go consume program (see the docstring)")
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-fill", action="store_true", help="the stream is there already")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args, args.url, args.server_pid))
        return
    with NatsServer() as server:
        assert server._proc is not None
        run_async(run(args, server.url, server._proc.pid))


if __name__ == "__main__":
    main()
