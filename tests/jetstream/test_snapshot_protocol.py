"""The snapshot core of KV and Object Store listings (``_protocol/_snapshot.py``):
synchronous rules, and properties against a model of the bucket and of the server's
consumers, for any interleaving of puts, deletes, purges, deliveries and consumer
resets: ``keys()`` (with its look-up of the keys re-put before the scan reached
them), ``history()``, a watch's initial values and Object Store ``list()``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients.jetstream._protocol._snapshot import (
    CountedStartSubjects,
    ScanVerdict,
    SnapshotScan,
    StartSubjects,
    same_messages,
    subjects_object,
    subjects_of_object,
)

TAKE, SKIP, AFTER, RESUME = (
    ScanVerdict.TAKE,
    ScanVerdict.SKIP,
    ScanVerdict.AFTER,
    ScanVerdict.RESUME,
)

# -- the rules, one by one --


def test_an_empty_snapshot_is_done_at_once() -> None:
    scan = SnapshotScan(0, latest_only=True)
    assert scan.done
    assert scan.deliver(1) is AFTER


def test_a_consumer_with_nothing_pending_ends_the_scan() -> None:
    scan = SnapshotScan(10, latest_only=True)
    assert not scan.done
    scan.opened(0)
    assert scan.done


def test_each_delivery_is_taken_and_the_scan_ends_at_the_snapshot() -> None:
    scan = SnapshotScan(5, latest_only=True)
    scan.opened(9)
    assert scan.deliver(1) is TAKE
    assert scan.deliver(3) is TAKE
    assert not scan.done
    assert scan.deliver(5) is TAKE  # the snapshot's last message
    assert scan.done
    assert scan.deliver(6) is AFTER
    assert scan.taken == 3


def test_a_delivery_beyond_the_snapshot_ends_it_unread() -> None:
    scan = SnapshotScan(5, latest_only=True)
    scan.opened(4)
    assert scan.deliver(2) is TAKE
    assert scan.deliver(7) is AFTER  # written after the start
    assert scan.done
    assert scan.taken == 1


def test_the_scan_ends_after_as_many_deliveries_as_were_pending() -> None:
    # A filter whose last message lies below the stream's last sequence: the
    # count the consumer was created with ends it, not a later write.
    scan = SnapshotScan(9, latest_only=False)
    scan.opened(2)
    assert scan.deliver(2) is TAKE
    assert not scan.done
    assert scan.deliver(4) is TAKE
    assert scan.done


def test_a_restarted_scan_skips_what_it_reached_and_asks_to_resume_beyond() -> None:
    scan = SnapshotScan(6, latest_only=True)
    scan.opened(5)
    assert scan.deliver(1) is TAKE
    assert scan.deliver(3) is TAKE
    scan.opened(5)  # a replacement after a reset: its skip list starts over
    assert scan.restarts == 1
    assert scan.deliver(1) is SKIP
    assert scan.deliver(3) is SKIP
    assert scan.deliver(4) is TAKE
    assert scan.reached == 4
    assert scan.deliver(8) is RESUME  # the watch reads its updates from 7
    assert scan.done
    assert scan.taken == 3


def test_every_revision_is_taken_once_in_order() -> None:
    scan = SnapshotScan(6, latest_only=False)
    scan.opened(4)
    assert scan.deliver(1) is TAKE
    assert scan.deliver(2) is TAKE
    scan.opened(2)  # a replacement resumes by sequence: no restart
    assert scan.restarts == 0
    assert scan.deliver(2) is SKIP  # never twice
    assert scan.deliver(6) is TAKE
    assert scan.done


def test_a_bad_snapshot_is_refused() -> None:
    with pytest.raises(ValueError, match="last_seq"):
        SnapshotScan(-1, latest_only=True)
    for first in (0, True, 1.0):
        with pytest.raises(ValueError, match="first_seq"):
            SnapshotScan(5, latest_only=False, first_seq=first)  # type: ignore[arg-type]


def test_a_scan_from_a_first_sequence_looks_for_nothing_before_it() -> None:
    """A watch resumed from revision 7: before its first delivery the messages
    left are looked for from 7 (the consumer's start), not from the stream's
    start, whose older messages are no part of the scan."""
    scan = SnapshotScan(10, latest_only=False, first_seq=7)
    scan.opened(4)
    assert scan.resume_from == 7
    assert scan.deliver(7) is TAKE
    assert scan.resume_from == 8
    assert SnapshotScan(10, latest_only=False).resume_from == 1


# -- a model of the bucket and of the server's consumers --

PUT, DEL, PURGE = "PUT", "DEL", "PURGE"
KEYS = ("a", "b", "c", "d", "e")


@dataclass
class Bucket:
    """A KV stream: messages by sequence; ``history`` revisions kept per key; a
    purge marker removes the key's earlier messages (``Nats-Rollup: sub``)."""

    history: int
    stored: dict[int, tuple[str, str]] = field(default_factory=dict)
    last_seq: int = 0

    def write(self, key: str, op: str) -> None:
        self.last_seq += 1
        self.stored[self.last_seq] = (key, op)
        mine = sorted(s for s, (k, _) in self.stored.items() if k == key)
        drop = mine[:-1] if op == PURGE else mine[: max(0, len(mine) - self.history)]
        for s in drop:
            del self.stored[s]

    def last_of(self) -> dict[str, tuple[int, str]]:
        out: dict[str, tuple[int, str]] = {}
        for seq in sorted(self.stored):
            key, op = self.stored[seq]
            out[key] = (seq, op)
        return out


@dataclass
class Consumer:
    """A server-side consumer as nats-server runs it. ``last_per_subject``: the
    last message of each key at creation, in stream order (those removed since
    are passed over), then every message after the stream's last sequence at
    creation. Otherwise every message from ``start``. ``pending`` counts what
    it would still deliver."""

    bucket: Bucket
    skip: list[int]
    cursor: int  # deliveries after the skip list are above this

    @classmethod
    def last_per_subject(cls, bucket: Bucket) -> Consumer:
        skip = sorted(seq for seq, _ in bucket.last_of().values())
        return cls(bucket, skip, bucket.last_seq)

    @classmethod
    def from_seq(cls, bucket: Bucket, start: int) -> Consumer:
        return cls(bucket, [], start - 1)

    def _remaining(self) -> list[int]:
        stored = self.bucket.stored
        return [s for s in self.skip if s in stored] + sorted(s for s in stored if s > self.cursor)

    def pending(self) -> int:
        return len(self._remaining())

    def next(self) -> tuple[str, int, int, str] | None:
        """(key, stream sequence, pending after it, operation), or None."""
        remaining = self._remaining()
        if not remaining:
            return None
        seq = remaining[0]
        if self.skip and seq in self.skip:
            self.skip = self.skip[self.skip.index(seq) + 1 :]
        else:
            self.skip = []
            self.cursor = seq
        key, op = self.bucket.stored[seq]
        return key, seq, len(remaining) - 1, op


writes = st.tuples(st.sampled_from(KEYS), st.sampled_from((PUT, PUT, DEL, PURGE)))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), writes),
        st.tuples(st.just("deliver"), st.none()),
        st.tuples(st.just("reset"), st.none()),
    ),
    max_size=60,
)


