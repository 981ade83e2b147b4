"""Filter pushdown: which of Spark's filters a batch read can leave to the server.

Theory of operation. Spark hands ``DataSourceReader.pushFilters`` the conjuncts of a
query's ``WHERE`` clause (pyspark 4.1+, ``pyspark.sql.datasource.Filter``); the
reader turns each into a :class:`Predicate` (or ``None`` for a shape it does not
know) and folds them here into a selection:

- :func:`plan_jetstream` gives a :class:`JetStreamSelection`: the subjects to read
  (Direct Get ``next_by_subj`` filters: literal subjects, or one wildcard such as
  ``orders.>``), a sequence range, and a range of times (microseconds since the
  epoch, the precision of a Spark timestamp) that the driver turns into a sequence
  range with Direct Get ``start_time``.
- :func:`plan_liftbridge` gives a :class:`LiftbridgeSelection`: the partitions to
  read, an offset range, and a range of times that the driver turns into offsets
  per partition with a start-at-time subscription.

Rules. A predicate is *pushed* only when the selection then yields exactly the rows
it admits: Spark drops a pushed filter from its plan and never checks it again.
Everything else is returned to Spark, which applies it to what the read yields; a
returned predicate may still narrow the read when what it admits is a subset of
what the narrowed read yields (``subject LIKE 'orders.e%'`` reads ``orders.>``).
Predicates combine by AND, so each one only ever narrows the selection; the
reader's own options (``subject``, ``startSequence``, ``partitions``, ...) are
intersected with it (:meth:`JetStreamSelection.narrow`), never replaced.

Times and ``IN`` lists are exact only up to what the server can do: a start time
finds the first message at or after it, which is exact while a stream's (or a
partition's) times do not go backwards; the reader therefore also applies the
time bounds and ``IN`` sets to every row it reads (:meth:`JetStreamSelection.admits`
is the rule), so a pushed filter never lets a row through that it rejects.

Pure: no pyspark, no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

__all__ = (
    "MAX_IN_SUBJECTS",
    "Bounds",
    "JetStreamRead",
    "JetStreamSelection",
    "LiftbridgeSelection",
    "Op",
    "Predicate",
    "filter_tokens",
    "intersect_filters",
    "is_literal_subject",
    "plan_jetstream",
    "plan_liftbridge",
    "subject_matches",
    "to_micros",
)

#: A ``subject IN (...)`` list longer than this is left to Spark: every subject is a
#: separate Direct Get pass over the partition's range.
MAX_IN_SUBJECTS = 64

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)
_SPACE = frozenset(" \t\r\n\f\v")


class Op(enum.Enum):
    """The comparison of a :class:`Predicate` (pyspark's filter classes, by meaning)."""

    EQ = "="
    IN = "in"
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    STARTS_WITH = "starts with"
    NOT_NULL = "is not null"
    IS_NULL = "is null"


@dataclass(frozen=True, slots=True)
class Predicate:
    """``column op value``; ``value`` is a tuple for ``IN`` and ``None`` for the null tests."""

    column: str
    op: Op
    value: object = None


def to_micros(value: object) -> int | None:
    """An aware ``datetime`` as microseconds since the epoch; ``None`` for anything else.

    A naive datetime has no instant (which zone?): it is not pushed.
    """
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        return None
    return (value - _EPOCH) // _MICRO


def _as_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


# -- ranges ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bounds:
    """An inclusive range of integers; ``None`` is unbounded on that side."""

    lo: int | None = None
    hi: int | None = None

    @property
    def empty(self) -> bool:
        return self.lo is not None and self.hi is not None and self.lo > self.hi

    def narrow(self, lo: int | None = None, hi: int | None = None) -> Bounds:
        """The intersection with ``[lo, hi]``."""
        new_lo = self.lo if lo is None else lo if self.lo is None else max(self.lo, lo)
        new_hi = self.hi if hi is None else hi if self.hi is None else min(self.hi, hi)
        return Bounds(new_lo, new_hi)

    def __contains__(self, value: int) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)


def _time_lookups(times: Bounds) -> list[int]:
    """The times whose first position at or after a time-bounded read must find."""
    lookups = []
    if times.lo is not None:
        lookups.append(times.lo)
    if times.hi is not None:
        lookups.append(times.hi + 1)
    return lookups


