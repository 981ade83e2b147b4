"""Runs of deliveries judged at once (``judge_run``, ``take_run``, ``delivered_run``,
``ack_run_numbers``, ``decode_subjects``, ``keys_of_subjects``, ``all_put``): each agrees with the
one-by-one rule it stands for, wherever it answers, and changes nothing where it
does not."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients.jetstream._protocol._kv import (
    PUT,
    PrefixedKeys,
    all_put,
    decode_subjects,
    keys_of_subjects,
    operation_of_header_block,
)
from aioclients.jetstream._protocol._ordered import (
    CursorState,
    Delivery,
    OrderedCursor,
    ack_run_numbers,
    ack_sequences,
    counting_run,
)
from aioclients.jetstream._protocol._snapshot import ScanVerdict, SnapshotScan, StartSubjects


def _cursor_state(c: OrderedCursor) -> tuple[object, ...]:
    return (c.state, c.generation, c.stream_seq, c.expected, c.resets)


def _ack(stream_seq: int, consumer_seq: int, pending: int = 0) -> bytes:
    return b"$JS.ACK.S.C.1.%d.%d.1764168000000000000.%d" % (stream_seq, consumer_seq, pending)


#: ack subjects of every kind a run may hold: in order, out of order, repeated,
#: of the other layout, malformed
_REPLY = st.one_of(
    st.builds(_ack, st.integers(1, 40), st.integers(1, 40), st.integers(0, 3)),
    st.sampled_from(
        [
            b"$JS.ACK._.hash.S.C.1.5.5.1764168000000000000.0.rnd",
            b"$JS.ACK.S.C.1.x.3.1.0",
            b"$JS.ACK.S.C.1.2.3",
            b"$JS.ACK.S.C.1.2.3.4.5.6",
            b"_INBOX.x",
            b"",
            b"$JS.ACK.S.C.1. .1.1.0",
            b"$JS.ACK.S.C.1.+7.-1.1.0",
        ]
    ),
)


@st.composite
def _runs(draw: st.DrawFn) -> tuple[OrderedCursor, int, list[bytes]]:
    c = OrderedCursor({"deliver_policy": "all"})
    for _ in range(draw(st.integers(0, 2))):
        c.created()
        c.reset("gap")
    if draw(st.booleans()):
        c.created()
    c.stream_seq = draw(st.integers(0, 10))
    c.expected = draw(st.integers(1, 10))
    generation = c.generation if draw(st.integers(0, 4)) else c.generation + 1
    if draw(st.booleans()):
        # The usual run: in order from where the cursor stands, sometimes spoilt.
        start = draw(st.integers(1, 3))
        count = draw(st.integers(1, 30))
        replies = [
            _ack(c.stream_seq + start + 2 * i, c.expected + i, count - i) for i in range(count)
        ]
        if draw(st.booleans()):
            at = draw(st.integers(0, count - 1))
            replies[at] = draw(_REPLY)
    else:
        replies = draw(st.lists(_REPLY, max_size=20))
    return c, generation, replies


@settings(max_examples=500, deadline=None)
@given(_runs())
def test_judge_run_agrees_with_deliver_one_by_one(
    run: tuple[OrderedCursor, int, list[bytes]],
) -> None:
    c, generation, replies = run
    before = _cursor_state(c)
    judged = c.judge_run(generation, replies)
    assert _cursor_state(c) == before  # judging changes nothing
    one_by_one = copy.deepcopy(c)
    verdicts, seqs = [], []
    for reply in replies:
        try:
            stream_seq, consumer_seq, _, _ = ack_sequences(reply.decode())
        except Exception:
            verdicts.append(None)
            break
        verdicts.append(one_by_one.deliver(generation, consumer_seq, stream_seq))
        seqs.append(stream_seq)
    if judged is None:
        return
    # Wherever it answers, deliver() would have yielded each, with these sequences.
    assert verdicts == [Delivery.YIELD] * len(replies)
    assert list(judged) == seqs
    c.took_run(judged)
    assert _cursor_state(c) == _cursor_state(one_by_one)


@st.composite
def _counting_runs(draw: st.DrawFn) -> tuple[OrderedCursor, int, list[bytes]]:
    """Runs whose sequences count up by one (an ordered read of a whole stream),
    near where a sequence takes another digit, sometimes spoilt in one place: a
    delivery repeated, skipped, moved, of another consumer or shape, a number
    written otherwise."""
    c = OrderedCursor({"deliver_policy": "all"})
    c.created()
    c.expected = draw(st.sampled_from([1, 5, 95, 990, 9_990, 99_999]))
    c.stream_seq = draw(st.sampled_from([0, 3, 97, 989, 99_995, 999_990]))
    start = c.stream_seq + draw(st.integers(0, 2))
    count = draw(st.integers(1, 40))
    pending = draw(st.sampled_from([0, 7, 1000]))
    replies = [
        b"$JS.ACK.S.C%d.1.%d.%d.1764168000%09d.%d"
        % (
            draw(st.sampled_from([1, 2])) if i == count - 1 else 1,
            start + i,
            c.expected + i,
            i * 7,
            pending + count - i,
        )
        for i in range(count)
    ]
    spoil = draw(st.integers(0, 9))
    at = draw(st.one_of(st.just(count - 1), st.integers(0, count - 1)))
    if spoil == 1:
        replies.insert(at, replies[at])  # a repeated delivery
    elif spoil == 2 and count > 1:
        del replies[at]  # a skipped one (a gap, or the stream's)
    elif spoil == 3 and count > 1:
        other = draw(st.integers(0, count - 1))
        replies[at], replies[other] = replies[other], replies[at]
    elif spoil == 4:
        replies[at] = replies[at].replace(b".1.", b".2.", 1)  # redelivered
    elif spoil == 5:
        replies[at] = draw(_REPLY)
    elif spoil == 6:
        tokens = replies[at].split(b".")
        tokens[draw(st.sampled_from([5, 6]))] = draw(
            st.sampled_from([b"0%d" % (start + at), b"+1", b"1_0", b"", b"x"])
        )
        replies[at] = b".".join(tokens)
    elif spoil == 7:
        replies[at] = replies[at] + draw(st.sampled_from([b"0", b".1", b" ", b"\t"]))
    elif spoil == 8:  # a byte changed in place: another shape of the same length
        where = draw(st.integers(0, len(replies[at]) - 1))
        byte = draw(st.sampled_from([b".", b"x", b" ", b"7"]))
        replies[at] = replies[at][:where] + byte + replies[at][where + 1 :]
    elif spoil == 9:  # one sequence another number
        tokens = replies[at].split(b".")
        which = draw(st.sampled_from([5, 6]))
        tokens[which] = b"%d" % (int(tokens[which]) + draw(st.sampled_from([-1, 1, 2, 10])))
        replies[at] = b".".join(tokens)
    generation = c.generation if draw(st.integers(0, 5)) else c.generation + 1
    return c, generation, replies


@settings(max_examples=1000, deadline=None)
@given(_counting_runs())
def test_a_counting_run_is_judged_as_one_by_one(
    run: tuple[OrderedCursor, int, list[bytes]],
) -> None:
    """``counting_run``'s answer (a range, without reading each number) is what
    deliver() says one by one: a gap or a repeat inside a run is never passed."""
    c, generation, replies = run
    before = _cursor_state(c)
    judged = c.judge_run(generation, replies)
    assert _cursor_state(c) == before
    one_by_one = copy.deepcopy(c)
    verdicts, seqs = [], []
    for reply in replies:
        tokens = reply.split(b".")
        try:
            if len(tokens) != 9 or tokens[0] != b"$JS":
                raise ValueError
            stream_seq, consumer_seq = int(tokens[5]), int(tokens[6])
        except ValueError:
            verdicts.append(None)
            break
        verdicts.append(one_by_one.deliver(generation, consumer_seq, stream_seq))
        seqs.append(stream_seq)
    counted = counting_run(replies, c.expected)
    if counted is not None:
        # Told without the numbers: each ack subject says what the range says.
        assert [(int(r.split(b".")[5]), int(r.split(b".")[6])) for r in replies] == [
            (seq, c.expected + i) for i, seq in enumerate(counted)
        ]
    if judged is None:
        assert verdicts != [Delivery.YIELD] * len(replies) or counted is None
        return
    assert verdicts == [Delivery.YIELD] * len(replies)
    assert list(judged) == seqs
    c.took_run(judged)
    assert _cursor_state(c) == _cursor_state(one_by_one)


def test_counting_runs_across_another_digit() -> None:
    replies = [_ack(seq, seq - 90) for seq in range(95, 105)]  # 95..104, 5..14
    assert counting_run(replies, 5) is None  # the lengths differ: read each number
    replies = [_ack(seq, seq + 1) for seq in range(990, 999)]
    assert counting_run(replies, 991) == range(990, 999)
    assert counting_run(replies, 992) is None  # not the expected consumer sequences
    gap = replies[:4] + replies[5:]
    assert counting_run(gap, 991) is None
    repeated = replies[:4] + replies[3:-1]
    assert counting_run(repeated, 991) is None


def _deliver_run(c: OrderedCursor, generation: int, replies: list[bytes]) -> list[int] | None:
    """What the ordered sink does with a run: judge it, and record it if in order."""
    stream_seqs = c.judge_run(generation, replies)
    if stream_seqs is not None:
        c.took_run(stream_seqs)
    return stream_seqs


def test_the_usual_run_is_judged_at_once_and_a_gap_is_not() -> None:
    c = OrderedCursor({"deliver_policy": "all"})
    c.created()
    assert _deliver_run(c, 1, [_ack(1, 1), _ack(3, 2), _ack(4, 3)]) == [1, 3, 4]
    assert (c.stream_seq, c.expected) == (4, 4)
    assert _deliver_run(c, 1, [_ack(5, 4), _ack(6, 6)]) is None  # a gap: deliver() says so
    assert _deliver_run(c, 2, [_ack(5, 4)]) is None  # stale
    assert _deliver_run(c, 1, []) is None
    assert c.state is CursorState.RUNNING
    assert (c.stream_seq, c.expected) == (4, 4)


@settings(max_examples=300, deadline=None)
@given(st.lists(_REPLY, max_size=12), st.booleans())
def test_ack_run_numbers_read_what_ack_sequences_reads(replies: list[bytes], same: bool) -> None:
    if same:  # one consumer's: the first five tokens alike
        replies = [b"$JS.ACK.S.C.1." + r.split(b".", 5)[-1] for r in replies]
    numbers = ack_run_numbers(replies)
    if numbers is None:
        # An empty run, another layout, ack subjects of several consumers (or
        # delivery counts), or a space (which no ack subject on a control line
        # holds) is left to ack_sequences.
        assert (
            not replies
            or any(len(r.split(b".")) != 9 or r[:4] != b"$JS." for r in replies)
            or any(r.split(b".")[:5] != replies[0].split(b".")[:5] for r in replies)
            or any(b" " in r for r in replies)
        )
        return
    for i, reply in enumerate(replies):
        assert reply.split(b".")[:5] == replies[0].split(b".")[:5]
        assert numbers[5 * i : 5 * i + 4] == reply.split(b".")[5:]


@st.composite
def _scans(draw: st.DrawFn) -> tuple[SnapshotScan, Sequence[int]]:
    scan = SnapshotScan(draw(st.integers(0, 60)), latest_only=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 2))):
        scan.opened(draw(st.integers(0, 60)))
        for seq in sorted(draw(st.sets(st.integers(1, 70), max_size=8))):
            scan.deliver(seq)
    kind = draw(st.integers(0, 2))
    if kind == 0:  # anything
        seqs = draw(st.lists(st.integers(1, 70), max_size=15))
    elif kind == 1:  # increasing
        seqs = sorted(draw(st.sets(st.integers(1, 70), max_size=15)))
    else:  # the usual run, up to or past the end of what the consumer had pending
        first = scan.reached + draw(st.integers(0, 2))
        count = draw(st.integers(0, max(0, scan._left) + 1))
        seqs = range(first, first + count)  # as judge_run gives a counting run
        if draw(st.booleans()):
            seqs = list(seqs)
    return scan, seqs


def _scan_state(scan: SnapshotScan) -> tuple[object, ...]:
    return tuple(getattr(scan, name) for name in SnapshotScan.__slots__)


@settings(max_examples=500, deadline=None)
@given(_scans())
def test_take_run_agrees_with_deliver_one_by_one(
    case: tuple[SnapshotScan, Sequence[int]],
) -> None:
    scan, seqs = case
    one_by_one = copy.copy(scan)
    before = _scan_state(scan)
    verdicts = [one_by_one.deliver(seq) for seq in seqs]
    if scan.take_run(seqs):
        assert verdicts == [ScanVerdict.TAKE] * len(seqs)
        assert not scan.done
        assert _scan_state(scan) == _scan_state(one_by_one)
    else:
        assert _scan_state(scan) == before


@settings(max_examples=500, deadline=None)
@given(_scans())
def test_take_head_agrees_with_deliver_one_by_one(
    case: tuple[SnapshotScan, Sequence[int]],
) -> None:
    scan, seqs = case
    one_by_one = copy.copy(scan)
    before = _scan_state(scan)
    head = scan.take_head(seqs)
    assert 0 <= head <= len(seqs)
    verdicts = []
    for seq in seqs[:head]:
        verdicts.append(one_by_one.deliver(seq))
        assert not one_by_one.done  # the scan goes on after each of the head
    assert verdicts == [ScanVerdict.TAKE] * head
    assert _scan_state(scan) == (_scan_state(one_by_one) if head else before)
    increasing = all(a < b for a, b in itertools.pairwise(seqs))
    if increasing and head < len(seqs):
        # the longest such head: the next one is not taken, or ends the scan
        assert one_by_one.deliver(seqs[head]) is not ScanVerdict.TAKE or one_by_one.done


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.sampled_from("abcdefgh"), max_size=8),
    st.lists(st.tuples(st.sampled_from("abcdefghij"), st.integers(1, 20)), max_size=12),
    st.integers(0, 20),
)
def test_delivered_run_is_delivered_for_each(
    start: set[str], run: list[tuple[str, int]], last: int
) -> None:
    at_once, one_by_one = StartSubjects(set(start), last), StartSubjects(set(start), last)
    at_once.delivered_run([s for s, _ in run], [q for _, q in run])
    for subject, seq in run:
        one_by_one.delivered(subject, seq)
    assert at_once.unreached == one_by_one.unreached


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(1, 30), max_size=10), st.integers(1, 25), st.integers(0, 8))
def test_delivered_run_of_a_range_is_delivered_for_each(
    start: set[int], first: int, count: int
) -> None:
    names = {f"k{n}" for n in start}
    seqs = range(first, first + count)
    at_once, one_by_one = StartSubjects(set(names), 20), StartSubjects(set(names), 20)
    at_once.delivered_run([f"k{seq}" for seq in seqs], seqs)
    for seq in seqs:
        one_by_one.delivered(f"k{seq}", seq)
    assert at_once.unreached == one_by_one.unreached


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.binary(max_size=8) | st.sampled_from([b"a\xc3", b"\xe2\x82", b"\xff b"]), max_size=8
    )
)
def test_decode_subjects_decodes_each(subjects: list[bytes]) -> None:
    texts = decode_subjects(subjects)
    if texts is None:
        assert not subjects or any(b" " in s for s in subjects)
    else:
        assert texts == [s.decode("utf-8", "replace") for s in subjects]


#: subjects as a listing meets them, with the odd ones a wire may carry: no
#: prefix, half of it, the prefix twice, spaces, bytes that are no UTF-8
_PREFIX = "$KV.b."
_SUBJECTS = st.lists(
    st.builds(
        bytes.__add__,
        st.sampled_from([b"$KV.b.", b"", b"$KV.", b"$KV.b.$KV.b.", b" $KV.b.", b"\xe2"]),
        st.binary(max_size=6) | st.sampled_from([b"k", b"a\xc3", b" ", b"x $KV.b.y", b"\xff"]),
    ),
    max_size=8,
)


@settings(max_examples=1000, deadline=None)
@given(_SUBJECTS, st.sampled_from([_PREFIX, "", "$KV.b. "]))
def test_keys_of_subjects_cuts_each_decoded_subject(subjects: list[bytes], prefix: str) -> None:
    keys = keys_of_subjects(subjects, prefix)
    texts = [s.decode("utf-8", "replace") for s in subjects]
    if keys is None:
        # Refused only where one split cannot tell: none, a space, another prefix.
        assert (
            not subjects
            or any(b" " in s for s in subjects)
            or not all(t.startswith(prefix) for t in texts)
        )
    else:
        assert all(t.startswith(prefix) for t in texts)
        assert keys == [t[len(prefix) :] for t in texts]


@given(st.lists(st.text(max_size=4), max_size=6), st.integers(-8, 8), st.integers(-8, 8))
def test_prefixed_keys_are_the_subjects(keys: list[str], start: int, stop: int) -> None:
    subjects = [_PREFIX + key for key in keys]
    view = PrefixedKeys(_PREFIX, keys)
    assert len(view) == len(subjects)
    assert list(view) == subjects
    assert view[start:stop] == subjects[start:stop]
    for i in range(-len(keys), len(keys)):
        assert view[i] == subjects[i]
    remaining = set(subjects) | {"other"}
    remaining.difference_update(view)
    assert remaining == {"other"}


_BLOCKS = st.one_of(
    st.none(),
    st.just(b""),
    st.sampled_from(
        [
            b"NATS/1.0\r\nNats-Msg-Size: 5\r\n\r\n",
            b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n",
            b"NATS/1.0\r\nKV-Operation: PURGE\r\nNats-Rollup: sub\r\n\r\n",
            b"NATS/1.0\r\nKV-Operation: PUT\r\n\r\n",
            b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\n\r\n",
            b"NATS/1.0\r\nKV-Oper",
            b"ation: DEL\r\n\r\n",
        ]
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_BLOCKS, max_size=8))
def test_all_put_only_when_each_is_a_put(blocks: list[bytes | None]) -> None:
    if all_put(blocks):
        assert all(operation_of_header_block(b) == PUT for b in blocks)


def test_all_put_of_plain_values_and_of_markers() -> None:
    plain = b"NATS/1.0\r\nNats-Msg-Size: 5\r\n\r\n"
    assert all_put([plain, None, plain, b""])
    assert not all_put([plain, b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n"])
    assert not all_put([b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\n\r\n"])


def test_take_head_leaves_the_delivery_that_ends_the_scan_to_deliver() -> None:
    scan = SnapshotScan(100, latest_only=True)
    scan.opened(5)
    assert scan.take_head(range(1, 9)) == 4  # the fifth, the last pending, ends it
    assert (scan.taken, scan.reached, scan.done) == (4, 4, False)
    assert scan.deliver(5) is ScanVerdict.TAKE
    assert scan.done
    scan = SnapshotScan(4, latest_only=True)
    scan.opened(50)
    assert scan.take_head([2, 3, 4, 5]) == 2  # 4 is the snapshot's last sequence
    assert scan.take_head([3]) == 0  # reached already: deliver() skips it
    assert scan.take_head([4, 5]) == 0
    assert scan.take_head([5, 4]) == 0  # not in order
    assert (scan.taken, scan.reached) == (2, 3)


def test_take_run_leaves_the_run_that_ends_the_scan_to_deliver() -> None:
    scan = SnapshotScan(100, latest_only=True)
    scan.opened(5)
    assert scan.take_run([1, 2])
    assert (scan.taken, scan.reached, scan.done) == (2, 2, False)
    assert not scan.take_run([3, 4, 5])  # the last pending one: deliver() ends the scan
    scan = SnapshotScan(4, latest_only=True)
    scan.opened(50)
    assert not scan.take_run([3, 4])  # the snapshot's last sequence: likewise
    assert scan.take_run([3])
    assert not scan.take_run([3])  # reached already: deliver() skips it