@dataclass
class Run:
    taken: list[tuple[str, int, str]]  # (key, seq, op) taken, in order
    written_after: set[str]  # keys written after the snapshot
    snapshot: Bucket  # the bucket at the start (a copy)
    end: Bucket  # the bucket at the end
    first_beyond: ScanVerdict | None  # the verdict of the first delivery beyond it
    left: list[str]  # the subjects of the start the scan did not reach (StartSubjects)
    counted_left: list[str]  # the same, told by CountedStartSubjects (latest_only)


def run_scan(
    history: int,
    before: list[tuple[str, str]],
    between: list[tuple[str, str]],
    script: list[tuple[str, tuple[str, str] | None]],
    *,
    latest_only: bool,
    settle_after: int | None = None,
    settle_with_set: bool = False,
) -> Run:
    """Drive a SnapshotScan as the KV drivers do: the snapshot is the stream's last
    sequence, the consumer is created after ``between`` more writes, ``script``
    interleaves writes, deliveries and resets (a ``last_per_subject`` scan starts
    over; an every-revision scan resumes after its last delivery); then the
    deliveries are drained. ``settle_after``: the counted subjects are named only
    after that many deliveries (or at the end), as ``keys()`` reads its consumer
    while the answer naming them is on its way (counted, or as a set)."""
    bucket = Bucket(history)
    for key, op in before:
        bucket.write(key, op)
    snapshot = Bucket(history, dict(bucket.stored), bucket.last_seq)
    scan = SnapshotScan(bucket.last_seq, latest_only=latest_only)
    start = StartSubjects(snapshot.last_of(), bucket.last_seq)
    at_start = set(snapshot.last_of())
    counted = CountedStartSubjects(len(at_start), at_start.copy, bucket.last_seq)
    named = counted if not settle_with_set else at_start.copy()
    if settle_after is not None:
        counted = CountedStartSubjects.before_answer(bucket.last_seq)
    deliveries = 0
    settled: list[int] = []
    written_after: set[str] = set()
    for key, op in between:
        bucket.write(key, op)
        written_after.add(key)

    def create() -> Consumer:
        if latest_only:
            return Consumer.last_per_subject(bucket)
        return Consumer.from_seq(bucket, last_delivered + 1)

    last_delivered = 0
    consumer = create()
    scan.opened(consumer.pending())
    taken: list[tuple[str, int, str]] = []
    first_beyond: list[ScanVerdict] = []

    def deliver() -> bool:
        nonlocal last_delivered, deliveries
        if deliveries == settle_after and not settled:
            settled.append(1)
            counted.settle(named)
        got = consumer.next()
        if got is None:
            return False
        deliveries += 1
        key, seq, _, op = got  # the pending count each delivery carries is not used
        last_delivered = seq
        start.delivered(key, seq)  # every delivery, as the listing drivers do
        counted.delivered(key, seq)
        was_done = scan.done
        verdict = scan.deliver(seq)
        if verdict is TAKE:
            taken.append((key, seq, op))
        if seq > snapshot.last_seq and not was_done and not first_beyond:
            first_beyond.append(verdict)
            # After a restart, a watch must go back to read its updates by sequence.
            assert verdict is (RESUME if scan.restarts and latest_only else AFTER)
        return True

    for action, arg in script:
        if scan.done:
            break
        if action == "write":
            assert arg is not None
            bucket.write(*arg)
            written_after.add(arg[0])
        elif action == "deliver":
            deliver()
        else:
            consumer = create()
            scan.opened(consumer.pending())
            counted.restarted()  # as keys() tells it of a replacement
    # Drain: the scan must end (nothing can leave it waiting for ever).
    while not scan.done:
        assert deliver(), "the scan waits for a delivery that never comes"
    if settle_after is not None and not settled:
        counted.settle(named)
    return Run(
        taken,
        written_after,
        snapshot,
        bucket,
        first_beyond[0] if first_beyond else None,
        start.left(),
        counted.left(),
    )


