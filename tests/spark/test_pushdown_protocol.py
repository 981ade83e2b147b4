"""Filter pushdown's pure planning (no Spark, no I/O): which filters a read pushes and
what the pushed read then yields.

The properties model a stream (subjects, sequences with gaps, times that never go
backwards) and a server (a subject filter, a sequence range, "first message at or
after a time"), then check that the plan reads exactly the rows the filters admit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients.spark._protocol._pushdown import (
    MAX_IN_SUBJECTS,
    Bounds,
    JetStreamSelection,
    LiftbridgeSelection,
    Op,
    Predicate,
    filter_tokens,
    intersect_filters,
    is_literal_subject,
    plan_jetstream,
    plan_liftbridge,
    subject_matches,
    to_micros,
)

UTC = timezone.utc
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def P(column: str, op: Op, value: object = None) -> Predicate:
    return Predicate(column, op, value)


# -- a reference for subject filters, written independently of the module -----------------


def reference_matches(pattern: str, subject: str) -> bool:
    """NATS matching as a regular expression: '*' one token, a final '>' one or more."""
    parts = []
    for token in pattern.split("."):
        if token == "*":
            parts.append(r"[^.]+")
        elif token == ">":
            parts.append(r"[^.]+(?:\.[^.]+)*")
        else:
            parts.append(re.escape(token))
    return re.fullmatch(r"\.".join(parts), subject) is not None


TOKENS = st.sampled_from(["a", "b", "c"])
LITERALS = st.lists(TOKENS, min_size=1, max_size=3).map(".".join)


@st.composite
def filters(draw: Any) -> str:
    tokens = draw(st.lists(st.sampled_from(["a", "b", "c", "*"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        tokens = [*tokens[: draw(st.integers(0, len(tokens) - 1))], ">"]
    return ".".join(tokens)


# -- subjects ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "tokens"),
    [
        ("orders", ["orders"]),
        ("orders.eu", ["orders", "eu"]),
        ("orders.*", ["orders", "*"]),
        ("orders.>", ["orders", ">"]),
        ("*.eu.>", ["*", "eu", ">"]),
        (">", [">"]),
        ("", None),
        ("orders..eu", None),
        (".orders", None),
        ("orders.", None),
        ("orders.>.eu", None),
        ("orders.e*", None),
        ("orders.e>", None),
        ("orders eu", None),
        ("orders.\teu", None),
    ],
)
def test_filter_tokens(subject: str, tokens: list[str] | None) -> None:
    assert filter_tokens(subject) == tokens


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        *[("orders.eu", True), ("o-1_2/x", True), ("orders.*", False), ("orders.>", False)],
        *[("", False), ("a..b", False), ("a b", False), (None, False), (5, False)],
    ],
)
def test_is_literal_subject(value: object, literal: bool) -> None:
    assert is_literal_subject(value) is literal


@pytest.mark.parametrize(
    ("a", "b", "both"),
    [
        ("orders.>", "orders.eu", "orders.eu"),
        ("orders.>", "orders.eu.x", "orders.eu.x"),
        ("orders.>", "orders", None),
        ("orders.*", "orders.eu.x", None),
        ("orders.*", "*.eu", "orders.eu"),
        ("orders.>", "*.eu.>", "orders.eu.>"),
        ("*.*", "a.>", "a.*"),
        (">", "a.b", "a.b"),
        ("a.b", "a.c", None),
        ("a.>", "b.>", None),
        ("a.>", "a.>", "a.>"),
    ],
)
def test_intersect_filters(a: str, b: str, both: str | None) -> None:
    assert intersect_filters(a, b) == both
    assert intersect_filters(b, a) == both


def test_intersect_refuses_what_is_not_a_filter() -> None:
    with pytest.raises(ValueError, match="not a subject filter"):
        intersect_filters("a..b", "a.>")


@given(filters(), filters(), LITERALS)
def test_intersection_matches_exactly_what_both_match(a: str, b: str, subject: str) -> None:
    both = intersect_filters(a, b)
    expected = reference_matches(a, subject) and reference_matches(b, subject)
    assert (both is not None and reference_matches(both, subject)) == expected


@given(filters(), LITERALS)
def test_subject_matches_agrees_with_the_reference(pattern: str, subject: str) -> None:
    assert subject_matches(pattern, subject) == reference_matches(pattern, subject)


# -- times ------------------------------------------------------------------------------------


def test_to_micros_is_exact_and_zone_independent() -> None:
    assert to_micros(datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)) == 1
    assert to_micros(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == -1
    plus2 = timezone(timedelta(hours=2))
    assert to_micros(datetime(2025, 3, 1, 14, 0, tzinfo=plus2)) == to_micros(T0)
    assert to_micros(datetime(2025, 3, 1, 12, 0)) is None, "naive: no instant"
    assert to_micros("2025-03-01") is None


# -- JetStream: which shapes are pushed ---------------------------------------------------------


def plan_js(*predicates: Predicate | None) -> tuple[JetStreamSelection, list[bool]]:
    return plan_jetstream(list(predicates))


def test_subject_equality_in_and_prefix_are_pushed() -> None:
    sel, pushed = plan_js(P("subject", Op.EQ, "orders.eu"))
    assert (sel.subjects, pushed) == (("orders.eu",), [True])
    sel, pushed = plan_js(P("subject", Op.IN, ("orders.eu", "orders.us", "orders.eu")))
    assert (sel.subjects, pushed) == (("orders.eu", "orders.us"), [True])
    sel, pushed = plan_js(P("subject", Op.STARTS_WITH, "orders."))
    assert (sel.subjects, pushed) == (("orders.>",), [True])
    sel, pushed = plan_js(P("SUBJECT", Op.STARTS_WITH, "orders.eu."))
    assert (sel.subjects, pushed) == (("orders.eu.>",), [True]), "column names: any case"


def test_a_prefix_that_ends_inside_a_token_narrows_but_stays_with_spark() -> None:
    sel, pushed = plan_js(P("subject", Op.STARTS_WITH, "orders.e"))
    assert (sel.subjects, pushed) == (("orders.>",), [False])
    sel, pushed = plan_js(P("subject", Op.STARTS_WITH, "ord"))
    assert (sel.subjects, pushed) == (None, [False])


@pytest.mark.parametrize(
    "predicate",
    [
        P("subject", Op.EQ, "orders.*"),  # a literal string '*' to Spark, a wildcard to NATS
        P("subject", Op.EQ, "orders.>"),
        P("subject", Op.EQ, ""),
        P("subject", Op.EQ, "a b"),
        P("subject", Op.EQ, 5),
        P("subject", Op.IN, ("orders.eu", None)),
        P("subject", Op.IN, ("orders.eu", "orders.*")),
        P("subject", Op.IN, ()),
        P("subject", Op.IN, tuple(f"s.{i}" for i in range(MAX_IN_SUBJECTS + 1))),
        P("subject", Op.STARTS_WITH, "orders.*."),
        P("subject", Op.GT, "orders"),
        P("sequence", Op.GT, 1.5),
        P("sequence", Op.GT, True),
        P("sequence", Op.IN, (1, None)),
        P("sequence", Op.STARTS_WITH, "1"),
        P("timestamp", Op.GE, datetime(2025, 1, 1)),  # naive
        P("timestamp", Op.IN, (T0,)),
        P("headers", Op.NOT_NULL),
        P("data", Op.EQ, b"x"),
        None,
    ],
)
def test_shapes_that_stay_with_spark(predicate: Predicate | None) -> None:
    sel, pushed = plan_js(predicate)
    assert pushed == [False]
    assert sel == JetStreamSelection()


def test_sequence_comparisons_make_one_range() -> None:
    sel, pushed = plan_js(
        P("sequence", Op.GT, 10),
        P("sequence", Op.LE, 99),
        P("sequence", Op.GE, 5),
        P("sequence", Op.LT, 200),
    )
    assert pushed == [True] * 4
    assert sel.sequences == Bounds(11, 99)
    assert plan_js(P("sequence", Op.EQ, 7))[0].sequences == Bounds(7, 7)
    in_list = plan_js(P("sequence", Op.IN, (9, 3, 7)), P("sequence", Op.IN, (3, 9, 11)))[0]
    assert in_list.sequence_set == {3, 9}
    assert in_list.residual


def test_timestamp_bounds_are_microseconds() -> None:
    t = T0 + timedelta(microseconds=5)
    base = to_micros(T0)
    assert base is not None
    assert plan_js(P("timestamp", Op.GE, t))[0].times == Bounds(base + 5, None)
    assert plan_js(P("timestamp", Op.GT, t))[0].times == Bounds(base + 6, None)
    assert plan_js(P("timestamp", Op.LT, t))[0].times == Bounds(None, base + 4)
    assert plan_js(P("timestamp", Op.LE, t))[0].times == Bounds(None, base + 5)
    sel = plan_js(P("timestamp", Op.EQ, t))[0]
    assert sel.times == Bounds(base + 5, base + 5)
    assert sel.time_lookups() == [base + 5, base + 6]


def test_an_empty_prefix_admits_every_subject() -> None:
    assert plan_js(P("subject", Op.STARTS_WITH, "")) == (JetStreamSelection(), [True])


def test_null_tests() -> None:
    sel, pushed = plan_js(P("subject", Op.NOT_NULL), P("timestamp", Op.NOT_NULL))
    assert (sel, pushed) == (JetStreamSelection(), [True, True])
    sel, pushed = plan_js(P("sequence", Op.IS_NULL))
    assert pushed == [True]
    assert sel.empty


def test_contradictions_read_nothing() -> None:
    assert plan_js(P("subject", Op.EQ, "a"), P("subject", Op.EQ, "b"))[0].empty
    assert plan_js(P("subject", Op.EQ, "a.b"), P("subject", Op.STARTS_WITH, "c."))[0].empty
    assert plan_js(P("sequence", Op.GT, 5), P("sequence", Op.LT, 5))[0].empty
    assert plan_js(P("sequence", Op.IN, (1,)), P("sequence", Op.IN, (2,)))[0].empty


def test_options_narrow_the_pushed_subjects_and_never_widen_them() -> None:
    sel = plan_js(P("subject", Op.IN, ("orders.eu", "orders.us", "stock.eu")))[0]
    assert sel.narrow(subject="orders.*").subjects == ("orders.eu", "orders.us")
    assert sel.narrow(subject="*.eu").subjects == ("orders.eu", "stock.eu")
    assert sel.narrow(subject="other.>").empty
    prefix = plan_js(P("subject", Op.STARTS_WITH, "orders."))[0]
    assert prefix.narrow(subject="*.eu").subjects == ("orders.eu",)
    assert prefix.narrow(subject="orders.*").subjects == ("orders.*",)
    assert JetStreamSelection().narrow(subject="orders.*").subjects == ("orders.*",)
    narrowed = plan_js(P("sequence", Op.GE, 10))[0].narrow(start=5, end=50)
    assert narrowed.sequences == Bounds(10, 50)
    with pytest.raises(ValueError, match="not a subject filter"):
        sel.narrow(subject="a..b")


def test_read_plan_under_the_options() -> None:
    sel = plan_js(P("subject", Op.EQ, "orders.eu"), P("sequence", Op.GE, 30))[0]
    read = sel.read(subject="orders.*", start=10, end=90, first=20, last=100, at_or_after={})
    assert (read.first, read.last, read.subjects, read.residual) == (30, 90, ("orders.eu",), None)
    plain = JetStreamSelection().read(
        subject="orders.*", start=None, end=None, first=20, last=100, at_or_after={}
    )
    assert (plain.first, plain.last, plain.subjects) == (20, 100, ("orders.*",))
    below = JetStreamSelection().read(
        subject=None, start=5, end=None, first=20, last=100, at_or_after={}
    )
    assert (below.first, below.subjects) == (5, (None,)), "the reader checks data loss"
    # An option the planner cannot parse is passed through untouched (the server judges).
    odd = JetStreamSelection().read(
        subject="a..b", start=None, end=None, first=1, last=9, at_or_after={}
    )
    assert odd.subjects == ("a..b",)
    timed = plan_js(P("timestamp", Op.GE, T0))[0]
    lookups = timed.time_lookups()
    read = timed.read(
        subject=None, start=None, end=None, first=1, last=100, at_or_after={lookups[0]: 61}
    )
    assert (read.first, read.last, read.residual) == (61, 100, timed)
    none_after = timed.read(
        subject=None, start=None, end=None, first=1, last=100, at_or_after={lookups[0]: None}
    )
    assert none_after.empty


# -- JetStream: the pushed read yields exactly what the filters admit ---------------------------


@dataclass(frozen=True)
class Stored:
    subject: str
    seq: int
    time: datetime

    @property
    def micros(self) -> int:
        micros = to_micros(self.time)
        assert micros is not None
        return micros


@st.composite
def streams(draw: Any) -> list[Stored]:
    count = draw(st.integers(0, 25))
    seq = draw(st.integers(1, 5))
    time = T0
    out = []
    for _ in range(count):
        out.append(Stored(draw(LITERALS), seq, time))
        seq += draw(st.integers(1, 3))  # gaps: deleted messages
        time += timedelta(microseconds=draw(st.sampled_from([0, 1, 2, 1000])))
    return out


ZONES = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))])
TIMES = st.builds(
    lambda us, zone: (T0 + timedelta(microseconds=us)).astimezone(zone),
    st.integers(-2, 6000),
    ZONES,
)
COMPARE = st.sampled_from([Op.EQ, Op.GT, Op.GE, Op.LT, Op.LE])


@st.composite
def js_predicates(draw: Any) -> Predicate | None:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return P("subject", Op.EQ, draw(st.one_of(LITERALS, filters(), st.just(""))))
    if kind == 1:
        return P("subject", Op.IN, tuple(draw(st.lists(LITERALS, min_size=1, max_size=4))))
    if kind == 2:
        prefix = draw(st.sampled_from(["", "a", "a.", "a.b", "a.b.", "b.", "c.a", "*.", "a.*."]))
        return P("subject", Op.STARTS_WITH, prefix)
    if kind == 3:
        return P("sequence", draw(COMPARE), draw(st.integers(-2, 60)))
    if kind == 4:
        return P("sequence", Op.IN, tuple(draw(st.lists(st.integers(0, 60), min_size=1))))
    if kind == 5:
        return P("timestamp", draw(COMPARE), draw(TIMES))
    if kind == 6:
        column = draw(st.sampled_from(["subject", "sequence", "timestamp", "data", "headers"]))
        return P(column, draw(st.sampled_from([Op.NOT_NULL, Op.IS_NULL])))
    if kind == 7:
        return P("data", Op.EQ, b"x")
    if kind == 8:
        return P("subject", Op.GT, draw(LITERALS))
    return None


def js_value(m: Stored, column: str) -> object:
    return {"subject": m.subject, "sequence": m.seq, "timestamp": m.time, "data": b""}.get(column)


def spark_admits(p: Predicate | None, m: Stored) -> bool:
    """What Spark itself would decide for the row (None: a filter we cannot see into)."""
    if p is None:
        return True  # stands for a filter Spark keeps; it does not touch these columns
    value = js_value(m, p.column.lower()) if p.column.lower() != "headers" else None
    if p.op is Op.NOT_NULL:
        return value is not None
    if p.op is Op.IS_NULL:
        return value is None
    if value is None:
        return False
    op, want = p.op, p.value
    if op is Op.IN:
        return value in tuple(want)  # type: ignore[arg-type]
    if op is Op.STARTS_WITH:
        return isinstance(value, str) and value.startswith(str(want))
    return bool(
        {
            Op.EQ: value == want,
            Op.GT: value > want,  # type: ignore[operator]
            Op.GE: value >= want,  # type: ignore[operator]
            Op.LT: value < want,  # type: ignore[operator]
            Op.LE: value <= want,  # type: ignore[operator]
        }[op]
    )


def first_at_or_after(stream: list[Stored], micros: int) -> int | None:
    """The server's start-time lookup: the first message stored at or after ``micros``."""
    return next((m.seq for m in stream if m.micros >= micros), None)


