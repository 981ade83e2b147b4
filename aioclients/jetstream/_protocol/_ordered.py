"""Ordered consumers (NATS ADR-17): the client-side cursor that keeps delivery gapless.

An ordered consumer is an ephemeral consumer (``ack_policy none``,
``max_deliver 1``, memory storage, one replica) that the client throws away and
recreates whenever it can no longer vouch for the order: the server numbers
its deliveries 1, 2, 3, ... (the consumer sequence); a delivery whose number is
not the next expected one means a message was lost in between (a gap).

States (``CursorState``):
    IDLE        no consumer yet (before the first create)
    RUNNING     a consumer of the current ``generation`` is delivering
    RESETTING   the consumer is being replaced; deliveries are dropped
    STOPPED     the user is done; nothing more is yielded

Rules:
    - ``deliver(generation, consumer_seq, stream_seq)``: a delivery of an older
      generation, or while not RUNNING, is dropped (a stale message of a consumer
      already replaced). One whose consumer sequence is not the expected one is
      a gap: the cursor enters RESETTING and tells the driver to replace the
      consumer. A stream sequence not above the last one yielded is dropped
      (never yield twice, never go back). Anything else is yielded.
    - ``reset(reason)``: a missed heartbeat, a reconnect or the consumer's
      deletion also replace the consumer. Only the first of several reasons
      yields a ``ConsumerReset``; the others are the same reset.
    - The replacement starts at the last yielded stream sequence + 1
      (``deliver_policy by_start_sequence``); before anything was yielded, at
      the user's own start (``consumer_config``). A new generation begins with
      ``created()``, expecting consumer sequence 1 again.
    - With ``restart`` set, the replacement starts over at the user's own start
      instead (a ``last_per_subject`` listing of KV keys: resuming by sequence
      would deliver older revisions); the stream sequences begin anew with each
      generation, and the caller drops what it already had (``_snapshot.py``).
      ``resume_after(seq)`` ends that mode: the next consumer starts at ``seq + 1``.
    - A failed create is retried after a delay that doubles from
      ``retry_initial`` up to ``retry_max``: ``get_timer()`` / ``handle_timer(now)``.

These two together give the guarantee tested as a property: the stream
sequences yielded strictly increase and none of the stream's (filtered)
messages is skipped.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from operator import lt
from typing import Any

from aioclients._errors import InvalidArgumentError, LocalProtocolError, RemoteProtocolError

__all__ = (
    "DELIVER_POLICIES",
    "ConsumerReset",
    "CursorState",
    "Delivery",
    "OrderedCursor",
    "ack_run_numbers",
    "ack_sequences",
    "counting_run",
    "ordered_consumer_config",
)

DELIVER_POLICIES = frozenset(
    {"all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"}
)

#: ADR-17: the server removes an abandoned ordered consumer after this long.
INACTIVE_THRESHOLD = 300.0


class CursorState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    RESETTING = "resetting"
    STOPPED = "stopped"


class Delivery(enum.Enum):
    """What to do with one delivered message."""

    YIELD = "yield"
    DROP = "drop"
    RESET = "reset"


# Per-delivery names: reading a member through its Enum class costs about ten
# times a module global's lookup on CPython 3.11 (``deliver`` runs per message).
_RUNNING = CursorState.RUNNING
_YIELD = Delivery.YIELD
_DROP = Delivery.DROP
_RESET = Delivery.RESET


@dataclass(frozen=True, slots=True)
class ConsumerReset:
    """The ordered consumer was recreated to resume at stream sequence ``next_seq``.

    ``reason`` is ``"gap"``, ``"heartbeat"``, ``"reconnect"``, ``"deleted"``,
    ``"snapshot"`` (a KV scan cut short by a reset reads on by sequence) or
    another short word naming the cause.
    """

    next_seq: int
    reason: str = "gap"


def ordered_consumer_config(
    *,
    filter_subjects: list[str] | None,
    deliver_policy: str,
    opt_start_seq: int | None,
    opt_start_time: datetime | None,
    headers_only: bool,
) -> dict[str, Any]:
    """The user's part of an ordered consumer's config, checked.

    Raises:
        InvalidArgumentError: an unknown policy or a start that does not fit it.
    """
    if deliver_policy not in DELIVER_POLICIES:
        raise InvalidArgumentError(
            f"deliver_policy must be one of {sorted(DELIVER_POLICIES)}, got {deliver_policy!r}"
        )
    if opt_start_seq is not None:
        if (
            not isinstance(opt_start_seq, int)
            or isinstance(opt_start_seq, bool)
            or opt_start_seq < 1
        ):
            raise InvalidArgumentError(f"opt_start_seq must be an int >= 1, got {opt_start_seq!r}")
        if deliver_policy == "all":
            deliver_policy = "by_start_sequence"
        elif deliver_policy != "by_start_sequence":
            raise InvalidArgumentError(
                f"opt_start_seq needs deliver_policy 'by_start_sequence', not {deliver_policy!r}"
            )
    if opt_start_time is not None:
        if not isinstance(opt_start_time, datetime) or opt_start_time.tzinfo is None:
            raise InvalidArgumentError("opt_start_time must be an aware datetime")
        if deliver_policy == "all":
            deliver_policy = "by_start_time"
        elif deliver_policy != "by_start_time":
            raise InvalidArgumentError(
                f"opt_start_time needs deliver_policy 'by_start_time', not {deliver_policy!r}"
            )
    if deliver_policy == "by_start_sequence" and opt_start_seq is None:
        raise InvalidArgumentError("deliver_policy 'by_start_sequence' needs opt_start_seq")
    if deliver_policy == "by_start_time" and opt_start_time is None:
        raise InvalidArgumentError("deliver_policy 'by_start_time' needs opt_start_time")
    if filter_subjects is not None:
        if isinstance(filter_subjects, str):
            filter_subjects = [filter_subjects]
        if not filter_subjects or not all(isinstance(s, str) and s for s in filter_subjects):
            raise InvalidArgumentError("filter_subjects must be a non-empty list of subjects")
    config: dict[str, Any] = {"deliver_policy": deliver_policy}
    if opt_start_seq is not None:
        config["opt_start_seq"] = opt_start_seq
    if opt_start_time is not None:
        config["opt_start_time"] = opt_start_time
    if filter_subjects is not None:
        if len(filter_subjects) == 1:
            config["filter_subject"] = filter_subjects[0]
        else:
            config["filter_subjects"] = list(filter_subjects)
    if headers_only:
        config["headers_only"] = True
    return config


class OrderedCursor:
    """Where an ordered consumer stands, and when it must be replaced (see module doc).

    Args:
        config: the user's part of the consumer config (``ordered_consumer_config``).
        retry_initial / retry_max: delays between failed creates, seconds.
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
    ) -> None:
        self._user_config = dict(config)
        self.state = CursorState.IDLE
        #: the number of the current consumer (0 before the first)
        self.generation = 0
        #: the stream sequence last yielded (0 before any)
        self.stream_seq = 0
        #: the consumer sequence the next delivery must carry
        self.expected = 1
        self.resets = 0
        #: replacements start over at the user's start (see the module doc)
        self.restart = False
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._failures = 0
        self._retry_at: float | None = None

    # -- the consumer to create --

    def consumer_config(self) -> dict[str, Any]:
        """The config of the next consumer: the user's start, or just after the
        last stream sequence yielded."""
        config = dict(self._user_config)
        if self.stream_seq and not self.restart:
            config["deliver_policy"] = "by_start_sequence"
            config["opt_start_seq"] = self.stream_seq + 1
            config.pop("opt_start_time", None)
        config.update(
            ack_policy="none",
            max_deliver=1,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=INACTIVE_THRESHOLD,
        )
        return config

    @property
    def next_seq(self) -> int:
        """The stream sequence a replacement consumer starts at (with ``restart``:
        1, or the user's own start; ``last_per_subject`` begins at each subject's
        last message)."""
        if self.stream_seq and not self.restart:
            return self.stream_seq + 1
        start = self._user_config.get("opt_start_seq")
        return int(start) if start else 1

    def created(self) -> int:
        """A consumer was created: a new generation, expecting consumer sequence 1.

        Returns the new generation.
        """
        if self.state is CursorState.STOPPED:
            raise LocalProtocolError("the ordered consumer is stopped")
        self.generation += 1
        self.expected = 1
        if self.restart:
            self.stream_seq = 0
        self.state = CursorState.RUNNING
        self._failures = 0
        self._retry_at = None
        return self.generation

    # -- deliveries --

    def deliver(self, generation: int, consumer_seq: int, stream_seq: int) -> Delivery:
        """Judge one delivered message (see the module doc)."""
        if generation != self.generation or self.state is not _RUNNING:
            return _DROP
        if consumer_seq != self.expected:
            self.state = CursorState.RESETTING
            self.resets += 1
            return _RESET
        self.expected = consumer_seq + 1
        if stream_seq <= self.stream_seq:
            return _DROP
        self.stream_seq = stream_seq
        return _YIELD

    def judge_run(self, generation: int, replies: Sequence[bytes]) -> Sequence[int] | None:
        """Judge a run of deliveries at once, by their ack subjects as they came,
        changing nothing.

        Returns their stream sequences when :meth:`deliver` would yield every one
        of them (the usual case: in order, of the current consumer, the ack
        subjects as :func:`ack_run_numbers` reads them; a ``range`` when both
        sequences count up by one, as :func:`counting_run` tells without reading
        each number); then :meth:`took_run` records them as those calls would.
        ``None`` otherwise: judge them one by one with ``deliver``.
        """
        if generation != self.generation or self.state is not _RUNNING:
            return None
        counted = counting_run(replies, self.expected)
        if counted is not None:
            # Both sequences count up by one: in order, none repeated, none skipped.
            return counted if counted.start > self.stream_seq else None
        numbers = ack_run_numbers(replies)
        if numbers is None:
            return None
        try:
            consumer_seqs = list(map(int, numbers[1::5]))
            stream_seqs = list(map(int, numbers[0::5]))
        except ValueError:
            return None
        expected = self.expected
        if consumer_seqs != list(range(expected, expected + len(consumer_seqs))):
            return None
        if stream_seqs[0] <= self.stream_seq or not all(
            map(lt, stream_seqs, islice(stream_seqs, 1, None))
        ):
            return None
        return stream_seqs

    def took_run(self, stream_seqs: Sequence[int]) -> None:
        """Record a run that :meth:`judge_run` judged (as its ``deliver`` calls would)."""
        self.expected += len(stream_seqs)
        self.stream_seq = stream_seqs[-1]

    def reset(self, reason: str) -> ConsumerReset | None:
        """Replace the consumer for ``reason``; ``None`` when a reset is already
        under way (or the cursor is stopped)."""
        if self.state in (CursorState.RESETTING, CursorState.STOPPED):
            return None
        self.state = CursorState.RESETTING
        self.resets += 1
        return ConsumerReset(self.next_seq, reason)

    def release(self) -> None:
        """The user is done with the current consumer for now (not a reset): the
        next read creates a fresh one where this one stopped."""
        if self.state is CursorState.RUNNING:
            self.state = CursorState.RESETTING

    def rewind(self, stream_seq: int) -> None:
        """Messages after ``stream_seq`` were judged in order but never reached the
        user (dropped with a stopped stream's buffer): the next consumer starts
        right after ``stream_seq``. Only while no consumer is running."""
        if self.state is CursorState.RUNNING:
            raise LocalProtocolError("rewind() while a consumer is running")
        if 0 <= stream_seq < self.stream_seq:
            self.stream_seq = stream_seq

    def resume_after(self, stream_seq: int) -> None:
        """Leave ``restart`` mode: the next consumer starts at ``stream_seq + 1``
        (the caller then resets the current one)."""
        self.restart = False
        self.stream_seq = stream_seq

    def gap_event(self) -> ConsumerReset:
        """The ``ConsumerReset`` to report after ``deliver`` answered RESET."""
        return ConsumerReset(self.next_seq, "gap")

    # -- failed creates --

    def create_failed(self, now: float) -> float:
        """A create failed at ``now``: returns when to try again."""
        delay = min(self._retry_max, self._retry_initial * (2**self._failures))
        self._failures += 1
        self._retry_at = now + delay
        return self._retry_at

    def get_timer(self) -> float | None:
        return self._retry_at if self.state is CursorState.RESETTING else None

    def handle_timer(self, now: float) -> bool:
        """True when a retry of the create is due at ``now``."""
        if self._retry_at is None or self.state is not CursorState.RESETTING:
            return False
        if now < self._retry_at:
            return False
        self._retry_at = None
        return True

    def stop(self) -> None:
        self.state = CursorState.STOPPED
        self._retry_at = None


