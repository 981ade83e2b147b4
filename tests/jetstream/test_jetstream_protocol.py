"""Pure JetStream helpers: bytes and dicts in, values or errors out. No server, no loop."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._protocol._config import (
    ENUM_FIELDS,
    config_from_wire,
    config_to_wire,
    validate_priority_config,
)
from aioclients.jetstream._protocol._direct import (
    ReplyKind,
    batch_request,
    classify_reply,
    multi_last_request,
    single_request,
)
from aioclients.jetstream._protocol._headers import (
    decode_header_lines,
    decode_headers,
    encode_headers,
    publish_headers,
)
from aioclients.jetstream._protocol._names import (
    validate_consumer_name,
    validate_filter_subject,
    validate_group_name,
    validate_publish_subject,
    validate_stream_name,
)
from aioclients.jetstream._protocol._time import format_rfc3339, parse_server_time

# -- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ORDERS", "kv_users", "a-b", "x" * 255, "Ünïcode"])
def test_valid_stream_and_consumer_names(name: str) -> None:
    assert validate_stream_name(name) == name
    assert validate_consumer_name(name) == name


@pytest.mark.parametrize("name", ["", "a.b", "a b", "a*", "a>", "a/b", "a\\b", "a\tb", "x" * 256])
def test_invalid_stream_names_say_why(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="stream name"):
        validate_stream_name(name)


def test_name_must_be_a_str() -> None:
    with pytest.raises(InvalidArgumentError, match="must be a str"):
        validate_stream_name(5)


@pytest.mark.parametrize("subject", ["a", "a.b.c", "orders.new", "$KV.b.k", "a*b"])
def test_valid_publish_subjects(subject: str) -> None:
    assert validate_publish_subject(subject) == subject


@pytest.mark.parametrize("subject", ["", ".a", "a.", "a..b", "a b", "a.*", "a.>", "*", ">"])
def test_invalid_publish_subjects(subject: str) -> None:
    with pytest.raises(InvalidArgumentError):
        validate_publish_subject(subject)


def test_publish_subject_cache_does_not_admit_invalid_subjects() -> None:
    validate_publish_subject("cached.ok")
    assert validate_publish_subject("cached.ok") == "cached.ok"
    with pytest.raises(InvalidArgumentError):
        validate_publish_subject("cached.ok.")
    with pytest.raises(InvalidArgumentError):
        validate_publish_subject(["unhashable"])


@pytest.mark.parametrize("subject", ["a.*", "a.>", "*.b", ">", "a.*.c"])
def test_filter_subjects_allow_wildcards(subject: str) -> None:
    assert validate_filter_subject(subject) == subject


@pytest.mark.parametrize("subject", ["a.>.b", "a..b", "", "a b"])
def test_invalid_filter_subjects(subject: str) -> None:
    with pytest.raises(InvalidArgumentError):
        validate_filter_subject(subject)


@pytest.mark.parametrize("group", ["jobs", "A-Z_a=z/09", "x" * 16])
def test_valid_group_names(group: str) -> None:
    assert validate_group_name(group) == group


@pytest.mark.parametrize("group", ["", "x" * 17, "a b", "a.b", "a*", "é", None])
def test_invalid_group_names(group: object) -> None:
    with pytest.raises(InvalidArgumentError, match="A-Z a-z 0-9"):
        validate_group_name(group)


@given(st.text(min_size=1, max_size=20))
def test_group_name_rule_matches_adr42(text: str) -> None:
    allowed = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_/=")
    ok = len(text) <= 16 and all(c in allowed for c in text)
    if ok:
        assert validate_group_name(text) == text
    else:
        with pytest.raises(InvalidArgumentError):
            validate_group_name(text)


# -- config --------------------------------------------------------------------------------


def test_durations_go_out_as_nanoseconds_at_any_depth() -> None:
    wire = config_to_wire(
        {
            "name": "S",
            "max_age": 1.5,
            "duplicate_window": timedelta(minutes=2),
            "consumer_limits": {"inactive_threshold": 30},
            "backoff": [1, 2.5],
            "max_msgs": 10,
            "description": None,
        }
    )
    assert wire == {
        "name": "S",
        "max_age": 1_500_000_000,
        "duplicate_window": 120_000_000_000,
        "consumer_limits": {"inactive_threshold": 30_000_000_000},
        "backoff": [1_000_000_000, 2_500_000_000],
        "max_msgs": 10,
    }


def test_durations_come_back_as_seconds() -> None:
    back = config_from_wire(
        {"ack_wait": 30_000_000_000, "backoff": [500_000_000], "max_deliver": -1}
    )
    assert back == {"ack_wait": 30.0, "backoff": [0.5], "max_deliver": -1}


@given(st.floats(0, 10**6, allow_nan=False))
def test_duration_round_trip(seconds: float) -> None:
    wire = config_to_wire({"ack_wait": seconds})
    assert isinstance(wire["ack_wait"], int)
    assert config_from_wire(wire)["ack_wait"] == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize("bad", [-1, "5s", float("inf"), float("nan"), True])
def test_bad_durations_are_rejected(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="ack_wait"):
        config_to_wire({"ack_wait": bad})


def test_pause_until_takes_an_aware_datetime() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert config_to_wire({"pause_until": when})["pause_until"] == "2030-01-02T03:04:05.000000Z"
    with pytest.raises(InvalidArgumentError, match="pause_until"):
        config_to_wire({"pause_until": datetime(2030, 1, 2)})


def test_valid_priority_configs() -> None:
    validate_priority_config({})
    validate_priority_config({"priority_policy": "none"})
    for policy in ("overflow", "pinned_client", "prioritized"):
        validate_priority_config({"priority_groups": ["jobs"], "priority_policy": policy})
    validate_priority_config(
        {"priority_groups": ["jobs"], "priority_policy": "pinned_client", "priority_timeout": 5}
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"priority_groups": ["a", "b"], "priority_policy": "overflow"}, "exactly one group"),
        ({"priority_groups": [], "priority_policy": "overflow"}, "exactly one group"),
        ({"priority_groups": "jobs", "priority_policy": "overflow"}, "must be a list"),
        ({"priority_groups": ["x" * 17], "priority_policy": "overflow"}, "A-Z a-z"),
        ({"priority_groups": ["jobs"]}, "need both"),
        ({"priority_policy": "overflow"}, "need both"),
        ({"priority_groups": ["jobs"], "priority_policy": "fifo"}, "unknown priority_policy"),
        (
            {"priority_groups": ["j"], "priority_policy": "overflow", "deliver_subject": "x"},
            "pull consumers only",
        ),
        (
            {"priority_groups": ["j"], "priority_policy": "overflow", "priority_timeout": 1},
            "pinned_client",
        ),
        ({"priority_timeout": 1}, "pinned_client"),
    ],
)
def test_invalid_priority_configs(config: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        validate_priority_config(config)


# -- headers -------------------------------------------------------------------------------


def test_encode_headers_repeats_list_values() -> None:
    block = encode_headers({"A": "1", "B": ["x", "y"]})
    assert block == b"NATS/1.0\r\nA: 1\r\nB: x\r\nB: y\r\n\r\n"


def test_decode_headers_with_inline_status() -> None:
    block = b"NATS/1.0 404 No Messages\r\nNats-Pending-Messages: 3\r\n\r\n"
    assert decode_headers(block) == {
        "Status": "404",
        "Description": "No Messages",
        "Nats-Pending-Messages": "3",
    }


def test_decode_rejects_garbage_with_offset() -> None:
    with pytest.raises(RemoteProtocolError, match="offset 0"):
        decode_headers(b"HTTP/1.1 200\r\n\r\n")
    with pytest.raises(RemoteProtocolError, match="offset 10"):
        decode_headers(b"NATS/1.0\r\nno-colon-here\r\n\r\n")


def test_a_status_description_that_is_not_utf8_is_decoded_leniently() -> None:
    # Header text is UTF-8 by convention only: like header values, a description's
    # undecodable bytes become U+FFFD instead of a UnicodeDecodeError.
    block = b"NATS/1.0 408 Request \xff Timeout\r\nK: caf\xc3\xa9 \xfe\r\n\r\n"
    assert decode_headers(block) == {
        "Status": "408",
        "Description": "Request \ufffd Timeout",
        "K": "caf\u00e9 \ufffd",
    }
    assert decode_headers(block, strict=False) == decode_headers(block)


@pytest.mark.parametrize(
    "block",
    [
        b"NATS/1.0 4\xff4 Not Found\r\n\r\n",
        b"NATS/1.0 \xc3\xa9\xc3\xa9\r\n\r\n",
        b"NATS/1.0 abc Bad\r\n\r\n",
        b"NATS/1.0\xff\xfe\r\nK: v\r\n\r\n",
    ],
)
def test_a_status_code_that_is_not_digits_is_a_remote_protocol_error(block: bytes) -> None:
    with pytest.raises(RemoteProtocolError, match="status code") as info:
        decode_headers(block)
    assert info.value.offset in (8, 9)
    # Read-loop (lenient) decoding skips such a status instead of failing.
    assert "Status" not in decode_headers(block, strict=False)


def test_msg_headers_of_a_block_that_is_not_utf8_raise_the_typed_error() -> None:
    from aioclients.jetstream._message import Msg

    msg = Msg(None, "s", "r", b"", b"NATS/1.0\xff\xfe\r\nK: v\r\n\r\n")  # type: ignore[arg-type]
    with pytest.raises(RemoteProtocolError, match="status code"):
        _ = msg.headers
    lenient = Msg(None, "s", "r", b"", b"NATS/1.0\r\nK: \xff\r\n\r\n")  # type: ignore[arg-type]
    assert lenient.headers == {"K": "\ufffd"}


@given(st.binary(max_size=60))
def test_decoding_any_bytes_raises_nothing_but_remote_protocol_error(tail: bytes) -> None:
    for block in (b"NATS/1.0" + tail, b"NATS/1.0 " + tail, b"NATS/1.0\r\n" + tail):
        try:
            decode_headers(block)
        except RemoteProtocolError:
            pass
        decode_headers(block, strict=False)  # lenient: never raises


_key = st.from_regex(r"[A-Za-z0-9\-_]{1,12}", fullmatch=True)
_value = st.from_regex(r"[ -~]{0,20}", fullmatch=True).map(str.strip)


@given(st.dictionaries(_key, st.one_of(_value, st.lists(_value, min_size=2, max_size=3))))
def test_header_round_trip(headers: dict[str, str | list[str]]) -> None:
    assert decode_headers(encode_headers(headers)) == headers


@pytest.mark.parametrize(
    "headers",
    [{"bad key": "v"}, {"": "v"}, {"K": "line\r\nbreak"}, {"K": 5}, {"K:": "v"}],
)
def test_bad_headers_are_rejected(headers: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        encode_headers(headers)  # type: ignore[arg-type]


def test_publish_headers_merge_expectations() -> None:
    merged = publish_headers(
        {"X": "1"},
        msg_id="m-1",
        expected_stream="S",
        expected_last_seq=4,
        expected_last_subject_seq=0,
        expected_last_msg_id="m-0",
    )
    assert merged == {
        "X": "1",
        "Nats-Msg-Id": "m-1",
        "Nats-Expected-Stream": "S",
        "Nats-Expected-Last-Sequence": "4",
        "Nats-Expected-Last-Subject-Sequence": "0",
        "Nats-Expected-Last-Msg-Id": "m-0",
    }
    other = publish_headers(
        None,
        msg_id=None,
        expected_stream=None,
        expected_last_seq=None,
        expected_last_subject_seq=7,
        expected_last_msg_id=None,
        expected_last_subject_seq_subject="orders.*.17",
    )
    assert other == {
        "Nats-Expected-Last-Subject-Sequence": "7",
        "Nats-Expected-Last-Subject-Sequence-Subject": "orders.*.17",
    }
    for bad, match in (
        ({"expected_last_subject_seq_subject": "a.b"}, "needs expected_last_subject_seq"),
        ({"expected_last_subject_seq": 0, "expected_last_subject_seq_subject": ""}, "subject"),
        ({"expected_last_subject_seq": 0, "expected_last_subject_seq_subject": "a.>.b"}, ">"),
        ({"expected_last_subject_seq": 0, "expected_last_subject_seq_subject": 5}, "subject"),
    ):
        options: dict[str, Any] = {
            "msg_id": None,
            "expected_stream": None,
            "expected_last_seq": None,
            "expected_last_subject_seq": None,
            "expected_last_msg_id": None,
            **bad,
        }
        with pytest.raises(InvalidArgumentError, match=match):
            publish_headers(None, **options)
    none = publish_headers(
        None,
        msg_id=None,
        expected_stream=None,
        expected_last_seq=None,
        expected_last_subject_seq=None,
        expected_last_msg_id=None,
    )
    assert none is None


@pytest.mark.parametrize(
    "kwargs", [{"msg_id": ""}, {"expected_last_seq": -1}, {"expected_last_subject_seq": -2}]
)
def test_publish_headers_reject_bad_expectations(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {
        "msg_id": None,
        "expected_stream": None,
        "expected_last_seq": None,
        "expected_last_subject_seq": None,
        "expected_last_msg_id": None,
    }
    with pytest.raises(InvalidArgumentError):
        publish_headers(None, **{**base, **kwargs})  # type: ignore[arg-type]


# -- time ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2022-08-06T00:29:27.587861324Z",
        "2022-08-06 00:29:27.587861324 +0000 UTC",
        "2022-08-06T02:29:27.587861+02:00",
    ],
)
def test_server_times_in_every_layout(text: str) -> None:
    assert parse_server_time(text) == datetime(2022, 8, 6, 0, 29, 27, 587861, tzinfo=timezone.utc)


def test_unparseable_time_is_a_remote_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError):
        parse_server_time("yesterday")


@given(st.datetimes(timezones=st.just(timezone.utc)))
def test_time_round_trip(when: datetime) -> None:
    assert parse_server_time(format_rfc3339(when)) == when


# -- Direct Get ----------------------------------------------------------------------------


def _loads(payload: bytes | None) -> object:
    assert payload is not None
    return json.loads(payload)


def test_single_request_forms() -> None:
    assert _loads(single_request(seq=5, last_by_subj=None, next_by_subj=None, start_time=None)) == {
        "seq": 5
    }
    assert single_request(seq=None, last_by_subj="kv.a", next_by_subj=None, start_time=None) is None
    assert _loads(
        single_request(seq=3, last_by_subj=None, next_by_subj="kv.b", start_time=None)
    ) == {
        "seq": 3,
        "next_by_subj": "kv.b",
    }
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert _loads(
        single_request(seq=None, last_by_subj=None, next_by_subj=None, start_time=when)
    ) == {"start_time": "2024-01-01T00:00:00.000000Z"}


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"seq": 0},
        {"seq": -1},
        {"last_by_subj": ""},
        {"last_by_subj": "a..b"},
        {"next_by_subj": "a b"},
        {"last_by_subj": "a", "seq": 1},
        {"next_by_subj": ""},
        {"seq": 1, "start_time": datetime(2024, 1, 1, tzinfo=timezone.utc)},
        {"start_time": datetime(2024, 1, 1)},
    ],
)
def test_single_request_rejects(kwargs: dict[str, object]) -> None:
    base = {"seq": None, "last_by_subj": None, "next_by_subj": None, "start_time": None}
    with pytest.raises(InvalidArgumentError):
        single_request(**{**base, **kwargs})  # type: ignore[arg-type]


def test_batch_request_defaults_to_the_start_of_the_stream() -> None:
    payload = batch_request(batch=10, seq=None, start_time=None, next_by_subj=None, max_bytes=None)
    assert json.loads(payload) == {"batch": 10, "seq": 1}
    payload = batch_request(batch=2, seq=7, start_time=None, next_by_subj="a.>", max_bytes=100)
    assert json.loads(payload) == {"batch": 2, "seq": 7, "next_by_subj": "a.>", "max_bytes": 100}


@pytest.mark.parametrize("kwargs", [{"batch": 0}, {"batch": True}, {"max_bytes": 0}])
def test_batch_request_rejects(kwargs: dict[str, object]) -> None:
    base = {"batch": 1, "seq": None, "start_time": None, "next_by_subj": None, "max_bytes": None}
    with pytest.raises(InvalidArgumentError):
        batch_request(**{**base, **kwargs})  # type: ignore[arg-type]


def test_multi_last_request_pages() -> None:
    first = multi_last_request(["kv.>"], up_to_seq=None, up_to_time=None, batch=10)
    assert json.loads(first) == {"multi_last": ["kv.>"], "batch": 10}
    later = multi_last_request(["kv.>"], up_to_seq=42, up_to_time=None, batch=10, seq=11)
    assert json.loads(later) == {"multi_last": ["kv.>"], "up_to_seq": 42, "batch": 10, "seq": 11}


def test_multi_last_request_rejects() -> None:
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(InvalidArgumentError, match="not both"):
        multi_last_request(["a"], up_to_seq=1, up_to_time=when, batch=None)
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        multi_last_request([], up_to_seq=None, up_to_time=None, batch=None)
    with pytest.raises(InvalidArgumentError, match="at most 1024"):
        multi_last_request(
            [f"s.{i}" for i in range(1025)], up_to_seq=None, up_to_time=None, batch=None
        )


def test_classify_a_stored_message_strips_bookkeeping_headers() -> None:
    reply = classify_reply(
        {
            "Nats-Stream": "KV",
            "Nats-Subject": "kv.a",
            "Nats-Sequence": "7",
            "Nats-Time-Stamp": "2024-01-01T00:00:00.5Z",
            "Nats-Num-Pending": "3",
            "Nats-Last-Sequence": "6",
            "App": "yes",
        }
    )
    assert reply.kind is ReplyKind.MESSAGE
    assert (reply.subject, reply.seq, reply.num_pending, reply.last_seq) == ("kv.a", 7, 3, 6)
    assert reply.headers == {"App": "yes"}
    assert reply.time == datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("204", ReplyKind.END_OF_BATCH),
        ("404", ReplyKind.NOT_FOUND),
        ("408", ReplyKind.BAD_REQUEST),
        ("413", ReplyKind.TOO_MANY_SUBJECTS),
        ("503", ReplyKind.NO_RESPONDERS),
        ("500", ReplyKind.OTHER_STATUS),
    ],
)
def test_classify_status_replies(status: str, kind: ReplyKind) -> None:
    reply = classify_reply(
        {"Status": status, "Description": "x", "Nats-Num-Pending": "0", "Nats-UpTo-Sequence": "9"}
    )
    assert reply.kind is kind
    assert reply.up_to_seq == 9


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"Nats-Subject": "a", "Nats-Sequence": "1"},
        {"Nats-Subject": "a", "Nats-Sequence": "x", "Nats-Time-Stamp": "2024-01-01T00:00:00Z"},
    ],
)
def test_classify_rejects_malformed_replies(headers: dict[str, str] | None) -> None:
    with pytest.raises(RemoteProtocolError):
        classify_reply(headers)


def test_lenient_header_lines_skip_what_nats_py_skips() -> None:
    raw = b"Good: 1\r\nno colon\r\nBad Name: 2\r\n\xff: 3\r\nGood: 4\r\nU: \xe2\x82\xac\xff\r\n"
    assert decode_header_lines(raw, strict=False) == {"Good": ["1", "4"], "U": "\u20ac\ufffd"}
    with pytest.raises(RemoteProtocolError, match="offset 9"):
        decode_header_lines(raw)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"ack_policy": "explict"}, "ack_policy must be one of 'none', 'all', 'explicit'"),
        ({"deliver_policy": "latest"}, "deliver_policy must be one of 'all', 'last', 'new',"),
        ({"storage": "disk"}, "storage must be one of 'file', 'memory', got 'disk'"),
        ({"retention": "work_queue"}, "retention must be one of 'limits', 'interest',"),
        ({"discard": "oldest"}, "discard must be one of 'old', 'new', got 'oldest'"),
        ({"replay_policy": 1}, "replay_policy must be one of 'instant', 'original', got 1"),
    ],
)
def test_a_misspelt_enumeration_value_names_the_option(
    config: dict[str, object], message: str
) -> None:
    # The server's answer names neither: invalid JSON: can not unmarshal "\"explict\"".
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        config_to_wire(config)


def test_every_enumeration_value_passes() -> None:
    for key, values in ENUM_FIELDS.items():
        for value in values:
            assert config_to_wire({key: value}) == {key: value}
