"""Atomic batches (ADR-50) and schedules (ADR-51): headers, checks and answers.
Pure: no server, no event loop."""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients import InvalidArgumentError
from aioclients._errors import RemoteProtocolError
from aioclients.jetstream import BatchAbortedError, BatchAck, JetStreamError, MaxPayloadError
from aioclients.jetstream._protocol._batch import (
    MAX_BATCH_MESSAGES,
    BatchMessage,
    batch_header_block,
    check_sizes,
    collect_batch,
    middle_frames,
    open_reply_error,
    parse_batch_ack,
)
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._schedule import (
    build_schedule,
    format_at,
)

# -- batches: what the caller gives ----------------------------------------------------------


def test_a_batch_is_taken_with_and_without_headers() -> None:
    batch = collect_batch(
        [("a.1", b"x"), ("a.2", bytearray(b"y"), {"K": "v"}), ("a.3", memoryview(b"z"), {})]
    )
    assert batch == [
        BatchMessage("a.1", b"x", None),
        BatchMessage("a.2", b"y", {"K": "v"}),
        BatchMessage("a.3", b"z", None),
    ]
    assert all(type(m.payload) is bytes for m in batch)


def test_a_generator_is_read_once() -> None:
    batch = collect_batch((f"a.{i}", b"p") for i in range(3))
    assert [m.subject for m in batch] == ["a.0", "a.1", "a.2"]


def test_the_limit_is_refused_before_reading_further() -> None:
    taken = itertools.count()

    def endless() -> object:
        for i in taken:
            yield ("a.b", str(i).encode())

    with pytest.raises(BatchAbortedError, match="more than 1,000") as info:
        collect_batch(endless())
    assert info.value.err_code is None
    # 1,000 accepted and the 1,001st seen: not one more.
    assert next(taken) == MAX_BATCH_MESSAGES + 1
    assert len(collect_batch([("a.b", b"")] * MAX_BATCH_MESSAGES)) == MAX_BATCH_MESSAGES


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        ([], "at least one"),
        ("a.b", "iterable"),
        (b"ab", "iterable"),
        ({"a.b": b"x"}, "iterable"),
        (42, "iterable"),
        ([("a.b",)], r"messages\[0\]"),
        ([["a.b", b"x"]], r"messages\[0\]"),
        ([("a.b", b"x"), ("a.*", b"x")], r"messages\[1\]"),
        ([("a.b", "text")], "payload must be bytes"),
        ([("a.b", b"x", ["K", "v"])], "headers must be a mapping"),
        ([("a.b", b"x", {"Nats-Batch-Id": "mine"})], "set by publish_batch"),
        ([("a.b", b"x", {"nats-batch-commit": "1"})], "set by publish_batch"),
    ],
)
def test_bad_batches_are_refused(messages: object, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        collect_batch(messages)


# -- batches: the header block of each message -------------------------------------------------


def test_header_blocks_carry_id_sequence_and_commit() -> None:
    assert batch_header_block("b1", 1) == (
        b"NATS/1.0\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence: 1\r\n\r\n"
    )
    assert batch_header_block("b1", 7, {"K": ["a", "b"]}, commit=True) == (
        b"NATS/1.0\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence: 7\r\n"
        b"Nats-Batch-Commit: 1\r\nK: a\r\nK: b\r\n\r\n"
    )


def test_bad_header_values_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="CR or LF"):
        batch_header_block("b1", 2, {"K": "a\r\nInjected: 1"})


_NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True).filter(
    lambda n: not n.lower().startswith("nats-batch")
)
_VALUE = (
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20)
    .map(str.strip)
    .filter(bool)
)


@given(
    batch_id=st.from_regex(r"[a-f0-9]{1,64}", fullmatch=True),
    sequence=st.integers(1, MAX_BATCH_MESSAGES),
    headers=st.dictionaries(_NAME, _VALUE, max_size=4),
    commit=st.booleans(),
)
def test_a_header_block_decodes_to_what_was_put_in(
    batch_id: str, sequence: int, headers: dict[str, str], commit: bool
) -> None:
    block = batch_header_block(batch_id, sequence, headers, commit=commit)
    decoded = decode_headers(block)
    assert decoded.pop("Nats-Batch-Id") == batch_id
    assert decoded.pop("Nats-Batch-Sequence") == str(sequence)
    assert (decoded.pop("Nats-Batch-Commit", None) == "1") is commit
    assert decoded == headers
    assert block.endswith(b"\r\n\r\n")


