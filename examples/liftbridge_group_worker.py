"""A Liftbridge consumer-group member that commits cursors and resumes from them after a
restart.

The worker (``python examples/liftbridge_group_worker.py --worker BROKERS STREAM COUNT``)
joins the group ``billing`` with ``client.consumer(...)``, reads the partitions the group
assigns it, and commits what it processed as the group's cursors with ``checkpoint()``
after every 25 messages (at-least-once: a crash replays at most the last 25). It stops
after COUNT messages; leaving ``async with`` commits the rest and leaves the group.

Run without arguments, the example publishes 300 invoices to a two-partition stream,
runs one worker for 120 of them, shows the committed cursors, then restarts the worker
for the other 180 and checks that together they processed every invoice exactly once.
Run it against the local servers (a two-broker Liftbridge emulator among them), from a
checkout (`./run demo` or `./run test` made `.venv`), each command in a terminal of its
own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/liftbridge_group_worker.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. A real
Liftbridge cluster works too; LIFTBRIDGE_BROKERS (a comma list, default
127.0.0.1:9292,127.0.0.1:9293) names its brokers.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import uuid

from aioclients import liftbridge
from aioclients.liftbridge import StartPosition

GROUP = "billing"
INVOICES = 300
FIRST_RUN = 120
COMMIT_EVERY = 25


# -- the worker -------------------------------------------------------------------------------


async def worker(brokers: list[str], stream: str, count: int) -> None:
    async with await liftbridge.connect(brokers) as client:
        member = client.consumer(
            GROUP,
            [stream],
            auto_offset=StartPosition.EARLIEST,  # where a partition without a cursor starts
            checkpoint_interval=None,  # commit explicitly, after processing
        )
        async with member:  # joins the group; leaving commits and leaves the group
            print(f"worker: assigned {member.assignments}", flush=True)
            processed = 0
            while processed < count:
                # A bounded wait: a member that hears nothing for 20 s gives up.
                msg = await asyncio.wait_for(anext(member), timeout=20)
                print(f"processed {msg.partition}:{msg.offset} {msg.value.decode()}", flush=True)
                processed += 1
                if processed % COMMIT_EVERY == 0:
                    await member.checkpoint()  # the cursors now say: done up to here


# -- the self-contained demonstration ---------------------------------------------------------


async def run_worker(brokers: list[str], stream: str, count: int) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--worker",
        ",".join(brokers),
        stream,
        str(count),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
    lines = out.decode().splitlines()
    if proc.returncode:
        raise SystemExit(f"the worker failed ({proc.returncode}): {lines[-3:]}")
    print(lines[0])
    return [line for line in lines if line.startswith("processed ")]


async def cursors(client: liftbridge.Client, stream: str) -> dict[int, int]:
    cursor_id = f"__group:{GROUP}"  # the cursor id a group commits under
    return {p: await client.fetch_cursor(cursor_id, stream, p) for p in (0, 1)}


async def demonstrate() -> None:
    brokers = os.environ.get("LIFTBRIDGE_BROKERS", "127.0.0.1:9292,127.0.0.1:9293").split(",")
    async with await liftbridge.connect(brokers) as client:
        stream = f"invoices-{uuid.uuid4().hex[:8]}"
        await client.create_stream(stream, stream, partitions=2)
        try:
            futures = [
                await client.publish_async(stream, b"invoice-%d" % i, partition=i % 2)
                for i in range(INVOICES)
            ]
            await asyncio.gather(*futures)
            print(f"published {INVOICES} invoices to {stream} (2 partitions)")

            first = await run_worker(brokers, stream, FIRST_RUN)
            committed = await cursors(client, stream)
            print(f"run 1 processed {len(first)}; the group's cursors: {committed}")
            second = await run_worker(brokers, stream, INVOICES - FIRST_RUN)
            print(f"run 2 (restarted) processed {len(second)}, resuming after those cursors")
        finally:
            await client.delete_stream(stream)

    seen = collections.Counter(line.split()[2] for line in first + second)
    twice = sorted(invoice for invoice, n in seen.items() if n > 1)
    missing = INVOICES - len(seen)
    if twice or missing:
        raise SystemExit(f"check failed: processed twice {twice[:5]}, missing {missing}")
    print(f"every one of the {INVOICES} invoices was processed exactly once across the restart")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        asyncio.run(worker(sys.argv[2].split(","), sys.argv[3], int(sys.argv[4])))
    else:
        try:
            asyncio.run(demonstrate())
        except liftbridge.LiftbridgeConnectError as exc:  # no cluster: say so in one line
            raise SystemExit(exc) from None