histories = st.integers(min_value=1, max_value=3)
ops = st.lists(writes, max_size=15)


@settings(max_examples=400)
@given(
    histories,
    ops,
    st.lists(writes, max_size=3),
    steps,
    st.none() | st.integers(min_value=0, max_value=30),
    st.booleans(),
)
def test_keys_lists_each_key_holding_a_value_at_the_start_once(
    history: int,
    before: list[tuple[str, str]],
    between: list[tuple[str, str]],
    script: list[tuple[str, tuple[str, str] | None]],
    settle_after: int | None,
    settle_with_set: bool,
) -> None:
    run = run_scan(
        history,
        before,
        between,
        script,
        latest_only=True,
        settle_after=settle_after,
        settle_with_set=settle_with_set,
    )
    # keys() counts the subjects of the start instead of keeping their set: the
    # same ones are left to look up, whatever was written, however many consumers
    # started over, and however late the answer naming them came.
    assert run.counted_left == run.left
    listed = [key for key, _, op in run.taken if op == PUT]
    holding = {k for k, (_, op) in run.snapshot.last_of().items() if op == PUT}
    assert len(listed) == len(set(listed)), "a key listed twice"
    assert set(listed) <= holding, "a key listed that held no value at the start"
    untouched = holding - run.written_after
    assert untouched <= set(listed), "a key not written since the start is missing"