def _read_hpubs(wire: bytes) -> list[tuple[str, dict[str, str | list[str]], bytes]]:
    """HPUB frames without reply subject back into (subject, headers, payload)."""
    out = []
    while wire:
        line, _, rest = wire.partition(b"\r\n")
        verb, subject, hdr_len, total = line.split(b" ")
        assert verb == b"HPUB"
        body, tail = rest[: int(total)], rest[int(total) :]
        assert tail[:2] == b"\r\n"
        out.append((subject.decode(), decode_headers(body[: int(hdr_len)]), body[int(hdr_len) :]))
        wire = tail[2:]
    return out


_MESSAGES = st.lists(
    st.tuples(
        st.sampled_from(["a.b", "orders.new", "x"]),
        st.binary(max_size=300),
        st.none() | st.dictionaries(_NAME, _VALUE, max_size=2),
    ),
    min_size=1,
    max_size=40,
)


@given(_MESSAGES, st.integers(1, 2000))
def test_middle_frames_carry_messages_2_to_n_minus_1_in_order(
    messages: list[tuple[str, bytes, dict[str, str] | None]], chunk: int
) -> None:
    batch = [BatchMessage(*m) for m in messages]
    writes = list(middle_frames("b1", batch, chunk=chunk))
    assert all(len(w) > 0 for w in writes)
    read = _read_hpubs(b"".join(writes))
    assert len(read) == max(0, len(batch) - 2)
    for sequence, (subject, headers, payload) in enumerate(read, start=2):
        original = batch[sequence - 1]
        assert (subject, payload) == (original.subject, original.payload)
        assert headers.pop("Nats-Batch-Id") == "b1"
        assert headers.pop("Nats-Batch-Sequence") == str(sequence)
        assert "Nats-Batch-Commit" not in headers
        assert headers == (original.headers or {})


def _sizes_on_the_wire(batch_id: str, batch: list[BatchMessage]) -> list[int]:
    """Headers + payload of each message as sent: the middle read back from its
    frames, the first and the last as their request headers make them."""
    n = len(batch)
    middle = [len(h) + len(p) for h, p in _blocks(b"".join(middle_frames(batch_id, batch)))]
    first = batch[0]
    sizes = [
        len(batch_header_block(batch_id, 1, first.headers, commit=n == 1)) + len(first.payload)
    ]
    if n > 1:
        last = batch[-1]
        sizes += middle
        sizes.append(
            len(batch_header_block(batch_id, n, last.headers, commit=True)) + len(last.payload)
        )
    return sizes


