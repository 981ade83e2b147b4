"""Object Store: aioclients vs nats-py, put and get of one large object, in one run.

Default: puts and gets a --size-mib (64) MiB object with each client, rounds
interleaved (nats-py first), printing MB/s per round and the best of each with
the ratio. Both use 128 KiB chunks on a store of --storage (file) storage.

``--huge``: puts and gets a --huge-gib (1) GiB object with aioclients only, the
data generated as it is sent (never held in memory) and the chunks dropped as
they are read, and prints how far the process's resident memory grew above what
it was before (peak RSS, from /proc/self/status).

    python benchmarks/jetstream_object_store.py --size-mib 64 --rounds 3
    python benchmarks/jetstream_object_store.py --huge --huge-gib 1
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import AsyncIterator

import nats
from _loop import add_loop_argument, run_async, use_loop
from nats.js import api as nats_api

from aioclients import jetstream
from aioclients.testing import NatsServer

MIB = 1024 * 1024
BUCKET_OURS = "BENCH_OURS"
BUCKET_THEIRS = "BENCH_THEIRS"
#: the stores' storage (--storage)
STORAGE = ["file"]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    # Linux: writing 5 to clear_refs resets VmHWM (the peak) to the current RSS.
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


async def ours_put(url: str, data: bytes) -> float:
    async with await jetstream.connect(url, timeout=30) as js:
        store = await js.create_object_store(BUCKET_OURS, storage=STORAGE[0])
        start = time.perf_counter()
        await store.put("obj", data)
        elapsed = time.perf_counter() - start
    return len(data) / MIB / elapsed


async def ours_get(url: str, data: bytes) -> float:
    async with await jetstream.connect(url, timeout=30) as js:
        store = await js.object_store(BUCKET_OURS)
        start = time.perf_counter()
        got = await store.get_bytes("obj")
        elapsed = time.perf_counter() - start
    assert got == data
    return len(data) / MIB / elapsed


async def theirs_put(url: str, data: bytes) -> float:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=30)
        store = await js.create_object_store(
            BUCKET_THEIRS, storage=nats_api.StorageType(STORAGE[0])
        )
        start = time.perf_counter()
        await store.put("obj", data)
        elapsed = time.perf_counter() - start
    finally:
        await nc.close()
    return len(data) / MIB / elapsed


async def theirs_get(url: str, data: bytes) -> float:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=30)
        store = await js.object_store(BUCKET_THEIRS)
        start = time.perf_counter()
        result = await store.get("obj")
        elapsed = time.perf_counter() - start
    finally:
        await nc.close()
    assert result.data == data
    return len(data) / MIB / elapsed


async def side_by_side(url: str, size_mib: int, rounds: int) -> None:
    data = os.urandom(size_mib * MIB)
    best = {"put": [0.0, 0.0], "get": [0.0, 0.0]}
    for r in range(rounds):
        for op, theirs, ours in (("put", theirs_put, ours_put), ("get", theirs_get, ours_get)):
            t = await theirs(url, data)
            o = await ours(url, data)
            best[op] = [max(best[op][0], o), max(best[op][1], t)]
            print(
                f"  round {r + 1} {op}: aioclients {o:.1f} MB/s, nats-py {t:.1f} MB/s, "
                f"{o / t:.2f}x",
                flush=True,
            )
    print(f"{'scenario':<16} {'aioclients':>14} {'nats-py':>14} {'ratio':>7}")
    for op, (o, t) in best.items():
        name = f"{op} {size_mib} MiB"
        print(f"{name:<16} {o:>9.1f} MB/s {t:>9.1f} MB/s {o / t:>6.2f}x")


async def generated(total: int, piece: int = MIB) -> AsyncIterator[bytes]:
    """``total`` bytes made up as they are sent: a random MiB with a counter in front."""
    block = bytearray(os.urandom(piece))
    sent = 0
    n = 0
    while sent < total:
        n += 1
        block[:8] = n.to_bytes(8, "big")
        size = min(piece, total - sent)
        yield bytes(block[:size])
        sent += size


async def huge(url: str, gib: int) -> None:
    total = gib * 1024 * MIB
    async with await jetstream.connect(url, timeout=60) as js:
        store = await js.create_object_store("BENCH_HUGE")
        base = _status_kib("VmRSS")
        _reset_peak()
        start = time.perf_counter()
        info = await store.put("huge", generated(total))
        put_s = time.perf_counter() - start
        put_peak = _status_kib("VmHWM")
        print(f"put {gib} GiB: {total / MIB / put_s:.1f} MB/s, {info.chunks} chunks", flush=True)
        _reset_peak()
        read = 0
        start = time.perf_counter()
        async with store.get("huge") as obj:
            async for chunk in obj:
                read += len(chunk)
        get_s = time.perf_counter() - start
        get_peak = _status_kib("VmHWM")
        assert read == total, read
        print(f"get {gib} GiB: {total / MIB / get_s:.1f} MB/s (digest checked)", flush=True)
        await js.delete_object_store("BENCH_HUGE")
    print(f"RSS before: {base / 1024:.1f} MiB")
    print(f"RSS growth, put: {(put_peak - base) / 1024:.1f} MiB (peak {put_peak / 1024:.1f} MiB)")
    print(f"RSS growth, get: {(get_peak - base) / 1024:.1f} MiB (peak {get_peak / 1024:.1f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing nats-server with JetStream")
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--storage", choices=("file", "memory"), default="file")
    parser.add_argument("--huge", action="store_true", help="the bounded-memory run instead")
    parser.add_argument("--huge-gib", type=int, default=1)
    add_loop_argument(parser)
    args = parser.parse_args()
    use_loop(args.loop)
    STORAGE[0] = args.storage

    def go(url: str) -> None:
        if args.huge:
            run_async(huge(url, args.huge_gib))
        else:
            run_async(side_by_side(url, args.size_mib, args.rounds))

    if args.url:
        go(args.url)
        return
    with NatsServer() as server:
        go(server.url)


if __name__ == "__main__":
    main()
