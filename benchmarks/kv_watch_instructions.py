"""Instructions per entry of KV ``watch()`` until ``initial_done``, counted by valgrind.

The rate of a watch's initial values on a shared 2-core machine moves with the
load more than with a change to it; the instructions the client executes do not.
This fills two buckets (file storage, history 1, 100-byte values, as
``jetstream_kv.py`` does) with N and 3N keys, then watches each whole bucket until
its initial values are in (``initial_done``) under ``valgrind --tool=cachegrind
--cache-sim=no`` and prints the difference divided by 2N: the client's
instructions per watched entry, everything a watch does once (start-up,
connecting, the stream info of the snapshot, the consumer's creation) taken out,
and everything it does per entry in (the frames, the ordered consumer's judgement,
the snapshot's, the entries made and handed out). The server is another process:
none of its work is counted. ``--client nats-py`` counts nats-py's ``watchall()``
until its ``None`` marker on the same buckets instead: the other side of
``jetstream_kv.py --only watch``'s ratio.

    python benchmarks/kv_watch_instructions.py --loop asyncio
    python benchmarks/kv_watch_instructions.py --loop asyncio --client nats-py
    python benchmarks/kv_watch_instructions.py --url nats://127.0.0.1:4222 --no-fill \\
        --tree /tmp/base                                        # another checkout
"""

from __future__ import annotations

from _kv_instructions import main

from aioclients import jetstream


def bucket(n: int) -> str:
    return f"WATCH{n}"


async def watch_ours(url: str, n: int) -> None:
    async with await jetstream.connect(url, timeout=30) as js:
        kv = await js.key_value(bucket(n))
        count = 0
        async with kv.watch() as watcher:
            async for _ in watcher:
                count += 1
                if watcher.initial_done.is_set():
                    break
    assert count == n, (count, n)


async def watch_nats_py(url: str, n: int) -> None:
    import nats

    nc = await nats.connect(url)
    kv = await nc.jetstream(timeout=30).key_value(bucket(n))
    count = 0
    watcher = await kv.watchall()
    async for entry in watcher:
        if entry is None:
            break
        count += 1
    await watcher.stop()
    await nc.close()
    assert count == n, (count, n)


if __name__ == "__main__":
    main(
        __file__,
        __doc__ or "",
        bucket,
        {"ours": ("watch()", watch_ours), "nats-py": ("nats-py's watchall()", watch_nats_py)},
        "entry",
    )
