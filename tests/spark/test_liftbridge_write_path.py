"""The liftbridge writer's publish path (no Spark) against the broker of ``liftbridge_cluster``
(the emulator, or ``AIOCLIENTS_TEST_LIFTBRIDGE``): every ack counted, every failure fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pyarrow as pa
import pytest

from aioclients import liftbridge
from aioclients.spark._errors import PublishFailedError
from aioclients.spark._liftbridge import WriteConfig, WriteResult, _publish

pytestmark = pytest.mark.spark


def _config(addresses: list[str], stream: str, *, window: int) -> WriteConfig:
    return WriteConfig(
        brokers=tuple(addresses),
        stream=stream,
        partitioner=None,
        timeout=10.0,
        max_pending=window,
        text_columns=frozenset(),
    )


def _values(count: int, per_batch: int) -> Iterator[pa.RecordBatch]:
    for start in range(0, count, per_batch):
        values = [f"m{i}".encode() for i in range(start, min(count, start + per_batch))]
        yield pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})


@pytest.fixture
async def stream(liftbridge_cluster: object, unique_name: str) -> AsyncIterator[str]:
    addresses = liftbridge_cluster.addresses  # type: ignore[attr-defined]
    async with await liftbridge.connect(addresses) as client:
        await client.create_stream(unique_name, unique_name)
        yield unique_name
        try:
            await client.delete_stream(unique_name)
        except liftbridge.NoSuchStreamError:
            pass


async def test_every_value_is_published_in_order_through_a_small_window(
    liftbridge_cluster: object, stream: str
) -> None:
    addresses = liftbridge_cluster.addresses  # type: ignore[attr-defined]
    result = await _publish(_config(addresses, stream, window=16), _values(2000, 700))
    assert result == WriteResult(published=2000)
    async with await liftbridge.connect(addresses) as client:
        sub = client.subscribe(stream, start_at=liftbridge.StartPosition.EARLIEST, stop_offset=1999)
        async with sub:
            got = [message.value async for message in sub]
    assert got == [f"m{i}".encode() for i in range(2000)]


async def test_a_refused_value_fails_the_task_naming_its_row(
    liftbridge_cluster: object, unique_name: str
) -> None:
    # No such stream: the broker answers every publish with an asyncError.
    addresses = liftbridge_cluster.addresses  # type: ignore[attr-defined]
    with pytest.raises(
        PublishFailedError, match=r"liftbridge stream .* first was row 0 to partition 0"
    ):
        await _publish(_config(addresses, f"{unique_name}-missing", window=16), _values(600, 600))