@settings(max_examples=400)
@given(histories, ops, st.lists(writes, max_size=3), steps)
def test_watch_initial_values_are_each_keys_message_at_the_start(
    history: int,
    before: list[tuple[str, str]],
    between: list[tuple[str, str]],
    script: list[tuple[str, tuple[str, str] | None]],
) -> None:
    run = run_scan(history, before, between, script, latest_only=True)
    at_start = run.snapshot.last_of()
    keys = [key for key, _, _ in run.taken]
    assert len(keys) == len(set(keys)), "a key given twice as an initial value"
    for key, seq, op in run.taken:
        assert at_start[key] == (seq, op), "an initial value that is not the key's at the start"
    assert set(at_start) - run.written_after <= set(keys)


@settings(max_examples=400)
@given(histories, ops, st.lists(writes, max_size=3), steps)
def test_history_lists_each_revision_of_the_snapshot_once_in_order(
    history: int,
    before: list[tuple[str, str]],
    between: list[tuple[str, str]],
    script: list[tuple[str, tuple[str, str] | None]],
) -> None:
    run = run_scan(history, before, between, script, latest_only=False)
    seqs = [seq for _, seq, _ in run.taken]
    assert seqs == sorted(set(seqs)), "a revision twice or out of order"
    assert all(seq <= run.snapshot.last_seq for seq in seqs), "a revision written later"
    for key, seq, op in run.taken:
        assert run.snapshot.stored[seq] == (key, op)
    still_there = {s for s in run.snapshot.stored if s in run.end.stored}
    assert still_there <= set(seqs), "a revision of the snapshot still stored is missing"


def test_counted_start_subjects_load_them_only_when_one_is_left() -> None:
    loads: list[int] = []

    def load() -> set[str]:
        loads.append(1)
        return {"a", "b", "c"}

    start = CountedStartSubjects(3, load, 10)
    start.delivered_run(["a", "b"], range(4, 6))
    start.delivered("c", 9)
    assert start.left() == []
    assert not loads
    start = CountedStartSubjects(3, load, 10)
    start.delivered_run(["a", "b", "c"], [4, 5, 11])  # c's message of then is gone
    assert start.left() == ["c"]
    assert loads == [1]
    start = CountedStartSubjects(3, load, 10)
    start.delivered_run(["a", "b"], range(4, 6))
    start.restarted()  # the replacement starts over: a again, not c
    start.delivered("a", 4)
    assert start.left() == ["c"]


def listing(run: Run, *, live: set[str]) -> list[str]:
    """What ``keys()`` / Object Store ``list()`` give: the scan's takes whose
    operation counts (``live``), then each subject of the start the scan did not
    reach, looked up as it is at the end."""
    listed = [key for key, _, op in run.taken if op in live]
    now = run.end.last_of()
    listed += [key for key in run.left if key in now and now[key][1] in live]
    return listed


