"""What listing a bucket's keys costs at least in Python, beside ``keys()``, in one run.

Fills a bucket (file storage, history 1) with --keys keys of 100-byte values
(jetstream_kv.py's bucket and filling), then lists its keys with:

- ``floor``: a bare ``asyncio.Protocol`` on its own socket that creates the same
  consumer ``keys()`` reads a large bucket through (ephemeral, ordered: ack
  policy none, ``deliver_policy last_per_subject``, ``headers_only``, memory
  storage, filtered on ``$KV.<bucket>.>``), pulls like it (batch
  min(20000, pending), idle heartbeats 5 s, expires 30 s, a refill pull when half
  of the batch has come), counts the deliveries until the ack subject's pending is
  0 and deletes the consumer. It finds each frame's end and the pending count, and
  nothing else: no key, no message object, no ordering check.
- ``aioclients keys()``: ``async for key in kv.keys()`` (its failed ``multi_last``
  attempt included: a bucket above 1024 keys is listed through the consumer).
- ``nats-py keys()``: ``await kv.keys()``.

Each runs --rounds times, interleaved; every round is printed with the client's CPU
time, then the best rate and the ratios to the floor.

    python benchmarks/jetstream_kv_keys_floor.py --keys 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from _floor import PullingFloor, open_floor
from _loop import add_loop_argument, run_async, use_loop

# The bucket, its filling and both keys() loops are jetstream_kv.py's, so both
# scripts measure the same listing.
from jetstream_kv import BUCKET, fill, ours_keys, theirs_keys

from aioclients.testing import NatsServer

#: keys()'s pull: its buffer of 20000 keys, refilled at half (consume's default
#: threshold), 30 s expiry, the ordered consumer's 5 s heartbeats
BATCH = 20_000
THRESHOLD = BATCH // 2
PULL = b'{"batch": %d, "expires": 30000000000, "idle_heartbeat": 5000000000}'
NEXT = b"$JS.API.CONSUMER.MSG.NEXT.%s.%s"


class _FloorProtocol(PullingFloor):
    """Counts the headers-only deliveries; API replies and control lines aside."""

    PULL = PULL

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        size = len(buf)
        while pos < size:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            if buf.startswith(b"HMSG", pos):
                parts = buf[pos:end].split(b" ")
                total = int(parts[-1])
                if size < end + 2 + total + 2:
                    break
                body_at = end + 2
                pos = body_at + total + 2
                if len(parts) == 6:  # a delivery: it has an ack subject
                    tokens = parts[3].split(b".")
                    pending = int(tokens[8] if len(tokens) == 9 else tokens[10])
                    self.count += 1
                    self.outstanding -= 1
                    if pending == 0:
                        if not self.done.done():
                            self.done.set_result(None)
                    elif self.outstanding <= THRESHOLD:
                        self.pull(BATCH - self.outstanding)
                continue  # else a status (heartbeat, 408): nothing to do
            if buf.startswith(b"MSG", pos):
                parts = buf[pos:end].split(b" ")
                total = int(parts[-1])
                if size < end + 2 + total + 2:
                    break
                body = buf[end + 2 : end + 2 + total]
                pos = end + 2 + total + 2
                self.api_reply(body)
                continue
            self.control(buf[pos:end])
            pos = end + 2
        self.buffer = buf[pos:]


async def floor_keys(url: str, n: int, bucket: str = BUCKET) -> float:
    """List the ``n`` keys of ``bucket`` as the floor does; returns keys per second."""
    stream = f"KV_{bucket}"
    transport, proto = await open_floor(url, _FloorProtocol)
    start = time.perf_counter()
    config = {
        "deliver_policy": "last_per_subject",
        "filter_subject": f"$KV.{bucket}.>",
        "headers_only": True,
        "ack_policy": "none",
        "max_deliver": 1,
        "mem_storage": True,
        "num_replicas": 1,
        "inactive_threshold": 300_000_000_000,
    }
    created = await proto.request(
        f"$JS.API.CONSUMER.CREATE.{stream}",
        json.dumps({"stream_name": stream, "config": config}).encode(),
    )
    name = created["name"]
    proto.next_subject = NEXT % (stream.encode(), name.encode())
    pending = int(created["num_pending"])
    if pending:
        proto.pull(min(BATCH, pending))
        await asyncio.wait_for(proto.done, 120)
    await proto.request(f"$JS.API.CONSUMER.DELETE.{stream}.{name}", b"")
    elapsed = time.perf_counter() - start
    transport.close()
    assert proto.count == n, proto.count
    return n / elapsed


async def run(url: str, keys: int, rounds: int) -> None:
    await fill(url, keys)
    runs: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("floor (asyncio.Protocol)", lambda: floor_keys(url, keys)),
        ("aioclients keys()", lambda: ours_keys(url, keys)),
        ("nats-py keys()", lambda: theirs_keys(url, keys)),
    ]
    rates: dict[str, list[float]] = {name: [] for name, _ in runs}
    cpus: dict[str, list[float]] = {name: [] for name, _ in runs}
    for r in range(rounds):
        for name, fn in runs:
            # The client's CPU time (connect included; the server's is not in it).
            cpu = time.process_time()
            rate = await fn()
            cpu = time.process_time() - cpu
            rates[name].append(rate)
            cpus[name].append(cpu)
            print(
                f"  round {r + 1} {name}: {rate:.0f} keys/s, "
                f"client CPU {cpu * 1e6 / keys:.2f} us/key",
                flush=True,
            )
    floor = max(rates["floor (asyncio.Protocol)"])
    print(f"{'client':<26} {'best keys/s':>12} {'us/key CPU':>11} {'/ floor':>8}")
    for name, got in rates.items():
        best = max(got)
        cpu = min(cpus[name]) * 1e6 / keys
        print(f"{name:<26} {best:>12.0f} {cpu:>11.2f} {best / floor:>7.2f}x")
    ours, theirs = max(rates["aioclients keys()"]), max(rates["nats-py keys()"])
    print(
        f"keys() aioclients / floor: {ours / floor:.2f}x; "
        f"aioclients / nats-py: {ours / theirs:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    if args.url:
        run_async(run(args.url, args.keys, args.rounds))
        return
    with NatsServer() as server:
        run_async(run(server.url, args.keys, args.rounds))


if __name__ == "__main__":
    main()