def _blocks(wire: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    while wire:
        line, _, rest = wire.partition(b"\r\n")
        _, _, hdr_len, total = line.split(b" ")
        body = rest[: int(total)]
        out.append((body[: int(hdr_len)], body[int(hdr_len) :]))
        wire = rest[int(total) + 2 :]
    return out


@given(_MESSAGES, st.integers(0, 400))
def test_sizes_are_checked_exactly_as_sent(
    messages: list[tuple[str, bytes, dict[str, str] | None]], slack: int
) -> None:
    batch = [BatchMessage(*m) for m in messages]
    sizes = _sizes_on_the_wire("0123abcd", batch)
    assert len(sizes) == len(batch)
    limit = max(sizes)
    check_sizes("0123abcd", batch, limit)  # the largest fits exactly
    check_sizes("0123abcd", batch, 0)  # no limit
    if limit > 1:
        lower = limit - 1 - slack % (limit - 1)
        first_over = next(i for i, size in enumerate(sizes, start=1) if size > lower)
        with pytest.raises(MaxPayloadError, match=f"message {first_over} "):
            check_sizes("0123abcd", batch, lower)


# -- batches: the server's answers -------------------------------------------------------------


def test_an_empty_answer_opens_the_batch() -> None:
    assert open_reply_error(b"", None) is None


def test_a_refused_start_says_why_and_what_to_do() -> None:
    err = open_reply_error(
        b'{"error":{"code":400,"err_code":10174,"description":"atomic publish is disabled"},'
        b'"stream":"B","seq":0}',
        None,
    )
    assert isinstance(err, BatchAbortedError)
    assert isinstance(err, JetStreamError)
    assert (err.code, err.err_code) == (400, 10174)
    assert "allow_atomic=True" in str(err)


def test_no_stream_for_the_first_subject_is_a_refusal() -> None:
    err = open_reply_error(b"", "503")
    assert isinstance(err, BatchAbortedError)
    assert err.code == 503


def test_the_commit_ack_is_read() -> None:
    ack = parse_batch_ack(b'{"stream":"A","seq":9,"batch":"b1","count":3}', None, "b1")
    assert ack == BatchAck("A", 9, "b1", 3)
    with_domain = parse_batch_ack(
        b'{"stream":"A","domain":"hub","seq":9,"batch":"b1","count":3}', None, "b1"
    )
    assert with_domain.domain == "hub"


@pytest.mark.parametrize(
    ("err_code", "description", "words"),
    [
        (10176, "atomic publish batch is incomplete", "publish it again"),
        (10199, "atomic publish batch is too large: 1000", "split it"),
        (10071, "wrong last sequence: 3", "expectation failed"),
        (10999, "something new", "something new"),
    ],
)
def test_a_refused_commit_raises_with_the_servers_code(
    err_code: int, description: str, words: str
) -> None:
    data = (
        f'{{"error":{{"code":400,"err_code":{err_code},"description":"{description}"}},'
        f'"stream":"A","seq":0}}'
    ).encode()
    with pytest.raises(BatchAbortedError, match=words) as info:
        parse_batch_ack(data, None, "b1")
    assert info.value.err_code == err_code
    assert info.value.description.endswith(description)
    assert str(info.value).startswith("atomic batch not stored")


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"stream":"A","seq":9}',  # a plain pub ack: the server ignored the batch headers
        b'{"stream":"A","seq":9,"batch":"other","count":3}',
        b"[1]",
    ],
)
def test_a_commit_answer_that_is_no_batch_ack_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_batch_ack(data, None, "b1")


# -- schedules ---------------------------------------------------------------------------------


def test_an_at_schedule() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    s = build_schedule("s.one", target="t.one", at=when, headers={"K": "v"})
    assert s.headers == {
        "K": "v",
        "Nats-Schedule": "@at 2030-01-02T01:04:05Z",
        "Nats-Schedule-Target": "t.one",
    }
    assert s.version == (2, 12, 0)


def test_at_is_rounded_up_to_the_second_never_earlier() -> None:
    when = datetime(2030, 12, 31, 23, 59, 59, 1, tzinfo=timezone.utc)
    assert format_at(when) == "@at 2031-01-01T00:00:00Z"


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9998, 1, 1)))
def test_at_is_the_first_whole_second_not_before(when: datetime) -> None:
    aware = when.replace(tzinfo=timezone.utc)
    text = format_at(aware)
    assert re.fullmatch(r"@at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", text)
    sent = datetime.fromisoformat(text[4:].replace("Z", "+00:00"))
    assert timedelta(0) <= sent - aware < timedelta(seconds=1)


@pytest.mark.parametrize(
    ("every", "pattern"),
    [
        (1, "@every 1s"),
        (1.5, "@every 1.5s"),
        (90, "@every 1m30s"),
        (timedelta(hours=2), "@every 2h0m0s"),
        (timedelta(hours=1, seconds=30.25), "@every 1h0m30.25s"),
    ],
)
def test_an_every_schedule(every: object, pattern: str) -> None:
    s = build_schedule("s.one", target="t.one", every=every, ttl=5)
    assert s.headers["Nats-Schedule"] == pattern
    assert s.headers["Nats-Schedule-TTL"] == "5s"
    assert s.version == (2, 14, 0)


@given(st.integers(1000, 10**12))
def test_every_reads_back_to_the_millisecond(millis: int) -> None:
    pattern = build_schedule("s.one", target="t.one", every=timedelta(milliseconds=millis)).headers[
        "Nats-Schedule"
    ]
    m = re.fullmatch(r"@every (?:(\d+)h)?(?:(\d+)m)?(\d+)(?:\.(\d{1,3}))?s", str(pattern))
    assert m is not None, pattern
    hours, minutes, seconds, fraction = (int(g or 0) for g in m.groups())
    fraction_ms = fraction * 10 ** (3 - len(m[4])) if m[4] else 0
    assert ((hours * 60 + minutes) * 60 + seconds) * 1000 + fraction_ms == millis