@settings(max_examples=400)
@given(histories, ops, st.lists(writes, max_size=3), steps)
def test_keys_with_its_look_ups_lists_each_key_of_the_start_once(
    history: int,
    before: list[tuple[str, str]],
    between: list[tuple[str, str]],
    script: list[tuple[str, tuple[str, str] | None]],
) -> None:
    run = run_scan(history, before, between, script, latest_only=True)
    listed = listing(run, live={PUT})
    at_start = run.snapshot.last_of()
    holding = {k for k, (_, op) in at_start.items() if op == PUT}
    still = {k for k, (_, op) in run.end.last_of().items() if op == PUT}
    assert len(listed) == len(set(listed)), "a key listed twice"
    assert set(listed) <= set(at_start), "a key created after the start is listed"
    # A key deleted at the start may come back only by a write since (documented).
    assert set(listed) - holding <= run.written_after, "a key holding no value is listed"
    assert holding & still <= set(listed), "a key holding a value all along is missing"
    assert holding - run.written_after <= set(listed)


@settings(max_examples=400)
@given(ops, st.lists(writes, max_size=3), steps, st.booleans())
def test_object_store_list_gives_each_object_of_the_start_once(
    before: list[tuple[str, str]],
    between: list[tuple[str, str]],
    script: list[tuple[str, tuple[str, str] | None]],
    show_deleted: bool,
) -> None:
    # An object's meta is a rollup (one revision kept); PUT stands for a meta of a
    # live object, DEL and PURGE for the meta ``delete()`` writes.
    run = run_scan(1, before, between, script, latest_only=True)
    live = {PUT, DEL, PURGE} if show_deleted else {PUT}
    listed = listing(run, live=live)
    at_start = {k for k, (_, op) in run.snapshot.last_of().items() if op in live}
    at_end = {k for k, (_, op) in run.end.last_of().items() if op in live}
    assert len(listed) == len(set(listed)), "an object listed twice"
    assert set(listed) <= set(run.snapshot.last_of()), "an object written later is listed"
    assert set(listed) - at_start <= run.written_after
    assert at_start & at_end <= set(listed), "an object there all along is missing"


def test_start_subjects_takes_a_set_over_and_drops_what_a_delivery_reached() -> None:
    subjects = {"$KV.b.a", "$KV.b.b", "$KV.b.c"}
    start = StartSubjects(subjects, 5)
    assert start.unreached is subjects  # taken over, not copied (100k keys: a copy)
    start.delivered("$KV.b.b", 5)
    start.delivered("$KV.b.c", 6)  # after the start: not that subject's message of then
    assert start.left() == ["$KV.b.a", "$KV.b.c"]
    listed = ["$KV.b.x"]
    assert StartSubjects(listed, 1).unreached == {"$KV.b.x"}
    assert listed == ["$KV.b.x"]


# -- the subjects of a STREAM.INFO answer, counted --

subject_names = st.text(min_size=1, max_size=12)
plain_names = st.text(
    st.characters(blacklist_characters='"\\', blacklist_categories=("Cs", "Cc"), min_codepoint=33),
    min_size=1,
    max_size=12,
)


def _info_answer(subjects: dict[str, int], description: str, ascii_only: bool) -> bytes:
    # As nats-server writes it (compact); the config's subjects are a list, and a
    # description may hold anything, quotes and braces included.
    answer = {
        "type": "io.nats.jetstream.api.v1.stream_info_response",
        "total": len(subjects),
        "offset": 0,
        "limit": 100000,
        "config": {"name": "KV_b", "subjects": ["$KV.b.>"], "description": description},
        "state": {"messages": 9, "last_seq": 42, "subjects": subjects, "consumer_count": 1},
    }
    text = json.dumps(answer, separators=(",", ":"), ensure_ascii=ascii_only)
    return text.encode()


