"""The local servers command (``python -m aioclients.testing serve``, ``aioclients-servers``),
run as a user runs it: a subprocess, here on free ports (every port set to 0)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from servers_command import FREE_PORTS, ROOT, START_TIMEOUT, Running, start_servers

from aioclients import jetstream, liftbridge
from aioclients.liftbridge import StartPosition, StopPosition
from aioclients.nsq import HTTPProducer, Producer, Reader


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Running]:
    running = start_servers(tmp_path, *FREE_PORTS)
    try:
        running.read_until(r"^Ready\.", START_TIMEOUT)
        yield running
    finally:
        if running.proc.poll() is None:
            running.stop()


def _refuses(address: str) -> bool:
    host, port = address.replace("nats://", "").rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(5)
        return sock.connect_ex((host, int(port))) != 0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_it_prints_where_each_server_listens(servers: Running) -> None:
    env = servers.environment
    assert set(env) == {
        "NATS_URL",
        "NSQD_TCP",
        "NSQD_HTTP",
        "NSQLOOKUPD_HTTP",
        "LIFTBRIDGE_BROKERS",
    }
    text = "\n".join(servers.lines)
    assert f"nats-server  {env['NATS_URL']}  (JetStream" in text
    assert f"nsqd         {env['NSQD_TCP']} (TCP)  {env['NSQD_HTTP']} (HTTP)" in text
    assert re.search(rf"nsqlookupd   \S+ \(TCP\)  {env['NSQLOOKUPD_HTTP']} \(HTTP\)", text)
    brokers = env["LIFTBRIDGE_BROKERS"].split(",")
    assert f"liftbridge   {', '.join(brokers)}  emulator, 2 brokers on that nats-server" in text


async def test_every_server_answers(servers: Running) -> None:
    env = servers.environment
    async with await jetstream.connect(env["NATS_URL"]) as js:
        assert (await js.account_info()).streams >= 0  # JetStream is on
        await js.create_stream("SERVE_CHECK", subjects=["serve.check"])
        assert (await js.publish("serve.check", b"x")).seq == 1

    async with Producer(env["NSQD_TCP"]) as producer:
        await producer.publish("serve_check", b"over TCP")
    async with HTTPProducer(env["NSQD_HTTP"]) as http_producer:
        await http_producer.publish("serve_check", b"over HTTP")
    # nsqd registered the topic with nsqlookupd over its TCP protocol; a Reader finds it
    # there and reads both messages.
    async with aiohttp.ClientSession() as session:
        url = f"http://{env['NSQLOOKUPD_HTTP']}/lookup?topic=serve_check"
        deadline = time.monotonic() + 20
        while True:
            async with session.get(url) as answer:
                if answer.status == 200 and (await answer.json())["producers"]:
                    break
            assert time.monotonic() < deadline, "nsqd never registered with nsqlookupd"
            await asyncio.sleep(0.05)
    async with Reader(
        "serve_check", "check", lookupd_http_addresses=[env["NSQLOOKUPD_HTTP"]]
    ) as reader:
        bodies = set()
        async for msg in reader:
            bodies.add(msg.body)
            await msg.finish()
            if len(bodies) == 2:
                break
    assert bodies == {b"over TCP", b"over HTTP"}

    brokers = env["LIFTBRIDGE_BROKERS"].split(",")
    async with await liftbridge.connect(brokers[1:]) as client:
        assert sorted(b.address for b in (await client.fetch_metadata()).brokers()) == sorted(
            brokers
        )
        await client.create_stream("serve.check", "serve-check")
        await client.publish("serve-check", b"through Liftbridge")
        async with client.subscribe(
            "serve-check", start_at=StartPosition.EARLIEST, stop_at=StopPosition.LATEST
        ) as sub:
            assert [m.value async for m in sub] == [b"through Liftbridge"]


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "Ctrl-C"],
)
def test_a_signal_stops_everything_leaving_nothing_behind(
    servers: Running, sig: int, group: bool
) -> None:
    env = servers.environment
    children = servers.children()
    assert children, "nats-server runs as a child process"
    assert any(servers.tmpdir.iterdir()), "the JetStream store is a temporary folder"

    code, stdout, stderr = servers.stop(sig, group=group)

    assert code == 0, stderr
    assert stdout.rstrip().endswith("Stopped."), stdout
    assert stderr == ""  # nothing logged on the way down
    assert all(_gone(pid) for pid in children)
    assert list(servers.tmpdir.iterdir()) == []
    addresses = [env["NATS_URL"], env["NSQD_TCP"], env["NSQD_HTTP"], env["NSQLOOKUPD_HTTP"]]
    assert all(_refuses(a) for a in addresses + env["LIFTBRIDGE_BROKERS"].split(","))


@pytest.mark.parametrize(
    ("option", "what"),
    [("--nats-port", "nats-server"), ("--nsqd-http-port", "nsqd HTTP")],
)
def test_a_port_in_use_is_one_clear_line(tmp_path: Path, option: str, what: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [a for a in FREE_PORTS if not a.startswith(option)] + [f"{option}={port}"]
        running = start_servers(tmp_path, *args, pump=False)
        stdout, stderr = running.proc.communicate(timeout=30)
    assert running.proc.returncode == 1
    assert stdout == ""
    assert stderr == (
        f"python -m aioclients.testing serve: port {port} ({what}) on 127.0.0.1 is already in "
        f"use: stop what listens there, or choose another port with {option} (0 picks a "
        "free one)\n"
    )
    assert list(running.tmpdir.iterdir()) == []  # nothing was started


def test_a_liftbridge_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [*FREE_PORTS[:-1], f"--liftbridge-ports=0,{port}"]
        running = start_servers(tmp_path, *args, pump=False)
        _, stderr = running.proc.communicate(timeout=30)
    assert running.proc.returncode == 1
    assert f"port {port} (Liftbridge broker 1)" in stderr
    assert "--liftbridge-ports" in stderr
    assert stderr.count("\n") == 1


def test_only_nsq_starts_no_nats_server(tmp_path: Path) -> None:
    running = start_servers(tmp_path, "--only", "nsq", *FREE_PORTS)
    try:
        running.read_until(r"^Ready\.", START_TIMEOUT)
        assert running.children() == []
        assert [line.split()[0] for line in running.lines[:2]] == ["nsqd", "nsqlookupd"]
        assert set(running.environment) == {"NSQD_TCP", "NSQD_HTTP", "NSQLOOKUPD_HTTP"}
    finally:
        code, _, stderr = running.stop()
    assert code == 0, stderr


async def test_only_liftbridge_runs_on_a_private_nats_server(tmp_path: Path) -> None:
    running = start_servers(tmp_path, "--only=liftbridge", *FREE_PORTS)
    try:
        running.read_until(r"^Ready\.", START_TIMEOUT)
        (line,) = [x for x in running.lines if x.startswith("liftbridge")]
        assert "2 brokers on a private nats-server (nats://127.0.0.1:" in line
        assert set(running.environment) == {"LIFTBRIDGE_BROKERS"}
        brokers = running.environment["LIFTBRIDGE_BROKERS"].split(",")
        async with await liftbridge.connect(brokers) as client:
            await client.create_stream("only", "only")
        children = running.children()
        assert len(children) == 1
    finally:
        code, _, stderr = running.stop(signal.SIGINT)
    assert code == 0, stderr
    assert _gone(children[0])
    assert list(running.tmpdir.iterdir()) == []


def test_without_a_subcommand_it_says_how_to_call_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioclients.testing"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert result.returncode == 2
    assert "python -m aioclients.testing serve" in result.stderr
