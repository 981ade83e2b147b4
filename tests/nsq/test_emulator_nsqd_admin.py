"""The nsqd emulator's topic and channel administration over HTTP (pause, unpause,
empty) as a subscribed TCP client sees it, and its in-flight timers.

With ``AIOCLIENTS_TEST_NSQ_BIN_DIR`` naming a real nsqd binary (run by hand), each
test gets a fresh real nsqd instead (``tests/nsq/nsq_processes.py``). The steps
are ordered so that a real nsqd, whose topics and clients run in goroutines of
their own, has one possible outcome: a channel is paused before its client
subscribes, RDY is 0 while a channel is emptied.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from aioclients.testing import NsqdEmulator
from tests.nsq.nsq_processes import nsqd_server
from tests.nsq.test_emulator_nsqd import TIMER_BOUND, subscribed

WaitFor = Callable[..., Awaitable[None]]


@pytest.fixture
async def emulator() -> AsyncIterator[NsqdEmulator]:
    async with nsqd_server() as nsqd:
        yield nsqd


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(http: aiohttp.ClientSession, nsqd: NsqdEmulator, path: str) -> tuple[int, Any]:
    async with http.post(f"http://{nsqd.http_address}{path}") as resp:
        body = await resp.read()
        if resp.content_type == "application/json":
            return resp.status, json.loads(body)
        return resp.status, body


def topic_stats(nsqd: NsqdEmulator, topic: str) -> dict[str, Any]:
    [found] = [t for t in nsqd.stats(topic=topic)["topics"] if t["topic_name"] == topic]
    return found


def channel_stats(nsqd: NsqdEmulator, topic: str, channel: str) -> dict[str, Any]:
    [found] = [c for c in topic_stats(nsqd, topic)["channels"] if c["channel_name"] == channel]
    return found


async def test_a_paused_channel_queues_and_unpausing_delivers(
    emulator: NsqdEmulator, http: aiohttp.ClientSession, wait_for: WaitFor
) -> None:
    emulator.create_topic("p", "c")
    assert await post(http, emulator, "/channel/pause?topic=p&channel=c") == (200, b"")
    raw = await subscribed(emulator, "p", "c")
    raw.command(b"RDY 5")
    emulator.publish("p", b"held")

    async def queued() -> bool:
        return channel_stats(emulator, "p", "c")["depth"] == 1

    await wait_for(queued, what="the message queued on the paused channel")
    stats = channel_stats(emulator, "p", "c")
    assert (stats["paused"], stats["in_flight_count"]) == (True, 0)
    assert await post(http, emulator, "/channel/unpause?topic=p&channel=c") == (200, b"")
    _, attempts, _, body = await raw.message()
    assert (attempts, body) == (1, b"held")
    assert channel_stats(emulator, "p", "c")["paused"] is False
    await raw.close()


async def test_a_paused_topic_keeps_messages_from_its_channels(
    emulator: NsqdEmulator, http: aiohttp.ClientSession, wait_for: WaitFor
) -> None:
    raw = await subscribed(emulator, "pt", "c")
    raw.command(b"RDY 5")
    assert await post(http, emulator, "/topic/pause?topic=pt") == (200, b"")
    emulator.publish("pt", b"kept")
    stats = topic_stats(emulator, "pt")
    assert (stats["paused"], stats["depth"]) == (True, 1)
    assert channel_stats(emulator, "pt", "c")["depth"] == 0
    assert await post(http, emulator, "/topic/unpause?topic=pt") == (200, b"")
    _, attempts, _, body = await raw.message()
    assert (attempts, body) == (1, b"kept")
    assert topic_stats(emulator, "pt")["depth"] == 0
    await raw.close()


async def test_emptying_a_channel_drops_in_flight_messages_too(
    emulator: NsqdEmulator, http: aiohttp.ClientSession, wait_for: WaitFor
) -> None:
    raw = await subscribed(emulator, "e", "c")
    emulator.publish("e", b"one", b"two", b"three")
    raw.command(b"RDY 1")
    _, _, held, _ = await raw.message()
    raw.command(b"RDY 0")

    async def two_queued() -> bool:
        return channel_stats(emulator, "e", "c")["depth"] == 2

    await wait_for(two_queued, what="one message in flight, two queued")
    assert await post(http, emulator, "/channel/empty?topic=e&channel=c") == (200, b"")
    stats = channel_stats(emulator, "e", "c")
    assert (stats["depth"], stats["in_flight_count"], stats["message_count"]) == (0, 0, 3)
    raw.command(b"FIN " + held)
    assert await raw.error() == b"E_FIN_FAILED FIN " + held + b" failed ID not in flight"
    emulator.publish("e", b"four")
    raw.command(b"RDY 1")  # the client's in-flight count went to 0 with the channel's
    _, attempts, _, body = await raw.message()
    assert (attempts, body) == (1, b"four")
    await raw.close()


async def test_emptying_a_topic_drops_what_it_keeps_for_channels_to_come(
    emulator: NsqdEmulator, http: aiohttp.ClientSession
) -> None:
    emulator.publish("et", b"gone", b"also gone")
    assert topic_stats(emulator, "et")["depth"] == 2
    assert await post(http, emulator, "/topic/empty?topic=et") == (200, b"")
    assert topic_stats(emulator, "et")["depth"] == 0
    raw = await subscribed(emulator, "et", "c")
    emulator.publish("et", b"kept")
    raw.command(b"RDY 5")
    _, _, _, body = await raw.message()
    assert body == b"kept"
    assert topic_stats(emulator, "et")["message_count"] == 3
    await raw.close()


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/topic/empty", 400, "MISSING_ARG_TOPIC"),
        ("/topic/empty?topic=bad!", 400, "INVALID_TOPIC"),
        ("/topic/empty?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/topic/pause", 400, "MISSING_ARG_TOPIC"),
        ("/topic/pause?topic=bad!", 404, "TOPIC_NOT_FOUND"),  # nsqd checks no name here
        ("/topic/unpause?topic=nope", 404, "TOPIC_NOT_FOUND"),
        ("/channel/empty?topic=a", 400, "MISSING_ARG_CHANNEL"),
        ("/channel/empty?topic=a&channel=nope", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/pause?topic=nope&channel=c", 404, "TOPIC_NOT_FOUND"),
        ("/channel/pause?topic=a&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
        ("/channel/unpause?topic=a&channel=nope", 404, "CHANNEL_NOT_FOUND"),
        ("/channel/unpause?channel=c", 400, "MISSING_ARG_TOPIC"),
    ],
)
async def test_admin_errors(
    emulator: NsqdEmulator, http: aiohttp.ClientSession, path: str, status: int, message: str
) -> None:
    emulator.create_topic("a", "c")
    assert await post(http, emulator, path) == (status, {"message": message})


async def test_a_short_msg_timeout_is_not_held_back_by_a_later_deferred_message(
    emulator: NsqdEmulator,
) -> None:
    emulator.create_topic("tm", "c")
    emulator.publish("tm", b"later", defer=600)  # the channel's first timer: 10 minutes out
    raw = await subscribed(emulator, "tm", "c", msg_timeout=1000)
    emulator.publish("tm", b"now")
    raw.command(b"RDY 1")
    _, attempts, msg_id, _ = await raw.message()
    assert attempts == 1
    _, attempts, again, body = await raw.message(timeout=TIMER_BOUND)  # not FINished
    assert (again, attempts, body) == (msg_id, 2, b"now")
    await raw.close()


async def test_the_emulators_admin_methods(emulator: NsqdEmulator) -> None:
    """What the HTTP calls above use, callable from a test (emulator only)."""
    if getattr(emulator, "real", False):
        pytest.skip("the emulator's methods")
    raw = await subscribed(emulator, "m", "c")
    emulator.pause_channel("m", "c")
    emulator.pause_topic("m")
    doc = topic_stats(emulator, "m")
    assert (doc["paused"], doc["channels"][0]["paused"]) == (True, True)
    emulator.unpause_topic("m")
    emulator.unpause_channel("m", "c")
    emulator.publish("m", b"x")
    emulator.empty_channel("m", "c")
    emulator.empty_topic("m")
    assert channel_stats(emulator, "m", "c")["depth"] == 0
    emulator.delete_channel("m", "c")
    assert await raw.closed()
    assert emulator.channel_names("m") == []
    emulator.delete_topic("m")
    assert emulator.topic_names() == []
    for call in (
        lambda: emulator.delete_topic("m"),
        lambda: emulator.empty_channel("m", "c"),
        lambda: emulator.pause_topic("m"),
    ):
        with pytest.raises(LookupError, match="does not exist"):
            call()
    await raw.close()
