"""The NSQ Reader's own CPU per message, without the network: receive, iterate, FIN.

A Reader with one connection whose transport only counts writes is fed reads of
--batch message frames (two reads per batch, as nsqd's 16 KiB buffer splits a
RDY-full of 100-byte messages) and consumes them with ``async for`` and ``await
msg.finish()``, --rounds batches per pass; the FINs are flushed after each
batch. No socket, no server: what is left is the client's Python work per message
(frame decoding, the ``Message``, the iterator, the FIN path, the RDY
distributor), the figure to profile (``py-spy record -- python
benchmarks/nsq_reader_cpu.py``) and to compare between checkouts (run it with
each checkout on ``PYTHONPATH``, alternating). Prints the CPU time per message of
each pass.

    python benchmarks/nsq_reader_cpu.py --rounds 1000 --passes 3 --loop uvloop
    python benchmarks/nsq_reader_cpu.py ... --vary 7   # bodies of 100-106 bytes

Under valgrind (instructions per message: a run of 300 batches minus one of 100) pass
--no-early-write: valgrind's slowness would otherwise make the 1 ms early write of
the FINs fire, which it does not at the real speed.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time
from typing import Any

from _loop import add_loop_argument, run_async, use_loop

from aioclients.nsq import Reader
from aioclients.nsq._io import _connection
from aioclients.nsq._io._connection import NsqdConnection
from aioclients.nsq._protocol._connection import ConnectionCore, ConnectionState
from aioclients.nsq._protocol._rdy import RdyDistributor
from aioclients.nsq._responder import ReaderResponder


class _CountingTransport:
    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def frames(count: int, vary: int = 1) -> bytes:
    """``count`` message frames, bodies of 100 to 100 + ``vary`` - 1 bytes in turn."""
    out = []
    for i in range(count):
        payload = struct.pack(">qH", 1, 1) + b"%016d" % i + b"x" * (100 + i % vary)
        out.append(struct.pack(">ll", 4 + len(payload), 2) + payload)
    return b"".join(out)


async def one_pass(rounds: int, batch: int, vary: int = 1) -> tuple[float, int]:
    """CPU us per message of ``rounds`` batches, and the writes made."""
    loop = asyncio.get_running_loop()
    reader = Reader("t", "c", nsqd_tcp_addresses=["127.0.0.1:1"], max_in_flight=batch)
    # what start() sets up, without connecting
    reader._started = True
    reader._loop = loop
    dist = reader._dist = RdyDistributor(batch, rng=reader._rng)
    reader._responder = ReaderResponder(
        dist, reader._apply, loop.time, requeue_delay=90.0, max_requeue_delay=900.0
    )
    core = ConnectionCore(identify={}, topic="t", channel="c")
    core.state = ConnectionState.SUBSCRIBED
    core.decoder.max_frame_size = 1 << 20
    conn = NsqdConnection("127.0.0.1:1", core, reader)
    transport = _CountingTransport()
    conn._transport = transport  # type: ignore[assignment]
    reader._wire(conn)
    reader._conns[conn.address] = conn
    reader._apply(dist.add_connection(conn.address, 2500, loop.time()))
    core.rdy_allowance = batch
    data = frames(batch, vary)
    half = len(data) // 2
    anext: Any = reader.__anext__
    used = time.process_time()
    for _ in range(rounds):
        conn.data_received(data[:half])
        conn.data_received(data[half:])
        for _ in range(batch):
            msg = await anext()
            await msg.finish()
        conn.flush()
    used = time.process_time() - used
    return used / (rounds * batch) * 1e6, transport.writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="batches per pass")
    parser.add_argument("--batch", type=int, default=200, help="messages per batch (RDY)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument(
        "--vary",
        type=int,
        default=1,
        help="bodies of 100 to 100+VARY-1 bytes in turn (default 1: all 100 bytes)",
    )
    parser.add_argument(
        "--no-early-write",
        action="store_true",
        help="FINs wait for the end of the loop iteration however long it takes",
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.no_early_write:
        _connection.EARLY_FLUSH_DELAY = float("inf")
    for _ in range(args.passes):
        us, writes = run_async(one_pass(args.rounds, args.batch, args.vary))
        print(f"{us:.3f} us of CPU per message ({writes} writes)", flush=True)


if __name__ == "__main__":
    main()
