"""The nats-py boundary: what we need of its private members, and the slower paths taken
(and reported once) where a nats-py release lacks what the fast paths use.

CI also runs the whole JetStream suite against the oldest nats-py that pyproject.toml
allows (see .ci/run); these tests force the fallbacks on whatever version is installed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.subscription import Subscription

from aioclients import InvalidArgumentError
from aioclients.jetstream import JetStream, connect
from aioclients.jetstream import _transport as transport
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

Server = NatsServer | ExternalServer


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process reports anew."""
    monkeypatch.setattr(transport, "_REPORTED_OFF", set())


def _off_reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is off with nats-py" in r.getMessage()]


def test_a_client_without_the_write_internals_is_refused_by_name() -> None:
    class Stripped:
        def __init__(self) -> None:
            self._pending: list[bytes] = []
            self._pending_data_size = 0

        # no _max_pending_size, _flush_queue, _pongs

    with pytest.raises(InvalidArgumentError) as info:
        transport.check_nats_py(Stripped())  # type: ignore[arg-type]
    message = str(info.value)
    assert "_max_pending_size, _flush_queue, _pongs" in message
    assert transport.SUPPORTED_NATS_PY in message
    assert transport.nats_py_version() in message


def test_the_supported_range_is_the_one_pyproject_installs() -> None:
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"{transport.SUPPORTED_NATS_PY}"' in pyproject


def test_the_installed_nats_py_has_every_required_member() -> None:
    nc = transport.NatsClient()
    transport.check_nats_py(nc)  # does not raise
    assert isinstance(nc._ps, transport.FastParser)


async def test_without_synchronous_delivery_messages_come_through_callbacks_and_it_is_said_once(
    nats_server: Server,
    unique_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    original_init = Subscription.__init__

    class OtherQueue:
        """A queue nats-py can use that is not an asyncio.Queue (as if a release
        changed its type): our synchronous delivery must not be swapped in."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    def init_with_another_queue(self: Subscription, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._pending_queue = OtherQueue(self._pending_queue)  # type: ignore[assignment]

    monkeypatch.setattr(Subscription, "__init__", init_with_another_queue)
    caplog.set_level(logging.INFO, logger="aioclients.jetstream")
    async with await connect(nats_server.url) as js:
        # A caller-owned (plain) client takes the callback path for everything.
        nc = await nats.connect(nats_server.url)
        try:
            plain = JetStream(nc)
            stream = await js.create_stream(
                unique_name, subjects=[f"{unique_name}.>"], allow_direct=True
            )
            for i in range(20):
                await js.publish(f"{unique_name}.s", b"%d" % i)
            for ctx in (js, plain):
                consumer = await ctx.create_consumer(unique_name, ack_policy="explicit")
                got = []
                async with consumer.fetch(20, expires=5.0) as messages:
                    async for msg in messages:
                        got.append(int(msg.data))
                        await msg.ack_sync()
                assert got == list(range(20))
            assert (await stream.direct_get(5)).data == b"4"  # sequences start at 1
            assert (await plain.stream(unique_name)).name == unique_name
        finally:
            await nc.close()
    reports = _off_reports(caplog)
    assert sum("synchronous delivery" in r for r in reports) == 1, reports
    assert sum("raw message handling" in r for r in reports) == 1, reports
    assert all(transport.nats_py_version() in r for r in reports)


async def test_on_a_supported_nats_py_nothing_is_reported(
    nats_server: Server, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aioclients.jetstream")
    async with await connect(nats_server.url) as js:
        await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
        await js.publish(f"{unique_name}.s", b"x")
        consumer = await js.create_consumer(unique_name, ack_policy="none")
        assert (await consumer.next(expires=5.0)).data == b"x"
    assert _off_reports(caplog) == []
