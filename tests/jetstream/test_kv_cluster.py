"""KV ``keys()`` of a bucket of 3 replicas on a 3-node cluster (routes on loopback).

The look at the stream that gives the listing's snapshot is answered by the stream
leader, while the listing's consumer (R1) is placed on any of the 3 replicas: these
check that the listing is the bucket's exact snapshot all the same, asking the server
to name no key when nothing changes, and through a leader change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from support import ApiRequests, cluster_servers, when_cluster_ready

from aioclients._errors import AioClientsError
from aioclients.jetstream import (
    JetStream,
    KeyExistsError,
    KeyValue,
    WrongLastSequenceError,
    connect,
)
from aioclients.jetstream import _kv as kv_module
from aioclients.jetstream._ordered import SnapshotReader, initial_pending
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import NATS_URL_ENV

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]

#: keys written by :func:`_fill`: above the 1,024 of one multi_last answer, so that
#: ``keys()`` reads its consumer
KEYS = 3000


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[NatsServer]]:
    """One cluster for the module: it takes some 5 s to elect its meta leader."""
    if os.environ.get(NATS_URL_ENV):
        pytest.skip(f"starts nats-servers of its own configuration; {NATS_URL_ENV} is set")
    servers = cluster_servers()
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.close()


@pytest.fixture
async def bucket(
    cluster: list[NatsServer], unique_name: str
) -> AsyncIterator[tuple[JetStream, KeyValue]]:
    """A bucket of 3 replicas keeping 5 revisions, and a context on ``n0``."""
    js = await connect(cluster[0].url, timeout=5.0)
    name = unique_name.replace(".", "_")[-60:]
    try:
        kv = await when_cluster_ready(
            lambda: js.create_key_value(name, history=5, replicas=3), timeout=60
        )
        yield js, kv
    finally:
        with contextlib.suppress(AioClientsError):
            await js.delete_key_value(name)
        await js.close()


async def _fill(js: JetStream, kv: KeyValue) -> set[str]:
    """``k0``..``k2999``, of which 60 deleted and 40 purged, listed once (the handle
    lists through its consumer from then on); the keys that hold a value."""
    futures = [await js.publish_async(f"$KV.{kv.bucket}.k{i}", b"v") for i in range(KEYS)]
    await asyncio.gather(*futures)
    for i in range(60):
        await kv.delete(f"k{i}")
    for i in range(60, 100):
        await kv.purge(f"k{i}")
    keys = {f"k{i}" for i in range(100, KEYS)}
    assert await _listed(kv) == keys
    return keys


async def _listed(kv: KeyValue, *filters: str) -> set[str]:
    """``kv.keys(*filters)``, each key once, bounded in time."""

    async def read() -> list[str]:
        return [key async for key in kv.keys(*filters)]

    keys = await asyncio.wait_for(read(), 30)
    assert len(keys) == len(set(keys)), "a key listed twice"
    return set(keys)


async def _listed_with_requests(
    js: JetStream, kv: KeyValue, url: str
) -> tuple[set[str], list[str]]:
    """:func:`_listed`, and the kinds of JetStream API requests on the bucket's stream
    meanwhile (seen by a spy connected to ``url``)."""
    spy = await ApiRequests.open(url, f"KV_{kv.bucket}")
    try:
        keys = await _listed(kv)
        return keys, await spy.kinds(js)
    finally:
        await spy.close()


async def test_keys_of_an_unchanged_replicated_bucket_name_no_keys(
    bucket: tuple[JetStream, KeyValue], cluster: list[NatsServer]
) -> None:
    js, kv = bucket
    expected = await _fill(js, kv)
    keys, kinds = await _listed_with_requests(js, kv, cluster[0].url)
    assert keys == expected
    # The look, a consumer (again for one that read a replica still catching up,
    # or replaced) and a second look; the keys never named.
    assert "named" not in kinds
    assert kinds[:2] == ["info", "create"]
    assert kinds[-1] == "info"


class _AtFirstBatch(SnapshotReader):
    """A SnapshotReader that runs ``then`` once, after its first batch of keys."""

    then: Any = None

    async def next_batch(self) -> list[str] | None:
        keys = await super().next_batch()
        then, _AtFirstBatch.then = _AtFirstBatch.then, None
        if keys is not None and then is not None:
            await then()
        return keys


async def test_keys_written_while_the_listing_reads_are_listed_as_the_model_says(
    bucket: tuple[JetStream, KeyValue],
    cluster: list[NatsServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys put, put again, deleted and purged once the consumer delivered its
    first keys: the second look shows the change, the subjects are named, and that
    answer (after every write) is the snapshot, read by a new consumer."""
    js, kv = bucket
    model = await _fill(js, kv)

    async def write() -> None:
        for i in range(20):
            await kv.put(f"new{i}", b"1")  # created
            model.add(f"new{i}")
            await kv.put(f"k{100 + i}", b"2")  # put again
            await kv.put(f"k{i}", b"2")  # deleted before, put again
            model.add(f"k{i}")
            await kv.delete(f"k{200 + i}")
            model.discard(f"k{200 + i}")
            await kv.delete(f"k{KEYS - 1 - i}")  # the last keys: not read yet
            model.discard(f"k{KEYS - 1 - i}")
        for i in range(10):
            await kv.purge(f"k{300 + i}")
            model.discard(f"k{300 + i}")

    _AtFirstBatch.then = write
    monkeypatch.setattr(kv_module, "SnapshotReader", _AtFirstBatch)
    keys, kinds = await _listed_with_requests(js, kv, cluster[0].url)
    assert _AtFirstBatch.then is None  # the writes ran
    assert keys == model
    assert kinds.count("named") == 1
    at = kinds.index("named")
    # The second look, the keys named, and a new consumer (maybe replaced).
    assert kinds[at - 1 : at + 2] == ["info", "named", "create"]
    assert set(kinds[at + 2 :]) <= {"create"}


