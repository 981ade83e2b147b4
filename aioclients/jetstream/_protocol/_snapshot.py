"""Snapshot listings of a Key-Value bucket: ``keys()``, ``history()`` and the initial
values of ``watch()`` read exactly what the bucket held when the call started.

They read an ordered consumer (ADR-17) whose deliveries keep coming while other
clients write. A :class:`SnapshotScan` judges each in-order delivery against the
snapshot: the stream's last sequence ``last_seq`` when the call started.

Rules:
    - :meth:`opened` each time a consumer is created (the first, or a
      replacement), with the number of messages it had pending then.
    - A delivery whose stream sequence is beyond ``last_seq`` was written after
      the start: the scan is over (``AFTER``); ``keys()`` and ``history()`` end
      there, a watch yields it as its first update.
    - The scan is also over after the delivery at ``last_seq`` itself, or once
      the consumer has delivered as many messages as it had pending when it was
      created (at once when that was none, or when ``last_seq`` is 0). The
      pending count each delivery carries is not used: nats-server 2.15 reports
      0 on a ``last_per_subject`` consumer's deliveries while hundreds of its
      skip list remain, when others write meanwhile.
    - ``latest_only`` (deliver policy ``last_per_subject``): the server's skip
      list gives every key's last message at the consumer's creation, once, in
      stream order, passing over those removed since; then the messages after
      its creation. So each key is taken once, as it was at the start; a key
      written between the start and the moment the scan reaches it shows up
      beyond ``last_seq`` and is left out of the scan (with one revision kept,
      its value at the start is no longer stored; ``keys()`` looks such keys up
      afterwards from the subjects the stream held at the start).
    - Every revision (``latest_only`` false: ``history()``, ``include_history``):
      each stream sequence at most once, in order.
    - A reset of a ``latest_only`` scan restarts ``last_per_subject`` from the
      beginning (:meth:`opened` again). Nothing at or below ``reached`` (the highest
      sequence delivered so far) is taken again: the first consumer delivered
      every key whose last message lies there, and a key's last message only
      moves up (a write adds a newer one; limits and purges remove older ones).
      Above ``reached``, a key's last message at or before ``last_seq`` is the
      same whichever consumer delivers it. No set of keys is kept: memory stays
      constant however large the bucket. A restarted watch that reaches beyond
      ``last_seq`` answers ``RESUME``: its updates must be read by stream
      sequence from ``last_seq + 1`` (the restarted consumer's skip list would
      give only the last of them).
    - Messages of the snapshot may vanish while it is read (an admin purge, max
      age without markers): the consumer then never delivers as many as it had
      pending, nor the one at ``last_seq``. So the driver arms a timer
      (:meth:`get_timer`, :meth:`handle_timer`): when nothing was delivered
      for ``stall_after`` seconds it asks the consumer's info; when the
      consumer has nothing pending and has made no delivery beyond those
      judged (:meth:`stall_suspected`), it asks the stream for the first
      message of the scan's filters after the last delivery (the highest of any
      consumer, a replacement's included: :attr:`resume_from`), and
      :meth:`stalled` ends the scan when there is none up to ``last_seq``.
      What was taken stands (no duplicate, nothing invented); a write after the
      start would have come as a delivery beyond ``last_seq``, so none is missed.

``keys()`` and Object Store ``list()`` also keep :class:`StartSubjects`: the
subjects holding a message at the start that no delivery at or before
``last_seq`` reached. With one revision kept (and an object's meta is a rollup)
a key re-put after the start lost its message of then, and the skip list passes
over it; once the scan is over the driver looks each of those up as it is now.

When are the subjects of the start named? ``keys()`` with one filter only counts
them (:class:`CountedStartSubjects`), and naming them costs the server a
``STREAM.INFO`` answer listing every one (some 100 ms of its CPU per 100,000).
Up to a number of subjects (the driver's limit, by the consumer's pending count)
it asks for none in the usual case: it holds the keys read until a second look
at the stream after the read; when that look shows the first one's messages
(:func:`same_messages`), the stream was the start's all along, and a single
consumer delivering as many as it had pending reached every subject
(:meth:`CountedStartSubjects.settle_from_pending`). Otherwise (a write or a
removal meanwhile, a replacement consumer), and at once above that limit, the
subjects are named; an answer that shows another stream than the first look
becomes the snapshot, read by a new consumer (nothing was handed out yet).

Pure: no I/O, no clock; ``tests/jetstream/test_snapshot_protocol.py`` checks these
rules, and the listings built on them, against a model of the bucket for any
interleaving of writes and resets.
"""

