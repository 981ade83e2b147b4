"""A FastAPI app that runs a JetStream consumer as a background task in its lifespan.

The app publishes orders through ``POST /orders`` and a background consumer
(started when the app starts, drained when it stops) keeps running totals that
``GET /stats`` reports.

Run it against the local servers, from a checkout (`./run demo` or `./run test` made
`.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/fastapi_consumer.py

Run as a script, it starts the app on a free port, posts 50 orders over HTTP, waits
until the consumer has counted them all, prints the totals and shuts the server down
(which drains the consumer). To serve it for your own requests instead:

    .venv/bin/uvicorn --app-dir examples fastapi_consumer:app

With pip: `pip install "aioclients[servers]" fastapi uvicorn`, then the same without
`.venv/bin/`. Any nats-server with JetStream works too; NATS_URL (default
nats://127.0.0.1:4222) names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import uvicorn
from fastapi import FastAPI

from aioclients import jetstream

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
STREAM = os.environ.get("ORDERS_STREAM", "WEBORDERS")
stats: dict[str, Any] = {"orders": 0, "revenue": 0.0}


async def consume_orders(messages: jetstream.MessageStream) -> None:
    async for msg in messages:
        order = json.loads(msg.data)
        stats["orders"] += 1
        stats["revenue"] += order["amount"]
        await msg.ack()


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    js = await jetstream.connect(NATS_URL)
    await js.create_stream(STREAM, subjects=[f"{STREAM}.>"])
    consumer = await js.create_or_update_consumer(
        STREAM, durable_name="web-stats", ack_policy="explicit"
    )
    app.state.js = js
    async with consumer.consume(max_messages=100) as messages:
        task = asyncio.create_task(consume_orders(messages))
        try:
            yield
        finally:
            await messages.drain()  # stop pulling, finish what was received
            await task
    await js.close()


app = FastAPI(lifespan=lifespan)


@app.post("/orders")
async def create_order(order: dict[str, Any]) -> dict[str, int]:
    ack = await app.state.js.publish(f"{STREAM}.new", json.dumps(order).encode())
    return {"seq": ack.seq}


@app.get("/stats")
async def get_stats() -> dict[str, Any]:
    return stats


async def demo() -> None:
    # Connecting first: without a server this fails at once, before uvicorn starts.
    async with await jetstream.connect(NATS_URL) as js:
        await js.create_stream(STREAM, subjects=[f"{STREAM}.>"])
        try:
            await post_orders_and_check()
        finally:
            await js.delete_stream(STREAM)


async def post_orders_and_check() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(100):  # wait for the server to accept connections
                if server.started:
                    break
                await asyncio.sleep(0.05)
            for i in range(50):
                async with http.post(f"{base}/orders", json={"id": i, "amount": 10.0}) as resp:
                    resp.raise_for_status()
            for _ in range(200):  # the consumer counts them in the background
                async with http.get(f"{base}/stats") as resp:
                    current = await resp.json()
                if current["orders"] >= 50:
                    break
                await asyncio.sleep(0.05)
        print(f"consumer counted {current['orders']} orders, revenue {current['revenue']:.2f}")
        if current["orders"] != 50:
            raise SystemExit("the background consumer did not see every order")
    finally:
        server.should_exit = True
        await serving


if __name__ == "__main__":
    STREAM = f"WEBORDERS_{os.getpid()}"
    try:
        asyncio.run(demo())
    except jetstream.JetStreamConnectError as exc:  # no server: say so in one line
        raise SystemExit(exc) from None
