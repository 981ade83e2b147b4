"""nsqlookupd answers (both shapes), addresses and poll jitter."""

from __future__ import annotations

import json
import random

import pytest

from aioclients import InvalidArgumentError
from aioclients.nsq import NSQProtocolError
from aioclients.nsq._protocol._lookup import (
    lookupd_url,
    parse_address,
    parse_lookup_response,
    poll_delay,
)

PRODUCERS = [
    {"broadcast_address": "h1", "tcp_port": 4150, "http_port": 4151, "hostname": "x"},
    {"broadcast_address": "h2", "tcp_port": 4250, "http_port": 4251},
    {"broadcast_address": "h1", "tcp_port": 4150, "http_port": 4151},
    {"broadcast_address": "::1", "tcp_port": 4350},
]


def test_new_shape() -> None:
    body = json.dumps({"channels": ["c"], "producers": PRODUCERS}).encode()
    assert parse_lookup_response(body) == ["h1:4150", "h2:4250", "[::1]:4350"]


def test_old_wrapped_shape() -> None:
    body = json.dumps(
        {
            "status_code": 200,
            "status_txt": "OK",
            "data": {"channels": [], "producers": PRODUCERS[:2]},
        }
    ).encode()
    assert parse_lookup_response(body) == ["h1:4150", "h2:4250"]


def test_no_producers() -> None:
    assert parse_lookup_response(b'{"channels": [], "producers": []}') == []


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"producers": 5}',
        b'{"producers": [{"tcp_port": 1}]}',
        b'{"producers": [1]}',
    ],
)
def test_bad_answers(body: bytes) -> None:
    with pytest.raises(NSQProtocolError):
        parse_lookup_response(body)


def test_addresses() -> None:
    assert parse_address("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert parse_address("[::1]:4150") == ("::1", 4150)
    for bad in ["nohost", ":4150", "h:0", "h:x", 4150]:
        with pytest.raises(InvalidArgumentError):
            parse_address(bad)
    for url in ["nsq://127.0.0.1:4150", "tcp://u:s3cret@h:4150"]:
        with pytest.raises(InvalidArgumentError, match="without a scheme") as info:
            parse_address(url)
        assert "s3cret" not in str(info.value)
    assert lookupd_url("h:4161") == "http://h:4161"
    assert lookupd_url("http://h:4161/") == "http://h:4161"
    with pytest.raises(InvalidArgumentError):
        lookupd_url("h")


def test_poll_delay_jitter_bounds() -> None:
    rng = random.Random(1)
    delays = [poll_delay(60.0, 0.3, rng) for _ in range(500)]
    assert all(60.0 <= d <= 78.0 for d in delays)
    assert max(delays) - min(delays) > 10.0
    assert poll_delay(60.0, 0.0, rng) == 60.0