def serve(stream: list[Stored], first: int, last: int, subject: str | None) -> list[Stored]:
    """The server's Direct Get over a range, with a subject filter."""
    return [
        m
        for m in stream
        if first <= m.seq <= last and (subject is None or reference_matches(subject, m.subject))
    ]


@given(
    streams(),
    st.lists(js_predicates(), max_size=5),
    st.one_of(st.none(), filters()),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 60)),
)
def test_the_pushed_plan_selects_exactly_the_rows_the_filters_would(
    stream: list[Stored],
    predicates: list[Predicate | None],
    subject: str | None,
    start: int | None,
    end: int | None,
) -> None:
    selection, pushed = plan_jetstream(predicates)
    assert len(pushed) == len(predicates)
    first = stream[0].seq if stream else 1
    last = stream[-1].seq if stream else 0
    found = {t: first_at_or_after(stream, t) for t in selection.time_lookups()}
    plan = selection.read(
        subject=subject, start=start, end=end, first=first, last=last, at_or_after=found
    )
    read: list[Stored] = []
    if not plan.empty:
        for filter_subject in plan.subjects:
            read += serve(stream, plan.first, plan.last, filter_subject)
    if plan.residual is not None:
        # Times never go backwards here: the range alone keeps to the time bounds
        # (the reader's own check of each row is a safety net for streams where they do).
        assert all(m.micros in plan.residual.times for m in read)
        read = [
            m
            for m in read
            if m.micros in plan.residual.times
            and (plan.residual.sequence_set is None or m.seq in plan.residual.sequence_set)
        ]
    assert len({m.seq for m in read}) == len(read), "no message is read twice"

    def by_options(m: Stored) -> bool:
        return (
            (subject is None or reference_matches(subject, m.subject))
            and (start is None or m.seq >= start)
            and (end is None or m.seq <= end)
        )

    exact = [p for p, ok in zip(predicates, pushed, strict=True) if ok]
    returned = [p for p, ok in zip(predicates, pushed, strict=True) if not ok]
    wanted = [m for m in stream if by_options(m) and all(spark_admits(p, m) for p in predicates)]
    by_pushed = [m for m in stream if by_options(m) and all(spark_admits(p, m) for p in exact)]
    read_set = {m.seq for m in read}
    # Pushed filters are applied exactly; returned ones may narrow, never drop a wanted row.
    assert {m.seq for m in wanted} <= read_set <= {m.seq for m in by_pushed}
    after_spark = [m for m in read if all(spark_admits(p, m) for p in returned)]
    assert sorted(m.seq for m in after_spark) == [m.seq for m in wanted]


