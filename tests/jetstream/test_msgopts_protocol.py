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
    format_go_duration,
    format_increment,
    format_ttl,
    parse_counter_value,
)
from aioclients.jetstream._publisher import parse_pub_ack

# Go's time.ParseDuration units, and the grammar of its input: an optional sign,
# then one or more decimal numbers (a fraction allowed), each with a unit.
_UNITS = {
    "h": 3_600_000_000_000,
    "m": 60_000_000_000,
    "s": 1_000_000_000,
    "ms": 1_000_000,
    "us": 1000,
    "µs": 1000,  # U+00B5, what Duration.String writes
    "μs": 1000,  # U+03BC
    "ns": 1,
}
_GO_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?(h|m(?!s)|s|ms|us|µs|μs|ns)")


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration, as time.ParseDuration reads it (exact: the
    fraction of each term is taken in whole nanoseconds, Go's rounding down)."""
    sign = -1 if text[:1] == "-" else 1
    rest = text[1:] if text[:1] in ("-", "+") else text
    if rest == "0":
        return 0
    assert rest, text
    total, at = 0, 0
    while at < len(rest):
        m = _GO_TERM.match(rest, at)
        assert m is not None, text
        assert m[1] or m[2], text  # a term has digits
        whole, frac, unit = m[1] or "0", m[2] or "", m[3]
        size = _UNITS[unit]
        total += int(whole) * size + (int(frac) * size // 10 ** len(frac) if frac else 0)
        at = m.end()
    return sign * total


# What Go's time.Duration(ns).String() gives (go1.27, each checked to parse back).
_GO_STRINGS = [
    (0, "0s"),
    (1, "1ns"),
    (-1, "-1ns"),
    (999, "999ns"),
    (1000, "1µs"),
    (1001, "1.001µs"),
    (1500, "1.5µs"),
    (999_999, "999.999µs"),
    (1_000_000, "1ms"),
    (1_500_000, "1.5ms"),
    (1_000_500, "1.0005ms"),
    (999_999_999, "999.999999ms"),
    (1_000_000_000, "1s"),
    (1_000_000_001, "1.000000001s"),
    (1_000_001_000, "1.000001s"),
    (1_005_000_000, "1.005s"),
    (1_500_000_000, "1.5s"),
    (2_000_000_000, "2s"),
    (59_999_999_999, "59.999999999s"),
    (60_000_000_000, "1m0s"),
    (61_000_000_000, "1m1s"),
    (90_000_000_000, "1m30s"),
    (90_250_000_000, "1m30.25s"),
    (90_500_000_000, "1m30.5s"),
    (3_599_000_000_000, "59m59s"),
    (3_600_000_000_000, "1h0m0s"),
    (3_601_000_000_000, "1h0m1s"),
    (3_660_000_000_000, "1h1m0s"),
    (5_400_500_000_000, "1h30m0.5s"),
    (7_200_000_000_000, "2h0m0s"),
    (86_400_000_000_000, "24h0m0s"),
    (-1500, "-1.5µs"),
    (-1_000_000_000, "-1s"),
    (-90_500_000_000, "-1m30.5s"),
    (2**63 - 1, "2562047h47m16.854775807s"),
    (-(2**63), "-2562047h47m16.854775808s"),
]


@pytest.mark.parametrize(("ns", "text"), _GO_STRINGS)
def test_durations_are_written_as_gos_duration_string(ns: int, text: str) -> None:
    assert format_go_duration(ns) == text
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize("ns", [2**63, -(2**63) - 1])
def test_a_duration_outside_int64_is_refused(ns: int) -> None:
    with pytest.raises(ValueError, match="range"):
        format_go_duration(ns)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_any_duration_parses_back_as_go_reads_it(ns: int) -> None:
    text = format_go_duration(ns)
    assert parse_go_duration(text) == ns
    # Go's shape: h/m/s terms in that order, the larger ones only when needed,
    # and a fraction only on the last term, without trailing zeros.
    assert re.fullmatch(
        r"-?(0s|[1-9][0-9]*(\.[0-9]*[1-9])?(ns|µs|ms)|([1-9][0-9]*h)?"
        r"(([1-9][0-9]*|0)m)?([1-9][0-9]*|0)(\.[0-9]*[1-9])?s)",
        text,
    ), text
    assert ("h" in text) == (abs(ns) >= 3_600_000_000_000)
    assert ("m" in text.replace("ms", "")) == (abs(ns) >= 60_000_000_000)


@pytest.mark.parametrize(
    ("ttl", "text"),
    [
        (1, "1s"),
        (1.0, "1s"),
        (1.5, "1.5s"),
        (2, "2s"),
        (60, "1m0s"),
        (90.25, "1m30.25s"),
        (3600, "1h0m0s"),
        (1.000001, "1.000001s"),
        (1.000000001, "1.000000001s"),
        (timedelta(minutes=1), "1m0s"),
        (timedelta(seconds=1, milliseconds=5), "1.005s"),
        (timedelta(days=1, seconds=1), "24h0m1s"),
        ("never", "never"),
    ],
)
def test_ttl_is_written_as_nats_go_writes_it(ttl: object, text: str) -> None:
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
    assert parse_go_duration(format_ttl(ttl)) == round(ttl * 1_000_000_000)


@given(st.integers(min_value=1, max_value=9_000_000_000))
def test_any_whole_ttl_reads_back_as_its_seconds(ttl: int) -> None:
    text = format_ttl(ttl)
    assert parse_go_duration(text) == ttl * 1_000_000_000
    assert "." not in text


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
