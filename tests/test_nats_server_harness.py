"""The NatsServer harness: a real process, a free port, a store that survives restarts."""

from __future__ import annotations

import os
import socket

import pytest

from aioclients import jetstream
from aioclients.testing import NatsServer
from aioclients.testing.pytest_plugin import ExternalServer

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("AIOCLIENTS_TEST_NATS_URL")),
    reason="exercises the embedded server, not an external one",
)


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_restart_keeps_file_store_and_port() -> None:
    async with NatsServer() as server:
        port = server.port
        async with await jetstream.connect(server.url) as js:
            await js.create_stream("KEEP", subjects=["keep"], storage="file")
            await js.publish("keep", b"survives")
        server.restart()
        assert server.port == port
        async with await jetstream.connect(server.url) as js:
            stream = await js.stream("KEEP")
            assert (await stream.get_msg(1)).data == b"survives"


def test_sync_context_manager_stop_and_start() -> None:
    with NatsServer() as server:
        assert server.running
        assert _accepts(server.port)
        server.stop()
        assert not server.running
        assert not _accepts(server.port)
        server.start()
        assert _accepts(server.port)
    assert not server.running


async def test_stop_start_and_restart_can_be_awaited_too() -> None:
    # The API contract writes them without "(sync)": `await server.stop()` works as
    # well as the plain call, and the work is done when the call returns.
    async with NatsServer() as server:
        assert await server.stop() is None
        assert not server.running
        assert not _accepts(server.port)
        assert await server.start() is None
        assert _accepts(server.port)
        assert await server.restart() is None
        assert _accepts(server.port)
        async with await jetstream.connect(server.url) as js:
            await js.account_info()


def test_pause_and_resume_freeze_the_process() -> None:
    with NatsServer() as server:
        server.pause()
        try:
            assert server.running  # frozen, not gone
        finally:
            server.resume()
        assert _accepts(server.port)


def test_bad_config_fails_with_the_server_log() -> None:
    server = NatsServer(config="this is { not valid")
    with pytest.raises(RuntimeError, match="nats-server exited"):
        server.start()
    server.close()


def test_external_server_fixture_skips_stop(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_stop(nats_server_private):
            nats_server_private.stop()
        """
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "aioclients.testing.pytest_plugin",
    )
    result.assert_outcomes(passed=1)
    os.environ["AIOCLIENTS_TEST_NATS_URL"] = "nats://127.0.0.1:1"
    try:
        result = pytester.runpytest_subprocess("-p", "aioclients.testing.pytest_plugin")
    finally:
        del os.environ["AIOCLIENTS_TEST_NATS_URL"]
    result.assert_outcomes(skipped=1)


def test_an_external_cluster_is_named_by_a_comma_separated_list() -> None:
    seeds = "nats://127.0.0.1:1, nats://127.0.0.1:2,nats://127.0.0.1:3"
    server = ExternalServer(seeds)
    assert server.urls == ["nats://127.0.0.1:1", "nats://127.0.0.1:2", "nats://127.0.0.1:3"]
    assert server.url == "nats://127.0.0.1:1"  # one URL, for what takes only one
    assert ExternalServer("nats://127.0.0.1:4").urls == ["nats://127.0.0.1:4"]