@given(streams(), st.lists(js_predicates(), max_size=5))
def test_admits_lies_between_the_pushed_filters_and_all_filters(
    stream: list[Stored], predicates: list[Predicate | None]
) -> None:
    selection, pushed = plan_jetstream(predicates)
    for m in stream:
        if selection.admits(m.subject, m.seq, m.micros):
            assert all(spark_admits(p, m) for p, ok in zip(predicates, pushed, strict=True) if ok)
        if all(spark_admits(p, m) for p in predicates):
            assert selection.admits(m.subject, m.seq, m.micros)


# -- Liftbridge -------------------------------------------------------------------------------


def plan_lb(*predicates: Predicate | None) -> tuple[LiftbridgeSelection, list[bool]]:
    return plan_liftbridge(list(predicates), "orders")


def test_liftbridge_shapes() -> None:
    sel, pushed = plan_lb(P("partition", Op.EQ, 1))
    assert (sel.partitions, pushed) == ({1}, [True])
    sel, pushed = plan_lb(P("partition", Op.IN, (0, 2, 5)), P("partition", Op.IN, (2, 5, 7)))
    assert (sel.partitions, pushed) == ({2, 5}, [True, True])
    sel, pushed = plan_lb(P("offset", Op.GE, 3), P("offset", Op.LT, 10))
    assert (sel.offsets, pushed) == (Bounds(3, 9), [True, True])
    sel, pushed = plan_lb(P("timestamp", Op.GT, T0))
    assert (sel.times.lo, pushed) == ((to_micros(T0) or 0) + 1, [True])
    sel, pushed = plan_lb(P("stream", Op.EQ, "orders"), P("stream", Op.EQ, "other"))
    assert pushed == [True, True]
    assert sel.empty
    sel, pushed = plan_lb(P("partition", Op.GT, 1), P("key", Op.EQ, b"k"), None)
    assert (sel, pushed) == (LiftbridgeSelection(), [False, False, False])


