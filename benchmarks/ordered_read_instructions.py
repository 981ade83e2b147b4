"""Instructions per message of an ordered consumer's read path, without a socket.

The parser (``FastParser.parse``), the ordered consumer's sink (the cursor's
judgement, the ``Msg`` objects) and the hand-out (``__anext__``), on messages made
in the process: 100-byte deliveries (``--kind msg``, an ordered read) or
headers-only ones (``--kind hmsg``, as ``headers_only=True`` gets them; KV
``keys()`` reads the same frames and makes keys of them instead), all of one
consumer and in order. They reach the parser as on a connection: ``--burst`` 32 KiB
reads at a time are fed to an ``asyncio.StreamReader`` (one socket read: 8, 256
KiB, what a busy read of a fast server brings), which a read loop like nats-py's
reads 32 KiB at a time, while the iterator runs as a task of its own, woken as
``BatchStream`` wakes it. No server and no pulls (so no --loop: asyncio's own
drives the tasks): only our own per-message work, which the machine's load does not
change when counted in instructions. Objects that outlive a read (the ``Msg``s
waiting to be handed out) make CPython's cyclic garbage collector run; its work is
counted too.

Each count runs ``valgrind --tool=cachegrind --cache-sim=no`` four times, reading N
and 3N messages and only making those reads; the instructions per message are the
difference of the reads minus the difference of the making, divided by 2N.

    python benchmarks/ordered_read_instructions.py --kind msg
    python benchmarks/ordered_read_instructions.py --kind hmsg --tree /tmp/base

With ``--url``, the same read from a nats-server instead (an ordered consume of the
N and 2N first messages of a stream of 100-byte ones, filled if needed; the
difference divided by N), on ``--loop``: the socket reads are then the server's,
which valgrind's slow client lets fill up.

    python benchmarks/ordered_read_instructions.py --url nats://127.0.0.1:4222 \
        --loop uvloop [--tree /tmp/base]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from _valgrind import count_instructions

#: a header block like the one a headers-only consumer gets for a 100-byte message
HEADER = b"NATS/1.0\r\nNats-Msg-Size: 100\r\n\r\n"
READ = 32768


def frame(kind: str, seq: int) -> bytes:
    reply = b"$JS.ACK.ORD.Xq8BPwdgYhWw3cO0S1H7Bd.1.%d.%d.1764168000123456789.%d" % (
        seq,
        seq,
        10**7 - seq,
    )
    if kind == "msg":
        return b"MSG ord.data 5 %s 100\r\n%s\r\n" % (reply, b"x" * 100)
    size = len(HEADER)
    return b"HMSG $KV.b.key-%07d 5 %s %d %d\r\n%s\r\n" % (seq, reply, size, size, HEADER)


def reads(kind: str, n: int) -> list[bytes]:
    whole = b"".join(frame(kind, seq) for seq in range(1, n + 1))
    return [whole[at : at + READ] for at in range(0, len(whole), READ)]


async def read(kind: str, n: int, burst: int) -> None:
    from aioclients.jetstream._ordered import OrderedConsumer, OrderedMessageStream
    from aioclients.jetstream._protocol._pull import consume_options
    from aioclients.jetstream._transport import NatsClient

    data = reads(kind, n)
    nc: Any = NatsClient()  # not connected: its parser reads a StreamReader fed by hand
    api: Any = None  # the Msgs keep it; nothing here calls it
    oc = OrderedConsumer(api, "ORD", {})
    oc._cursor.created()
    stream = OrderedMessageStream(oc, consume_options(max_messages=2000), None)
    made: Any = stream._sink(1)
    sink, columns = made if isinstance(made, tuple) else (made, None)
    came = asyncio.Event()  # what BatchStream's wake-up of the iterator does

    def woken(handler: Any) -> Any:
        def wake(*args: Any) -> None:
            handler(*args)
            came.set()

        return wake

    nc._run_handlers[5] = woken(sink)
    getattr(nc, "_paced", {})[5] = True  # as BatchStream subscribes (a checkout may not)
    if columns is not None:  # as BatchStream registers them
        nc._deliveries_handlers[5] = woken(lambda s, r, p: columns(s, r, (None,) * len(p), p))
        nc._header_deliveries_handlers[5] = woken(columns)
    reader = asyncio.StreamReader(limit=1 << 22)
    nc._ps.attach(reader)
    idle = asyncio.Event()

    async def read_loop() -> None:  # nats-py's, without its checks
        while True:
            chunk = await reader.read(READ)
            if not chunk:
                return
            await nc._ps.parse(chunk)

    async def take() -> int:
        got = 0
        while got < n:
            if not stream._take_incoming():
                if not reader._buffer:  # type: ignore[attr-defined]
                    idle.set()
                came.clear()
                await came.wait()
                continue
            while stream._ready:
                await stream.__anext__()
                got += 1
        idle.set()
        return got

    looping = asyncio.ensure_future(read_loop())
    taking = asyncio.ensure_future(take())
    for at in range(0, len(data), burst):
        # One socket read: what the event loop hands the StreamReader at once.
        reader.feed_data(b"".join(data[at : at + burst]))
        await idle.wait()
        idle.clear()
    reader.feed_eof()
    got = await taking
    await looping
    assert got == n, (got, n)


#: the stream ``--url`` reads (filled with 100-byte messages if it has too few)
SERVER_STREAM = "ORDINSTR"


async def read_from_server(url: str, n: int) -> None:
    """An ordered consume of the first ``n`` messages of the server's stream."""
    from aioclients import jetstream

    async with await jetstream.connect(url, timeout=30) as js:
        stream = await js.stream(SERVER_STREAM)
        oc = await stream.ordered_consumer()
        got = 0
        async with oc.consume(max_messages=2000) as messages:
            async for _msg in messages:
                got += 1
                if got == n:
                    break


