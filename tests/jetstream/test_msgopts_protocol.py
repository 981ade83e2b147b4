"""Per-message TTL (ADR-43) and counter (ADR-49) headers, and the stream options of
nats-server 2.11+: synchronous checks and hypothesis properties, no server."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._protocol._config import STREAM_FEATURES, stream_features
from aioclients.jetstream._protocol._kv import bucket_stream_config
from aioclients.jetstream._protocol._msgopts import (
    counter_value_of,
    format_increment,
    format_ttl,
    parse_counter_value,
)
from aioclients.jetstream._publisher import parse_pub_ack

_UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1000, "ns": 1}
_GO_DURATION = re.compile(r"([0-9]+)(s|ms|us|ns)")


def go_duration_ns(text: str) -> int:
    """Nanoseconds of a one-unit Go duration, as Go's time.ParseDuration reads it."""
    m = _GO_DURATION.fullmatch(text)
    assert m is not None, text
    return int(m[1]) * _UNITS[m[2]]


@pytest.mark.parametrize(
    ("ttl", "text"),
    [
        (1, "1s"),
        (1.0, "1s"),
        (1.5, "1500ms"),
        (2, "2s"),
        (90.25, "90250ms"),
        (1.000001, "1000001us"),
        (1.000000001, "1000000001ns"),
        (timedelta(minutes=1), "60s"),
        (timedelta(seconds=1, milliseconds=5), "1005ms"),
        ("never", "never"),
    ],
)
def test_ttl_is_the_coarsest_exact_go_duration(ttl: object, text: str) -> None:
    assert format_ttl(ttl) == text


@pytest.mark.parametrize(
    "ttl",
    [0, 0.5, 0.999, -1, float("nan"), float("inf"), True, "1s", "Never", None, b"1", 2**80],
)
def test_a_bad_ttl_is_refused_naming_the_argument(ttl: object) -> None:
    with pytest.raises(InvalidArgumentError, match="ttl"):
        format_ttl(ttl)


def test_under_one_second_says_the_minimum() -> None:
    with pytest.raises(InvalidArgumentError, match="at least 1 second"):
        format_ttl(0.999)
    with pytest.raises(InvalidArgumentError, match="limit_marker_ttl"):
        format_ttl(0, name="limit_marker_ttl")


@given(st.floats(min_value=1.0, max_value=9e9, allow_nan=False, allow_infinity=False))
def test_any_float_ttl_reads_back_as_its_nanoseconds(ttl: float) -> None:
    text = format_ttl(ttl)
    assert go_duration_ns(text) == round(ttl * 1_000_000_000)
    # No finer unit than needed: the number is not divisible by the next unit up.
    number, unit = _GO_DURATION.fullmatch(text).groups()  # type: ignore[union-attr]
    units = list(_UNITS)
    if unit != "s":
        coarser = _UNITS[units[units.index(unit) - 1]] // _UNITS[unit]
        assert int(number) % coarser != 0


@given(st.integers(min_value=1, max_value=9_000_000_000))
def test_any_whole_ttl_is_seconds(ttl: int) -> None:
    assert format_ttl(ttl) == f"{ttl}s"


@given(st.integers())
def test_any_increment_reads_back_as_the_int(delta: int) -> None:
    text = format_increment(delta)
    assert int(text) == delta
    assert re.fullmatch(r"[+-]?[0-9]+", text)
    assert text.startswith("+") == (delta > 0)


@pytest.mark.parametrize("delta", [1.0, "1", True, None, 10**3 + 0.5])
def test_an_increment_must_be_an_int(delta: object) -> None:
    with pytest.raises(InvalidArgumentError, match="delta must be an int"):
        format_increment(delta)


@given(st.integers(min_value=-(10**60), max_value=10**60))
def test_counter_values_of_any_size_parse(value: int) -> None:
    assert counter_value_of(b'{"val":"%d"}' % value, what="x") == value
    assert parse_counter_value(str(value), what="x") == value


@pytest.mark.parametrize(
    "payload", [b"", b"not json", b"[]", b'{"val":5}', b'{"val":"5.0"}', b'{"x":"1"}']
)
def test_a_payload_that_is_no_counter_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="counter"):
        counter_value_of(payload, what="the counter of 'c.a'")


class _Reply:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.headers = None


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b'{"stream":"C","seq":3,"val":"5"}', "5"),
        (
            b'{"stream":"C","seq":3,"val":"-99999999999999999999999995"}',
            "-99999999999999999999999995",
        ),
        (b'{"stream":"C","domain":"d","seq":3,"val":"0"}', "0"),
        (b'{"stream": "C", "seq": 3, "val": "7"}', "7"),  # another spacing: the JSON path
        (b'{"stream":"C","seq":3}', None),
    ],
)
def test_a_pub_ack_carries_the_counter_value(data: bytes, value: str | None) -> None:
    ack = parse_pub_ack(_Reply(data), "c.a")  # type: ignore[arg-type]
    assert (ack.stream, ack.seq, ack.value) == ("C", 3, value)


def test_the_2_11_and_2_12_stream_options_name_their_feature_and_level() -> None:
    assert set(STREAM_FEATURES) == {
        "allow_msg_ttl",
        "subject_delete_marker_ttl",
        "allow_msg_counter",
        "allow_atomic",
        "allow_msg_schedules",
    }
    assert stream_features({"allow_msg_ttl": False, "subject_delete_marker_ttl": 0}) == []
    assert stream_features({"max_age": 5, "allow_msg_ttl": True}) == [
        ("per-message TTL (ADR-43)", 1)
    ]
    found = stream_features({"allow_msg_ttl": True, "allow_msg_counter": True})
    assert found[0] == ("message counters (ADR-49)", 2)  # the highest level first
    assert len(found) == 2


def test_a_bucket_with_limit_markers_turns_on_ttls() -> None:
    def config(**extra: object) -> dict[str, object]:
        return bucket_stream_config(
            "b",
            history=1,
            ttl=None,
            max_value_size=None,
            max_bytes=None,
            storage="file",
            replicas=1,
            description=None,
            **extra,  # type: ignore[arg-type]
        )

    assert "allow_msg_ttl" not in config()
    marked = config(limit_marker_ttl=5)
    assert marked["allow_msg_ttl"] is True
    assert marked["subject_delete_marker_ttl"] == 5
    for bad in (0.5, "never", -1):
        with pytest.raises(InvalidArgumentError, match="limit_marker_ttl"):
            config(limit_marker_ttl=bad)