def test_liftbridge_choose_and_windows() -> None:
    sel = plan_lb(P("partition", Op.IN, (1, 3, 9)), P("offset", Op.GE, 4))[0]
    assert sel.choose([0, 1, 2, 3]) == [1, 3], "partitions a stream lacks are just absent"
    assert sel.offset_window(0, 20, {}) == Bounds(4, 20)
    timed = plan_lb(P("timestamp", Op.GE, T0), P("timestamp", Op.LE, T0))[0]
    lo, after = timed.time_lookups()
    assert timed.offset_window(0, 20, {lo: 7, after: 9}) == Bounds(7, 8)
    assert timed.offset_window(0, 20, {lo: None, after: None}).empty
    assert plan_lb(P("partition", Op.IS_NULL))[0].choose([0, 1]) == []


@dataclass(frozen=True)
class LbMessage:
    partition: int
    offset: int
    time: datetime

    @property
    def micros(self) -> int:
        micros = to_micros(self.time)
        assert micros is not None
        return micros


@st.composite
def partitions(draw: Any) -> dict[int, list[LbMessage]]:
    out = {}
    for p in range(draw(st.integers(1, 3))):
        kept_from = draw(st.integers(0, 3))  # retention trimmed the oldest
        time = T0
        messages = []
        for offset in range(kept_from, kept_from + draw(st.integers(0, 12))):
            messages.append(LbMessage(p, offset, time))
            time += timedelta(microseconds=draw(st.sampled_from([0, 1, 3])))
        out[p] = messages
    return out


