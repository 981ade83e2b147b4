"""A service that keeps its configuration in a JetStream Key-Value bucket and
reacts to changes through ``watch``.

The service seeds defaults with ``create`` (only where a key is absent, so a
restart never overwrites what an operator set), loads the current values, and
applies every later change as it arrives. An "operator" then changes the
configuration with optimistic concurrency (``update`` with the revision it
read) and removes a feature flag; the service sees both and the run ends.

Run it against the local servers, from a checkout (`./run demo` or `./run test` made
`.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/jetstream_kv_config_service.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. Any
nats-server with JetStream works too; NATS_URL (default nats://127.0.0.1:4222) names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid

from aioclients import jetstream
from aioclients.jetstream import KeyExistsError, KeyValue, KeyWrongRevisionError

DEFAULTS = {
    "http.port": b"8080",
    "db.pool_size": b"10",
    "feature.new_checkout": b"off",
}


class ConfigService:
    """Holds the live configuration; ``ready`` is set once the bucket's values are in."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv
        self.config: dict[str, bytes] = {}
        self.revision = 0  # the last revision applied
        self.ready = asyncio.Event()
        self.changed = asyncio.Condition()

    async def seed_defaults(self) -> None:
        for key, value in DEFAULTS.items():
            with contextlib.suppress(KeyExistsError):  # keep what is there
                await self.kv.create(key, value)

    async def run(self) -> None:
        async with self.kv.watch() as watcher:
            if watcher.initial_done.is_set():  # an empty bucket
                self.ready.set()
            async for entry in watcher:
                if entry.operation == "PUT":
                    self.config[entry.key] = entry.value
                else:  # DEL or PURGE: back to "not configured"
                    self.config.pop(entry.key, None)
                self.revision = entry.revision
                if self.ready.is_set():
                    print(f"service: {entry.key} -> {entry.operation} {entry.value!r}")
                elif watcher.initial_done.is_set():
                    self.ready.set()
                async with self.changed:
                    self.changed.notify_all()

    async def wait_for_revision(self, revision: int, timeout: float = 10.0) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: self.revision >= revision), timeout
            )


async def operator_raises_pool_size(kv: KeyValue) -> int:
    """Read-modify-write that never loses a concurrent change."""
    while True:
        entry = await kv.get("db.pool_size")
        new = str(int(entry.value) * 2).encode()
        try:
            return await kv.update("db.pool_size", new, entry.revision)
        except KeyWrongRevisionError:
            continue  # someone else changed it meanwhile: read again


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    bucket = f"config_{uuid.uuid4().hex[:8]}"
    async with await jetstream.connect(url) as js:
        kv = await js.create_key_value(bucket, history=5)
        try:
            service = ConfigService(kv)
            await service.seed_defaults()
            task = asyncio.create_task(service.run())
            try:
                await asyncio.wait_for(service.ready.wait(), 10)
                print(f"service: loaded {len(service.config)} settings: {sorted(service.config)}")

                revision = await operator_raises_pool_size(kv)
                await kv.delete("feature.new_checkout")
                await service.wait_for_revision(revision + 1)

                assert service.config["db.pool_size"] == b"20"
                assert "feature.new_checkout" not in service.config
                history = [e.value for e in await kv.history("db.pool_size")]
                print(f"service: now {service.config}; db.pool_size history {history}")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            await js.delete_key_value(bucket)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except jetstream.JetStreamConnectError as exc:  # no server: say so in one line
        raise SystemExit(exc) from None
