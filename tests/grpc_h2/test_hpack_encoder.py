"""Our HPACK encoder: golden bytes, and every block decoded by the ``hpack`` package.

The decoder is an independent implementation: after each block its dynamic
table must equal ours, entry for entry, whatever the fields, the table sizes
the peer allows (0 included) and their order.
"""

from __future__ import annotations

import hpack
import hpack.table
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients._grpc_h2._protocol._hpack import (
    INDEX,
    NAME,
    NEVER,
    STATIC_TABLE,
    HeaderEncoder,
    encode_integer,
)


def decoder_table(decoder: hpack.Decoder) -> list[tuple[str, str]]:
    return [(n.decode(), v.decode()) for n, v in decoder.header_table.dynamic_entries]


def decode(decoder: hpack.Decoder, block: bytes) -> list[tuple[str, str, bool]]:
    return [(h[0], h[1], h.indexable) for h in decoder.decode(block, raw=False)]


def test_static_table_is_rfc_7541_appendix_a() -> None:
    assert [(n.decode(), v.decode()) for n, v in hpack.table.HeaderTable.STATIC_TABLE] == list(
        STATIC_TABLE
    )


@pytest.mark.parametrize(
    ("value", "prefix", "first", "expected"),
    [
        (10, 5, 0, b"\x0a"),  # RFC 7541, C.1.1
        (1337, 5, 0, b"\x1f\x9a\x0a"),  # C.1.2
        (42, 8, 0, b"\x2a"),  # C.1.3
        (30, 5, 0x20, b"\x3e"),
        (31, 5, 0x20, b"\x3f\x00"),
        (4096, 5, 0x20, b"\x3f\xe1\x1f"),
        (62, 7, 0x80, b"\xbe"),
        (127, 7, 0x80, b"\xff\x00"),
    ],
)
def test_integers(value: int, prefix: int, first: int, expected: bytes) -> None:
    assert encode_integer(value, prefix, first) == expected


def test_first_use_inserts_then_indexes_golden() -> None:
    enc = HeaderEncoder()
    fields = [(":method", "POST", INDEX), (":path", "/a", INDEX), ("te", "trailers", INDEX)]
    # static full match; literal with indexing, static name 4; literal name
    assert enc.encode(fields) == b"\x83\x44\x02/a\x40\x02te\x08trailers"
    assert enc.entries() == [("te", "trailers"), (":path", "/a")]
    assert enc.size == (2 + 8 + 32) + (5 + 2 + 32)
    generation = enc.generation
    assert enc.encode(fields) == b"\x83\xbf\xbe"
    assert enc.generation == generation  # nothing changed: a cached block stays valid


def test_name_fields_insert_once_then_name_the_entry() -> None:
    enc = HeaderEncoder()
    assert enc.encode([("grpc-timeout", "5S", NAME)]) == b"\x40\x0cgrpc-timeout\x025S"
    assert enc.encode([("grpc-timeout", "7S", NAME)]) == b"\x0f\x2f\x027S"  # index 62
    assert enc.encode([("grpc-timeout", "5S", NAME)]) == b"\xbe"  # the stored value
    assert enc.entries() == [("grpc-timeout", "5S")]
    # A static name is named, never inserted.
    assert enc.encode([("user-agent", "x", NAME)]) == b"\x0f\x2b\x01x"


def test_never_indexed_fields_stay_out_of_every_table() -> None:
    enc = HeaderEncoder()
    dec = hpack.Decoder()
    block = enc.encode([("authorization", "secret", NEVER), ("x-k", "v", NEVER)])
    assert block == b"\x10\x0dauthorization\x06secret\x10\x03x-k\x01v"
    assert decode(dec, block) == [("authorization", "secret", False), ("x-k", "v", False)]
    assert enc.entries() == [] == decoder_table(dec)