@st.composite
def lb_predicates(draw: Any) -> Predicate | None:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return P("partition", Op.EQ, draw(st.integers(-1, 3)))
    if kind == 1:
        return P("partition", Op.IN, tuple(draw(st.lists(st.integers(0, 3), min_size=1))))
    if kind == 2:
        return P("offset", draw(COMPARE), draw(st.integers(-1, 16)))
    if kind == 3:
        return P("offset", Op.IN, tuple(draw(st.lists(st.integers(0, 16), min_size=1))))
    if kind == 4:
        return P("timestamp", draw(COMPARE), draw(TIMES))
    return P("stream", Op.EQ, draw(st.sampled_from(["orders", "other"])))


def lb_admits(p: Predicate | None, m: LbMessage) -> bool:
    if p is None:
        return True
    value = {"partition": m.partition, "offset": m.offset, "timestamp": m.time}.get(
        p.column, "orders"
    )
    op, want = p.op, p.value
    if op is Op.IN:
        return value in tuple(want)  # type: ignore[arg-type]
    return bool(
        {
            Op.EQ: value == want,
            Op.GT: value > want,  # type: ignore[operator]
            Op.GE: value >= want,  # type: ignore[operator]
            Op.LT: value < want,  # type: ignore[operator]
            Op.LE: value <= want,  # type: ignore[operator]
        }[op]
    )


