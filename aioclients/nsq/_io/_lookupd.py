"""One nsqlookupd query over HTTP (aiohttp); the polling schedule lives in the Reader."""

from __future__ import annotations

import asyncio
import errno

import aiohttp

from aioclients._core import redact_text, redact_url
from aioclients.nsq._errors import NSQConnectError, NSQError, NSQProtocolError
from aioclients.nsq._protocol._lookup import parse_lookup_response

__all__ = ("MAX_LOOKUP_ANSWER", "query_lookupd", "read_body")

_ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}

#: The largest /lookup answer read (some 20,000 producers); a larger one is refused.
MAX_LOOKUP_ANSWER = 4 * 1024 * 1024


async def read_body(response: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The body of ``response``, refusing one over ``limit`` bytes as it arrives
    (a server whose answer never ends must not fill memory until the timeout).

    Raises:
        NSQProtocolError: the body is larger than ``limit``.
    """
    length = response.content_length
    if length is not None and length > limit:
        raise NSQProtocolError(f"{what} announced an answer of {length} bytes (at most {limit})")
    body = bytearray()
    while chunk := await response.content.read(65536):
        body += chunk
        if len(body) > limit:
            raise NSQProtocolError(f"{what} sent an answer larger than {limit} bytes")
    return bytes(body)


async def query_lookupd(
    session: aiohttp.ClientSession, base_url: str, topic: str, timeout: float
) -> list[str]:
    """The producers of ``topic`` known to one nsqlookupd, as ``"host:port"`` keys.

    An unknown topic is an empty list (nsqlookupd answers 404 ``TOPIC_NOT_FOUND``).

    Raises:
        NSQConnectError: unreachable, timed out.
        NSQError: another HTTP error.
        NSQProtocolError: an answer of neither known shape, or too large.
    """
    url = f"{base_url}/lookup"
    try:
        async with session.get(
            url,
            params={"topic": topic},
            headers=_ACCEPT,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            status = response.status
            body = await read_body(response, MAX_LOOKUP_ANSWER, f"nsqlookupd {redact_url(url)}")
    except asyncio.TimeoutError:
        raise NSQConnectError(
            f"nsqlookupd {redact_url(base_url)} did not answer within {timeout}s"
        ) from None
    except (aiohttp.ClientError, OSError) as exc:
        if getattr(exc, "errno", None) == errno.ECONNREFUSED:
            raise NSQConnectError(
                f"nsqlookupd {redact_url(base_url)} unreachable (connection refused): "
                "start one with `aioclients-servers` or `nsqlookupd`, or check that this "
                "is its HTTP address"
            ) from None
        raise NSQConnectError(
            f"nsqlookupd {redact_url(base_url)} unreachable: "
            f"{http_failure(exc, 'nsqlookupd', 4161)}"
        ) from None
    if status == 404 or b"TOPIC_NOT_FOUND" in body[:200]:
        return []
    if status != 200:
        raise NSQError(f"HTTP_{status}", f"nsqlookupd {redact_url(url)}: {body[:200]!r}")
    return parse_lookup_response(body)


def http_failure(exc: BaseException, server: str, http_port: int) -> str:
    """What went wrong with an HTTP request, in one short line, without credentials.

    aiohttp's repr of a ClientResponseError carries the whole request (URL, headers);
    a port that does not speak HTTP (an nsqd or nsqlookupd TCP port) shows up as a
    "Bad status line" ClientResponseError, which gets a hint instead.
    """
    if isinstance(exc, aiohttp.ClientResponseError):
        first = str(exc.message).splitlines()[0] if exc.message else ""
        if first.startswith(("Bad status line", "Invalid status line", "Expected HTTP")):
            return (
                f"it does not answer HTTP: is this {server}'s HTTP port "
                f"({http_port} by default), not its TCP port?"
            )
        return f"HTTP {exc.status} {redact_text(first)}".rstrip()
    # aiohttp's text may quote the URL, credentials included
    return redact_text(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
