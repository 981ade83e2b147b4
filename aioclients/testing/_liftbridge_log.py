"""One partition's commit log as Liftbridge v1.9.0 keeps it: segments, retention
and compaction, as a pure model (time is an argument, in ns since the epoch).

Rules (Liftbridge v1.9.0, ``server/commitlog``):

* The log is a list of segments; the last one is the *active* segment, the only
  one written to. A segment holds a run of offsets from its base offset.
* Before each append (``commitLog.Append`` -> ``checkAndPerformSplit``) the
  active segment is rolled, i.e. a new empty active segment is started at the
  next offset, when it is full (``position >= segment_max_bytes``) or when
  ``segment_max_age`` has passed since its first message was written (a segment
  never written to never rolls by age; an age of 0 never rolls). The check comes
  before the write, so a segment can exceed ``segment_max_bytes`` by one message,
  and the message that fills a segment leaves it active until the next append
  or cleaner tick.
* A record takes the message set header (28 bytes) plus the encoded message
  (:func:`record_size`); the server adds the headers ``subject`` and ``reply``.
* The cleaner ticks every ``cleaner_interval`` from the log's creation (a Go
  ticker). A tick first rolls the active segment if it is full or too old; when
  it did, the tick does nothing else ("we don't need to run the cleaner"). Else
  ``Clean()`` applies the retention limits, by age, then messages, then bytes,
  each deleting whole segments from the oldest on and never the active one:

  - age: every leading segment whose last write is older than ``now -
    retention_max_age``, up to the first that is not;
  - messages (bytes): from the active segment backwards, segments are kept while
    their total count (size) stays within the limit; the active segment counts
    but is kept whatever its size; the first that goes over, and every older
    one, are deleted;

  then, with ``compact``, compaction: every segment but the active one keeps
  only the newest message of each key (among offsets up to the high watermark),
  messages without a key, and messages at or past the high watermark; segments
  left empty are removed.
* Nothing else deletes: appending past a limit keeps every message until the
  next cleaner tick that does not roll.
* The oldest offset is the first segment's first message (-1 when that segment
  is empty: the cleaner removed every sealed segment and nothing was written
  since). Without compaction it only moves by whole segments.

A reader (``commitlog/reader.go``'s committed reader) holds the segment it
reads from; when the cleaner deletes that segment under it, its next read fails
(``segment has been closed``); a segment replaced by compaction is looked up
again at the reader's offset.

``Clean()`` deletes and rewrites segments before it swaps the log's segment list:
while it works, readers still see the old list, whose removed segments are closed.
A reader opened then on a closed segment fails ("Failed to create stream reader:
segment has been closed", the server's answer for a paused partition too), as does
a lookup by timestamp. The model keeps that window open between
``handle_timer(..., hold=True)`` and :meth:`SegmentedLog.settle` (the driver gives
it a duration).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = (
    "DEFAULT_CLEANER_INTERVAL",
    "DEFAULT_RETENTION_MAX_AGE",
    "DEFAULT_SEGMENT_MAX_BYTES",
    "PLAIN_RECORD_SIZE",
    "LogConfig",
    "LogReader",
    "ReaderOpenError",
    "Segment",
    "SegmentClosedError",
    "SegmentedLog",
    "TimestampLookupError",
    "record_size",
)

_MS = 1_000_000  # ns
#: the server's defaults (``server/config.go``): a stream that sets nothing gets these
DEFAULT_SEGMENT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_RETENTION_MAX_AGE = 7 * 24 * 3600 * 1000 * _MS
DEFAULT_SEGMENT_MAX_AGE = DEFAULT_RETENTION_MAX_AGE  # "defaults to the retention time"
DEFAULT_CLEANER_INTERVAL = 5 * 60 * 1000 * _MS
#: what the commit log itself takes for an explicit 0 (``commitlog.New``)
_LOG_DEFAULT_SEGMENT_MAX_BYTES = 1024 * 1024 * 1024
_LOG_DEFAULT_CLEANER_INTERVAL = DEFAULT_CLEANER_INTERVAL

_MESSAGE_SET_HEADER = 28  # offset 8, timestamp 8, leader epoch 8, size 4
# crc 4, magic 1, attributes 1, key length 4, value length 4, header count 2
_MESSAGE_FIXED = 4 + 1 + 1 + 4 + 4 + 2


def record_size(key: bytes, value: bytes, headers: Mapping[str, bytes]) -> int:
    """Bytes one message takes in a segment (``newMessageSetFromProto`` + ``Message.Encode``).

    ``headers`` are the stored ones, ``subject`` and ``reply`` included. A missing
    key is written as length -1, so it takes 4 bytes like an empty one.
    """
    size = _MESSAGE_SET_HEADER + _MESSAGE_FIXED + len(key) + len(value)
    for name, header in headers.items():
        size += 2 + len(name.encode()) + 4 + len(header)
    return size


#: a message's size without key, value and headers but ``subject`` and ``reply``'s values
#: (what most messages carry: :func:`record_size` without looking at headers)
PLAIN_RECORD_SIZE = _MESSAGE_SET_HEADER + _MESSAGE_FIXED + (2 + 7 + 4) + (2 + 5 + 4)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """A partition log's limits, in bytes, messages and ns; 0 = no such limit.

    Build it with :meth:`from_stream_config` to get the server's defaults and its
    reading of 0.
    """

    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    segment_max_age: int = DEFAULT_SEGMENT_MAX_AGE
    retention_max_bytes: int = 0
    retention_max_messages: int = 0
    retention_max_age: int = DEFAULT_RETENTION_MAX_AGE
    cleaner_interval: int = DEFAULT_CLEANER_INTERVAL
    compact: bool = False

    @classmethod
    def from_stream_config(
        cls,
        *,
        segment_max_bytes: int | None = None,
        segment_max_age_ms: int | None = None,
        retention_max_bytes: int | None = None,
        retention_max_messages: int | None = None,
        retention_max_age_ms: int | None = None,
        cleaner_interval_ms: int | None = None,
        compact: bool | None = None,
    ) -> LogConfig:
        """The limits a stream gets from its CreateStream options (None: not set).

        As ``StreamsConfig.ApplyOverrides`` and ``commitlog.New`` read them: durations
        in ms; an unset option takes the server default (the segment age stays 7 days
        when only the retention age is set); an explicit 0 segment size or cleaner
        interval takes the commit log's own default (1 GiB, 5 minutes).
        """
        seg_bytes = DEFAULT_SEGMENT_MAX_BYTES if segment_max_bytes is None else segment_max_bytes
        interval = DEFAULT_CLEANER_INTERVAL
        if cleaner_interval_ms is not None:
            interval = cleaner_interval_ms * _MS
        return cls(
            segment_max_bytes=seg_bytes or _LOG_DEFAULT_SEGMENT_MAX_BYTES,
            segment_max_age=(
                DEFAULT_SEGMENT_MAX_AGE if segment_max_age_ms is None else segment_max_age_ms * _MS
            ),
            retention_max_bytes=retention_max_bytes or 0,
            retention_max_messages=retention_max_messages or 0,
            retention_max_age=(
                DEFAULT_RETENTION_MAX_AGE
                if retention_max_age_ms is None
                else retention_max_age_ms * _MS
            ),
            cleaner_interval=interval or _LOG_DEFAULT_CLEANER_INTERVAL,
            compact=bool(compact),
        )

    def __post_init__(self) -> None:
        if self.segment_max_bytes <= 0:
            raise ValueError(f"segment_max_bytes must be > 0, got {self.segment_max_bytes}")
        if self.cleaner_interval <= 0:
            raise ValueError(f"cleaner_interval must be > 0, got {self.cleaner_interval}")
        for name in ("segment_max_age", "retention_max_bytes", "retention_max_messages"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.retention_max_age < 0:
            raise ValueError(f"retention_max_age must be >= 0, got {self.retention_max_age}")


class SegmentClosedError(Exception):
    """A reader's segment was deleted under it (the server's ``ErrSegmentClosed``)."""


class ReaderOpenError(Exception):
    """A reader could not be opened: a segment it needs was closed by the cleaner."""


class TimestampLookupError(Exception):
    """``LatestOffsetBeforeTimestamp`` failed (the server answers INTERNAL with this text)."""


class Segment:
    """One segment: its base offset, the offsets it keeps and their sizes and times."""

    __slots__ = (
        "base",
        "closed",
        "count",
        "deleted",
        "first",
        "first_write",
        "last",
        "last_write",
        "offsets",
        "replaced",
        "size",
    )

    def __init__(self, base: int) -> None:
        self.base = base
        #: first and last offset kept (-1: empty)
        self.first = -1
        self.last = -1
        #: timestamps (ns) of the first and last message written (0: none)
        self.first_write = 0
        self.last_write = 0
        self.size = 0  # bytes (the segment file's position)
        self.count = 0  # messages (index entries)
        #: after compaction, the offsets kept (None: every one from first to last)
        self.offsets: list[int] | None = None
        self.deleted = False  # the cleaner deleted it: readers in it fail
        self.replaced = False  # compaction replaced it: readers look again
        self.closed = False  # deleted or replaced (one check per message read)

    def delete(self) -> None:
        self.deleted = self.closed = True

    def replace(self) -> None:
        self.replaced = self.closed = True

    @property
    def next_offset(self) -> int:
        """``NextOffset()``: the last offset + 1 (the base when empty)."""
        return self.base if self.last == -1 else self.last + 1

    def kept(self) -> Iterable[int]:
        """The offsets this segment keeps, in order."""
        if self.offsets is not None:
            return self.offsets
        return range(self.first, self.last + 1) if self.first >= 0 else ()

    def __repr__(self) -> str:
        return (
            f"Segment(base={self.base}, first={self.first}, last={self.last}, "
            f"count={self.count}, size={self.size})"
        )


class SegmentedLog:
    """A partition log: the messages (opaque payloads), their segments, the cleaner.

    Args:
        config: the stream's limits.
        created: when the log was created (ns); the cleaner ticks from then on.
    """

    def __init__(self, config: LogConfig, *, created: int) -> None:
        self.config = config
        self.created = created
        #: payload by offset; b"" once retention or compaction removed it
        self.entries: list[bytes] = []
        #: reception timestamp (ns) by offset
        self.timestamps: list[int] = []
        # Per message, for compaction only: its key and its size.
        self._keys: list[bytes] = []
        self._sizes = array("q")
        self._compacting = config.compact
        #: the segments, oldest first; the last one is active
        self.segments: list[Segment] = [Segment(0)]
        #: what readers see: ``segments``, or while a clean is held the list from
        #: before it (removed segments closed)
        self.view: list[Segment] = self.segments
        self._next_tick = created + config.cleaner_interval
        #: segments the last clean deleted or rewrote (a real Clean() takes a while
        #: for each)
        self.touched = 0
        #: messages removed so far, by retention and by compaction
        self.deleted_messages = 0
        self.compacted_messages = 0

    # -- reading -------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def next_offset(self) -> int:
        return len(self.entries)

    @property
    def newest_offset(self) -> int:
        """The last offset written (-1: none yet); retention never lowers it."""
        return len(self.entries) - 1

    @property
    def oldest_offset(self) -> int:
        """``OldestOffset()``: the first segment's first offset (-1 when it is empty);
        while a clean is held, the first one of the list readers still see."""
        return self.view[0].first

    @property
    def cleaning(self) -> bool:
        """Whether a clean is held (readers see the segments from before it)."""
        return self.view is not self.segments

    def read(self, offset: int) -> bytes | None:
        """The payload at ``offset``, or None when it is not kept (or not written)."""
        if offset < 0 or offset >= len(self.entries):
            return None
        return self.entries[offset] or None

    def segment_for(self, offset: int) -> Segment | None:
        """``findSegment``: the first segment readers see whose next offset is past
        ``offset``."""
        segments = self.view
        lo, hi = 0, len(segments)
        while lo < hi:
            mid = (lo + hi) // 2
            if segments[mid].next_offset > offset:
                hi = mid
            else:
                lo = mid + 1
        return segments[lo] if lo < len(segments) else None

    def segment_after(self, segment: Segment) -> Segment | None:
        """``findSegmentByBaseOffset(base + 1)``: the segment after ``segment``."""
        for s in self.view:
            if s.base >= segment.base + 1:
                return s
        return None

    # -- writing -------------------------------------------------------------

    def _must_roll(self, segment: Segment, now: int) -> bool:
        """``segment.CheckSplit``: full, or older than ``segment_max_age``."""
        if segment.size >= self.config.segment_max_bytes:
            return True
        age = self.config.segment_max_age
        if age == 0 or segment.first_write == 0:
            return False
        return now - segment.first_write >= age

    def _roll_if_due(self, now: int) -> bool:
        active = self.active
        if not self._must_roll(active, now):
            return False
        new = Segment(len(self.entries))
        self.segments.append(new)
        if self.view is not self.segments:
            self.view.append(new)  # rolled while cleaning: the clean rebases onto it
        return True

    def append(self, payload: bytes, *, size: int, key: bytes, timestamp: int, now: int) -> int:
        """Write one message received at ``timestamp`` (ns; at ``now`` on the server)
        taking ``size`` bytes (:func:`record_size`); returns its offset."""
        if not payload:
            raise ValueError("an empty payload cannot be stored (it marks a removed message)")
        seg = self.segments[-1]
        config = self.config
        if seg.size >= config.segment_max_bytes or (
            config.segment_max_age
            and seg.first_write
            and now - seg.first_write >= config.segment_max_age
        ):
            self._roll_if_due(now)
            seg = self.segments[-1]
        offset = len(self.entries)
        self.entries.append(payload)
        self.timestamps.append(timestamp)
        if self._compacting:
            self._keys.append(key)
            self._sizes.append(size)
        if seg.first == -1:
            seg.first = offset
            seg.first_write = timestamp
        seg.last = offset
        seg.last_write = timestamp
        seg.size += size
        seg.count += 1
        return offset

    # -- the cleaner ---------------------------------------------------------

    def reopen(self, now: int) -> None:
        """The log was closed (a paused partition) and is opened again at ``now``: a
        new cleaner ticker starts (``commitlog.New`` on resume)."""
        self._next_tick = now + self.config.cleaner_interval

    def get_timer(self) -> int:
        """When the cleaner ticks next (ns)."""
        return self._next_tick

    def handle_timer(self, now: int, *, hw: int, hold: bool = False) -> bool:
        """Run the cleaner tick due at or before ``now`` (none: nothing happens).

        ``hw`` is the log's high watermark (compaction keeps what is past it). With
        ``hold``, a clean that removes segments leaves readers on the old segment
        list until :meth:`settle` (no tick runs meanwhile).
        Returns whether the log changed (a roll or a deletion).
        """
        due = self._next_tick
        if now < due or self.cleaning:
            return False
        interval = self.config.cleaner_interval
        self.touched = 0
        # A late tick is not repeated (a Go ticker drops ticks a slow reader missed).
        self._next_tick = due + interval * ((now - due) // interval + 1)
        if self._roll_if_due(now):
            return True
        return self.clean(now, hw=hw, hold=hold)

    def settle(self) -> None:
        """End a held clean: readers see the cleaned segments."""
        self.view = self.segments

    def clean(self, now: int, *, hw: int, hold: bool = False) -> bool:
        """``Clean()``: the retention limits, then compaction; whether anything went
        (with ``hold``, readers see the old list until :meth:`settle`)."""
        config = self.config
        before = self.segments
        segments = before
        if config.retention_max_age or config.retention_max_messages or config.retention_max_bytes:
            if config.retention_max_age:
                segments = self._age_limit(segments, now - config.retention_max_age)
            if config.retention_max_messages:
                segments = self._total_limit(segments, config.retention_max_messages, "count")
            if config.retention_max_bytes:
                segments = self._total_limit(segments, config.retention_max_bytes, "size")
        touched = len(before) - len(segments)
        for gone in before[:touched]:
            self._drop(gone)
        self.segments = segments
        if config.compact and len(segments) > 1:
            touched += self._compact(hw)
        self.touched = touched
        self.view = before if hold and touched else self.segments
        return touched > 0

    @staticmethod
    def _age_limit(segments: list[Segment], ttl: int) -> list[Segment]:
        if len(segments) <= 1:
            return segments
        idx = 0
        for i, seg in enumerate(segments):
            if i != len(segments) - 1 and seg.last_write < ttl:
                continue
            idx = i
            break
        return segments[idx:]

    @staticmethod
    def _total_limit(segments: list[Segment], limit: int, what: str) -> list[Segment]:
        if len(segments) <= 1:
            return segments
        total = getattr(segments[-1], what)
        i = len(segments) - 2
        while i > -1:
            total += getattr(segments[i], what)
            if total > limit:
                break
            i -= 1
        return segments[i + 1 :]

    def _drop(self, seg: Segment) -> None:
        seg.delete()
        entries, keys = self.entries, self._keys
        for offset in seg.kept():
            entries[offset] = b""
            if self._compacting:
                keys[offset] = b""
            self.deleted_messages += 1

    def _compact(self, hw: int) -> int:
        """``compactCleaner.Compact``: keep the newest message of each key in every
        segment but the active one. Each of them is rewritten and replaced, whether
        or not it loses a message; returns how many."""
        segments = self.segments
        keys = self._keys
        latest: dict[bytes, int] = {}
        for seg in segments:
            for offset in seg.kept():
                if offset > hw:
                    break
                latest[keys[offset]] = offset
        compacted: list[Segment] = []
        entries, sizes, stamps = self.entries, self._sizes, self.timestamps
        for seg in segments[:-1]:
            kept = [o for o in seg.kept() if not keys[o] or latest.get(keys[o]) == o or o >= hw]
            if len(kept) < seg.count:
                survivors = set(kept)
                for offset in seg.kept():
                    if offset not in survivors:
                        entries[offset] = keys[offset] = b""
                        self.compacted_messages += 1
            # Replaced (readers in it open again at their offset), and deleted when
            # nothing is left (``cleanupEmptySegment`` marks it replaced first).
            seg.replace()
            if not kept:
                seg.delete()
                continue
            new = Segment(seg.base)
            new.offsets = kept if seg.offsets is not None or len(kept) < seg.count else None
            new.first, new.last = kept[0], kept[-1]
            new.first_write, new.last_write = stamps[kept[0]], stamps[kept[-1]]
            new.size = sum(sizes[o] for o in kept)
            new.count = len(kept)
            compacted.append(new)
        compacted.append(segments[-1])
        self.segments = compacted
        return len(segments) - 1

    # -- timestamps ----------------------------------------------------------

    def _first_timestamp(self, seg: Segment) -> int | None:
        """The segment's first index entry's timestamp (None: empty, an EOF)."""
        if seg.closed:
            raise TimestampLookupError(
                "failed to find log segment for timestamp: segment has been closed"
            )
        return None if seg.first == -1 else self.timestamps[seg.first]

    def _search_by_timestamp(self, timestamp: int) -> tuple[int, bool]:
        """``findSegmentIndexByTimestamp``: the first segment whose first timestamp is
        past ``timestamp`` (Go's ``sort.Search``), and whether a probe met an empty
        segment (its EOF sticks, whatever the search returns)."""
        segments = self.view
        eof = False
        i, j = 0, len(segments)
        while i < j:
            h = (i + j) // 2
            first = self._first_timestamp(segments[h])
            if first is None:
                eof = True
                j = h
            elif first > timestamp:
                j = h
            else:
                i = h + 1
        return i, eof

    def _entry_at_or_after(self, seg: Segment, timestamp: int) -> int | None:
        """``segment.findEntryByTimestamp``: the first offset in ``seg`` whose timestamp
        is >= ``timestamp`` (None: none is)."""
        offsets = seg.kept()
        if seg.offsets is None and seg.first >= 0:
            i = bisect.bisect_left(self.timestamps, timestamp, seg.first, seg.last + 1)
            return i if i <= seg.last else None
        for o in offsets:
            if self.timestamps[o] >= timestamp:
                return o
        return None

    def earliest_offset_after_timestamp(self, timestamp: int) -> int:
        """``EarliestOffsetAfterTimestamp``: where a TIMESTAMP start position starts.

        Raises:
            TimestampLookupError: the search met a segment a held clean closed.
        """
        segments = self.view
        idx, eof = self._search_by_timestamp(timestamp)
        if eof:
            # "there is no such segment, meaning the timestamp is beyond the end of
            # the log": the server reads any EOF so, also an empty active segment's.
            return segments[-1].next_offset
        seg = segments[0] if idx == 0 else segments[idx - 1]
        found = self._entry_at_or_after(seg, timestamp)
        if found is not None:
            return found
        if idx < len(segments) - 1:
            found = self._entry_at_or_after(segments[idx], timestamp)
            if found is not None:
                return found
        return segments[-1].next_offset

    def latest_offset_before_timestamp(self, timestamp: int) -> int:
        """``LatestOffsetBeforeTimestamp``: where a STOP_TIMESTAMP subscription stops.

        Raises:
            TimestampLookupError: before the log's first message, or the lookup met an
                empty segment (the server's wording).
        """
        segments = self.view
        idx, eof = self._search_by_timestamp(timestamp)
        if eof:
            raise TimestampLookupError("failed to find log segment for timestamp: EOF")
        if idx == 0:
            seg = segments[0]
            if timestamp < seg.first_write:
                raise TimestampLookupError("timestamp is before the beginning of the log")
        else:
            seg = segments[idx - 1]
        found = self._entry_at_or_after(seg, timestamp)
        if found is not None:
            if self.timestamps[found] == timestamp:
                return found
            return found - 1
        return seg.last


class LogReader:
    """A committed reader (``commitlog/reader.go``): reads up to the high watermark,
    segment by segment, and fails when the cleaner deletes its segment under it.

    Args:
        log: the log.
        offset: where to start (>= 0; below the oldest offset: at the oldest).
        hw: the high watermark when the reader is created. A start past it, or an
            empty log, waits for the next committed message, whatever its offset
            ("If offset exceeds HW, wait for the next message").

    Attributes:
        offset: the next offset to read (a message removed by compaction is skipped).
        segment: the segment the reader is in (None: waiting to look it up).
    """

    __slots__ = ("_reopen", "log", "offset", "segment")

    def __init__(self, log: SegmentedLog, offset: int, hw: int) -> None:
        self.log = log
        self.segment: Segment | None = None
        self._reopen = False  # the segment was replaced: the next lookup re-opens
        if offset > hw or log.oldest_offset == -1:
            self.offset = hw + 1
            return
        self.offset = offset
        found = self._locate(offset, hw, strict=False)
        if isinstance(found, str):
            raise ReaderOpenError(found)
        self.segment = found

    def _locate(self, offset: int, hw: int, *, strict: bool) -> Segment | str:
        """The segment to read ``offset`` from, or why the lookup failed: the segment
        holding the high watermark, and the one holding ``offset`` (any found one when
        ``strict``), must be open (``getHWPos``, ``findEntry``)."""
        log = self.log
        hw_segment = log.segment_for(hw)
        if hw_segment is None:
            return "segment not found"
        if hw_segment.closed:
            return "segment has been closed"
        seg = log.segment_for(offset)
        if seg is None:
            return "segment not found"
        if seg.closed and (strict or seg.base <= offset):
            return "segment has been closed"
        return seg

    def span(self, hw: int) -> range | list[int]:
        """The offsets the reader can read now without leaving its segment (the
        committed ones, up to ``hw``), in order; empty: nothing yet. Advance
        :attr:`offset` past each one read, and call again when :attr:`segment` is
        closed (deleted or replaced).

        Raises:
            SegmentClosedError: the cleaner deleted the segment the reader was in, or a
                lookup met a segment a held clean closed (the message is the server's).
        """
        log = self.log
        while True:
            seg = self.segment
            if seg is None:
                if self.offset > hw or log.oldest_offset == -1:
                    return _NOTHING
                reopen, self._reopen = self._reopen, False
                found = self._locate(self.offset, hw, strict=not reopen)
                if isinstance(found, str):
                    what = "reinitialize reader" if reopen else "read message headers"
                    raise SegmentClosedError(f"failed to {what}: {found}")
                seg = self.segment = found
            if seg.closed:
                if seg.replaced:
                    # Compaction replaced it: the reader is opened again at its offset.
                    self.segment = None
                    self._reopen = True
                    continue
                raise SegmentClosedError("failed to read message headers: segment has been closed")
            rest = _from(seg, self.offset)
            if rest:
                if rest[0] > hw:
                    return _NOTHING
                if rest[-1] <= hw:
                    return rest
                return rest[: bisect.bisect_right(rest, hw)]
            if seg is log.active:
                return _NOTHING
            nxt = log.segment_after(seg)
            if nxt is None:
                return _NOTHING
            self.segment = nxt


_NOTHING = range(0)


def _from(seg: Segment, offset: int) -> range | list[int]:
    """The offsets ``seg`` keeps from ``offset`` on."""
    if seg.offsets is None:
        if seg.first < 0:
            return _NOTHING
        return range(max(offset, seg.first), seg.last + 1)
    return seg.offsets[bisect.bisect_left(seg.offsets, offset) :]