async def _leader(kv: KeyValue) -> str:
    cluster = (await kv.stream.info()).cluster
    assert cluster is not None
    leader: str = cluster.get("leader", "")
    return leader


@pytest.mark.parametrize("when", ["reading", "looking again"])
async def test_keys_while_the_stream_leader_steps_down(
    bucket: tuple[JetStream, KeyValue], monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """The stream leader steps down while the consumer is read, or right before
    the second look: the listing is exact, or fails with a clear error (never a
    wrong list, never a hang), and the next one is exact."""
    js, kv = bucket
    expected = await _fill(js, kv)
    before = await _leader(kv)
    answers: list[Any] = []

    async def step_down() -> None:
        reply = await js.nc.request(
            f"$JS.API.STREAM.LEADER.STEPDOWN.KV_{kv.bucket}", b"", timeout=5
        )
        answers.append(json.loads(reply.data))

    if when == "reading":
        _AtFirstBatch.then = step_down
        monkeypatch.setattr(kv_module, "SnapshotReader", _AtFirstBatch)
    else:
        real_info = kv._api.stream_info
        looks = 0

        async def stream_info(name: str, **kwargs: Any) -> Any:
            nonlocal looks
            looks += 1
            if looks == 2:
                await step_down()
            return await real_info(name, **kwargs)

        monkeypatch.setattr(kv._api, "stream_info", stream_info)
    try:
        keys: set[str] | None = await _listed(kv)
    except AioClientsError:
        keys = None  # no leader to answer for a moment: a clear error
    assert answers, "no step-down"
    assert answers[0].get("success") is True, answers
    if keys is not None:
        assert keys == expected
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:  # the other two elect a new leader
        with contextlib.suppress(AioClientsError):
            if (await _leader(kv)) not in ("", before):
                break
        assert loop.time() < deadline, "no new stream leader"
        await asyncio.sleep(0.1)
    assert await _listed(kv) == expected


@pytest.mark.parametrize("filters", [(), ("*",)], ids=["whole", "filtered"])
async def test_keys_right_after_writes_a_follower_has_yet_to_apply(
    bucket: tuple[JetStream, KeyValue],
    cluster: list[NatsServer],
    monkeypatch: pytest.MonkeyPatch,
    filters: tuple[str, ...],
) -> None:
    """A follower paused while keys are deleted and put (the other two make the
    quorum) is still catching up when it resumes; a listing at once may have its
    consumer placed there, with a skip list older than the leader's look. The
    listing is exact all the same. Rounds go on until a consumer was seen on that
    follower with fewer keys pending than the bucket holds (at most 8). Every key
    is one token, so the filter ``*`` lists them all, through the filtered path
    (the check against the filter's newest message, not the stream's last)."""
    js, kv = bucket
    model = await _fill(js, kv)
    subjects = KEYS  # one a key ever written, markers included
    leader = await _leader(kv)
    follower = next(i for i in (1, 2) if f"n{i}" != leader)  # the client is on n0
    seen: list[tuple[str, int]] = []
    open_consumer = kv_module.open_ordered_consumer

    async def opened(*args: Any, **kwargs: Any) -> Any:
        oc = await open_consumer(*args, **kwargs)
        host = (oc._consumer.cached_info.cluster or {}).get("leader", "")
        seen.append((host, initial_pending(oc)))
        return oc

    monkeypatch.setattr(kv_module, "open_ordered_consumer", opened)
    for round_ in range(8):
        await asyncio.to_thread(cluster[follower].pause)
        try:
            futures = [
                await js.publish_async(f"$KV.{kv.bucket}.r{round_}_{i}", b"v") for i in range(2000)
            ]
            await asyncio.wait_for(asyncio.gather(*futures), 20)
            model.update(f"r{round_}_{i}" for i in range(2000))
            subjects += 2000
            for i in range(100 + 100 * round_, 150 + 100 * round_):
                await kv.delete(f"k{i}")
                model.discard(f"k{i}")
        finally:
            cluster[follower].resume()
        del seen[:]
        assert await _listed(kv, *filters) == model
        if any(host == f"n{follower}" and pending < subjects for host, pending in seen):
            break


async def test_racing_creates_on_a_replicated_bucket_lose_with_key_exists(
    bucket: tuple[JetStream, KeyValue],
) -> None:
    """On a replicated stream the leader refuses a write whose expected sequence
    meets one still in flight with err_code 10164 ("wrong last sequence", no
    number) rather than 10071: a racing create() loses with KeyExistsError all the
    same, as nats.go's Create does, and a publish with WrongLastSequenceError."""
    js, kv = bucket
    codes: set[int | None] = set()
    for attempt in range(20):  # until the server has answered with 10164
        key = f"race{attempt}"
        results = await asyncio.gather(
            *(kv.create(key, b"%d" % i) for i in range(30)), return_exceptions=True
        )
        won = [r for r in results if isinstance(r, int)]
        lost = [r for r in results if not isinstance(r, int)]
        assert len(won) == 1, results
        assert all(isinstance(r, KeyExistsError) for r in lost), lost
        codes |= {r.err_code for r in lost if isinstance(r, KeyExistsError)}
        futures = [
            await js.publish_async(f"$KV.{kv.bucket}.{key}", b"x", expected_last_subject_seq=0)
            for _ in range(10)
        ]
        refused = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(r, WrongLastSequenceError) for r in refused), refused
        codes |= {r.err_code for r in refused if isinstance(r, WrongLastSequenceError)}
        if 10164 in codes:
            break
    assert 10164 in codes, codes
