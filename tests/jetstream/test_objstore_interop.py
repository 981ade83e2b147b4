"""Object Store interop with nats-py 2.16 on the same nats-server: a store written
by one client is read, listed and watched by the other, both ways round (links,
metadata, deletes, a sealed store). nats-py's own rename is broken, so renames
go only from us to nats-py."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from collections.abc import AsyncIterator

import nats
import pytest
from nats.js import api as nats_api
from nats.js.errors import BadRequestError
from nats.js.errors import LinkIsABucketError as NatsLinkIsABucketError
from nats.js.errors import ObjectNotFoundError as NatsObjectNotFoundError
from nats.js.object_store import ObjectStore as NatsObjectStore

from aioclients.jetstream import (
    BucketNotFoundError,
    BucketSealedError,
    JetStream,
    LinkIsABucketError,
    ObjectDeletedError,
    ObjectNotFoundError,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def bucket(unique_name: str) -> str:
    return unique_name.replace(".", "_")[-50:]


@pytest.fixture
async def nc(nats_server: object) -> AsyncIterator[nats.NATS]:
    client = await nats.connect(nats_server.url)  # type: ignore[attr-defined]
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def cleanup(js: JetStream, bucket: str) -> AsyncIterator[None]:
    yield
    for name in (bucket, bucket + "_2"):
        with contextlib.suppress(BucketNotFoundError):
            await js.delete_object_store(name)


@pytest.mark.usefixtures("cleanup")
async def test_nats_py_objects_are_read_listed_and_watched_by_us(
    js: JetStream, nc: nats.NATS, bucket: str
) -> None:
    theirs: NatsObjectStore = await nc.jetstream().create_object_store(bucket)
    big = os.urandom(700_000)  # six chunks of nats-py's 128 KiB
    await theirs.put(
        "big/one",
        big,
        meta=nats_api.ObjectMeta(
            name="big/one", description="from nats-py", headers={"X-Kind": "blob"}
        ),
    )
    await theirs.put("file", io.BytesIO(b"from a file"))
    await theirs.put("gone", b"soon deleted")
    await theirs.delete("gone")

    store = await js.object_store(bucket)
    async with store.get("big/one") as obj:
        assert obj.info.size == 700_000
        assert obj.info.chunks == 6
        assert obj.info.description == "from nats-py"
        assert obj.info.headers == {"X-Kind": "blob"}
        chunks = [c async for c in obj]
    assert len(chunks) == 6
    assert b"".join(chunks) == big
    assert await store.get_bytes("file") == b"from a file"
    with pytest.raises(ObjectDeletedError):
        await store.get_bytes("gone")
    assert [i.name async for i in store.list()] == ["big/one", "file"]
    listed = {i.name: i.deleted async for i in store.list(show_deleted=True)}
    assert listed == {"big/one": False, "file": False, "gone": True}

    async with store.watch() as watcher:
        initial = [await asyncio.wait_for(watcher.__anext__(), 10) for _ in range(3)]
        assert watcher.initial_done.is_set()
        await theirs.put("later", b"x")
        update = await asyncio.wait_for(watcher.__anext__(), 10)
    assert [i.name for i in initial] == ["big/one", "file", "gone"]
    assert update.name == "later"

    # a store nats-py sealed takes no writes from us
    await theirs.seal()
    with pytest.raises(BucketSealedError):
        await store.put("new", b"x")
    assert (await store.status()).sealed


@pytest.mark.usefixtures("cleanup")
async def test_our_objects_are_read_by_nats_py(js: JetStream, nc: nats.NATS, bucket: str) -> None:
    store = await js.create_object_store(bucket)
    other = await js.create_object_store(bucket + "_2")
    big = os.urandom(1_000_000)
    await store.put(
        "big",
        big,
        description="from aioclients",
        headers={"X-Kind": "blob"},
        metadata={"owner": "us"},
        chunk_size=100_000,
    )
    await store.put("small", b"small")
    await store.put("old-name", b"renamed")
    await store.update_meta("old-name", new_name="new-name", description="renamed by us")
    target = await other.put("target", b"linked data")
    await store.add_link("link", target)
    await store.add_bucket_link("everything", other)
    await store.put("gone", b"x")
    await store.delete("gone")

    theirs: NatsObjectStore = await nc.jetstream().object_store(bucket)
    result = await theirs.get("big")  # nats-py checks the digest itself
    assert result.data == big
    assert result.info.size == 1_000_000
    assert result.info.chunks == 10
    assert result.info.description == "from aioclients"
    assert result.info.headers == {"X-Kind": ["blob"]}  # nats.go's wire form
    assert (await theirs.get("small")).data == b"small"
    renamed = await theirs.get("new-name")
    assert renamed.data == b"renamed"
    assert renamed.info.description == "renamed by us"
    with pytest.raises(NatsObjectNotFoundError):
        await theirs.get_info("old-name")
    assert (await theirs.get("link")).data == b"linked data"
    with pytest.raises(NatsLinkIsABucketError):
        await theirs.get("everything")
    with pytest.raises(NatsObjectNotFoundError):
        await theirs.get_info("gone")
    assert (await theirs.get_info("gone", show_deleted=True)).deleted
    names = sorted(i.name for i in await theirs.list(ignore_deletes=True))
    assert names == ["big", "everything", "link", "new-name", "small"]

    # our links in our own reads, too
    assert await store.get_bytes("link") == b"linked data"
    with pytest.raises(LinkIsABucketError):
        await store.get_bytes("everything")

    # a store we sealed takes no writes from nats-py
    await store.seal()
    with pytest.raises(BadRequestError):
        await theirs.put("new", b"x")
    with pytest.raises(ObjectNotFoundError):
        await store.info("new")