def test_table_size_zero_sends_literals_and_restoring_it_indexes_again() -> None:
    enc = HeaderEncoder()
    dec = hpack.Decoder()
    fields = [(":path", "/a", INDEX), ("grpc-timeout", "1S", NAME)]
    decode(dec, enc.encode(fields))
    assert len(decoder_table(dec)) == 2
    enc.set_peer_limit(0)
    dec.max_allowed_table_size = 0
    block = enc.encode(fields)
    assert block == b"\x20\x04\x02/a\x00\x0cgrpc-timeout\x021S"  # size 0, plain literals
    assert decode(dec, block) == [(":path", "/a", True), ("grpc-timeout", "1S", True)]
    assert decoder_table(dec) == [] == enc.entries()
    assert enc.encode(fields) == block[1:]  # the update is announced once
    enc.set_peer_limit(4096)
    dec.max_allowed_table_size = 4096
    block = enc.encode(fields)
    assert block.startswith(b"\x3f\xe1\x1f\x44")  # back to 4096, then inserting again
    decode(dec, block)
    assert decoder_table(dec) == enc.entries() == [("grpc-timeout", "1S"), (":path", "/a")]


def test_a_size_that_went_down_and_up_announces_both() -> None:
    enc = HeaderEncoder()
    dec = hpack.Decoder()
    decode(dec, enc.encode([(":path", "/a", INDEX)]))
    enc.set_peer_limit(10)
    enc.set_peer_limit(8192)  # above our cap: we stay at 4096
    assert enc.max_size == 4096
    block = enc.encode([(":path", "/a", INDEX)])
    assert block == b"\x2a\x3f\xe1\x1f\x44\x02/a"  # 10, 4096: the entry was evicted
    assert decode(dec, block) == [(":path", "/a", True)]
    assert decoder_table(dec) == enc.entries() == [(":path", "/a")]


def test_a_cap_below_the_default_is_announced_in_the_first_block() -> None:
    enc = HeaderEncoder(max_table_size=100)
    assert enc.encode([]) == b"\x3f\x45"  # 100
    assert enc.encode([]) == b""
    with pytest.raises(ValueError, match="negative"):
        HeaderEncoder(max_table_size=-1)


def test_an_entry_larger_than_the_table_is_a_literal_and_evicts_nothing() -> None:
    enc = HeaderEncoder(max_table_size=64)
    dec = hpack.Decoder()
    decode(dec, enc.encode([("te", "trailers", INDEX)]))
    block = enc.encode([(":path", "/" + "p" * 40, INDEX)])
    assert block[0] == 0x04  # without indexing
    decode(dec, block)
    assert decoder_table(dec) == enc.entries() == [("te", "trailers")]


def test_eviction_keeps_indices_in_step() -> None:
    enc = HeaderEncoder(max_table_size=90)  # two 40-odd byte entries at most
    dec = hpack.Decoder()
    dec.max_allowed_table_size = 90
    for path in ("/a", "/b", "/c", "/b", "/a", "/c"):
        block = enc.encode([(":path", path, INDEX), ("te", "trailers", INDEX)])
        assert decode(dec, block) == [(":path", path, True), ("te", "trailers", True)]
        assert decoder_table(dec) == enc.entries()
        assert dec.header_table._current_size == enc.size <= 90


NAMES = [":path", ":authority", "te", "grpc-timeout", "x-a", "user-agent", "content-type"]
VALUES = ["", "a", "/x.Y/Z", "trailers", "v" * 50, "w" * 300, "application/grpc"]
field = st.tuples(
    st.sampled_from(NAMES), st.sampled_from(VALUES), st.sampled_from([INDEX, NAME, NEVER])
)
step = st.one_of(
    st.lists(field, max_size=8),
    st.integers(min_value=0, max_value=5000),  # the peer's SETTINGS_HEADER_TABLE_SIZE
)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=5000), st.lists(step, max_size=25))
def test_any_blocks_and_sizes_decode_to_the_fields_and_the_same_table(
    cap: int, steps: list[list[tuple[str, str, int]] | int]
) -> None:
    enc = HeaderEncoder(max_table_size=cap)
    dec = hpack.Decoder()
    for item in steps:
        if isinstance(item, int):
            enc.set_peer_limit(item)
            dec.max_allowed_table_size = item
            continue
        block = enc.encode(item)
        decoded = dec.decode(block, raw=False)
        assert [(h[0], h[1]) for h in decoded] == [(n, v) for n, v, _ in item]
        assert [h.indexable for h in decoded] == [how != NEVER for _, _, how in item]
        assert decoder_table(dec) == enc.entries()
        assert dec.header_table.maxsize == enc.max_size <= cap
        assert dec.header_table._current_size == enc.size <= enc.max_size