def ack_run_numbers(replies: Sequence[bytes]) -> list[bytes] | None:
    """The numbers of a run of ack subjects of the 9-token form
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp
    ns>.<pending>``) that share their first five tokens (one consumer's first
    deliveries), read at once: ``numbers[5 * i : 5 * i + 4]`` are the stream
    sequence, consumer sequence, timestamp and pending count of ``replies[i]``, as
    bytes. ``None`` when the run is empty or not all of that kind (read those one by
    one with :func:`ack_sequences`)."""
    count = len(replies)
    if not count:
        return None
    first = replies[0]
    at = -1
    for _ in range(5):
        at = first.find(b".", at + 1)
        if at < 0:
            return None
    head = first[: at + 1]
    if not head.startswith(b"$JS."):
        return None
    joined = b" ".join(replies)
    # Every space is a joint (no ack subject on a control line holds one), and each
    # one starts the same five tokens: only the numbers are left, a space between
    # those of two ack subjects, four each. (A split at the joints and a join cost
    # half of a replace of them, whose search runs again for the output.)
    if joined.count(b" ") != count - 1:
        return None
    tails = joined[len(head) :].split(b" " + head)
    if len(tails) != count:
        return None
    numbers = b". .".join(tails).split(b".")
    if len(numbers) != 5 * count - 1 or numbers[4::5].count(b" ") != count - 1:
        return None
    return numbers


