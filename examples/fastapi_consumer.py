"""A FastAPI app that runs a JetStream consumer as a background task in its lifespan.

The app publishes orders through ``POST /orders`` and a background consumer
(started when the app starts, drained when it stops) keeps running totals that
``GET /stats`` reports. Serve it with uvicorn:

    NATS_URL=nats://127.0.0.1:4222 uvicorn examples.fastapi_consumer:app

Run as a script, it starts the app on a free port, posts 50 orders over HTTP,
waits until the consumer has counted them all, prints the totals and shuts
the server down (which drains the consumer).
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
    js = await jetstream.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
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
        js = await jetstream.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
        async with js:
            await js.delete_stream(STREAM)


if __name__ == "__main__":
    STREAM = f"WEBORDERS_{os.getpid()}"
    asyncio.run(demo())