def _narrow_by_times(
    window: Bounds, times: Bounds, at_or_after: Mapping[int, int | None], end: int
) -> Bounds:
    """``window`` (positions up to ``end``) narrowed to the messages stored within ``times``.

    ``at_or_after`` maps each time of :func:`_time_lookups` to the first position with a
    time at or after it (``None``: none is).
    """
    if times.lo is not None:
        first = at_or_after[times.lo]
        window = window.narrow(lo=end + 1 if first is None else first)
    if times.hi is not None:
        after = at_or_after[times.hi + 1]
        if after is not None:
            window = window.narrow(hi=after - 1)
    return window


def _compare(bounds: Bounds, op: Op, value: int) -> Bounds | None:
    """``bounds`` narrowed by ``column op value`` for an integer-valued column."""
    if op is Op.EQ:
        return bounds.narrow(value, value)
    if op is Op.GT:
        return bounds.narrow(lo=value + 1)
    if op is Op.GE:
        return bounds.narrow(lo=value)
    if op is Op.LT:
        return bounds.narrow(hi=value - 1)
    if op is Op.LE:
        return bounds.narrow(hi=value)
    return None


def _int_set(value: object) -> frozenset[int] | None:
    if not isinstance(value, tuple) or not value:
        return None
    numbers = [_as_int(v) for v in value]
    if any(n is None for n in numbers):
        return None  # a NULL or a value of another type in the list: Spark's business
    return frozenset(n for n in numbers if n is not None)


def _narrow_set(current: frozenset[int] | None, new: frozenset[int]) -> frozenset[int]:
    return new if current is None else current & new


# -- subjects -------------------------------------------------------------------------------


_Selection = TypeVar("_Selection", "JetStreamSelection", "LiftbridgeSelection")


def _position_step(
    selection: _Selection, op: Op, value: object, *, bounds: str, members: str
) -> tuple[_Selection, bool]:
    """A JetStream ``sequence`` or Liftbridge ``offset`` predicate: an ``IN`` list
    narrows the set in field ``members``, a comparison the range in ``bounds``."""
    if op is Op.IN:
        numbers = _int_set(value)
        if numbers is None:
            return selection, False
        current: frozenset[int] | None = getattr(selection, members)
        change: dict[str, Any] = {members: _narrow_set(current, numbers)}
        return replace(selection, **change), True
    number = _as_int(value)
    narrowed = None if number is None else _compare(getattr(selection, bounds), op, number)
    if narrowed is None:
        return selection, False
    change = {bounds: narrowed}  # one of the Bounds fields
    return replace(selection, **change), True


def _time_step(selection: _Selection, op: Op, value: object) -> tuple[_Selection, bool]:
    """A ``timestamp`` comparison narrows the selection's time range."""
    micros = to_micros(value)
    narrowed = None if micros is None else _compare(selection.times, op, micros)
    if narrowed is None:
        return selection, False
    return replace(selection, times=narrowed), True


def _fold(
    selection: _Selection,
    predicates: Sequence[Predicate | None],
    step: Callable[[_Selection, Predicate], tuple[_Selection, bool]],
) -> tuple[_Selection, list[bool]]:
    """Fold ``predicates`` (AND) into ``selection`` with ``step``; which were exact.

    ``None`` stands for a filter Spark gave that is not a :class:`Predicate`.
    """
    pushed = []
    for p in predicates:
        if p is None:
            pushed.append(False)
            continue
        selection, exact = step(selection, p)
        pushed.append(exact)
    return selection, pushed


def filter_tokens(subject: str) -> list[str] | None:
    """The tokens of a NATS subject filter, or ``None`` when it is not one.

    Tokens are non-empty and free of whitespace; ``*`` (one token) may stand
    anywhere, ``>`` (one or more tokens) only last; a wildcard is a whole token.
    """
    if not subject or any(c in _SPACE for c in subject):
        return None
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return None
        if ("*" in token or ">" in token) and token not in ("*", ">"):
            return None
        if token == ">" and i != len(tokens) - 1:
            return None
    return tokens