@settings(max_examples=300)
@given(
    st.dictionaries(st.one_of(subject_names, plain_names), st.integers(1, 10**6), max_size=8),
    st.text(max_size=20),
    st.booleans(),
)
def test_subjects_object_gives_what_decoding_the_whole_answer_gives(
    subjects: dict[str, int], description: str, ascii_only: bool
) -> None:
    data = _info_answer(subjects, description, ascii_only)
    whole = json.loads(data)
    cut = subjects_object(data)
    if cut is None:
        return  # decoded whole by the caller
    rest, inner = cut
    left = json.loads(rest)
    assert left["state"].pop("subjects") == {}
    whole["state"].pop("subjects")
    assert left == whole
    count, load = subjects_of_object(inner)
    assert count == len(subjects)
    assert load() == set(subjects)


@given(st.dictionaries(plain_names, st.integers(1, 10**6), max_size=8), st.text(max_size=20))
def test_subjects_written_plainly_are_counted_without_decoding_them(
    subjects: dict[str, int], description: str
) -> None:
    # Braces in names or in the description do not stop it; only a backslash does.
    cut = subjects_object(_info_answer(subjects, description, False))
    assert cut is not None
    assert subjects_of_object(cut[1])[0] == len(subjects)


def test_subjects_object_leaves_odd_answers_to_the_decoder() -> None:
    assert subjects_object(b'{"state":{"last_seq":3}}') is None  # no subjects
    assert subjects_object(b'{"state":{"subjects":{"a\\"b":1}}}') is None  # escaped
    assert subjects_object(b'{"x":{"subjects":{}},"state":{"subjects":{"a":1}}}') is None
    assert subjects_object(b'{"state":{"subjects":{"a}":1') is None  # cut short
    assert subjects_object(b'{"state":{"subjects":{"a}":1,"b":2}}}') == (
        b'{"state":{"subjects":{}}}',
        b'"a}":1,"b":2',
    )


def test_counted_start_subjects_named_late_count_what_came_before() -> None:
    start = CountedStartSubjects.before_answer(10)
    start.delivered_run(["a", "b"], range(4, 6))
    start.delivered("c", 9)
    start.settle(CountedStartSubjects(3, lambda: {"a", "b", "c"}, 10))
    assert start.left() == []
    start = CountedStartSubjects.before_answer(10)
    start.delivered_run(["a", "b"], [4, 11])  # b's message of then is gone
    named = {"a", "b"}
    start.settle(named)
    assert start.left() == ["b"]
    assert named == {"a", "b"}  # copied, not taken over
    start = CountedStartSubjects.before_answer(10)
    start.delivered("a", 12)  # a delivery beyond the start: one is missing
    with pytest.raises(RuntimeError, match="not settled"):
        start.left()


def test_counted_start_subjects_settled_from_the_consumers_pending() -> None:
    # The stream unchanged from the first look to one after the read: the single
    # consumer's skip list held each subject of the start once, as many as it
    # had pending when created; with that many delivered, none is left to name.
    start = CountedStartSubjects.before_answer(10)
    start.delivered_run(["a", "b"], range(4, 6))
    start.delivered("c", 9)
    start.delivered("d", 11)  # after the start: not counted
    assert start.settle_from_pending(3)
    assert start.count == 3
    assert start.left() == []
    start = CountedStartSubjects.before_answer(10)
    start.delivered_run(["a", "b"], range(4, 6))  # one short of pending
    assert not start.settle_from_pending(3)
    with pytest.raises(RuntimeError, match="not settled"):
        start.left()  # unchanged: the subjects must be named
    start.settle({"a", "b", "c"})
    assert start.left() == ["c"]
    start = CountedStartSubjects.before_answer(10)
    start.delivered("a", 4)
    start.restarted()  # a replacement started over: a is delivered again
    start.delivered_run(["a", "b"], range(4, 6))
    assert not start.settle_from_pending(3)


removals = st.tuples(st.just("remove"), st.sampled_from(KEYS))


