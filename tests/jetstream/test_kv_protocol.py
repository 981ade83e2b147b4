"""The Key-Value core (ADR-8): names, filters, operations and the bucket's stream config."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._protocol._config import config_to_wire
from aioclients.jetstream._protocol._direct import ReplyKind, classify_reply
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._kv import (
    _PLAIN_PUT_REPLY,
    DEL,
    PURGE,
    PUT,
    _direct_trailer,
    bucket_stream_config,
    direct_entry_fields,
    direct_put_fields,
    direct_put_stamp,
    key_filter_subjects,
    key_match,
    key_subject,
    matches_any,
    operation_of,
    operation_of_header_block,
    stamp_time,
    validate_bucket,
    validate_key,
    validate_key_filter,
    write_prefix,
)
from aioclients.jetstream._protocol._time import format_rfc3339, parse_server_time


@pytest.mark.parametrize("key", ["a", "a.b", "A-Z_0=9/x", "config.db.url", "=", "-", "__x"])
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key
    assert key_match(key) is not None  # the hot path's test agrees


@pytest.mark.parametrize(
    "key", ["", ".a", "a.", "a..b", "a b", "a*", "a.>", ">", "*", "é", "a\r\n", None, 5, b"a"]
)
def test_invalid_keys_are_refused_with_a_hint(key: object) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid key"):
        validate_key(key)
    if isinstance(key, str):
        assert key_match(key) is None  # the hot path's test agrees


@pytest.mark.parametrize("bucket", ["b", "B_1-x", "0"])
def test_valid_buckets(bucket: str) -> None:
    assert validate_bucket(bucket) == bucket


@pytest.mark.parametrize("bucket", ["", "a.b", "a b", "a*", ">", "a/b", "a=b", None])
def test_invalid_buckets(bucket: object) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid bucket"):
        validate_bucket(bucket)


@pytest.mark.parametrize("pattern", [">", "*", "a.*", "a.>", "a.*.c", "config.db"])
def test_valid_filters(pattern: str) -> None:
    assert validate_key_filter(pattern) == pattern


@pytest.mark.parametrize("pattern", ["", "a.>.b", "a*", "a.b*", "a..b", ".a", "a b"])
def test_invalid_filters(pattern: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid key filter"):
        validate_key_filter(pattern)


def test_subjects() -> None:
    assert key_subject("cfg", "db.url") == "$KV.cfg.db.url"
    assert key_filter_subjects("cfg", []) == ["$KV.cfg.>"]
    assert key_filter_subjects("cfg", ["a.*", "b"]) == ["$KV.cfg.a.*", "$KV.cfg.b"]


@given(st.text(alphabet="-/_=.abcXYZ019", min_size=1, max_size=20))
def test_a_key_is_valid_exactly_when_its_tokens_are_non_empty(key: str) -> None:
    ok = all(key.split("."))
    if ok:
        assert validate_key(key) == key
    else:
        with pytest.raises(InvalidArgumentError):
            validate_key(key)


@given(st.text(alphabet="-/_=.aZ09 *>é\n$", min_size=0, max_size=12))
def test_a_key_is_its_allowed_characters_in_non_empty_tokens(key: str) -> None:
    allowed = set("-/_=.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    valid = bool(key) and set(key) <= allowed and all(key.split("."))
    assert (key_match(key) is not None) is valid  # the hot path's test agrees
    if valid:
        assert validate_key(key) == key
    else:
        with pytest.raises(InvalidArgumentError):
            validate_key(key)


def test_operations_from_decoded_headers() -> None:
    assert operation_of(None) == PUT
    assert operation_of({}) == PUT
    assert operation_of({"KV-Operation": "DEL"}) == DEL
    assert operation_of({"KV-Operation": "PURGE", "Nats-Rollup": "sub"}) == PURGE
    assert operation_of({"KV-Operation": ["PUT", "DEL"]}) == DEL
    assert operation_of({"KV-Operation": "other"}) == PUT


@pytest.mark.parametrize(
    ("block", "op"),
    [
        (None, PUT),
        (b"", PUT),
        (b"NATS/1.0\r\nX: y\r\n\r\n", PUT),
        (b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n", DEL),
        (b"NATS/1.0\r\nKV-Operation:DEL\r\n\r\n", DEL),
        (b"NATS/1.0\r\nNats-Rollup: sub\r\nKV-Operation: PURGE\r\n\r\n", PURGE),
        (b"NATS/1.0\r\nKV-Operation: PUT\r\n\r\n", PUT),
        (b"NATS/1.0\r\nKV-Operation: PURGE", PURGE),
        # Markers placed by nats-server 2.11+ itself.
        (b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\n\r\n", PURGE),
        (b"NATS/1.0\r\nNats-Marker-Reason: Purge\r\n\r\n", PURGE),
        (b"NATS/1.0\r\nNats-Marker-Reason: Remove\r\n\r\n", DEL),
        (b"NATS/1.0\r\nNats-Marker-Reason: Later\r\n\r\n", PUT),
    ],
)
def test_operations_from_a_raw_header_block_agree_with_the_decoded_form(
    block: bytes | None, op: str
) -> None:
    assert operation_of_header_block(block) == op
    if block and block.endswith(b"\r\n\r\n"):
        assert operation_of(decode_headers(block)) == op


def test_bucket_stream_config_is_nats_go_s() -> None:
    cfg = bucket_stream_config(
        "cfg",
        history=5,
        ttl=60.0,
        max_value_size=1024,
        max_bytes=None,
        storage="memory",
        replicas=1,
        description="d",
    )
    wire = config_to_wire(cfg)
    assert wire["subjects"] == ["$KV.cfg.>"]
    assert wire["max_msgs_per_subject"] == 5
    assert wire["max_age"] == 60_000_000_000
    # The duplicate window is two minutes, or the TTL when that is shorter.
    assert wire["duplicate_window"] == 60_000_000_000
    assert wire["max_msg_size"] == 1024
    assert wire["max_bytes"] == -1
    assert wire["storage"] == "memory"
    assert wire["allow_rollup_hdrs"] is True
    assert wire["deny_delete"] is True
    assert wire["allow_direct"] is True
    assert wire["discard"] == "new"
    assert wire["description"] == "d"
    plain = bucket_stream_config(
        "b",
        history=1,
        ttl=None,
        max_value_size=None,
        max_bytes=None,
        storage="file",
        replicas=1,
        description=None,
    )
    assert config_to_wire(plain)["duplicate_window"] == 120_000_000_000
    assert "description" not in plain


_PLAIN: dict[str, Any] = dict(
    history=1,
    ttl=None,
    max_value_size=None,
    max_bytes=None,
    storage="file",
    replicas=1,
    description=None,
)


def test_bucket_options_nats_go_has_reach_the_stream_config() -> None:
    # What nats.go v1.53's CreateKeyValue stores for Compression, Metadata and
    # RePublish: the stream's s2 compression, its metadata, the RePublish as is.
    cfg = config_to_wire(
        bucket_stream_config(
            "b",
            **_PLAIN,
            compression=True,
            metadata={"team": "a"},
            republish={"src": ">", "dest": "rp.>", "headers_only": True},
            placement={"cluster": "c1"},
        )
    )
    assert cfg["compression"] == "s2"
    assert cfg["metadata"] == {"team": "a"}
    assert cfg["republish"] == {"src": ">", "dest": "rp.>", "headers_only": True}
    assert cfg["placement"] == {"cluster": "c1"}
    plain = bucket_stream_config("b", **_PLAIN)
    assert not {"compression", "metadata", "republish", "placement", "mirror"} & set(plain)


def test_a_mirror_bucket_is_nats_go_s() -> None:
    # nats.go: the mirror names the origin's stream, mirror_direct is on and the
    # mirror has no subjects of its own.
    for origin in ("orig", "KV_orig", {"name": "orig"}):
        cfg = bucket_stream_config("m", **_PLAIN, mirror=origin)
        assert cfg["mirror"] == {"name": "KV_orig"}
        assert cfg["mirror_direct"] is True
        assert "subjects" not in cfg
        assert "sources" not in cfg


def test_writes_to_a_mirror_go_to_its_origin_as_in_nats_go() -> None:
    assert write_prefix("b", {"subjects": ["$KV.b.>"]}) == "$KV.b."
    assert write_prefix("m", {"mirror": {"name": "KV_orig"}}) == "$KV.orig."
    external = {"mirror": {"name": "KV_orig", "external": {"api": "$JS.hub.API"}}}
    assert write_prefix("m", external) == "$JS.hub.API.$KV.orig."


def test_sources_of_a_bucket_map_their_keys_as_nats_go_does() -> None:
    cfg = bucket_stream_config(
        "dst",
        **_PLAIN,
        sources=[
            "one",
            {"name": "KV_two", "opt_start_seq": 3},
            {"name": "ORDERS", "subject_transforms": [{"src": "o.>", "dest": "$KV.dst.>"}]},
        ],
    )
    assert cfg["subjects"] == ["$KV.dst.>"]
    assert cfg["sources"] == [
        {"name": "KV_one", "subject_transforms": [{"src": "$KV.one.>", "dest": "$KV.dst.>"}]},
        {
            "name": "KV_two",
            "opt_start_seq": 3,
            "subject_transforms": [{"src": "$KV.two.>", "dest": "$KV.dst.>"}],
        },
        # transforms given: the source is used as is (a plain stream may feed a bucket)
        {"name": "ORDERS", "subject_transforms": [{"src": "o.>", "dest": "$KV.dst.>"}]},
    ]
    # An external source of the bucket's own name keeps its subjects (no transform).
    same = bucket_stream_config(
        "dst", **_PLAIN, sources=[{"name": "dst", "external": {"api": "$JS.hub.API"}}]
    )
    assert same["sources"] == [{"name": "KV_dst", "external": {"api": "$JS.hub.API"}}]


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("compression", "s2", "compression"),
        ("metadata", {"a": 1}, "metadata"),
        ("republish", ">", "republish"),
        ("mirror", {"filter_subject": "x"}, "mirror"),
        ("sources", [5], "source"),
    ],
)
def test_bucket_options_are_checked(option: str, value: object, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        bucket_stream_config("b", **_PLAIN, **{option: value})


def test_a_bucket_takes_a_mirror_or_sources_not_both() -> None:
    with pytest.raises(InvalidArgumentError, match="not both"):
        bucket_stream_config("b", **_PLAIN, mirror="a", sources=["c"])


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("history", 0),
        ("history", 65),
        ("history", True),
        ("ttl", -1),
        ("max_value_size", 0),
        ("max_bytes", -5),
        ("storage", "disk"),
        ("replicas", 0),
    ],
)
def test_bucket_settings_are_checked(option: str, value: object) -> None:
    settings: dict[str, object] = dict(_PLAIN)
    settings[option] = value
    with pytest.raises(InvalidArgumentError, match=option):
        bucket_stream_config("b", **settings)  # type: ignore[arg-type]


def _direct_reply(
    *user: tuple[str, str],
    seq: str = "42",
    op: str | None = None,
    stamp: str = "2024-01-02T03:04:05.123456789Z",
) -> bytes:
    lines = [f"{k}: {v}" for k, v in user]
    if op is not None:
        lines.append(f"KV-Operation: {op}")
    lines += [
        "Nats-Stream: KV_b",
        "Nats-Subject: $KV.b.k",
        f"Nats-Sequence: {seq}",
        f"Nats-Time-Stamp: {stamp}",
    ]
    return ("NATS/1.0\r\n" + "".join(line + "\r\n" for line in lines) + "\r\n").encode()


def _decoded_fields(block: bytes) -> tuple[int, str, str] | None:
    reply = classify_reply(decode_headers(block, strict=False))
    if reply.kind is not ReplyKind.MESSAGE:
        return None
    assert reply.seq is not None
    assert reply.time is not None
    return reply.seq, format_rfc3339(reply.time), operation_of(reply.headers)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (_direct_reply(), (42, PUT)),
        (_direct_reply(op="DEL"), (42, DEL)),
        (_direct_reply(("Nats-Rollup", "sub"), op="PURGE"), (42, PURGE)),
        (_direct_reply(("KV-Operation", "DEL"), op="PUT"), (42, PUT)),  # the last one counts
        (_direct_reply(("Nats-Marker-Reason", "MaxAge")), (42, PURGE)),
        (_direct_reply(("Nats-Marker-Reason", "Remove")), (42, DEL)),
        # A stored message's own header of the same name comes before the server's.
        (_direct_reply(("Nats-Sequence", "7")), (42, PUT)),
        (_direct_reply(("X-Note", "Nats-Sequence: 9"), ("KV-Op", "DEL")), (42, PUT)),
    ],
)
def test_direct_get_reply_fields_read_from_the_raw_block_agree_with_the_decoded_form(
    block: bytes, expected: tuple[int, str]
) -> None:
    fields = direct_entry_fields(block)
    assert fields is not None
    seq, stamp, op = fields
    assert (seq, op) == expected
    assert parse_server_time(stamp) == datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
    decoded = _decoded_fields(block)
    assert decoded is not None
    assert (seq, format_rfc3339(parse_server_time(stamp)), op) == decoded


@pytest.mark.parametrize(
    "block",
    [
        None,
        b"",
        b"NATS/1.0 404 Message Not Found\r\n\r\n",
        b"NATS/1.0 503\r\n\r\n",
        b"NATS/1.0\r\nNats-Subject: $KV.b.k\r\nNats-Time-Stamp: x\r\n\r\n",  # no sequence
        _direct_reply(seq="4x"),
        _direct_reply().replace(b"Nats-Subject: $KV.b.k", b"Nats-Subject:"),
    ],
)
def test_anything_but_a_plain_stored_message_is_left_to_the_full_decoding(
    block: bytes | None,
) -> None:
    assert direct_entry_fields(block) is None


_header_name = st.sampled_from(
    ["KV-Operation", "Nats-Marker-Reason", "Nats-Sequence", "X-A", "kv-operation", "Status"]
)
_header_value = st.sampled_from(["DEL", "PURGE", "PUT", "MaxAge", "Remove", "12", "", " DEL "])


@given(
    st.lists(st.tuples(_header_name, _header_value), max_size=6),
    st.sampled_from([None, "DEL", "PURGE", "PUT", "junk"]),
)
def test_direct_get_reply_fields_agree_with_the_decoded_form_for_any_user_headers(
    user: list[tuple[str, str]], op: str | None
) -> None:
    block = _direct_reply(*user, op=op)
    fields = direct_entry_fields(block)
    assert fields is not None
    seq, stamp, operation = fields
    assert (seq, format_rfc3339(parse_server_time(stamp)), operation) == _decoded_fields(block)


_STAMPS = [
    "2024-01-02T03:04:05.123456789Z",
    "2024-01-02T03:04:05.1234567Z",
    "2024-01-02T03:04:05.123456Z",
    "2024-01-02T03:04:05.12345Z",
    "2024-01-02T03:04:05Z",
    "2024-01-02T03:04:05.1234567890Z",
    "2022-08-06 00:29:27.587861324 +0000 UTC",
    "2024-01-02T03:04:05.123456789+01:00",
]


def test_a_plain_put_reply_is_read_by_the_cheap_reading() -> None:
    created = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
    assert direct_put_fields(_direct_reply()) == (42, created)
    assert direct_put_fields(_direct_reply(("X-A", "1"), op="PUT")) is None  # an operation
    assert direct_put_fields(_direct_reply(("X-A", "1"), ("Traceparent", "00-ab"))) == (
        42,
        created,
    )
    assert direct_put_fields(_direct_reply(stamp="2024-01-02T03:04:05.123456Z")) == (42, created)


@pytest.mark.parametrize(
    "block",
    [
        None,
        b"",
        b"NATS/1.0 404 Message Not Found\r\n\r\n",
        b"NATS/1.0 503\r\n\r\n",
        _direct_reply(op="DEL"),
        _direct_reply(op="PURGE"),
        _direct_reply(("Nats-Marker-Reason", "MaxAge")),
        _direct_reply(seq="4x"),
        _direct_reply(stamp="2024-01-02T03:04:05Z"),  # left to the general reading
        _direct_reply().replace(b"Nats-Subject: $KV.b.k", b"Nats-Subject: "),
        _direct_reply() + b"Nats-Extra: 1\r\n\r\n",
        _direct_reply().replace(b"NATS/1.0\r\n", b"NATS/1.0 200\r\n"),
    ],
)
def test_anything_but_a_plain_put_is_left_to_the_general_reading(block: bytes | None) -> None:
    assert direct_put_fields(block) is None


@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "KV-Operation",
                    "Nats-Marker-Reason",
                    "Nats-Sequence",
                    "Nats-Subject",
                    "Nats-Time-Stamp",
                    "X-A",
                    "kv-operation",
                ]
            ),
            st.sampled_from(["DEL", "PUT", "MaxAge", "12", "", " DEL ", "2024-01-02T03:04:05Z"]),
        ),
        max_size=5,
    ),
    st.sampled_from([None, "DEL", "PURGE", "PUT"]),
    st.sampled_from(["42", "7", "0042", "4x", ""]),
    st.sampled_from(_STAMPS),
)
def test_the_cheap_reading_of_a_put_agrees_with_the_general_one(
    user: list[tuple[str, str]], op: str | None, seq: str, stamp: str
) -> None:
    block = _direct_reply(*user, seq=seq, op=op, stamp=stamp)
    put = direct_put_fields(block)
    if put is None:
        return  # left to direct_entry_fields (checked against the decoded form above)
    fields = direct_entry_fields(block)
    assert fields is not None
    assert (put[0], put[1], PUT) == (fields[0], parse_server_time(fields[1]), fields[2])


_LINE_TEXT = st.text(
    st.characters(codec="utf-8", blacklist_characters="\r"), min_size=0, max_size=12
)


@given(
    _LINE_TEXT,
    _LINE_TEXT,
    st.sampled_from(["42", "7", "0042", "4x", "", "٣"]),
    st.sampled_from(_STAMPS),
)
def test_the_one_match_reading_of_a_plain_reply_agrees_with_the_trailer_reading(
    stream: str, subject: str, seq: str, stamp: str
) -> None:
    """A reply of a message stored without headers (the server's four lines alone):
    whatever the one match over the whole block reads, the match at the trailing
    lines reads the same, and where it refuses, so does that."""
    block = (
        f"NATS/1.0\r\nNats-Stream: {stream}\r\nNats-Subject: {subject}\r\n"
        f"Nats-Sequence: {seq}\r\nNats-Time-Stamp: {stamp}\r\n\r\n"
    ).encode()
    whole = _PLAIN_PUT_REPLY.fullmatch(block)
    trailer = _direct_trailer(block)
    if whole is not None:
        assert trailer is not None
        assert (whole[1], whole[2]) == trailer.groups()
    elif stream and trailer is not None:
        # (an empty stream name is refused by the one match alone) refused for its
        # stamp only: one the one match leaves to the trailer reading
        usual = block.replace(trailer[2], b"2024-01-02T03:04:05.123456")
        assert _PLAIN_PUT_REPLY.fullmatch(usual) is not None
    put = direct_put_fields(block)
    if trailer is None:
        assert put is None
    else:
        assert put is not None
        assert put[0] == int(trailer[1])


# Stamps of the reply's form whose digits may make no time (a 30th of February, a
# 24th hour, a year 0) or stray from the usual (years before 1000, the 29th to 31st).
_ODD_STAMPS = st.builds(
    "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:06d}{}Z".format,
    st.sampled_from([0, 1, 999, 1000, 2024, 2025, 9999]),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
    st.integers(0, 999_999),
    st.sampled_from(["", "7", "789"]),
)


@given(_ODD_STAMPS, st.booleans())
def test_a_stamp_left_unread_is_one_that_reads_as_the_trailer_reading_would(
    stamp: str, plain: bool
) -> None:
    """``direct_put_stamp`` leaves a stamp unread (bytes) only where reading it
    cannot fail, and otherwise reads it at once, failing where the trailer
    reading (the reading before lazy times) fails: a get raises just as before."""
    block = _direct_reply(stamp=stamp) if plain else _direct_reply(("X-A", "1"), stamp=stamp)
    trailer = _direct_trailer(block)
    assert trailer is not None
    try:
        expected = stamp_time(trailer[2])
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            direct_put_stamp(block)
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            direct_put_fields(block)
        return
    put = direct_put_stamp(block)
    assert put is not None
    assert put[0] == 42
    created = put[1]
    if isinstance(created, bytes):
        assert plain  # only the one match leaves it unread
        assert stamp_time(created) == expected
    else:
        assert created == expected
    assert direct_put_fields(block) == (42, expected)


def test_the_usual_stamp_is_left_unread() -> None:
    assert direct_put_stamp(_direct_reply()) == (42, b"2024-01-02T03:04:05.123456")
    # a day some month lacks: read at once (and refused at once where it is no time)
    late = direct_put_stamp(_direct_reply(stamp="2024-01-31T03:04:05.123456Z"))
    assert late == (42, datetime(2024, 1, 31, 3, 4, 5, 123456, tzinfo=timezone.utc))
    with pytest.raises(ValueError, match="day is out of range"):
        direct_put_stamp(_direct_reply(stamp="2023-02-29T03:04:05.123456Z"))


@pytest.mark.parametrize(
    "stamp",
    [
        b"2024-01-02T03:04:05.123456",  # a Direct Get reply's (kv.get)
        1_704_164_645_123_456_789,  # an ack subject's nanoseconds (watch)
    ],
)
def test_an_entry_with_its_stamp_unread_is_the_entry_with_its_time(stamp: bytes | int) -> None:
    import copy
    import dataclasses
    import pickle

    from aioclients.jetstream._kv import _new_entry
    from aioclients.jetstream._protocol._kv import KeyValueEntry

    created = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
    block = b"NATS/1.0\r\n\r\n"
    plain = KeyValueEntry("B", "a.b", b"v", 7, created, 0, PUT, block)

    def lazy() -> KeyValueEntry:
        return _new_entry("B", "a.b", b"v", 7, stamp, 0, PUT, block)

    entry = lazy()
    assert type(entry) is KeyValueEntry
    assert type(entry.created) is datetime
    assert entry.created == created
    assert entry.created is entry.created  # read once, then kept
    assert entry.created.tzinfo is timezone.utc
    # each of these reads it first thing, on an entry not read before
    assert lazy() == plain
    assert plain == lazy()
    assert hash(lazy()) == hash(plain)
    assert repr(lazy()) == repr(plain)
    assert str(lazy()) == str(plain)
    assert dataclasses.astuple(lazy()) == dataclasses.astuple(plain)
    assert dataclasses.replace(lazy(), key="a.b") == plain
    assert pickle.loads(pickle.dumps(lazy())) == plain
    assert copy.copy(lazy()).created == created
    assert copy.deepcopy(lazy()) == plain
    match lazy():
        case KeyValueEntry(created=when):
            assert when == created
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy().created = created  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(KeyValueEntry)][4] == "created"


def test_the_usual_reply_is_read_by_the_one_match() -> None:
    assert _PLAIN_PUT_REPLY.fullmatch(_direct_reply()) is not None
    assert _PLAIN_PUT_REPLY.fullmatch(_direct_reply(("X-A", "1"))) is None  # its own headers


def test_the_fast_entry_constructor_builds_the_same_frozen_entry() -> None:
    import dataclasses
    from datetime import datetime, timezone

    from aioclients.jetstream._kv import _new_entry
    from aioclients.jetstream._protocol._kv import KeyValueEntry

    assert _new_entry is not KeyValueEntry  # the fast path is on
    created = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    args = ("B", "a.b", b"v", 7, created, 3, "DEL")
    fast = _new_entry(*args)
    plain = KeyValueEntry(*args)
    assert type(fast) is KeyValueEntry
    assert fast == plain
    assert hash(fast) == hash(plain)
    assert repr(fast) == repr(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.key = "other"  # type: ignore[misc]
    # built by the same-layout class (the cheapest field writes), headers kept
    assert getattr(_new_entry, "__name__", "") == "_Twin"
    block = b"NATS/1.0\r\nKV-Operation: DEL\r\n\r\n"
    with_headers = _new_entry(*args, block)
    assert type(with_headers) is KeyValueEntry
    assert with_headers._headers is block
    assert with_headers == plain


def test_watch_entry_times_are_exact_to_the_microsecond() -> None:
    from datetime import datetime, timedelta, timezone

    from aioclients.jetstream._kv import _created, _new_entry

    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    for ns in (0, 999, 1_000, 1_764_037_000_123_456_789, 4_102_444_800_999_999_999):
        assert _created(ns) == epoch + timedelta(microseconds=ns // 1000)
        # as a watch's entry holds it until read
        assert _new_entry("B", "k", b"", 1, ns, 0, "PUT").created == _created(ns)


@pytest.mark.parametrize(
    ("filters", "subject", "expected"),
    [
        (["$KV.b.>"], "$KV.b.k", True),
        (["$KV.b.>"], "$KV.b.a.b", True),
        (["$KV.b.>"], "$KV.b", False),
        (["$KV.b.*"], "$KV.b.k", True),
        (["$KV.b.*"], "$KV.b.a.b", False),
        (["$KV.b.a.*", "$KV.b.c"], "$KV.b.c", True),
        (["$KV.b.a.*", "$KV.b.c"], "$KV.b.c.d", False),
        (["$KV.b.*.x"], "$KV.b.a.x", True),
        (["$KV.b.*.x"], "$KV.b.a.y", False),
        ([], "$KV.b.k", False),
    ],
)
def test_matches_any(filters: list[str], subject: str, expected: bool) -> None:
    assert matches_any(filters, subject) is expected


_TOKEN = st.sampled_from(["a", "b", "c"])


def _as_regex(pattern: str) -> str:
    parts = []
    for token in pattern.split("."):
        parts.append({"*": r"[^.]+", ">": r"[^.]+(\.[^.]+)*"}.get(token, re.escape(token)))
    return r"\.".join(parts)


@given(
    st.lists(st.lists(st.one_of(_TOKEN, st.just("*")), min_size=1, max_size=4), max_size=3),
    st.lists(st.booleans(), max_size=3),
    st.lists(_TOKEN, min_size=1, max_size=5),
)
def test_matches_any_is_nats_matching(
    patterns: list[list[str]], tails: list[bool], tokens: list[str]
) -> None:
    # Each pattern may end in '>' instead of its last token.
    filters = [
        ".".join([*p[:-1], ">"]) if i < len(tails) and tails[i] else ".".join(p)
        for i, p in enumerate(patterns)
    ]
    subject = ".".join(tokens)
    expected = any(re.fullmatch(_as_regex(f), subject) for f in filters)
    assert matches_any(filters, subject) is expected
