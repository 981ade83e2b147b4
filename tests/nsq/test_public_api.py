"""The public surface of aioclients.nsq matches the API contract (names, keywords, defaults)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import aioclients
import aioclients.nsq as nsq

READER_DEFAULTS = {
    "nsqd_tcp_addresses": (),
    "lookupd_http_addresses": (),
    "max_in_flight": 1,
    "max_attempts": 5,
    "requeue_delay": 90.0,
    "max_requeue_delay": 900.0,
    "max_backoff_duration": 128.0,
    "lookupd_poll_interval": 60.0,
    "lookupd_poll_jitter": 0.3,
    "low_rdy_idle_timeout": 10.0,
    "heartbeat_interval": 30.0,
    "msg_timeout": None,
    "tls": None,
    "snappy": False,
    "deflate": False,
    "deflate_level": 6,
    "sample_rate": 0,
    "auth_secret": None,
    "user_agent": None,
    "client_id": None,
    "hostname": None,
    "output_buffer_size": None,
    "output_buffer_timeout": None,
    "on_give_up": None,
}


def test_all_is_a_tuple_of_existing_names() -> None:
    assert isinstance(nsq.__all__, tuple)
    assert len(set(nsq.__all__)) == len(nsq.__all__)
    for name in nsq.__all__:
        assert hasattr(nsq, name), name
    for name in ("Reader", "Message", "Producer", "HTTPProducer", "NSQError", "NSQProtocolError"):
        assert name in nsq.__all__


def test_reader_signature_matches_the_contract() -> None:
    params = inspect.signature(nsq.Reader).parameters
    assert list(params)[:2] == ["topic", "channel"]
    for name, default in READER_DEFAULTS.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == default, name


def test_methods_exist_with_their_keywords() -> None:
    assert inspect.iscoroutinefunction(nsq.Reader.run)
    assert inspect.signature(nsq.Reader.run).parameters["concurrency"].default is None
    assert not inspect.iscoroutinefunction(nsq.Reader.is_starved)
    assert not inspect.iscoroutinefunction(nsq.Reader.set_max_in_flight)
    assert not inspect.iscoroutinefunction(nsq.Reader.statistics)
    assert inspect.iscoroutinefunction(nsq.Reader.close)
    requeue = inspect.signature(nsq.Message.requeue).parameters
    assert requeue["delay"].default is None
    assert requeue["backoff"].kind is inspect.Parameter.KEYWORD_ONLY
    assert requeue["backoff"].default is True
    assert isinstance(inspect.getattr_static(nsq.Message, "has_responded"), property)
    for cls in (nsq.Producer, nsq.HTTPProducer):
        for method in ("publish", "mpublish", "dpublish", "close"):
            assert inspect.iscoroutinefunction(getattr(cls, method)), (cls, method)
    producer = inspect.signature(nsq.Producer).parameters
    assert producer["tls"].default is None
    assert producer["auth_secret"].default is None


@pytest.mark.parametrize("name", [n for n in nsq.__all__ if n.endswith("Error")])
def test_errors_derive_from_the_root(name: str) -> None:
    assert issubclass(getattr(nsq, name), aioclients.AioClientsError)


def test_error_families() -> None:
    assert issubclass(nsq.NSQError, aioclients.ServerError)
    assert issubclass(nsq.NSQProtocolError, aioclients.RemoteProtocolError)
    assert issubclass(nsq.NSQConnectError, aioclients.ConnectError)
    assert nsq.NSQClosedError.__name__.endswith("ClosedError")
    assert issubclass(nsq.NSQClosedError, aioclients.ClientClosedError)
    err = nsq.NSQError("E_BAD_TOPIC", "PUB topic name is not valid")
    assert err.code == "E_BAD_TOPIC"


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.set_max_in_flight(7),
        lambda r: r.set_max_in_flight(n=7),  # the contract's name
        lambda r: r.set_max_in_flight(max_in_flight=7),  # pynsq's
    ],
    ids=["positional", "n", "max_in_flight"],
)
def test_set_max_in_flight_takes_the_contract_s_name_and_pynsq_s(call: Any) -> None:
    reader = nsq.Reader("t", "c", nsqd_tcp_addresses=["127.0.0.1:1"])
    call(reader)
    assert reader.statistics().max_in_flight == 7


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.set_max_in_flight(),
        lambda r: r.set_max_in_flight(3, max_in_flight=3),
        lambda r: r.set_max_in_flight(-1),
        lambda r: r.set_max_in_flight(max_in_flight="3"),
    ],
    ids=["neither", "both", "negative", "not-an-int"],
)
def test_set_max_in_flight_refuses_a_missing_double_or_bad_value(call: Any) -> None:
    reader = nsq.Reader("t", "c", nsqd_tcp_addresses=["127.0.0.1:1"])
    with pytest.raises(aioclients.InvalidArgumentError):
        call(reader)