@settings(max_examples=400)
@given(
    histories,
    ops,
    st.lists(st.one_of(writes.map(lambda w: ("write", w)), removals), max_size=2),
    st.lists(
        st.one_of(
            writes.map(lambda w: ("write", w)),
            removals,
            st.tuples(st.just("deliver"), st.none()),
            st.tuples(st.just("reset"), st.none()),
        ),
        max_size=40,
    ),
)
def test_keys_settled_from_pending_only_when_that_is_exact(
    history: int,
    before: list[tuple[str, str]],
    between: list[tuple[str, object]],
    script: list[tuple[str, object]],
) -> None:
    """keys() with its subjects not named at the start: at the end of the read a
    second look; when it shows the first look's messages, the consumer's pending
    count settles the subjects with none named. Whenever it does, what is left
    to look up is exactly what the set of the start's subjects leaves (nothing);
    with nothing written or removed and no reset, it always does."""
    bucket = Bucket(history)
    for key, op in before:
        bucket.write(key, op)
    look = (bucket.last_seq, len(bucket.stored))
    at_start = set(bucket.last_of())
    scan = SnapshotScan(bucket.last_seq, latest_only=True)
    start = StartSubjects(at_start.copy(), bucket.last_seq)
    counted = CountedStartSubjects.before_answer(bucket.last_seq)
    touched = False

    def act(action: str, arg: object) -> None:
        nonlocal touched
        if action == "write":
            bucket.write(*cast(tuple[str, str], arg))
            touched = True
        elif action == "remove":  # a purge of the key's messages, or their expiry
            for seq in [s for s, (k, _) in bucket.stored.items() if k == arg]:
                del bucket.stored[seq]
                touched = True

    for action, arg in between:
        act(action, arg)
    consumer = Consumer.last_per_subject(bucket)
    pending = consumer.pending()
    scan.opened(pending)

    def deliver() -> bool:
        got = consumer.next()
        if got is None:
            return False
        key, seq, _, _ = got
        start.delivered(key, seq)
        counted.delivered(key, seq)
        scan.deliver(seq)
        return True

    for action, arg in script:
        if scan.done:
            break
        if action == "deliver":
            deliver()
        elif action == "reset":
            consumer = Consumer.last_per_subject(bucket)
            scan.opened(consumer.pending())
            counted.restarted()
            touched = True
        else:
            act(action, arg)
    while not scan.done:
        if not deliver():  # the rest of the snapshot vanished: the stall guard ends it
            assert scan.stalled(scan.consumers, None)
    later = (bucket.last_seq, len(bucket.stored))
    if same_messages(look, later) and counted.settle_from_pending(pending):
        assert counted.left() == start.left() == []
    else:
        assert not (bucket.stored and not touched), "named although nothing happened"
        if same_messages(look, later):  # named: the answer shows the start's stream
            counted.settle(at_start)
            assert counted.left() == start.left()


@settings(max_examples=300)
@given(histories, ops, st.lists(st.tuples(writes, st.booleans()), max_size=4))
def test_two_looks_at_the_same_messages_see_the_same_bucket(
    history: int, before: list[tuple[str, str]], meanwhile: list[tuple[tuple[str, str], bool]]
) -> None:
    """The check keys() makes before handing out keys read from a consumer created
    between two looks at the stream: when both looks show the same last sequence
    and number of messages, nothing was written or removed between them."""
    bucket = Bucket(history)
    for key, op in before:
        bucket.write(key, op)
    first = dict(bucket.stored)
    look = (bucket.last_seq, len(bucket.stored))
    for (key, op), removal in meanwhile:
        if removal:  # a purge of the key's messages, or their expiry: nothing appended
            for seq in [s for s, (k, _) in bucket.stored.items() if k == key]:
                del bucket.stored[seq]
        else:
            bucket.write(key, op)
    later = (bucket.last_seq, len(bucket.stored))
    if same_messages(look, later):
        assert bucket.stored == first, "a change between the looks passed unseen"
    if bucket.last_seq == look[0] and bucket.stored == first:
        assert same_messages(look, later)  # nothing happened: no start over
    assert not same_messages(look, (later[0], None))  # not known: start over
