"""Keyed, pipelined publishing to Liftbridge with acks and back-pressure.

Publishes 5,000 account events to a three-partition stream with ``publish_async`` and
``partitioner="key"`` (every event of one account lands in the same partition, in order).
``publish_async`` returns once the message is written and hands back a future of its ack;
with ``publish_async_window=256`` at most 256 acks are outstanding, and the next
``publish_async`` waits for room: a producer faster than the cluster is held back instead
of queueing without bound. The example counts the outstanding acks as it goes, checks
every ack, then reads each partition back and checks that every account's events arrived
in the order they were sent.

Run it against the local servers (a two-broker Liftbridge emulator among them), from a
checkout (`./run demo` or `./run test` made `.venv`), each command in a terminal of its
own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/liftbridge_publisher.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. A real
Liftbridge cluster works too; LIFTBRIDGE_BROKERS (a comma list, default
127.0.0.1:9292,127.0.0.1:9293) names its brokers.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections import defaultdict

from aioclients import liftbridge
from aioclients.liftbridge import AckPolicy, StartPosition

EVENTS = 5000
ACCOUNTS = 50
WINDOW = 256


async def publish(client: liftbridge.Client, stream: str) -> dict[int, int]:
    pending: set[asyncio.Future[liftbridge.Ack | None]] = set()
    most_outstanding = 0
    futures = []
    started = time.perf_counter()
    for i in range(EVENTS):
        account = f"account-{i % ACCOUNTS}"
        event = {"account": account, "n": i // ACCOUNTS, "amount": i % 97}
        future = await client.publish_async(  # waits while WINDOW acks are outstanding
            stream,
            json.dumps(event).encode(),
            key=account.encode(),
            partitioner="key",
            ack_policy=AckPolicy.ALL,  # acked once every in-sync replica has it
        )
        futures.append(future)
        pending = {f for f in pending if not f.done()}
        pending.add(future)
        most_outstanding = max(most_outstanding, len(pending))
    results = await asyncio.gather(*futures, return_exceptions=True)
    seconds = time.perf_counter() - started

    failed = [r for r in results if isinstance(r, BaseException)]
    per_partition: dict[int, int] = defaultdict(int)
    for ack in results:
        if isinstance(ack, liftbridge.Ack) and ack.partition is not None:
            per_partition[ack.partition] += 1
    print(
        f"published {EVENTS} events in {seconds:.2f}s ({EVENTS / seconds:,.0f} msgs/s); "
        f"at most {most_outstanding} acks outstanding (window {WINDOW}); "
        f"{len(failed)} failed; per partition: {dict(sorted(per_partition.items()))}"
    )
    if failed or most_outstanding > WINDOW or sum(per_partition.values()) != EVENTS:
        raise SystemExit(f"check failed: {failed[:3]}")
    return per_partition


async def check_order(
    client: liftbridge.Client, stream: str, per_partition: dict[int, int]
) -> None:
    """Every account's events are in one partition, in the order they were published."""
    home: dict[str, int] = {}
    last_n: dict[str, int] = {}
    for partition, count in sorted(per_partition.items()):
        async with client.subscribe(
            stream, partition=partition, start_at=StartPosition.EARLIEST, stop_offset=count - 1
        ) as sub:
            async for msg in sub:
                event = json.loads(msg.value)
                account = event["account"]
                if home.setdefault(account, partition) != partition:
                    raise SystemExit(f"check failed: {account} is in two partitions")
                if event["n"] != last_n.get(account, -1) + 1:
                    raise SystemExit(f"check failed: {account} out of order at {msg.offset}")
                last_n[account] = event["n"]
    print(f"read back: {len(home)} accounts, each in one partition, every event in order")


async def main() -> None:
    brokers = os.environ.get("LIFTBRIDGE_BROKERS", "127.0.0.1:9292,127.0.0.1:9293").split(",")
    async with await liftbridge.connect(brokers, publish_async_window=WINDOW) as client:
        stream = f"accounts-{uuid.uuid4().hex[:8]}"
        await client.create_stream(stream, stream, partitions=3)
        try:
            per_partition = await publish(client, stream)
            await check_order(client, stream, per_partition)
        finally:
            await client.delete_stream(stream)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except liftbridge.LiftbridgeConnectError as exc:  # no cluster: say so in one line
        raise SystemExit(exc) from None