@pytest.mark.parametrize("cron", ["* * * * * *", "0 30 9 * * mon-fri", " 0 0 */2 1,15 jan-mar ? "])
def test_a_cron_schedule_with_a_time_zone(cron: str) -> None:
    s = build_schedule("s.one", target="t.one", cron=cron, time_zone="Europe/Amsterdam")
    assert s.headers["Nats-Schedule"] == " ".join(cron.split())
    assert s.headers["Nats-Schedule-Time-Zone"] == "Europe/Amsterdam"
    assert s.version == (2, 14, 0)


def test_predefined_schedules_pass_as_cron() -> None:
    assert build_schedule("s.a", target="t.a", cron="@Hourly").headers["Nats-Schedule"] == (
        "@hourly"
    )


def test_a_source_is_sent_and_needs_2_14_whatever_the_pattern() -> None:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    s = build_schedule("s.a", target="t.a", at=at, source="gauge.a")
    assert s.headers == {
        "Nats-Schedule": "@at 2030-01-02T03:04:05Z",
        "Nats-Schedule-Target": "t.a",
        "Nats-Schedule-Source": "gauge.a",
    }
    assert s.version == (2, 14, 0)  # @at alone needs 2.12
    assert "source" in s.what
    assert build_schedule("s.a", target="t.a", at=at).version == (2, 12, 0)
    assert build_schedule("s.a", target="t.a", every=5, source="g").version == (2, 14, 0)


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("t.a", "source must differ"),
        ("s.a", "source must differ"),
        ("g.*", "source: .*wildcard"),
        ("g.>", "source: .*wildcard"),
        ("", "source: "),
        (5, "source: "),
    ],
)
def test_a_bad_source_is_refused(source: object, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        build_schedule("s.a", target="t.a", every=5, source=source)


def test_ttl_never() -> None:
    s = build_schedule("s.a", target="t.a", every=2, ttl="never")
    assert s.headers["Nats-Schedule-TTL"] == "never"


_SOON = datetime(2030, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({}, "exactly one of at=, every= or cron=, got none"),
        ({"at": _SOON, "every": 5}, "got at and every"),
        ({"every": 5, "cron": "* * * * * *"}, "got every and cron"),
        ({"at": datetime(2030, 1, 1)}, "aware datetime"),
        ({"at": "2030-01-01T00:00:00Z"}, "aware datetime"),
        ({"every": 0.5}, "every must be a number of seconds >= 1"),
        ({"every": 0.9994}, ">= 1"),
        ({"every": True}, ">= 1"),
        ({"every": float("inf")}, ">= 1"),
        ({"every": "never"}, ">= 1"),
        ({"cron": "* * * * *"}, "6 fields"),
        ({"cron": "* * * * * * *"}, "6 fields"),
        ({"cron": "@every 5s"}, "every="),
        ({"cron": "* * * * * $"}, "characters"),
        ({"every": 5, "time_zone": "Europe/Paris"}, "cron schedules only"),
        ({"cron": "@daily", "time_zone": "Europe Paris"}, "IANA"),
        ({"cron": "@daily", "time_zone": ""}, "IANA"),
        ({"every": 5, "ttl": 0.5}, "ttl must be"),
        ({"every": 5, "ttl": "forever"}, "ttl must be"),
        ({"every": 5, "headers": {"Nats-Schedule": "@hourly"}}, "set by publish_schedule"),
        ({"every": 5, "headers": {"nats-schedule-ttl": "5s"}}, "set by publish_schedule"),
        ({"every": 5, "headers": [("K", "v")]}, "mapping"),
    ],
)
def test_bad_schedules_are_refused_before_sending(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(words) if "=" in words else words):
        build_schedule("s.one", target="t.one", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("subject", "target", "words"),
    [
        ("s.one", "s.one", "target must differ"),
        ("s.one", "t.*", "target"),
        ("s.one", "", "target"),
        ("s.*", "t.one", "subject"),
    ],
)
def test_subject_and_target_are_checked(subject: str, target: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        build_schedule(subject, target=target, every=5)
