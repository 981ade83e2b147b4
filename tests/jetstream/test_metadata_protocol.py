"""Ack-subject parsing: both token layouts, and malformed subjects."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._errors import RemoteProtocolError
from aioclients.jetstream._protocol._metadata import SequencePair, parse_ack_subject

TS = 1_700_000_000_123_456_789


def test_old_nine_token_layout() -> None:
    md = parse_ack_subject(f"$JS.ACK.ORDERS.worker.2.1001.17.{TS}.42")
    assert md.stream == "ORDERS"
    assert md.consumer == "worker"
    assert md.num_delivered == 2
    assert md.sequence == SequencePair(stream=1001, consumer=17)
    assert md.num_pending == 42
    assert md.timestamp_ns == TS
    assert md.timestamp == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=timezone.utc)
    assert md.domain is None


def test_domain_and_account_hash_layout() -> None:
    md = parse_ack_subject(f"$JS.ACK.hub.ACCHASH.ORDERS.worker.1.5.4.{TS}.0.randomtoken")
    assert (md.domain, md.stream, md.consumer) == ("hub", "ORDERS", "worker")
    assert md.sequence == SequencePair(stream=5, consumer=4)
    assert md.num_delivered == 1
    assert md.num_pending == 0


def test_underscore_means_no_domain() -> None:
    md = parse_ack_subject(f"$JS.ACK._.ACCHASH.S.C.1.2.3.{TS}.4")
    assert md.domain is None
    assert md.stream == "S"


@pytest.mark.parametrize(
    "subject",
    [
        "",
        "_INBOX.abc",
        "$JS.ACK.S.C.1.2.3",
        f"$JS.ACK.S.C.x.2.3.{TS}.4",
        f"$JS.ACK.S.C.1.2.3.{TS}.-4",
        f"$JS.ACK.a.b.S.C.1.2.3.{TS}",  # ten tokens: neither layout
        f"$JS.NAK.S.C.1.2.3.{TS}.4",
        f"$JS.ACK..C.1.2.3.{TS}.4",
    ],
)
def test_malformed_subjects_raise_remote_protocol_error(subject: str) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_ack_subject(subject)


@given(st.text(max_size=80))
def test_arbitrary_text_only_raises_remote_protocol_error(text: str) -> None:
    try:
        parse_ack_subject(text)
    except RemoteProtocolError:
        pass
