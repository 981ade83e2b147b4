"""The jetstream writer's lean publish path (no Spark) against the real nats-server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

from aioclients import jetstream
from aioclients.spark._errors import PublishFailedError
from aioclients.spark._jetstream import WriteConfig, WriteResult, _publish
from aioclients.testing import FaultProxy
from tests.jetstream.support import subscriptions_live

pytestmark = pytest.mark.spark


def _config(url: str, *, window: int = 100, timeout: float = 10.0) -> WriteConfig:
    return WriteConfig(
        servers=(url,), subject=None, timeout=timeout, max_pending=window, data_is_text=False
    )


def _batches(name: str, count: int, per_batch: int, *, msg_id: bool) -> Iterator[pa.RecordBatch]:
    for start in range(0, count, per_batch):
        rows = range(start, min(count, start + per_batch))
        columns = {
            "subject": pa.array([f"{name}.{i % 3}" for i in rows]),
            "data": pa.array([f"m{i}".encode() for i in rows], pa.binary()),
        }
        if msg_id:
            columns["msg_id"] = pa.array([f"id-{i}" for i in rows])
        yield pa.RecordBatch.from_pydict(columns)


async def test_every_row_is_published_once_through_a_small_window(
    nats_server: object, js: jetstream.JetStream, unique_name: str
) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    name = unique_name
    await js.create_stream(name, subjects=[f"{name}.>"], duplicate_window=60)
    first = await _publish(_config(url, window=64), _batches(name, 2500, 700, msg_id=True))
    assert first == WriteResult(stored=2500, duplicates=0)
    # A retried task: every row is a duplicate, every ack still counted.
    again = await _publish(_config(url, window=64), _batches(name, 2500, 700, msg_id=True))
    assert again == WriteResult(stored=0, duplicates=2500)
    info = await js.stream_info(name)
    assert info.state.messages == 2500
    msg = await (await js.stream(name)).get_msg(seq=2500)
    assert msg.data == b"m2499"
    assert msg.headers is not None
    assert msg.headers["Nats-Msg-Id"] == "id-2499"


async def test_a_publish_refused_mid_window_fails_the_task(
    nats_server: object, js: jetstream.JetStream, unique_name: str
) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    name = unique_name
    await js.create_stream(name, subjects=[f"{name}.>"], max_msgs=50, discard="new")
    with pytest.raises(PublishFailedError, match=r"publish\(es\) failed, the first with: row 50"):
        await _publish(_config(url, window=200), _batches(name, 1000, 1000, msg_id=False))
    assert (await js.stream_info(name)).state.messages == 50


@pytest.mark.fault
async def test_a_server_that_stops_answering_fails_the_task_in_time(
    nats_server: object, js: jetstream.JetStream, unique_name: str
) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    name = unique_name
    await js.create_stream(name, subjects=[f"{name}.>"])
    parts = urlsplit(url)
    async with FaultProxy(f"{parts.hostname}:{parts.port}") as proxy:

        def rows() -> Iterator[pa.RecordBatch]:
            yield from _batches(name, 100, 100, msg_id=False)
            proxy.freeze()  # the server answers nothing more
            yield from _batches(name, 100, 100, msg_id=False)

        with pytest.raises(PublishFailedError, match=r"no publish ack .* within 1\.0s"):
            await asyncio.wait_for(
                _publish(_config(f"nats://{proxy.address}", timeout=1.0), rows()), 30
            )


async def test_a_null_or_empty_subject_falls_back_on_the_option(
    nats_server: object, js: jetstream.JetStream, unique_name: str
) -> None:
    url = nats_server.url  # type: ignore[attr-defined]
    name = unique_name
    await js.create_stream(name, subjects=[f"{name}.>"])
    batch = pa.RecordBatch.from_pydict(
        {
            "subject": pa.array([f"{name}.own", "", None]),
            "data": pa.array([b"a", b"b", b"c"], pa.binary()),
        }
    )
    with_option = WriteConfig(
        servers=(url,),
        subject=f"{name}.fallback",
        timeout=10.0,
        max_pending=10,
        data_is_text=False,
    )
    assert await _publish(with_option, iter([batch])) == WriteResult(stored=3, duplicates=0)
    stream = await js.stream(name)
    subjects = [(await stream.get_msg(seq=s)).subject for s in (1, 2, 3)]
    assert subjects == [f"{name}.own", f"{name}.fallback", f"{name}.fallback"]
    with pytest.raises(PublishFailedError, match="null subject and there is no 'subject' option"):
        await _publish(_config(url), iter([batch]))


async def test_a_timeout_also_names_the_publishes_refused_before_it(
    nats_server: object, unique_name: str
) -> None:
    """Rows 0-1 go where no stream is (refused at once), rows 2-3 to a subscriber that
    never answers: the task times out, and says what was refused meanwhile."""
    import nats

    url = nats_server.url  # type: ignore[attr-defined]
    nc = await nats.connect(url)
    try:
        await nc.subscribe(f"{unique_name}.silent")
        await subscriptions_live(nc)  # not flush(): its PING can overtake the SUB
        batch = pa.RecordBatch.from_pydict(
            {
                "subject": [f"{unique_name}.nostream"] * 2 + [f"{unique_name}.silent"] * 2,
                "data": pa.array([b"a", b"b", b"c", b"d"], pa.binary()),
            }
        )
        with pytest.raises(PublishFailedError) as excinfo:
            await _publish(_config(url, timeout=1.0), iter([batch]))
        text = str(excinfo.value)
        assert "no publish ack" in text
        assert "refused before that: row 0: no stream takes the subject" in text
    finally:
        await nc.close()
