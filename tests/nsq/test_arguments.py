"""Bad arguments to Producer, HTTPProducer and Reader fail at construction with an
InvalidArgumentError naming the argument (never a raw TypeError, never sent to nsqd)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from aioclients import InvalidArgumentError
from aioclients._core import check_float
from aioclients.nsq import HTTPProducer, NSQError, Producer, Reader
from aioclients.nsq._protocol._rdy import RdyDistributor
from aioclients.nsq._responder import ReaderResponder

BAD_SECONDS = [
    -1,
    0,
    "30",
    None,
    math.nan,
    math.inf,
    True,
    b"1",
    pytest.param(10**400, id="10**400"),
]


@pytest.mark.parametrize("name", ["timeout", "connect_timeout"])
@pytest.mark.parametrize("value", BAD_SECONDS)
def test_producer_timeouts_are_checked(name: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        Producer("127.0.0.1:4150", **{name: value})


@pytest.mark.parametrize("value", [v for v in BAD_SECONDS if v is not None])
def test_producer_heartbeat_interval_is_checked(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="heartbeat_interval"):
        Producer("127.0.0.1:4150", heartbeat_interval=value)  # type: ignore[arg-type]


def test_a_string_heartbeat_is_not_sent_as_digits() -> None:
    with pytest.raises(InvalidArgumentError, match="heartbeat_interval must be a finite number"):
        Producer("127.0.0.1:4150", heartbeat_interval="30")  # type: ignore[arg-type]


def test_producer_heartbeat_none_and_fractions_are_fine() -> None:
    assert "heartbeat_interval" not in Producer("h:1", heartbeat_interval=None)._identify
    assert Producer("h:1", heartbeat_interval=1.5)._identify["heartbeat_interval"] == 1500


@pytest.mark.parametrize("cls", [Producer, Reader])
@pytest.mark.parametrize("value", [12345, 1.5, ["pw"], {"secret": "pw"}])
def test_auth_secret_of_the_wrong_type(cls: Any, value: object) -> None:
    args = ("127.0.0.1:4150",) if cls is Producer else ("t", "c")
    kwargs: dict[str, Any] = {"auth_secret": value}
    if cls is Reader:
        kwargs["nsqd_tcp_addresses"] = ["h:1"]
    with pytest.raises(InvalidArgumentError, match="auth_secret must be a str or bytes") as err:
        cls(*args, **kwargs)
    assert "pw" not in str(err.value)
    assert "12345" not in str(err.value)


@pytest.mark.parametrize("value", ["", b""])
def test_empty_auth_secret(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="auth_secret is empty"):
        Producer("h:1", auth_secret=value)  # type: ignore[arg-type]


def test_auth_secret_bytes_and_str_are_accepted() -> None:
    assert Producer("h:1", auth_secret=bytearray(b"pw"))._auth_secret == b"pw"
    assert Reader("t", "c", nsqd_tcp_addresses=["h:1"], auth_secret="pw")._auth_secret == "pw"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"deflate_level": 10}, "deflate_level"),
        ({"client_id": 5}, "client_id"),
        ({"hostname": b"h"}, "hostname"),
        ({"user_agent": 1.0}, "user_agent"),
    ],
)
def test_producer_identify_fields(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        Producer("h:1", **kwargs)


@pytest.mark.parametrize("value", BAD_SECONDS)
def test_http_producer_timeout(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout"):
        HTTPProducer("127.0.0.1:4151", timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"heartbeat_interval": math.inf}, "heartbeat_interval"),
        ({"heartbeat_interval": "30"}, "heartbeat_interval"),
        ({"connect_timeout": math.inf}, "connect_timeout"),
        ({"msg_timeout": "60"}, "msg_timeout"),
        ({"requeue_delay": math.inf}, "requeue_delay"),
        ({"close_timeout": -1}, "close_timeout"),
        ({"output_buffer_size": "16k"}, "output_buffer_size"),
        ({"output_buffer_timeout": -0.5}, "output_buffer_timeout"),
        ({"sample_rate": 100}, "sample_rate"),
        ({"deflate_level": 10}, "deflate_level"),
        ({"max_attempts": 70000}, "max_attempts"),
        ({"client_id": 7}, "client_id"),
        ({"hostname": 7}, "hostname"),
        ({"user_agent": 7}, "user_agent"),
        ({"on_give_up": "log"}, "on_give_up"),
    ],
)
def test_reader_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        Reader("t", "c", nsqd_tcp_addresses=["h:1"], **kwargs)


def test_requeue_with_an_infinite_delay_is_refused() -> None:
    # The requeue delay policy is the Reader's message responder's.
    responder = ReaderResponder(
        RdyDistributor(1, rng=random.Random(0)),
        lambda updates: None,
        lambda: 0.0,
        requeue_delay=90.0,
        max_requeue_delay=900.0,
    )

    class Msg:
        attempts = 1

    with pytest.raises(InvalidArgumentError, match="delay"):
        responder.requeue_delay_ms(Msg(), math.inf)  # type: ignore[arg-type]


def test_check_float() -> None:
    assert check_float("x", 2) == 2.0
    assert check_float("x", 0, inclusive=True) == 0.0
    with pytest.raises(InvalidArgumentError, match=r"x must be a finite number > 0, got 0"):
        check_float("x", 0)
    with pytest.raises(InvalidArgumentError, match=r"\.\.\.$"):
        check_float("x", "9" * 1000)  # a long value is cut in the message


_CLOSED = "127.0.0.1:1"  # nothing is sent: the name is checked first


@pytest.mark.parametrize(
    "call",
    [
        lambda: Producer(_CLOSED).publish("bad topic", b"x"),
        lambda: Producer(_CLOSED).mpublish("bad topic", [b"x"]),
        lambda: Producer(_CLOSED).dpublish("bad topic", b"x", 1.0),
        lambda: HTTPProducer(_CLOSED).publish("bad topic", b"x"),
        lambda: HTTPProducer(_CLOSED).mpublish("bad topic", [b"x"]),
        lambda: HTTPProducer(_CLOSED).dpublish("bad topic", b"x", 1.0),
    ],
    ids=["pub", "mpub", "dpub", "http-pub", "http-mpub", "http-dpub"],
)
async def test_a_bad_topic_is_an_nsq_error_coded_as_nsqd_codes_it(call: Any) -> None:
    # Checked before sending (an InvalidArgumentError), and the NSQError with the code
    # nsqd answers such a name with, so code written for either catches it.
    with pytest.raises(NSQError) as caught:
        await call()
    assert caught.value.code == "E_BAD_TOPIC"
    assert isinstance(caught.value, InvalidArgumentError)
    assert "'bad topic' is not valid for NSQ" in str(caught.value)


@pytest.mark.parametrize(
    ("topic", "channel", "code"),
    [("bad topic", "c", "E_BAD_TOPIC"), ("t", "bad channel", "E_BAD_CHANNEL")],
)
def test_a_reader_with_a_bad_name_is_an_nsq_error_coded_as_nsqd_codes_it(
    topic: str, channel: str, code: str
) -> None:
    with pytest.raises(NSQError) as caught:
        Reader(topic, channel, nsqd_tcp_addresses=["h:1"])
    assert caught.value.code == code
    assert isinstance(caught.value, InvalidArgumentError)