@given(partitions(), st.lists(lb_predicates(), max_size=5), st.data())
def test_the_pushed_liftbridge_plan_selects_exactly_the_rows_the_filters_would(
    stream: dict[int, list[LbMessage]], predicates: list[Predicate | None], data: Any
) -> None:
    selection, pushed = plan_liftbridge(predicates, "orders")
    assert all(pushed[i] for i, p in enumerate(predicates) if p is not None)
    chosen_by_option = data.draw(st.sets(st.sampled_from(sorted(stream)), min_size=1))
    starts = {p: data.draw(st.integers(0, 5)) for p in stream}
    ends = {p: data.draw(st.integers(-1, 16)) for p in stream}
    read = []
    for p in selection.choose(chosen_by_option):
        messages = stream[p]
        found = {
            t: next((m.offset for m in messages if m.micros >= t), None)
            for t in selection.time_lookups()
        }
        window = selection.offset_window(starts[p], ends[p], found)
        in_window = [
            m
            for m in messages
            if window.lo is not None
            and window.hi is not None
            and window.lo <= m.offset <= window.hi
        ]
        assert all(m.micros in selection.times for m in in_window), "the window is tight"
        for m in messages:
            if (
                window.lo is not None
                and window.hi is not None
                and window.lo <= m.offset <= window.hi
            ):
                if not selection.residual or selection.admits(p, m.offset, m.micros):
                    read.append(m)
    wanted = [
        m
        for p in sorted(chosen_by_option)
        for m in stream[p]
        if starts[p] <= m.offset <= ends[p] and all(lb_admits(q, m) for q in predicates)
    ]
    assert sorted(read, key=lambda m: (m.partition, m.offset)) == wanted
