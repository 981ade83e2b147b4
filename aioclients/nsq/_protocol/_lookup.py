"""nsqlookupd answers and address handling (pure).

Theory of operation (client library guide, "Discovery"): ``GET /lookup?topic=T`` on
every nsqlookupd answers ``{"channels": [...], "producers": [{"broadcast_address",
"tcp_port", ...}]}`` (nsqlookupd >= 1.0) or the same object wrapped as
``{"status_code": 200, "status_txt": "OK", "data": {...}}`` (older servers). The
producers of all lookupds are united, keyed by ``broadcast_address:tcp_port``.
Polls are spaced by the interval plus a random share of it (jitter), drawn from an
injected ``random.Random``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aioclients._core import redact_url
from aioclients._errors import InvalidArgumentError
from aioclients.nsq._errors import NSQProtocolError

if TYPE_CHECKING:
    from random import Random

__all__ = ("lookupd_url", "parse_address", "parse_lookup_response", "poll_delay")


def parse_address(address: object, what: str = "nsqd address") -> tuple[str, int]:
    """Split ``"host:port"`` (``"[::1]:4150"`` for IPv6).

    Raises:
        InvalidArgumentError: not a ``host:port`` string.
    """
    if not isinstance(address, str):
        raise InvalidArgumentError(
            f"{what} must be a 'host:port' string, got {redact_url(address)}"
        )
    if "://" in address:
        # "nsq://h:4150" would split into host "nsq://h" and fail later as a DNS error.
        raise InvalidArgumentError(
            f"{what} is 'host:port' without a scheme, got {redact_url(address)!r}"
        )
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgumentError(
            f"{what} must look like 'host:port', got {redact_url(address)!r}"
        )
    return host, int(port)


def lookupd_url(address: object) -> str:
    """The base URL of an nsqlookupd given as ``"http://host:port"`` or ``"host:port"``."""
    if not isinstance(address, str):
        raise InvalidArgumentError(f"lookupd address must be a string, got {redact_url(address)}")
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    parse_address(address, "lookupd address")
    return "http://" + address


def parse_lookup_response(body: bytes) -> list[str]:
    """The producers' ``"broadcast_address:tcp_port"`` keys from a /lookup answer.

    Raises:
        NSQProtocolError: the body is not a lookup answer of either shape.
    """
    try:
        doc = json.loads(body)
    except ValueError:
        raise NSQProtocolError(f"lookupd answer is not JSON: {body[:80]!r}") from None
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict):
        doc = doc["data"]  # nsqlookupd < 1.0 wraps the answer
    if not isinstance(doc, dict) or not isinstance(doc.get("producers", []), list):
        raise NSQProtocolError(f"lookupd answer has no producers list: {body[:80]!r}")
    keys: list[str] = []
    for producer in doc.get("producers", []):
        if not isinstance(producer, dict):
            raise NSQProtocolError("lookupd producer entry is not an object")
        host = producer.get("broadcast_address")
        port = producer.get("tcp_port")
        if not isinstance(host, str) or not host or not isinstance(port, int):
            raise NSQProtocolError(f"lookupd producer lacks broadcast_address/tcp_port: {producer}")
        key = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if key not in keys:
            keys.append(key)
    return keys


def poll_delay(interval: float, jitter: float, rng: Random) -> float:
    """Seconds until the next poll: ``interval`` plus up to ``jitter * interval``."""
    return interval * (1.0 + jitter * rng.random())
