"""Ordered consumer read of a whole stream: aioclients vs nats-py, side by side in one run.

Fills a file-storage stream with --count 100-byte messages, then reads all of
them in order with:

- aioclients: ``async for msg in (await stream.ordered_consumer()).consume()``
  (ADR-17 on our pull core);
- nats-py: ``js.subscribe(subject, ordered_consumer=True, cb=...)`` (its ordered
  push subscription with flow control, the fastest form it offers: a callback).

Each round reads the stream once per client, interleaved; the best round is
printed as msgs/s with the ratio, and the client's CPU time per message (steadier
than msgs/s on a busy machine). Each round also prints the cores each read used,
the client's and nats-server's (CPU time over wall time, nats-server's read from
``/proc/<pid>/stat``: ours, or the one of ``--url`` given ``--server-pid``), and the
end nats-server's lowest CPU time per message for each reader: with 2 cores, a
read that leaves both well under 1.0 core each waited on something else.

With ``--floor``, a third reader runs in the same rounds: a bare ``asyncio.Protocol``
on its own socket that creates the consumer ``ours`` reads through (ephemeral, ack
policy none, memory storage, one replica, deliver all), pulls like it (batch 2000,
a refill pull when half of it has come, 5 s idle heartbeats, 30 s expiry) and counts
the deliveries until the ack subject's pending count is 0: no message object, no
order check, no iteration. What this server and machine deliver to one Python
reader at most.

    python benchmarks/jetstream_ordered.py --count 1000000 --rounds 2 [--floor]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time

import nats
from _floor import PullingFloor, open_floor
from _loop import add_loop_argument, run_async, use_loop

from aioclients import jetstream
from aioclients.testing import NatsServer

PAYLOAD = b"x" * 100
STREAM = "BENCHO"
SUBJECT = "bencho.data"


async def fill(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        await js.create_stream(STREAM, subjects=["bencho.>"], storage="file")
        for _ in range(n):
            await js.publish_async(SUBJECT, PAYLOAD)
        await js.publish_async_complete(timeout=300)


CPU: dict[str, float] = {}
#: each read's CPU shares, printed with its round
USAGE: list[str] = []
#: nats-server's pid (its CPU read from /proc), or None when unknown (--url)
SERVER_PID: int | None = None
_TICK = os.sysconf("SC_CLK_TCK")


def server_cpu() -> float:
    """CPU seconds (user + system) nats-server has used so far (nan if unknown)."""
    if SERVER_PID is None:
        return math.nan
    with open(f"/proc/{SERVER_PID}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def note_cpu(who: str, cpu: float, n: int) -> None:
    per = cpu / n * 1e6
    CPU[who] = min(CPU.get(who, per), per)


class Usage:
    """The client's and nats-server's CPU over one read: per message (the lowest
    of the rounds kept) and as a share of the read's wall time (a share near 1.0:
    that process used a whole core)."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.cpu = time.process_time()
        self.server = server_cpu()

    def done(self, n: int, elapsed: float) -> str:
        cpu = time.process_time() - self.cpu
        server = server_cpu() - self.server
        note_cpu(self.who, cpu, n)
        if not math.isnan(server):
            note_cpu(self.who + " server", server, n)
        return f"{self.who}: client {cpu / elapsed:.2f} core, server {server / elapsed:.2f}"


async def ours(url: str, n: int) -> float:
    async with await jetstream.connect(url, timeout=30) as js:
        stream = await js.stream(STREAM)
        start = time.perf_counter()
        usage = Usage("ours")
        oc = await stream.ordered_consumer()
        count = 0
        async with oc.consume(max_messages=2000) as messages:
            async for _msg in messages:
                count += 1
                if count == n:
                    break
        elapsed = time.perf_counter() - start
        USAGE.append(usage.done(n, elapsed))
        last = oc.last_stream_seq
        assert last == n, last
        return n / elapsed


