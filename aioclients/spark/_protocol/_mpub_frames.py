"""NSQ ``MPUB`` commands from Arrow columns, built column-wise.

``MPUB <topic>\\n[size][count]([size][body])...`` (sizes 4-byte big-endian).
:class:`MpubBuilder` packs every body's size with Arrow kernels and joins sizes
and bodies into one buffer per record batch, so a command is a header plus one
slice of that buffer: no bytes object per row. Commands hold at most
``batch_size`` bodies and ``max_batch_bytes`` of ``[size][body]``; rows left
over at the end of a record batch are carried into the next one, so batches are
the same as when rows are taken one by one.

NSQ TCP protocol: https://nsq.io/clients/tcp_protocol_spec.html
"""

from __future__ import annotations

import bisect
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ("Mpub", "MpubBuilder", "MpubRowError")

_SIZE = struct.Struct(">I")
_BIN = pa.large_binary()


class MpubRowError(ValueError):
    """A row that nsqd would refuse (``row`` counts from the task's first row)."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(reason)
        self.row = row
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Mpub:
    """One MPUB command: its bytes, its first row and how many rows it holds."""

    command: bytes
    first_row: int
    rows: int


def _big_endian_sizes(sizes: pa.Array) -> pa.Array:
    """``uint32`` sizes as 4-byte big-endian binary values."""
    values = pc.cast(sizes, pa.uint32())
    if sys.byteorder == "little":

        def u32(value: int) -> pa.Scalar:
            return pa.scalar(value, pa.uint32())

        parts = [
            pc.shift_left(
                pc.bit_wise_and(pc.shift_right(values, u32(shift)), u32(0xFF)), u32(24 - shift)
            )
            for shift in (0, 8, 16, 24)
        ]
        swapped = pc.bit_wise_or(pc.bit_wise_or(parts[0], parts[1]), pc.bit_wise_or(*parts[2:]))
        values = pc.cast(swapped, pa.uint32())
    if values.null_count or values.offset:
        values = pc.fill_null(values, 0).take(pa.array(range(len(values))))
    assert values.type == pa.uint32()
    data = values.buffers()[1]
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(values), [None, data])
    return pc.cast(fixed, _BIN)


class MpubBuilder:
    """Turns columns of bodies into :class:`Mpub` commands for one topic."""

    def __init__(
        self, topic: str, *, batch_size: int, max_batch_bytes: int, max_message_size: int
    ) -> None:
        self._head = b"MPUB " + topic.encode() + b"\n"
        self._batch_size = batch_size
        self._max_bytes = max_batch_bytes
        self._max_message = max_message_size
        self._carry: pa.Array | None = None
        self._row = 0  # rows turned into commands so far

    def add(self, bodies: pa.Array) -> Iterator[Mpub]:
        """Commands for the rows of ``bodies`` (binary or string) and those carried over;
        the rows after the last full command are carried to the next call.

        Raises:
            MpubRowError: an empty or null body (nsqd rejects it), or one over
                ``max_message_size``.
        """
        column = pc.cast(bodies, _BIN)
        if self._carry is not None and len(self._carry):
            column = pa.concat_arrays([self._carry, column])
        self._carry = None
        yield from self._commands(column, final=False)

    def finish(self) -> Iterator[Mpub]:
        """The command for the carried rows, if any."""
        carry, self._carry = self._carry, None
        if carry is not None and len(carry):
            yield from self._commands(carry, final=True)

    def _commands(self, column: pa.Array, *, final: bool) -> Iterator[Mpub]:
        count = len(column)
        if not count:
            return
        sizes = pc.binary_length(column)
        empty = pc.fill_null(pc.equal(sizes, 0), True)
        if pc.any(empty).as_py():
            index = pc.index(empty, True).as_py()
            raise MpubRowError(self._row + index, "an empty or null body")
        largest = pc.max(sizes).as_py()
        if largest > self._max_message:
            index = pc.index(sizes, largest).as_py()
            raise MpubRowError(
                self._row + index,
                f"a body of {largest} bytes, over maxMessageSize ({self._max_message})",
            )
        framed = pc.binary_join_element_wise(_big_endian_sizes(sizes), column, pa.scalar(b"", _BIN))
        _, raw_offsets, values = framed.buffers()
        offsets = pa.Array.from_buffers(pa.int64(), count + 1, [None, raw_offsets]).to_pylist()
        view = memoryview(values) if values is not None else memoryview(b"")
        start = 0
        while start < count:
            # Greedy, as row by row: up to batch_size rows and max_batch_bytes bytes
            # (a single row over max_batch_bytes still goes alone).
            limit = offsets[start] + self._max_bytes
            stop = min(start + self._batch_size, bisect.bisect_right(offsets, limit) - 1, count)
            stop = max(stop, start + 1)
            full = stop - start == self._batch_size or (stop < count and offsets[stop + 1] > limit)
            if stop == count and not full and not final:
                self._carry = column.slice(start)
                return
            payload = view[offsets[start] : offsets[stop]]
            command = b"".join(
                (self._head, _SIZE.pack(len(payload) + 4), _SIZE.pack(stop - start), payload)
            )
            yield Mpub(command, self._row, stop - start)
            self._row += stop - start
            start = stop
