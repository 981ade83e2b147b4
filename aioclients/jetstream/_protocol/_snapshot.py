"""Snapshot listings of a Key-Value bucket: ``keys()``, ``history()`` and the initial
values of ``watch()`` read exactly what the bucket held when the call started.

They read an ordered consumer (ADR-17) whose deliveries keep coming while other
clients write. A :class:`SnapshotScan` judges each in-order delivery against the
snapshot: the stream's last sequence ``last_seq`` when the call started.

Rules:
    - A delivery whose stream sequence is beyond ``last_seq`` was written after
      the start: the scan is over (``AFTER``); ``keys()`` and ``history()`` end
      there, a watch yields it as its first update.
    - The scan is also over after the delivery at ``last_seq`` itself, or one
      with nothing pending after it, or at once when ``last_seq`` is 0 or the
      consumer had nothing pending (:meth:`nothing_pending`).
    - ``latest_only`` (deliver policy ``last_per_subject``): each key is taken
      once, at its first delivery (its last message at or before ``last_seq``,
      value or marker); later deliveries of a key taken are ``SKIP``. The
      server's skip list gives every key's last message at the consumer's
      creation in stream order; a key written between the start and the moment
      the scan reaches it shows up beyond ``last_seq`` and is left out: with one
      revision kept, its value at the start is no longer stored.
    - Every revision (``latest_only`` false: ``history()``, ``include_history``):
      each stream sequence at most once, in order.
    - A reset of a ``latest_only`` scan restarts ``last_per_subject`` from the
      beginning (:meth:`restarted`): the keys already taken stay taken, so none is
      taken twice, and a key's last message at or before ``last_seq`` is the same
      whichever consumer delivers it. A restarted watch that reaches beyond
      ``last_seq`` answers ``RESUME``: its updates must be read by stream sequence
      from ``last_seq + 1`` (the restarted consumer's skip list would give only
      the last of them).

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


class SnapshotScan:
    """Judges the deliveries of one listing against the snapshot (see module doc).

    Args:
        last_seq: the stream's last sequence when the call started (0: empty).
        latest_only: one delivery per key (``last_per_subject``), not every revision.
    """

    __slots__ = ("_keys", "_last_taken", "done", "last_seq", "latest_only", "restarts", "taken")

    def __init__(self, last_seq: int, *, latest_only: bool) -> None:
        if not isinstance(last_seq, int) or isinstance(last_seq, bool) or last_seq < 0:
            raise ValueError(f"last_seq must be an int >= 0, got {last_seq!r}")
        self.last_seq = last_seq
        self.latest_only = latest_only
        #: the snapshot has been read to its end
        self.done = last_seq == 0
        #: how many times the consumer restarted from the beginning
        self.restarts = 0
        #: how many deliveries were taken
        self.taken = 0
        self._keys: set[str] = set()
        self._last_taken = 0

    def nothing_pending(self) -> None:
        """The consumer had nothing pending when created: nothing to read."""
        self.done = True

    def restarted(self) -> None:
        """A fresh consumer starts over from the beginning (``last_per_subject``)."""
        self.restarts += 1
        self._last_taken = 0

    def deliver(self, key: str, stream_seq: int, pending: int) -> ScanVerdict:
        """Judge one in-order delivery (its key, stream sequence and pending count)."""
        if self.done:
            return ScanVerdict.AFTER
        if stream_seq > self.last_seq:
            self.done = True
            if self.restarts and self.latest_only:
                return ScanVerdict.RESUME
            return ScanVerdict.AFTER
        if stream_seq == self.last_seq or pending == 0:
            self.done = True
        if self.latest_only:
            keys = self._keys
            if key in keys:
                return ScanVerdict.SKIP
            keys.add(key)
        else:
            if stream_seq <= self._last_taken:
                return ScanVerdict.SKIP
            self._last_taken = stream_seq
        self.taken += 1
        return ScanVerdict.TAKE
