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
        # aiohttp's text may quote the URL, credentials included
        raise NSQConnectError(
            f"nsqlookupd {redact_url(base_url)} unreachable: {redact_text(repr(exc))}"
        ) from None
    if status == 404 or b"TOPIC_NOT_FOUND" in body[:200]:
        return []
    if status != 200:
        raise NSQError(f"HTTP_{status}", f"nsqlookupd {redact_url(url)}: {body[:200]!r}")
    return parse_lookup_response(body)
