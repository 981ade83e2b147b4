"""The emulator's partition log (pure): segments, the cleaner, retention and compaction as
Liftbridge v1.9.0's ``server/commitlog`` does them, on a fake clock (ns)."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients.liftbridge._protocol._crc32c import crc32c
from aioclients.testing._liftbridge_log import (
    DEFAULT_CLEANER_INTERVAL,
    DEFAULT_RETENTION_MAX_AGE,
    DEFAULT_SEGMENT_MAX_BYTES,
    PLAIN_RECORD_SIZE,
    LogConfig,
    LogReader,
    SegmentClosedError,
    SegmentedLog,
    TimestampLookupError,
    record_size,
)

SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND  # a wall-clock time, ns


def server_record(
    offset: int, timestamp: int, key: bytes | None, value: bytes, headers: dict[str, bytes]
) -> bytes:
    """The bytes Liftbridge v1.9.0 writes to a segment for one message: the message set
    header (offset, timestamp, leader epoch, size) and the encoded message (crc, magic,
    attributes, key, value, headers), big-endian."""
    body = struct.pack(">bb", 1, 0)
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", len(value)) + value
    body += struct.pack(">h", len(headers))
    for name, header in headers.items():
        raw = name.encode()
        body += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(header)) + header
    message = struct.pack(">I", crc32c(body)) + body
    return struct.pack(">QQQI", offset, timestamp, 0, len(message)) + message


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        (None, b"", {"subject": b"", "reply": b""}),
        (None, b"hello", {"subject": b"orders", "reply": b""}),
        (b"k1", b"v" * 300, {"subject": b"orders.1", "reply": b"_INBOX.x", "h": b"\x00\x01"}),
        (b"", b"x", {"subject": "ü".encode(), "reply": b"", "ключ": b"v"}),
    ],
)
def test_record_size_is_the_bytes_the_server_writes(
    key: bytes | None, value: bytes, headers: dict[str, bytes]
) -> None:
    written = server_record(7, T0, key, value, headers)
    assert record_size(key or b"", value, headers) == len(written)


def test_a_plain_message_takes_71_bytes() -> None:
    # 28 (message set header) + 16 (crc, magic, attributes, lengths, header count)
    # + key + value + "subject" (2+7+4+1) + "reply" (2+5+4+0).
    assert record_size(b"k", b"v", {"subject": b"s", "reply": b""}) == 71
    assert PLAIN_RECORD_SIZE + 1 + 1 + 1 + 0 == 71


def test_config_from_a_stream_takes_the_server_defaults() -> None:
    ms = 1_000_000
    assert LogConfig.from_stream_config() == LogConfig(
        segment_max_bytes=DEFAULT_SEGMENT_MAX_BYTES,
        segment_max_age=DEFAULT_RETENTION_MAX_AGE,
        retention_max_age=DEFAULT_RETENTION_MAX_AGE,
        cleaner_interval=DEFAULT_CLEANER_INTERVAL,
    )
    assert DEFAULT_SEGMENT_MAX_BYTES == 256 * 1024 * 1024
    assert DEFAULT_CLEANER_INTERVAL == 300 * SECOND
    # Only the retention age set: segments still roll after 7 days (the server default).
    config = LogConfig.from_stream_config(retention_max_age_ms=60_000, cleaner_interval_ms=100)
    assert config.retention_max_age == 60 * SECOND
    assert config.segment_max_age == DEFAULT_RETENTION_MAX_AGE
    assert config.cleaner_interval == 100 * ms
    # An explicit 0: the commit log's own defaults (1 GiB, 5 minutes); no age limit.
    zero = LogConfig.from_stream_config(
        segment_max_bytes=0, cleaner_interval_ms=0, retention_max_age_ms=0, segment_max_age_ms=0
    )
    assert (zero.segment_max_bytes, zero.cleaner_interval) == (1 << 30, 300 * SECOND)
    assert (zero.retention_max_age, zero.segment_max_age) == (0, 0)
    with pytest.raises(ValueError, match="cleaner_interval must be > 0"):
        LogConfig(cleaner_interval=-1)


# -- helpers ---------------------------------------------------------------------------

SIZE = 100  # bytes per message in most tests


def new_log(**limits: int | bool) -> SegmentedLog:
    options: dict[str, int | bool] = {
        "segment_max_bytes": 3 * SIZE,
        "segment_max_age": 0,
        "retention_max_age": 0,
        "cleaner_interval": SECOND,
    }
    options.update(limits)
    return SegmentedLog(LogConfig(**options), created=T0)  # type: ignore[arg-type]


def put(log: SegmentedLog, n: int = 1, *, at: int = T0, key: bytes = b"", size: int = SIZE) -> None:
    for _ in range(n):
        offset = log.next_offset
        log.append(b"m%d" % offset, size=size, key=key, timestamp=at, now=at)


def layout(log: SegmentedLog) -> list[tuple[int, int, int]]:
    """(base, first, last) of every segment."""
    return [(s.base, s.first, s.last) for s in log.segments]


def readable(log: SegmentedLog) -> list[int]:
    return [o for o in range(log.next_offset) if log.read(o) is not None]


def tick(log: SegmentedLog, *, hw: int | None = None) -> bool:
    """Run the next cleaner tick, at its due time."""
    return log.handle_timer(log.get_timer(), hw=log.newest_offset if hw is None else hw)


# -- segments --------------------------------------------------------------------------


def test_a_segment_rolls_before_the_append_that_finds_it_full() -> None:
    log = new_log(segment_max_bytes=250)
    put(log, 3)  # 100, 200, then 300 bytes: the check (200 < 250) came before the write
    assert layout(log) == [(0, 0, 2)]
    assert log.segments[0].size == 300, "a segment exceeds the limit by one message"
    put(log)
    assert layout(log) == [(0, 0, 2), (3, 3, 3)]


def test_a_segment_rolls_by_age_counted_from_its_first_write() -> None:
    log = new_log(segment_max_bytes=1 << 20, segment_max_age=10 * SECOND)
    put(log, at=T0)
    put(log, at=T0 + 9 * SECOND)
    assert layout(log) == [(0, 0, 1)]
    put(log, at=T0 + 10 * SECOND)
    assert layout(log) == [(0, 0, 1), (2, 2, 2)]


def test_a_full_segment_stays_active_until_the_next_append_or_tick() -> None:
    log = new_log(retention_max_messages=2)
    put(log, 6)  # two full segments of 3; the second is still the active one
    assert layout(log) == [(0, 0, 2), (3, 3, 5)]
    assert readable(log) == list(range(6)), "appending past the limit deletes nothing"
    assert tick(log) is True  # the tick rolls the full segment ... and does nothing else
    assert layout(log) == [(0, 0, 2), (3, 3, 5), (6, -1, -1)]
    assert readable(log) == list(range(6))
    assert tick(log) is True  # the next one cleans
    assert layout(log) == [(6, -1, -1)]
    assert (log.oldest_offset, log.newest_offset) == (-1, 5)
    assert readable(log) == []


# -- retention ---------------------------------------------------------------------------


def test_messages_limit_keeps_whole_segments_within_the_limit() -> None:
    log = new_log(retention_max_messages=5)
    put(log, 8)  # [0-2] [3-5] [6-7]
    assert tick(log) is True
    # active 2 + [3-5] 3 = 5 <= 5; + [0-2] = 8 > 5: the first segment goes.
    assert layout(log) == [(3, 3, 5), (6, 6, 7)]
    assert log.oldest_offset == 3
    assert readable(log) == [3, 4, 5, 6, 7]
    assert tick(log) is False, "nothing more to delete"


def test_the_active_segment_is_kept_whatever_its_size() -> None:
    log = new_log(segment_max_bytes=10 * SIZE, retention_max_messages=2)
    put(log, 7)
    assert tick(log) is False
    assert readable(log) == list(range(7)), "a log of one segment keeps everything"
    log = new_log(segment_max_bytes=5 * SIZE, retention_max_messages=2)
    put(log, 8)  # [0-4] [5-7]
    assert tick(log) is True
    assert layout(log) == [(5, 5, 7)], "three messages kept: the active segment stays"


def test_bytes_limit() -> None:
    log = new_log(retention_max_bytes=450)
    put(log, 8)  # 300 + 300 + 200 bytes
    tick(log)
    assert layout(log) == [(6, 6, 7)], "200 + 300 > 450: only the active segment stays"


def test_age_limit_deletes_leading_segments_last_written_before_the_cutoff() -> None:
    log = new_log(retention_max_age=60 * SECOND, cleaner_interval=30 * SECOND)
    put(log, 3, at=T0)
    put(log, 3, at=T0 + 20 * SECOND)
    put(log, 1, at=T0 + 40 * SECOND)  # [0-2]@0 [3-5]@20 [6]@40
    assert not log.handle_timer(T0 + 60 * SECOND, hw=6), "nothing older than a minute"
    assert log.handle_timer(T0 + 90 * SECOND, hw=6)
    assert layout(log) == [(6, 6, 6)], "both sealed segments are older than T0 + 30 s"
    assert log.get_timer() == T0 + 120 * SECOND
    # The active segment is kept however old; a roll by age, then the next tick, empty it.
    log2 = new_log(retention_max_age=60 * SECOND, segment_max_age=60 * SECOND)
    put(log2, 2, at=T0)
    assert log2.handle_timer(T0 + 100 * SECOND, hw=1)  # rolls (older than a minute)
    assert log2.handle_timer(T0 + 101 * SECOND, hw=1)  # cleans
    assert (log2.oldest_offset, log2.newest_offset) == (-1, 1)


def test_limits_apply_age_then_messages_then_bytes() -> None:
    log = new_log(retention_max_messages=6, retention_max_bytes=350)
    put(log, 9)
    tick(log)  # rolls the full active segment
    tick(log)
    # messages: 0 + 3 + 3 <= 6 keeps [3-5] [6-8]; bytes: 0 + 300 + 300 > 350 keeps [6-8].
    assert layout(log) == [(6, 6, 8), (9, -1, -1)]


def test_the_cleaner_ticks_on_its_own_grid() -> None:
    log = new_log(cleaner_interval=5 * SECOND)
    assert log.get_timer() == T0 + 5 * SECOND
    assert log.handle_timer(T0 + 4 * SECOND, hw=-1) is False
    assert log.get_timer() == T0 + 5 * SECOND, "not due: nothing happens"
    log.handle_timer(T0 + 17 * SECOND, hw=-1)  # late: the missed ticks are dropped
    assert log.get_timer() == T0 + 20 * SECOND
    log.reopen(T0 + 21 * SECOND)  # a resumed partition: a new ticker
    assert log.get_timer() == T0 + 26 * SECOND


# -- compaction --------------------------------------------------------------------------


def test_compaction_keeps_the_newest_message_of_each_key_up_to_the_hw() -> None:
    log = new_log(compact=True)
    for key in (b"a", b"b", b"a", b"", b"b", b"a", b"a", b"a"):
        put(log, key=key)
    # [0 a, 1 b, 2 a] [3 -, 4 b, 5 a] [6 a, 7 a]; hw 6: offset 7 is not committed, the
    # newest a up to the hw is 6 (in the active segment: it counts).
    assert tick(log, hw=6) is True
    assert readable(log) == [3, 4, 6, 7]
    assert log.oldest_offset == 3, "the first segment was compacted away"
    assert [(s.base, list(s.kept())) for s in log.segments] == [(3, [3, 4]), (6, [6, 7])]
    assert log.compacted_messages == 4
    sealed = log.segments[0]
    # Each run rewrites every sealed segment (readers in it open again), never the
    # active one, whose older "a" at 6 stays.
    assert tick(log, hw=7) is True
    assert readable(log) == [3, 4, 6, 7]
    assert sealed.replaced
    assert log.segments[0] is not sealed
    assert log.touched == 1


def test_compaction_keeps_keyless_messages_and_those_at_or_past_the_hw() -> None:
    log = new_log(compact=True)
    for key in (b"a", b"a", b"a", b"", b"a", b"", b"a"):
        put(log, key=key)
    tick(log, hw=2)
    # a@0, a@1 go (the newest a up to the hw is 2); 2 onwards are kept.
    assert readable(log) == [2, 3, 4, 5, 6]
    assert log.oldest_offset == 2, "the oldest offset is no segment boundary after compaction"
    tick(log, hw=6)
    assert readable(log) == [3, 5, 6], "keyless messages and the newest a stay"


# -- readers ---------------------------------------------------------------------------


def read_all(reader: LogReader, hw: int) -> list[int]:
    got: list[int] = []
    while span := reader.span(hw):
        for offset in span:
            got.append(offset)
            reader.offset = offset + 1
    return got


def test_a_reader_below_the_oldest_offset_starts_there() -> None:
    log = new_log(retention_max_messages=4)
    put(log, 7)
    tick(log)
    assert log.oldest_offset == 3
    assert read_all(LogReader(log, 0, hw=6), 6) == [3, 4, 5, 6]
    assert read_all(LogReader(log, 5, hw=6), 4) == [], "past the reader's high watermark"


def test_a_reader_past_the_hw_or_on_an_emptied_log_waits_for_the_next_message() -> None:
    log = new_log()
    put(log, 2)
    reader = LogReader(log, 10, hw=1)
    assert reader.span(1) == range(0)
    put(log, 2)
    assert read_all(reader, 3) == [2, 3], "the next committed message, whatever the start"
    emptied = new_log(segment_max_bytes=SIZE, retention_max_age=10 * SECOND)
    put(emptied, 4)
    assert emptied.handle_timer(T0 + 100 * SECOND, hw=3)  # rolls the full segment
    assert emptied.handle_timer(T0 + 200 * SECOND, hw=3)  # deletes every sealed one
    assert (emptied.oldest_offset, emptied.newest_offset) == (-1, 3)
    waiting = LogReader(emptied, 0, hw=3)
    assert waiting.span(3) == range(0)
    put(emptied)
    assert read_all(waiting, 4) == [4]


def test_a_reader_whose_segment_is_deleted_fails_and_one_compacted_under_goes_on() -> None:
    log = new_log(retention_max_messages=3)
    put(log, 7)
    slow = LogReader(log, 0, hw=6)
    assert slow.span(6) == range(0, 3)
    slow.offset = 1  # it read offset 0
    fast = LogReader(log, 6, hw=6)
    tick(log)
    with pytest.raises(SegmentClosedError, match="segment has been closed"):
        slow.span(6)
    assert read_all(fast, 6) == [6]

    compacted = new_log(compact=True)
    for key in (b"a", b"b", b"a", b"b", b"c", b"d", b"e"):
        put(compacted, key=key)
    reader = LogReader(compacted, 0, hw=6)
    reader.offset = 1
    tick(compacted)
    assert read_all(reader, 6) == [2, 3, 4, 5, 6], "0 and 1 went, the rest is read on"


# -- timestamps --------------------------------------------------------------------------


def test_timestamp_lookups_search_segment_by_segment() -> None:
    log = new_log()
    for i, ts in enumerate((10, 20, 20, 30, 40, 50, 60)):
        put(log, at=T0 + ts)
        assert log.timestamps[i] == T0 + ts
    # [10 20 20] [30 40 50] [60]
    assert log.earliest_offset_after_timestamp(T0 + 20) == 1
    assert log.earliest_offset_after_timestamp(T0 + 21) == 3
    assert log.earliest_offset_after_timestamp(T0) == 0
    assert log.earliest_offset_after_timestamp(T0 + 61) == 7
    assert log.latest_offset_before_timestamp(T0 + 20) == 1, "the first one stamped so"
    assert log.latest_offset_before_timestamp(T0 + 45) == 4
    assert log.latest_offset_before_timestamp(T0 + 99) == 6
    with pytest.raises(TimestampLookupError, match="before the beginning of the log"):
        log.latest_offset_before_timestamp(T0 + 9)


def test_an_empty_active_segment_sends_timestamp_starts_to_the_end() -> None:
    # Liftbridge v1.9.0 takes the EOF of an empty segment's index for "past the end of
    # the log", wherever the timestamp falls.
    log = new_log(segment_max_bytes=SIZE)
    for ts in (10, 20, 30):
        put(log, at=T0 + ts)
    tick(log)  # rolls the full active segment: a new, empty one
    assert layout(log)[-1] == (3, -1, -1)
    assert log.earliest_offset_after_timestamp(T0 + 30) == 3
    assert log.earliest_offset_after_timestamp(T0 + 5) == 0, "this search never met it"
    with pytest.raises(TimestampLookupError, match="EOF"):
        log.latest_offset_before_timestamp(T0 + 30)


# -- properties --------------------------------------------------------------------------

configs = st.builds(
    LogConfig,
    segment_max_bytes=st.integers(1, 1000),
    segment_max_age=st.sampled_from([0, 5 * SECOND, 20 * SECOND]),
    retention_max_bytes=st.sampled_from([0, 250, 1000]),
    retention_max_messages=st.sampled_from([0, 1, 4, 10]),
    retention_max_age=st.sampled_from([0, 10 * SECOND, 60 * SECOND]),
    cleaner_interval=st.sampled_from([SECOND, 3 * SECOND]),
    compact=st.booleans(),
)
# ("put", size, key, seconds later) or ("tick", seconds later, hw lag)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.integers(1, 300),
            st.sampled_from([b"", b"a", b"b"]),
            st.integers(0, 4),
        ),
        st.tuples(st.just("tick"), st.integers(0, 8), st.integers(0, 2), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(configs, operations)
def test_log_properties(config: LogConfig, ops: list[tuple[str, int, object, int]]) -> None:
    log = SegmentedLog(config, created=T0)
    now = T0
    newest_of_key: dict[bytes, int] = {}
    reader = LogReader(log, 0, hw=-1)
    read: list[int] = []
    for op in ops:
        before = list(log.segments)
        oldest_before = log.oldest_offset
        if op[0] == "put":
            _, size, key, later = op
            assert isinstance(key, bytes)
            now += later * SECOND
            offset = log.next_offset
            log.append(b"m", size=size, key=key, timestamp=now, now=now)
            if key:
                newest_of_key[key] = offset
            assert log.segments == before or log.segments[:-1] == before
        else:
            _, later, lag, _ = op
            now += later * SECOND
            hw = max(log.newest_offset - lag, -1)
            log.handle_timer(now, hw=hw)
            # The active segment is never removed (a roll adds a new one after it).
            assert before[-1] in log.segments
            if not config.compact:
                gone = [s for s in before if s not in log.segments]
                assert gone == before[: len(gone)], "only the oldest segments go"
                oldest = log.oldest_offset
                if oldest != -1 and oldest != oldest_before:
                    # The oldest offset moves by whole segments: to a segment's start.
                    assert oldest in {s.base for s in before}
        segments = log.segments
        assert all(s.first != -1 for s in segments[:-1]), "only the active one can be empty"
        for a, b in itertools.pairwise(segments):
            assert a.next_offset <= b.base
        # No message below the oldest is readable; without compaction every one from
        # the oldest to the newest is.
        oldest = log.oldest_offset
        kept = readable(log)
        if oldest == -1:
            assert all(s.first == -1 for s in segments)
            assert kept == []
        else:
            assert kept
            assert kept[0] == oldest
            if not config.compact:
                assert kept == list(range(oldest, log.next_offset))
        assert kept == [o for s in segments for o in s.kept()]
        assert sum(s.count for s in segments) == len(kept)
        # Compaction never removes the newest message of a key that retention kept.
        for offset in newest_of_key.values():
            if oldest != -1 and offset >= oldest:
                assert log.read(offset) is not None
        # A reader keeps reading in order, never a removed offset; it fails only when
        # its segment was deleted under it.
        try:
            span = reader.span(log.newest_offset)
            while span:
                for offset in span:
                    assert log.read(offset) is not None
                    assert not read or offset > read[-1]
                    read.append(offset)
                    reader.offset = offset + 1
                span = reader.span(log.newest_offset)
        except SegmentClosedError:
            assert reader.segment is not None
            assert reader.segment.deleted
            reader = LogReader(log, reader.offset, hw=log.newest_offset)
    if not config.compact and not any(
        (config.retention_max_age, config.retention_max_bytes, config.retention_max_messages)
    ):
        assert read == list(range(log.next_offset)), "without limits a reader gets everything"
