"""An asyncio consumer service with graceful shutdown on SIGTERM.

The service consumes orders from a durable JetStream consumer and acks each one
after handling it. On SIGTERM (or Ctrl-C) it stops pulling, finishes the
messages already received, and exits: nothing is lost, and whatever was not
received yet stays on the server for the next start. (A message the server was
sending at the very moment the subscription closed never arrives: it counts as
unacknowledged and is redelivered after ``ack_wait``, as with any JetStream client.)

Run it against the local servers, from a checkout (`./run demo` or `./run test` made
`.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/jetstream_consumer_service.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. Any
nats-server with JetStream works too; NATS_URL (default nats://127.0.0.1:4222) names it.

As a self-contained demo it publishes 200 orders first and sends itself
SIGTERM after handling 120 of them (set ``DEMO=0`` to run as a plain service
until you stop it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import uuid

from aioclients import jetstream

log = logging.getLogger("orders-service")


async def handle(order: dict[str, object]) -> None:
    """The business logic: here, pretend to bill the order."""
    await asyncio.sleep(0)


async def serve(js: jetstream.JetStream, stream_name: str, *, stop_after: int | None) -> int:
    consumer = await js.create_or_update_consumer(
        stream_name, durable_name="billing", ack_policy="explicit", ack_wait=30
    )
    handled = 0
    async with consumer.consume(max_messages=50) as messages:
        loop = asyncio.get_running_loop()
        shutdown = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, shutdown.set)

        async def drain_on_signal() -> None:
            await shutdown.wait()
            log.info("shutdown requested: finishing received messages")
            await messages.drain()  # no new pulls; buffered messages still come through

        drainer = asyncio.create_task(drain_on_signal())
        try:
            async for msg in messages:
                await handle(json.loads(msg.data))
                # Confirmed by the server: once the loop ends, every ack counted here is
                # in the consumer's state (a plain ack() may still be on its way).
                await msg.ack_sync()
                handled += 1
                if stop_after is not None and handled == stop_after:
                    os.kill(os.getpid(), signal.SIGTERM)  # the demo stops itself
        finally:
            drainer.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
    return handled


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    demo = os.environ.get("DEMO", "1") != "0"
    name = f"SERVICE_{uuid.uuid4().hex[:8]}" if demo else "ORDERS"
    async with await jetstream.connect(url) as js:
        if demo:
            await js.create_stream(name, subjects=[f"{name}.>"])
        try:
            if demo:
                for i in range(200):
                    await js.publish_async(f"{name}.new", json.dumps({"id": i}).encode())
                await js.publish_async_complete(timeout=10)
            handled = await serve(js, name, stop_after=120 if demo else None)
            info = await (await js.consumer(name, "billing")).info()
            print(
                f"handled and acked {handled} orders; {info.num_pending} still on the server, "
                f"{info.num_ack_pending} in flight at shutdown (redelivered after ack_wait)"
            )
            # Every order is handled (and its ack counted by the server), still
            # pending, or in flight; an ack lost on the way would count twice.
            if demo and handled + info.num_pending + info.num_ack_pending != 200:
                raise SystemExit("orders went missing, or an ack was lost")
        finally:
            if demo:
                await js.delete_stream(name)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except jetstream.JetStreamConnectError as exc:  # no server: say so in one line
        raise SystemExit(exc) from None
