"""How many partitions a jetstream batch read gets without ``numPartitions`` (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aioclients.spark._protocol._partitions import (
    ROWS_PER_PARTITION,
    WALK_PER_PARTITION,
    partition_count,
    rows_matter,
)

parallelism = st.integers(min_value=1, max_value=64)
sizes = st.integers(min_value=0, max_value=10**9)


@given(parallelism, sizes, st.none() | sizes)
def test_between_one_and_the_parallelism(cores: int, walked: int, rows: int | None) -> None:
    assert 1 <= partition_count(cores, walked, rows) <= cores


@given(parallelism, sizes, sizes, sizes, sizes)
def test_more_walk_or_more_rows_never_means_fewer_partitions(
    cores: int, walked: int, more_walked: int, rows: int, more_rows: int
) -> None:
    walked, more_walked = sorted((walked, more_walked))
    rows, more_rows = sorted((rows, more_rows))
    assert partition_count(cores, walked, rows) <= partition_count(cores, more_walked, more_rows)


@given(parallelism, sizes, sizes)
def test_rows_are_asked_for_only_when_they_can_change_the_answer(
    cores: int, walked: int, rows: int
) -> None:
    if not rows_matter(cores, walked):
        assert partition_count(cores, walked, rows) == partition_count(cores, walked) == cores


@given(parallelism, sizes)
def test_an_unfiltered_read_is_split_by_its_rows_as_before(cores: int, size: int) -> None:
    """Without a subject filter the server walks exactly the rows it sends."""
    assert partition_count(cores, size, size) == max(1, min(cores, -(-size // ROWS_PER_PARTITION)))


@given(parallelism, st.integers(min_value=0, max_value=ROWS_PER_PARTITION))
def test_a_narrow_selection_over_a_wide_range_gets_every_core(cores: int, rows: int) -> None:
    assert partition_count(cores, cores * WALK_PER_PARTITION, rows) == cores
    assert not rows_matter(cores, cores * WALK_PER_PARTITION)


@given(
    parallelism,
    st.integers(min_value=0, max_value=WALK_PER_PARTITION),
    st.integers(min_value=0, max_value=ROWS_PER_PARTITION),
)
def test_a_small_read_stays_one_partition(cores: int, walked: int, rows: int) -> None:
    assert partition_count(cores, walked, rows) == 1


def test_examples() -> None:
    # One subject of 100 over 1M messages: 10,000 rows, the walk of 1M.
    assert partition_count(2, 1_000_000, 10_000) == 2
    assert partition_count(8, 1_000_000, 10_000) == 4
    # Five subjects in one IN list over 200,000 messages: five passes.
    assert partition_count(8, 5 * 200_000, 2_000) == 4
    assert partition_count(8, 200_000, 50_000) == 3
    assert rows_matter(8, 1_000_000)
    assert not rows_matter(4, 1_000_000)
    assert partition_count(1, 10**9, 10**9) == 1
    assert not rows_matter(1, 10**9)
