"""Instructions per key of KV ``keys()`` on a large bucket, counted by valgrind.

The rate of ``keys()`` on a shared 2-core machine moves with the load more than
with a change to it; the instructions the client executes do not. This fills two
buckets (file storage, history 1, 100-byte values, as ``jetstream_kv.py`` does)
with N and 3N keys, then runs ``async for key in kv.keys()`` over each under
``valgrind --tool=cachegrind --cache-sim=no`` and prints the difference divided by
2N: the client's instructions per key, everything a listing does once (start-up,
connecting, the failed ``multi_last`` attempt, the consumer's creation) taken out,
and everything it does per key in (the snapshot's subjects, the frames, the
ordered consumer's judgement, the keys handed out). The server is another process:
none of its work is counted. ``--client floor`` counts the bare ``asyncio.Protocol`` of
``jetstream_kv_keys_floor.py`` listing the same buckets instead.

    python benchmarks/kv_keys_instructions.py --loop uvloop
    python benchmarks/kv_keys_instructions.py --loop uvloop --client floor  # the floor's
    python benchmarks/kv_keys_instructions.py --url nats://127.0.0.1:4222 --no-fill \\
        --tree /tmp/base                                        # another checkout
"""

from __future__ import annotations

from _kv_instructions import main
from jetstream_kv_keys_floor import floor_keys

from aioclients import jetstream


def bucket(n: int) -> str:
    return f"KEYS{n}"


async def list_keys(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        kv = await js.key_value(bucket(n))
        count = 0
        async for _ in kv.keys():
            count += 1
    assert count == n, (count, n)


async def list_floor(url: str, n: int) -> None:
    await floor_keys(url, n, bucket(n))


if __name__ == "__main__":
    main(
        __file__,
        __doc__ or "",
        bucket,
        {"ours": ("keys()", list_keys), "floor": ("the floor", list_floor)},
        "key",
    )