from __future__ import annotations

import enum
import json
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from operator import lt

__all__ = (
    "CountedStartSubjects",
    "ScanVerdict",
    "SnapshotScan",
    "StartSubjects",
    "same_messages",
    "subjects_object",
    "subjects_of_object",
)


class ScanVerdict(enum.Enum):
    """What to do with one in-order delivery of a snapshot scan."""

    #: part of the snapshot: list it (or yield it as an initial value)
    TAKE = "take"
    #: in the snapshot but taken already (or left out): drop it
    SKIP = "skip"
    #: written after the start: the scan is over (a watch's first update)
    AFTER = "after"
    #: written after the start, seen by a restarted ``last_per_subject`` consumer:
    #: the scan is over, and a watch must read its updates from ``last_seq + 1``
    RESUME = "resume"


# The verdicts as module constants: an Enum member read through its class costs
# a descriptor call on CPython 3.11, and deliver() runs once per entry of a scan.
_TAKE = ScanVerdict.TAKE
_SKIP = ScanVerdict.SKIP
_AFTER = ScanVerdict.AFTER
_RESUME = ScanVerdict.RESUME


class SnapshotScan:
    """Judges the deliveries of one listing against the snapshot (see module doc).

    Args:
        last_seq: the stream's last sequence when the call started (0: empty).
        latest_only: one delivery per key (``last_per_subject``), not every revision.
        first_seq: the first stream sequence the scan's consumer starts at (a
            watch resumed from a revision): none before it is looked for.
    """

    __slots__ = (
        "_check_at",
        "_count",
        "_left",
        "_mark",
        "_seen",
        "consumers",
        "done",
        "first_seq",
        "last_seq",
        "latest_only",
        "reached",
        "stall_after",
        "taken",
    )

    def __init__(
        self, last_seq: int, *, latest_only: bool, stall_after: float = 1.0, first_seq: int = 1
    ) -> None:
        if not isinstance(last_seq, int) or isinstance(last_seq, bool) or last_seq < 0:
            raise ValueError(f"last_seq must be an int >= 0, got {last_seq!r}")
        if not isinstance(first_seq, int) or isinstance(first_seq, bool) or first_seq < 1:
            raise ValueError(f"first_seq must be an int >= 1, got {first_seq!r}")
        self.first_seq = first_seq
        if not stall_after > 0:
            raise ValueError(f"stall_after must be > 0 seconds, got {stall_after!r}")
        #: seconds without a delivery before the consumer's info is asked
        self.stall_after = stall_after
        self.last_seq = last_seq
        self.latest_only = latest_only
        #: the snapshot has been read to its end
        self.done = last_seq == 0
        #: how many consumers were opened (more than one: there were resets)
        self.consumers = 0
        #: how many deliveries were taken
        self.taken = 0
        #: the highest stream sequence delivered so far (by any consumer)
        self.reached = 0
        self._left = 0
        # How many deliveries of the current consumer were judged (its consumer
        # sequence: an ordered consumer's deliveries come gapless and in order).
        self._count = 0
        # The stream sequence of the current consumer's last delivery.
        self._seen = 0
        # (consumers, _count) at the last look, and when to look next.
        self._mark = (0, 0)
        self._check_at: float | None = None

    @property
    def restarts(self) -> int:
        """How many times a replacement consumer started over (``latest_only``)."""
        return max(0, self.consumers - 1) if self.latest_only else 0

    def opened(self, pending: int) -> None:
        """A consumer was created with ``pending`` messages to deliver; a
        replacement of a ``latest_only`` scan starts over from the beginning."""
        self.consumers += 1
        self._left = pending
        self._count = 0
        self._seen = 0
        if pending <= 0:
            self.done = True

    def deliver(self, stream_seq: int) -> ScanVerdict:
        """Judge one in-order delivery of the current consumer by its stream sequence."""
        if self.done:
            return _AFTER
        self._count += 1
        self._seen = stream_seq
        if stream_seq > self.last_seq:
            self.done = True
            return _RESUME if self.latest_only and self.consumers > 1 else _AFTER
        left = self._left - 1
        self._left = left
        if left <= 0 or stream_seq == self.last_seq:
            self.done = True
        if stream_seq <= self.reached:
            return _SKIP  # delivered before the restart
        self.reached = stream_seq
        self.taken += 1
        return _TAKE

    def take_run(self, stream_seqs: Sequence[int]) -> bool:
        """Judge a run of in-order deliveries at once: ``True`` (recorded as
        :meth:`deliver` would) when it would answer ``TAKE`` for every one of them
        and the scan goes on after them (the usual case); ``False`` (nothing
        changed) otherwise: judge them one by one."""
        count = len(stream_seqs)
        if (
            self.done
            or not count
            or count >= self._left
            or stream_seqs[0] <= self.reached
            or stream_seqs[-1] >= self.last_seq
            or not (
                (type(stream_seqs) is range and stream_seqs.step > 0)  # judge_run's
                or all(map(lt, stream_seqs, islice(stream_seqs, 1, None)))
            )
        ):
            return False
        last = stream_seqs[-1]
        self._count += count
        self._seen = last
        self._left -= count
        self.reached = last
        self.taken += count
        return True

    def take_head(self, stream_seqs: Sequence[int]) -> int:
        """Judge the longest head of a run of in-order deliveries that :meth:`deliver`
        would answer ``TAKE`` for, one after the other, with the scan going on
        after each: how many (recorded as those calls would; 0: nothing changed).
        The rest, from the delivery that ends the scan on, is :meth:`deliver`'s."""
        count = len(stream_seqs)
        if (
            self.done
            or not count
            or stream_seqs[0] <= self.reached
            or not (
                (type(stream_seqs) is range and stream_seqs.step > 0)  # judge_run's
                or all(map(lt, stream_seqs, islice(stream_seqs, 1, None)))
            )
        ):
            return 0
        # The delivery that leaves none pending, or that reaches the snapshot's last
        # sequence (or goes past it), ends the scan: the head stops before it.
        head = bisect_left(stream_seqs, self.last_seq, 0, max(0, min(count, self._left - 1)))
        if head:
            last = stream_seqs[head - 1]
            self._count += head
            self._seen = last
            self._left -= head
            self.reached = last
            self.taken += head
        return head

    # -- a snapshot whose messages vanish ------------------------------------------------------

    def start_timer(self, now: float) -> None:
        """The scan began reading at ``now``: the first look is due ``stall_after`` later."""
        self._mark = (self.consumers, self._count)
        self._check_at = now + self.stall_after

    def get_timer(self) -> float | None:
        """When the driver should call :meth:`handle_timer` (``None``: never, the scan
        is over or its timer was not started)."""
        return None if self.done else self._check_at

    def handle_timer(self, now: float) -> bool:
        """The timer fired: ``True`` when nothing was delivered since the last look,
        so the driver should ask the consumer's info and pass it to
        :meth:`stalled`. The next look is due ``stall_after`` from ``now``."""
        if self.done:
            return False
        mark = (self.consumers, self._count)
        idle = mark == self._mark
        self._mark = mark
        self._check_at = now + self.stall_after
        return idle

    def stall_suspected(self, consumer: int, num_pending: int, delivered: int) -> bool:
        """Judge the consumer's info, asked of the ``consumer``-th consumer (the value
        of :attr:`consumers` when it was asked): ``num_pending`` and ``delivered``,
        its consumer sequence (how many deliveries it made; a purge moves its
        stream sequence, never this). ``True`` when it has nothing pending and
        made no delivery beyond those judged: the driver then asks the stream for
        the first message at or after :attr:`resume_from` matching the scan's
        filters and passes it to :meth:`stalled`. (The pending count alone is not
        trusted: nats-server 2.15 reports 0 for a ``last_per_subject`` consumer
        with much of its skip list left, when others write.) A replacement opened
        since, or a delivery in flight, is no stall."""
        if self.done:
            return False
        return consumer == self.consumers and num_pending <= 0 and delivered <= self._count

    def stuck(self, consumer: int, num_pending: int, num_waiting: int, delivered: int) -> bool:
        """Judge the consumer's info as :meth:`stall_suspected` does: ``True`` when
        the server holds messages for it (``num_pending``) and a pull waits
        (``num_waiting``) yet it made no delivery beyond those judged. nats-server
        2.15 leaves a ``last_per_subject`` consumer so when skip-list messages it
        had not sent yet are replaced (a key re-put, an object rewritten), until
        its pulls expire; the driver then replaces the consumer (a reset, which
        the scan survives exactly)."""
        if self.done or consumer != self.consumers:
            return False
        return num_pending > 0 and num_waiting > 0 and delivered <= self._count

    @property
    def resume_from(self) -> int:
        """The first stream sequence after every delivery so far: after the highest
        any consumer delivered (:attr:`reached`), not only the current one. A
        replacement resumes there (every revision), or starts over and only skips
        what lies at or below it (``latest_only``): what is left to take lies above
        it either way, and a replacement that delivered nothing yet looks from there,
        not from :attr:`first_seq` (whose messages, delivered already, may still be
        stored)."""
        return max(self._seen, self.reached, self.first_seq - 1) + 1

    def stalled(self, consumer: int, first_left: int | None) -> bool:
        """``first_left``: the first stream sequence at or after :attr:`resume_from`
        (as it was when the stall was suspected) holding a message of the scan's
        filters, ``None`` for none. ``True`` (and the scan is over) when there is
        none up to ``last_seq``: the rest of the snapshot vanished. A message left
        means a delivery is still due (that key's last message, at or beyond
        ``last_seq``), so the scan goes on."""
        if self.done:
            return True
        if consumer != self.consumers:
            return False
        if first_left is not None and first_left <= self.last_seq:
            return False
        self.done = True
        return True