def is_literal_subject(subject: object) -> bool:
    """Whether ``subject`` is a subject a message can be stored under (no wildcard)."""
    if not isinstance(subject, str):
        return False
    tokens = filter_tokens(subject)
    return tokens is not None and "*" not in tokens and ">" not in tokens


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether the literal ``subject`` matches the filter ``pattern`` (NATS rules)."""
    return intersect_filters(pattern, subject) == subject


def intersect_filters(a: str, b: str) -> str | None:
    """The filter matching exactly the subjects both ``a`` and ``b`` match, or ``None``.

    Token by token: a literal meets ``*`` or itself; ``*`` meets ``*``; ``>``
    takes what is left of the other side (which must be at least one token).
    Both must be valid filters (:func:`filter_tokens`).
    """
    ta, tb = filter_tokens(a), filter_tokens(b)
    if ta is None or tb is None:
        raise ValueError(f"not a subject filter: {a!r} / {b!r}")
    out: list[str] = []
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">":
            rest = tb[i:]
            return ".".join(out + rest) if rest else None
        if y == ">":
            rest = ta[i:]
            return ".".join(out + rest) if rest else None
        if x is None or y is None:
            return None  # one has more tokens than the other
        if x == "*":
            out.append(y)
        elif y == "*" or x == y:
            out.append(x)
        else:
            return None
    return ".".join(out)


def _intersect_all(current: tuple[str, ...] | None, new: Iterable[str]) -> tuple[str, ...]:
    """``current`` (``None``: every subject) intersected with the union of ``new``.

    Every tuple built here is a set of distinct literal subjects or a single
    filter, so its members never overlap and a subject is read at most once.
    """
    new = tuple(dict.fromkeys(new))
    if current is None:
        return new
    out: dict[str, None] = {}
    for a in current:
        for b in new:
            both = intersect_filters(a, b)
            if both is not None:
                out[both] = None
    return tuple(out)


# -- JetStream ------------------------------------------------------------------------------

JETSTREAM_NOT_NULL = frozenset({"subject", "sequence", "timestamp", "data"})


@dataclass(frozen=True, slots=True)
class JetStreamSelection:
    """What a ``jetstream`` batch read yields: the rows every pushed predicate admits.

    ``subjects``: ``None`` for every subject, else the filters to read one after the
    other (no two of them match the same subject; ``()`` reads nothing).
    ``sequences`` and ``times`` (microseconds since the epoch) are inclusive ranges;
    ``sequence_set`` the sequences of an ``IN`` list.
    """

    subjects: tuple[str, ...] | None = None
    sequences: Bounds = field(default_factory=Bounds)
    times: Bounds = field(default_factory=Bounds)
    sequence_set: frozenset[int] | None = None
    nothing: bool = False  # a contradiction (``subject IS NULL``...)

    @property
    def empty(self) -> bool:
        """Whether the selection admits no row at all (no server call needed)."""
        return (
            self.nothing
            or self.subjects == ()
            or self.sequences.empty
            or self.times.empty
            or self.sequence_set == frozenset()
        )

    @property
    def residual(self) -> bool:
        """Whether the reader must check rows itself (:meth:`admits`): times or ``IN``."""
        return self.times != Bounds() or self.sequence_set is not None

    def admits(self, subject: str, sequence: int, time_us: int) -> bool:
        """Whether a stored message is in the selection (the rule pushdown keeps)."""
        if self.empty:
            return False
        if self.subjects is not None and not any(
            subject_matches(p, subject) for p in self.subjects
        ):
            return False
        if self.sequence_set is not None and sequence not in self.sequence_set:
            return False
        return sequence in self.sequences and time_us in self.times

    def narrow(
        self,
        *,
        subject: str | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> JetStreamSelection:
        """Intersect with the reader's options: a subject filter and a sequence range.

        Raises:
            ValueError: ``subject`` is not a subject filter.
        """
        selection = self
        if subject is not None:
            if filter_tokens(subject) is None:
                raise ValueError(f"not a subject filter: {subject!r}")
            selection = replace(selection, subjects=_intersect_all(self.subjects, [subject]))
        return replace(selection, sequences=selection.sequences.narrow(start, end))

    def sequence_window(self, lo: int, hi: int, at_or_after: Mapping[int, int | None]) -> Bounds:
        """The sequences to read when the options ask for ``lo..hi``.

        ``at_or_after`` maps each time of :meth:`time_lookups` to the sequence of the
        first message stored at or after it (``None``: none is). Times become a
        sequence range under the assumption the server's own start-time lookup
        makes: a stream's times do not go backwards.
        """
        window = _narrow_by_times(self.sequences.narrow(lo, hi), self.times, at_or_after, hi)
        if self.sequence_set:
            window = window.narrow(min(self.sequence_set), max(self.sequence_set))
        return window

    def time_lookups(self) -> list[int]:
        """The times (microseconds) whose first message at or after the driver must find."""
        return _time_lookups(self.times)

    def read(
        self,
        *,
        subject: str | None,
        start: int | None,
        end: int | None,
        first: int,
        last: int,
        at_or_after: Mapping[int, int | None],
    ) -> JetStreamRead:
        """The read of a stream holding ``first..last`` under the reader's options.

        ``subject``, ``start`` and ``end`` are the options (``None``: not given);
        the result's range may start below ``first`` when ``start`` does (the
        reader's data loss check looks at that). ``at_or_after``: see
        :meth:`sequence_window`.
        """
        selection = self
        if subject is not None and filter_tokens(subject) is not None:
            selection = selection.narrow(subject=subject)
        if selection.empty:
            return JetStreamRead(1, 0, ())
        window = selection.sequence_window(
            start if start is not None else max(first, 1),
            end if end is not None else last,
            at_or_after,
        )
        assert window.lo is not None
        assert window.hi is not None
        subjects = (subject,) if selection.subjects is None else selection.subjects
        residual = selection if selection.residual else None
        return JetStreamRead(window.lo, window.hi, subjects, residual)


@dataclass(frozen=True, slots=True)
class JetStreamRead:
    """Sequences ``first..last`` read once per filter of ``subjects`` (``None``: all),
    the rows checked against ``residual`` when it is set (times, ``IN`` lists)."""

    first: int
    last: int
    subjects: tuple[str | None, ...]
    residual: JetStreamSelection | None = None

    @property
    def empty(self) -> bool:
        return self.first > self.last or not self.subjects


def _jetstream_step(selection: JetStreamSelection, p: Predicate) -> tuple[JetStreamSelection, bool]:
    """Fold one predicate in: (new selection, pushed?)."""
    column, op, value = p.column.lower(), p.op, p.value
    if op is Op.NOT_NULL and column in JETSTREAM_NOT_NULL:
        return selection, True  # never null: nothing to do
    if op is Op.IS_NULL and column in JETSTREAM_NOT_NULL:
        return replace(selection, nothing=True), True
    if column == "subject":
        return _subject_step(selection, op, value)
    if column == "sequence":
        return _position_step(selection, op, value, bounds="sequences", members="sequence_set")
    if column == "timestamp":
        return _time_step(selection, op, value)
    return selection, False


def _subject_step(
    selection: JetStreamSelection, op: Op, value: object
) -> tuple[JetStreamSelection, bool]:
    if op is Op.EQ:
        if not is_literal_subject(value):
            return selection, False  # e.g. 'orders.*' is a literal string to Spark
        assert isinstance(value, str)
        return replace(selection, subjects=_intersect_all(selection.subjects, [value])), True
    if op is Op.IN:
        if (
            not isinstance(value, tuple)
            or not value
            or len(value) > MAX_IN_SUBJECTS
            or not all(is_literal_subject(v) for v in value)
        ):
            return selection, False
        subjects = [v for v in value if isinstance(v, str)]
        return replace(selection, subjects=_intersect_all(selection.subjects, subjects)), True
    if op is Op.STARTS_WITH and isinstance(value, str):
        if value == "":
            return selection, True  # every subject starts with ''
        head, dot, tail = value.rpartition(".")
        if not dot or not is_literal_subject(head):
            return selection, False
        # 'orders.' is exactly 'orders.>' (a stored subject has no empty token);
        # 'orders.e' reads 'orders.>' and Spark keeps the rest of the filter.
        narrowed = replace(selection, subjects=_intersect_all(selection.subjects, [head + ".>"]))
        return narrowed, tail == ""
    return selection, False


def plan_jetstream(
    predicates: Sequence[Predicate | None],
) -> tuple[JetStreamSelection, list[bool]]:
    """Fold ``predicates`` (AND) into a selection; say which ones it applies exactly.

    ``None`` stands for a filter Spark gave that is not a :class:`Predicate`.
    """
    return _fold(JetStreamSelection(), predicates, _jetstream_step)


# -- Liftbridge -----------------------------------------------------------------------------

LIFTBRIDGE_NOT_NULL = frozenset({"stream", "partition", "offset", "timestamp"})


@dataclass(frozen=True, slots=True)
class LiftbridgeSelection:
    """What a ``liftbridge`` batch read yields: the rows every pushed predicate admits.

    ``partitions``: ``None`` for every partition. ``offsets`` and ``times``
    (microseconds since the epoch) are inclusive ranges; ``offset_set`` the offsets
    of an ``IN`` list.
    """

    partitions: frozenset[int] | None = None
    offsets: Bounds = field(default_factory=Bounds)
    times: Bounds = field(default_factory=Bounds)
    offset_set: frozenset[int] | None = None
    nothing: bool = False

    @property
    def empty(self) -> bool:
        return (
            self.nothing
            or self.partitions == frozenset()
            or self.offsets.empty
            or self.times.empty
            or self.offset_set == frozenset()
        )

    @property
    def residual(self) -> bool:
        return self.times != Bounds() or self.offset_set is not None

    def admits(self, partition: int, offset: int, time_us: int) -> bool:
        if self.empty:
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.offset_set is not None and offset not in self.offset_set:
            return False
        return offset in self.offsets and time_us in self.times

    def choose(self, partitions: Iterable[int]) -> list[int]:
        """The partitions (of those the options chose) this selection reads, sorted."""
        if self.empty:
            return []
        chosen = set(partitions)
        if self.partitions is not None:
            chosen &= self.partitions
        return sorted(chosen)

    def offset_window(self, start: int, end: int, at_or_after: Mapping[int, int | None]) -> Bounds:
        """The offsets to read of a partition the options read from ``start`` to ``end``.

        ``at_or_after`` maps each time of :meth:`time_lookups` to the partition's
        first offset with a timestamp at or after it (``None``: none is).
        """
        window = _narrow_by_times(self.offsets.narrow(start, end), self.times, at_or_after, end)
        if self.offset_set:
            window = window.narrow(min(self.offset_set), max(self.offset_set))
        return window

    def time_lookups(self) -> list[int]:
        return _time_lookups(self.times)


def _liftbridge_step(
    selection: LiftbridgeSelection, p: Predicate, stream: str
) -> tuple[LiftbridgeSelection, bool]:
    column, op, value = p.column.lower(), p.op, p.value
    if op is Op.NOT_NULL and column in LIFTBRIDGE_NOT_NULL:
        return selection, True
    if op is Op.IS_NULL and column in LIFTBRIDGE_NOT_NULL:
        return replace(selection, nothing=True), True
    if column == "stream" and op is Op.EQ and isinstance(value, str):
        return (selection if value == stream else replace(selection, nothing=True)), True
    if column == "partition":
        if op is Op.IN:
            numbers = _int_set(value)
        else:
            number = _as_int(value)
            numbers = frozenset({number}) if op is Op.EQ and number is not None else None
        if numbers is None:
            return selection, False
        current = selection.partitions
        return replace(selection, partitions=_narrow_set(current, numbers)), True
    if column == "offset":
        return _position_step(selection, op, value, bounds="offsets", members="offset_set")
    if column == "timestamp":
        return _time_step(selection, op, value)
    return selection, False


def plan_liftbridge(
    predicates: Sequence[Predicate | None], stream: str
) -> tuple[LiftbridgeSelection, list[bool]]:
    """Fold ``predicates`` (AND) into a selection of stream ``stream``; say which are exact."""
    return _fold(
        LiftbridgeSelection(),
        predicates,
        lambda selection, p: _liftbridge_step(selection, p, stream),
    )
