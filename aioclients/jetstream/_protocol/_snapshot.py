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

Pure: no I/O, no clock; ``tests/jetstream/test_snapshot_protocol.py`` checks these
rules against a model of the bucket for any interleaving of writes and resets.
"""

from __future__ import annotations

import enum

__all__ = ("ScanVerdict", "SnapshotScan")


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
    """

    __slots__ = ("_left", "consumers", "done", "last_seq", "latest_only", "reached", "taken")

    def __init__(self, last_seq: int, *, latest_only: bool) -> None:
        if not isinstance(last_seq, int) or isinstance(last_seq, bool) or last_seq < 0:
            raise ValueError(f"last_seq must be an int >= 0, got {last_seq!r}")
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

    @property
    def restarts(self) -> int:
        """How many times a replacement consumer started over (``latest_only``)."""
        return max(0, self.consumers - 1) if self.latest_only else 0

    def opened(self, pending: int) -> None:
        """A consumer was created with ``pending`` messages to deliver; a
        replacement of a ``latest_only`` scan starts over from the beginning."""
        self.consumers += 1
        self._left = pending
        if pending <= 0:
            self.done = True

    def deliver(self, stream_seq: int) -> ScanVerdict:
        """Judge one in-order delivery of the current consumer by its stream sequence."""
        if self.done:
            return _AFTER
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