def _at_or_before(subjects: Sequence[str], stream_seqs: Sequence[int], last: int) -> Sequence[str]:
    """The subjects of a run whose stream sequence is at or before ``last``: all of
    them (as they are) when the run's highest is."""
    if type(stream_seqs) is range and stream_seqs.step > 0:
        highest = stream_seqs[-1] if stream_seqs else 0
    else:
        highest = max(stream_seqs, default=0)
    if highest <= last:
        return subjects
    return [subject for subject, seq in zip(subjects, stream_seqs, strict=True) if seq <= last]


class StartSubjects:
    """The subjects holding a message when a listing started (the stream's
    ``subjects_filter`` answer that gave ``last_seq``) that the scan has not yet
    reached: see the module doc.

    Args:
        subjects: the subjects (keys or metas, markers included) at the start; a
            ``set`` is taken over (it becomes ``unreached``), not copied.
        last_seq: the stream's last sequence in the same answer.
    """

    __slots__ = ("last_seq", "unreached")

    def __init__(self, subjects: Iterable[str], last_seq: int) -> None:
        #: the subjects not reached yet
        self.unreached = subjects if isinstance(subjects, set) else set(subjects)
        self.last_seq = last_seq

    def delivered(self, subject: str, stream_seq: int) -> None:
        """Every delivery of the scan, whatever its verdict (a replacement consumer's
        too): one at or before ``last_seq`` is that subject's message of the start
        (or a later one the scan judges), so the subject needs no look-up."""
        if stream_seq <= self.last_seq:
            self.unreached.discard(subject)

    def delivered_run(self, subjects: Sequence[str], stream_seqs: Sequence[int]) -> None:
        """:meth:`delivered` for each ``(subject, stream_seq)`` of a run, at once."""
        self.unreached.difference_update(_at_or_before(subjects, stream_seqs, self.last_seq))

    def left(self) -> list[str]:
        """The subjects no delivery reached, sorted: to look up as they are now."""
        return sorted(self.unreached)