async def fill_server(url: str, n: int) -> None:
    from aioclients import jetstream

    async with await jetstream.connect(url, timeout=30) as js:
        try:
            have = (await js.stream_info(SERVER_STREAM)).state.messages
        except jetstream.StreamNotFoundError:
            await js.create_stream(SERVER_STREAM, subjects=["ordinstr.>"], storage="file")
            have = 0
        for _ in range(n - have):
            await js.publish_async("ordinstr.data", b"x" * 100)
        await js.publish_async_complete(timeout=300)


def count(tree: str, kind: str, n: int, burst: int, only_make: bool) -> int:
    args = ["--run", kind, str(n), str(burst)] + (["--make"] if only_make else [])
    return count_instructions(__file__, args, [tree])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--run":
        kind, n, burst = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        if len(sys.argv) > 5:  # only the reads made
            reads(kind, n)
            return
        asyncio.run(read(kind, n, burst))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":  # --serve URL N LOOP
        from _loop import run_async, use_loop

        use_loop(sys.argv[4])
        run_async(read_from_server(sys.argv[2], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("msg", "hmsg"), default="msg")
    parser.add_argument("--count", type=int, default=20_000, help="N (reads of N and 3N)")
    parser.add_argument(
        "--burst",
        type=int,
        default=8,
        help="32 KiB reads per socket read (8: 256 KiB, the most the event loops take at once)",
    )
    parser.add_argument("--tree", default=os.getcwd(), help="the checkout to measure")
    parser.add_argument(
        "--url",
        help="read 100-byte messages from this nats-server instead (reads of N and 2N)",
    )
    parser.add_argument("--loop", default="asyncio", choices=("asyncio", "uvloop"))
    args = parser.parse_args()
    n = args.count
    tree = os.path.abspath(args.tree)
    if args.url:
        asyncio.run(fill_server(args.url, 2 * n))
        here = os.path.dirname(os.path.abspath(__file__))
        runs = [
            count_instructions(__file__, ["--serve", args.url, str(m), args.loop], [tree, here])
            for m in (n, 2 * n)
        ]
        print(
            f"from {args.url}, {args.loop}, {tree}: "
            f"{(runs[1] - runs[0]) / n:,.0f} instructions per message"
        )
        return
    b = args.burst
    ran = count(tree, args.kind, 3 * n, b, False) - count(tree, args.kind, n, b, False)
    made = count(tree, args.kind, 3 * n, b, True) - count(tree, args.kind, n, b, True)
    print(f"{args.kind}, {tree}: {(ran - made) / (2 * n):,.0f} instructions per message")


if __name__ == "__main__":
    main()