#: every ASCII digit to ``0``: what is left of an ack subject is its shape
_SHAPE = bytes.maketrans(b"123456789", b"000000000")
_DIGITS = [b"%d" % d for d in range(10)]
#: the digit at place value ``q`` of ``n, n + 1, ...`` cycles through ``_CYCLES[q]``
#: from ``n % (10 * q)`` on (for the low places; the others change once in a run)
_CYCLES = {q: b"".join(digit * q for digit in _DIGITS) for q in (1, 10, 100)}


def _place_column(first: int, count: int, q: int) -> bytes:
    """The digits at place value ``q`` of ``first, first + 1, ..., first + count - 1``."""
    cycle = _CYCLES.get(q)
    if cycle is not None:
        at = first % (10 * q)
        return (cycle * ((at + count) // len(cycle) + 1))[at : at + count]
    parts = []
    value = first // q
    take = q - first % q
    left = count
    while left > 0:
        take = min(take, left)
        parts.append(_DIGITS[value % 10] * take)
        left -= take
        value += 1
        take = q
    return b"".join(parts)


def counting_run(replies: Sequence[bytes], expected: int) -> range | None:
    """The stream sequences of a run of ack subjects of the 9-token form (see
    :func:`ack_run_numbers`) whose consumer sequences are ``expected``,
    ``expected + 1``, ... and whose stream sequences count up by one from the
    first one's (an ordered read of a stream, a listing of keys written once
    each), told without reading each number: ``range(first, first + count)``.
    ``None`` when that cannot be told so (the run may still be in order: ask
    :func:`ack_run_numbers`).

    Every ack subject must have the first one's shape (its bytes with each digit
    as ``0``; one join and one ``translate`` of the run): the same length, its
    dots and its other bytes where the first one has them, digits where it has
    digits. Then each digit of a sequence sits at one offset in every ack subject,
    and that column of the joined run (one strided slice) is compared with the
    digits the counting sequence has there.
    """
    count = len(replies)
    if not count:
        return None
    first = replies[0]
    tokens = first.split(b".")
    if len(tokens) != 9 or tokens[0] != b"$JS" or b" " in first:
        return None
    stream_text, consumer_text = tokens[5], tokens[6]
    if not (stream_text.isdigit() and consumer_text.isdigit()):  # ASCII digits only
        return None
    shape = first.translate(_SHAPE)
    joined = b" ".join(replies)
    # The same shape (the spaces between them included): each ack subject is as
    # long as the first, since none holds a space (the shape has as many as the run).
    if joined.translate(_SHAPE) != (shape + b" ") * (count - 1) + shape:
        return None
    stride = len(first) + 1
    stream_at = len(b".".join(tokens[:5])) + 1
    consumer_at = stream_at + len(stream_text) + 1
    start = int(stream_text)
    for at, width, value in (
        (consumer_at, len(consumer_text), expected),
        (stream_at, len(stream_text), start),
    ):
        if value < 0 or value + count > 10**width:
            return None  # the last one would need another digit (or a sign)
        q = 10**width
        for offset in range(at, at + width):
            q //= 10
            if joined[offset::stride] != _place_column(value, count, q):
                return None
    return range(start, start + count)


def ack_sequences(reply: str) -> tuple[int, int, int, int]:
    """``(stream_seq, consumer_seq, num_pending, timestamp_ns)`` from an ack
    subject, without building the full metadata (the ordered consumer's
    per-message check).

    Raises:
        RemoteProtocolError: ``reply`` is not a JetStream ack subject.
    """
    tokens = reply.split(".")
    n = len(tokens)
    try:
        if n == 9 and tokens[0] == "$JS":
            return int(tokens[5]), int(tokens[6]), int(tokens[8]), int(tokens[7])
        if n >= 11 and tokens[0] == "$JS":
            return int(tokens[7]), int(tokens[8]), int(tokens[10]), int(tokens[9])
    except ValueError:
        pass
    raise RemoteProtocolError(f"not a JetStream ack subject: {reply!r}")