class CountedStartSubjects:
    """:class:`StartSubjects` for a listing that reads the skip list of one
    ``last_per_subject`` consumer (``keys()``), told without a set of subjects in the
    usual case: the subjects of the start are only counted (``count``, the number
    of them in the answer naming them, or the consumer's pending count, see
    :meth:`settle_from_pending`) until :meth:`left` has to name them (``load()``
    gives their set then).

    The consumer is created after that answer, so every delivery at or before
    ``last_seq`` is the last message, at its creation, of a subject that held one
    at the start: one delivery per subject, each subject among those of the start
    (the filters being the same). So while a single consumer was read
    (:meth:`restarted` not called), as many such deliveries as ``count`` reach
    every subject of the start, and :meth:`left` is empty; otherwise (a key
    re-put or removed meanwhile, a replacement consumer that starts over) it is
    computed as :class:`StartSubjects` computes it, from the subjects delivered.

    Args:
        count: how many subjects held a message at the start.
        load: the set of those subjects (called at most once).
        last_seq: the stream's last sequence in the same answer.
    """

    __slots__ = ("_load", "_reached", "_runs", "_single", "count", "last_seq")

    def __init__(self, count: int, load: Callable[[], set[str]], last_seq: int) -> None:
        self.count = count
        self.last_seq = last_seq
        self._load = load
        #: deliveries at or before ``last_seq``, and their subjects (runs of them)
        self._reached = 0
        self._runs: list[Sequence[str]] = []
        self._single = True

    @classmethod
    def before_answer(cls, last_seq: int) -> CountedStartSubjects:
        """One whose subjects are not known yet (``keys()`` creates and reads its
        consumer before they are named, if ever): deliveries are counted as usual,
        and :meth:`settle_from_pending` or :meth:`settle` gives their number (and
        set) before :meth:`left`."""
        return cls(-1, _not_settled, last_seq)

    def settle(self, subjects: CountedStartSubjects | set[str]) -> None:
        """The subjects of the start, from the answer (counted or a set) of a
        stream that held the same messages as at ``last_seq`` (see
        :func:`same_messages`)."""
        if isinstance(subjects, CountedStartSubjects):
            self.count, self._load = subjects.count, subjects._load
        else:
            self.count, self._load = len(subjects), subjects.copy

    def settle_from_pending(self, pending: int) -> bool:
        """Settle without naming the subjects, when the stream held the same
        messages (:func:`same_messages`) at the look that gave ``last_seq``, before
        the consumer's creation, and at a look after its read. It was the stream of
        the start all along, so the consumer's skip list was the last message of
        each subject of the start, one each, all at or before ``last_seq``: as many
        as the ``pending`` count it was created with (``last_per_subject``).

        ``True`` (``count`` set to ``pending``: :meth:`left` is empty) when a single
        consumer was read and delivered that many at or before ``last_seq``, so it
        reached every subject. ``False`` (nothing changed) otherwise: name them and
        :meth:`settle`."""
        if not self._single or self._reached != pending:
            return False
        self.count = pending
        return True

    def restarted(self) -> None:
        """A replacement consumer started over: deliveries may repeat subjects."""
        self._single = False

    def delivered(self, subject: str, stream_seq: int) -> None:
        """As :meth:`StartSubjects.delivered`."""
        if stream_seq <= self.last_seq:
            self._reached += 1
            self._runs.append((subject,))

    def delivered_run(self, subjects: Sequence[str], stream_seqs: Sequence[int]) -> None:
        """As :meth:`StartSubjects.delivered_run`: the subjects are kept, not hashed."""
        subjects = _at_or_before(subjects, stream_seqs, self.last_seq)
        self._reached += len(subjects)
        self._runs.append(subjects)

    def left(self) -> list[str]:
        """As :meth:`StartSubjects.left`."""
        if self._single and self._reached == self.count:
            return []
        unreached = self._load()
        for run in self._runs:
            unreached.difference_update(run)
        return sorted(unreached)