async def theirs(url: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    done = asyncio.Event()
    count = 0
    last = 0

    async def cb(msg: nats.aio.msg.Msg) -> None:
        nonlocal count, last
        count += 1
        if count == n:
            last = msg.metadata.sequence.stream
            done.set()

    start = time.perf_counter()
    usage = Usage("theirs")
    sub = await js.subscribe(SUBJECT, stream=STREAM, ordered_consumer=True, cb=cb)
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.perf_counter() - start
    USAGE.append(usage.done(n, elapsed))
    await sub.unsubscribe()
    await nc.close()
    assert last == n, last
    return n / elapsed


#: the floor's pulls: ``ours``'s max_messages, refilled at half (consume's default)
FLOOR_BATCH = 2000
FLOOR_PULL = b'{"batch":%d,"expires":30000000000,"idle_heartbeat":5000000000}'


class _FloorReader(PullingFloor):
    """Counts an ordered consumer's deliveries; API replies and control lines aside."""

    PULL = FLOOR_PULL

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        size = len(buf)
        while pos < size:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            if buf.startswith(b"MSG", pos) or buf.startswith(b"HMSG", pos):
                parts = buf[pos:end].split(b" ")
                total = int(parts[-1])
                if size < end + 2 + total + 2:
                    break
                body = buf[end + 2 : end + 2 + total]
                pos = end + 2 + total + 2
                if parts[0] == b"HMSG":
                    continue  # a status (heartbeat, 408): nothing to do
                if len(parts) == 5:  # a delivery: it has an ack subject
                    tokens = parts[3].split(b".")
                    pending = int(tokens[8] if len(tokens) == 9 else tokens[10])
                    self.count += 1
                    self.outstanding -= 1
                    if pending == 0:
                        if not self.done.done():
                            self.done.set_result(None)
                    elif self.outstanding <= FLOOR_BATCH // 2:
                        self.pull(FLOOR_BATCH - self.outstanding)
                else:
                    self.api_reply(body)
                continue
            self.control(buf[pos:end])
            pos = end + 2
        self.buffer = buf[pos:]


async def floor(url: str, n: int) -> float:
    transport, reader = await open_floor(url, _FloorReader)
    start = time.perf_counter()
    usage = Usage("floor")
    config = {
        "deliver_policy": "all",
        "ack_policy": "none",
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 300_000_000_000,
    }
    created = await reader.request(
        f"$JS.API.CONSUMER.CREATE.{STREAM}",
        json.dumps({"stream_name": STREAM, "config": config}).encode(),
    )
    name = created["name"]
    reader.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{name}".encode()
    reader.pull(FLOOR_BATCH)
    await asyncio.wait_for(reader.done, 600)
    elapsed = time.perf_counter() - start
    USAGE.append(usage.done(n, elapsed))
    await reader.request(f"$JS.API.CONSUMER.DELETE.{STREAM}.{name}", b"")
    transport.close()
    assert reader.count == n, reader.count
    return n / elapsed


async def run(url: str, count: int, rounds: int, with_floor: bool = False) -> None:
    await fill(url, count)
    best_ours = best_theirs = best_floor = 0.0
    for r in range(rounds):
        got_theirs = await theirs(url, count)
        got_ours = await ours(url, count)
        got_floor = await floor(url, count) if with_floor else 0.0
        print(
            f"  round {r + 1}: aioclients {got_ours:.0f}/s, nats-py {got_theirs:.0f}/s, "
            f"{got_ours / got_theirs:.2f}x"
            + (f"; floor {got_floor:.0f}/s ({got_ours / got_floor:.2f}x)" if with_floor else ""),
            flush=True,
        )
        print("    cores used: " + "; ".join(USAGE), flush=True)
        USAGE.clear()
        best_theirs = max(best_theirs, got_theirs)
        best_ours = max(best_ours, got_ours)
        best_floor = max(best_floor, got_floor)
    print(f"{'scenario':<30} {'messages':>9} {'aioclients':>13} {'nats-py':>13} {'ratio':>7}")
    print(
        f"{'ordered consumer, whole stream':<30} {count:>9} {best_ours:>11.0f}/s "
        f"{best_theirs:>11.0f}/s {best_ours / best_theirs:>6.2f}x"
    )
    print(
        f"{'client CPU per message':<30} {'':>9} {CPU['ours']:>10.2f} us "
        f"{CPU['theirs']:>10.2f} us {CPU['theirs'] / CPU['ours']:>6.2f}x"
    )
    if with_floor:
        print(
            f"floor (asyncio.Protocol): {best_floor:.0f}/s, client CPU {CPU['floor']:.2f} us "
            f"per message; aioclients / floor {best_ours / best_floor:.2f}x"
        )
    if "ours server" in CPU:
        print(
            "nats-server CPU per message: "
            + ", ".join(
                f"{who} {CPU[who + ' server']:.2f} us"
                for who in ("ours", "theirs", "floor")
                if who + " server" in CPU
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--floor", action="store_true", help="add a bare socket reader")
    parser.add_argument("--port", type=int, help="the port of the server started here")
    parser.add_argument("--server-pid", type=int, help="with --url: its pid, to see its CPU")
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    global SERVER_PID
    if args.url:
        SERVER_PID = args.server_pid
        run_async(run(args.url, args.count, args.rounds, args.floor))
        return
    with NatsServer(port=args.port) as server:
        assert server._proc is not None
        SERVER_PID = server._proc.pid
        run_async(run(server.url, args.count, args.rounds, args.floor))


if __name__ == "__main__":
    main()
