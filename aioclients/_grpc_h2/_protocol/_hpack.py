"""An HPACK encoder with a dynamic table, for the requests of one HTTP/2 connection.

Theory of operation (RFC 7541). Every gRPC request on a connection repeats the
same headers (``:authority``, ``content-type``, ``te``, ``user-agent``) and one
of a few ``:path`` values. Sent as literals they cost ~120 bytes per call, to
build here and to parse at the server. Indexed, the first request inserts them
into the dynamic table (a literal *with incremental indexing*) and every later
one sends a byte each.

The encoder keeps an exact copy of the table the peer's decoder builds from
what we sent: entries are added at the front, sized ``len(name) +
len(value) + 32``, and the oldest are evicted while the table is over its
maximum size. Each field says how it may be sent:

* ``INDEX``: an indexed field once it is in a table, else inserted (when it
  fits);
* ``NAME``: a value that changes per call (``grpc-timeout``): a literal that is
  not indexed, naming an entry that holds its name; the first value is inserted
  when no table holds the name, so later calls name it by index;
* ``NEVER``: a literal *never indexed* with a literal name (application
  metadata, which may carry credentials: RFC 7541, 7.1.3).

The table's maximum size is at most the peer's SETTINGS_HEADER_TABLE_SIZE
(4096 until the peer says otherwise) and at most our own cap. When it changes,
the next header block starts with a dynamic table size update (RFC 7541,
4.2 and 6.3): the smallest size reached since the last block first, when the
size went down and back up, so the peer evicts what we evicted. A size of 0
empties the table; nothing is inserted then.

:attr:`HeaderEncoder.generation` changes whenever the table (or a pending size
update) changes, so a caller may keep a block made only of indexed fields for as
long as the generation stays the same.

Strings are sent raw (no Huffman coding): the headers are short and indexed
after the first call, and the raw form costs no CPU.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Final

__all__ = ("INDEX", "NAME", "NEVER", "STATIC_TABLE", "HeaderEncoder", "encode_integer")

INDEX: Final = 0
NAME: Final = 1
NEVER: Final = 2

DEFAULT_TABLE_SIZE: Final = 4096  # SETTINGS_HEADER_TABLE_SIZE's initial value
_ENTRY_OVERHEAD: Final = 32  # RFC 7541, 4.1
_FIRST_DYNAMIC: Final = 62  # the static table holds indices 1-61

# RFC 7541, appendix A: index i is STATIC_TABLE[i - 1].
STATIC_TABLE: Final[tuple[tuple[str, str], ...]] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# Full matches only where the static value is a real one (not the empty placeholder).
_STATIC_FIELDS: Final = {f: i for i, f in enumerate(STATIC_TABLE, 1) if f[1]}
_STATIC_NAMES: Final = {n: i for i, (n, _) in reversed(list(enumerate(STATIC_TABLE, 1)))}


def encode_integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541, 5.1) with ``first``'s high bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode("ascii")
    return encode_integer(len(raw), 7, 0) + raw


class HeaderEncoder:
    """The encoding side of one connection's HPACK context.

    Args:
        max_table_size: the most table we are willing to use (the peer may
            allow less); 0 never indexes.
    """

    __slots__ = (
        "_by_field",
        "_by_name",
        "_cap",
        "_entries",
        "_inserted",
        "_lowest_since_block",
        "_max_size",
        "_size",
        "generation",
    )

    def __init__(self, max_table_size: int = DEFAULT_TABLE_SIZE) -> None:
        if max_table_size < 0:
            raise ValueError("an HPACK table size cannot be negative")
        self._cap = max_table_size
        # oldest first: (name, value, size, sequence number)
        self._entries: collections.deque[tuple[str, str, int, int]] = collections.deque()
        self._by_field: dict[tuple[str, str], int] = {}  # newest sequence number of a field
        self._by_name: dict[str, int] = {}  # newest sequence number holding a name
        self._inserted = 0  # entries ever inserted: the next one's sequence number
        self._size = 0
        # The peer's decoder starts at 4096; a smaller cap is announced in the first block.
        self._max_size = min(max_table_size, DEFAULT_TABLE_SIZE)
        self._lowest_since_block: int | None = (
            self._max_size if self._max_size != DEFAULT_TABLE_SIZE else None
        )
        self.generation = 0

    @property
    def max_size(self) -> int:
        """The table's maximum size now (what the peer's decoder will be told)."""
        return self._max_size

    @property
    def size(self) -> int:
        """Bytes the table's entries take (RFC 7541's entry size)."""
        return self._size

    def entries(self) -> list[tuple[str, str]]:
        """The dynamic table, newest first (index 62 onwards)."""
        return [(name, value) for name, value, _, _ in reversed(self._entries)]

    def set_peer_limit(self, limit: int) -> None:
        """The peer's SETTINGS_HEADER_TABLE_SIZE arrived (and is being acknowledged).

        Blocks encoded from now on follow our acknowledgement, so they may use
        the new size; the first of them announces it.
        """
        new = min(limit, self._cap)
        if new == self._max_size:
            return
        self._max_size = new
        self._evict_to(new)
        lowest = self._lowest_since_block
        self._lowest_since_block = new if lowest is None else min(lowest, new)
        self.generation += 1

    def encode(self, fields: Sequence[tuple[str, str, int]]) -> bytes:
        """One header block: ``(name, value, how)`` fields, ``how`` INDEX, NAME or NEVER.

        Names must be lowercase and names and values valid header text (the
        caller checks): the table changes as the peer's will when it decodes
        the block, so the block must be sent.
        """
        out = bytearray()
        lowest = self._lowest_since_block
        if lowest is not None:
            self._lowest_since_block = None
            self.generation += 1  # the next block has no update to start with
            if lowest < self._max_size:
                out += encode_integer(lowest, 5, 0x20)
            out += encode_integer(self._max_size, 5, 0x20)
        for name, value, how in fields:
            self._field(out, name, value, how)
        return bytes(out)

    def _index_of(self, sequence: int) -> int:
        return _FIRST_DYNAMIC + self._inserted - 1 - sequence

    def _field(self, out: bytearray, name: str, value: str, how: int) -> None:
        if how == NEVER:
            out += b"\x10" + _string(name) + _string(value)
            return
        key = (name, value)
        index = _STATIC_FIELDS.get(key)
        if index is None:
            sequence = self._by_field.get(key)
            if sequence is not None:
                index = self._index_of(sequence)
        if index is not None:
            out += encode_integer(index, 7, 0x80)
            return
        name_index = _STATIC_NAMES.get(name)
        if name_index is None:
            sequence = self._by_name.get(name)
            if sequence is not None:
                name_index = self._index_of(sequence)
        size = len(name) + len(value) + _ENTRY_OVERHEAD
        if (how == INDEX or name_index is None) and size <= self._max_size:
            # literal with incremental indexing (6-bit prefix, 01 pattern)
            out += encode_integer(name_index or 0, 6, 0x40)
            if name_index is None:
                out += _string(name)
            out += _string(value)
            self._insert(name, value, size)
            return
        # literal without indexing (4-bit prefix, 0000 pattern)
        out += encode_integer(name_index or 0, 4, 0x00)
        if name_index is None:
            out += _string(name)
        out += _string(value)

    def _insert(self, name: str, value: str, size: int) -> None:
        self._evict_to(self._max_size - size)
        sequence = self._inserted
        self._inserted += 1
        self._entries.append((name, value, size, sequence))
        self._size += size
        self._by_field[(name, value)] = sequence
        self._by_name[name] = sequence
        self.generation += 1

    def _evict_to(self, room: int) -> None:
        entries = self._entries
        while entries and self._size > room:
            name, value, size, sequence = entries.popleft()
            self._size -= size
            if self._by_field.get((name, value)) == sequence:
                del self._by_field[(name, value)]
            if self._by_name.get(name) == sequence:
                del self._by_name[name]
            self.generation += 1