def _not_settled() -> set[str]:
    raise RuntimeError("the subjects of the start are not settled yet")


def same_messages(first: tuple[int, int], later: tuple[int, int | None]) -> bool:
    """Whether a stream held the same messages at two looks at its state, each
    ``(last_seq, messages)`` (``messages`` ``None``: not known). With the same
    last sequence nothing was appended between them, and with nothing appended
    the number of messages can only fall (a purge, an expiry, a limit): as many
    means none was removed.

    ``keys()`` takes its snapshot's sequence from a first look and creates its
    consumer; a second look comes after the consumer's read (a small one, then
    one naming the subjects if that one shows a change), or, for a bucket above
    the keys it holds, the one naming the subjects is sent along with the
    creation (the server may answer the two in either order). When this holds,
    the consumer saw the stream as both looks did; otherwise ``keys()`` starts
    over from the answer naming the subjects, its consumer created after it."""
    return later[1] is not None and first == later


#: How a ``STREAM.INFO`` answer names its state's subjects (an object: the
#: config's ``subjects`` is a list).
_SUBJECTS_KEY = b'"subjects":{'


def subjects_object(answer: bytes) -> tuple[bytes, bytes] | None:
    """The ``STREAM.INFO`` answer ``answer`` without the text of its subjects
    object, and that text (what is between its braces), when it is written
    plainly: ``"subjects":{`` once in the answer, and no backslash in the object
    (so no string of it holds a quote or a brace that is escaped). ``None``
    otherwise: decode the whole answer.

    A 100,000-subject answer is 2.4 MB of JSON, most of which the listing needs only
    counted (:func:`subjects_of_object`). Decoding the answer with the object left
    empty (``{}``) gives the rest of it; the caller checks that it was the state's
    (``state["subjects"] == {}``)."""
    at = answer.find(_SUBJECTS_KEY)
    if at < 0 or answer.find(_SUBJECTS_KEY, at + 1) >= 0:
        return None
    start = at + len(_SUBJECTS_KEY)
    # The object ends at the first closing brace outside its strings: after an
    # even number of quotes (a string holds none, with no backslash).
    end = answer.find(b"}", start)
    quotes = answer.count(b'"', start, end) if end >= 0 else 0
    while end >= 0 and quotes % 2:
        after = answer.find(b"}", end + 1)
        if after >= 0:
            quotes += answer.count(b'"', end, after)
        end = after
    if end < 0:
        return None
    inner = answer[start:end]
    if b"\\" in inner:
        return None
    return answer[:start] + answer[end:], inner


def subjects_of_object(inner: bytes) -> tuple[int, Callable[[], set[str]]]:
    """How many subjects the object text ``inner`` (from :func:`subjects_object`)
    names, told by counting (two quotes each: no name holds one, unescaped), and a
    function that decodes their set."""
    return inner.count(b'"') // 2, lambda: set(json.loads(b"{" + inner + b"}"))
