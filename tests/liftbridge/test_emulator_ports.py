"""The emulated cluster on ports of your choice, and what it leaves behind."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from aioclients import InvalidArgumentError, liftbridge
from aioclients.testing import LiftbridgeCluster, NatsServer


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _entries(folder: Path) -> list[Path]:
    return list(folder.iterdir())


async def test_brokers_listen_on_the_ports_given(nats_server: NatsServer) -> None:
    ports = [_free_port(), 0]
    async with LiftbridgeCluster(2, nats_url=nats_server.url, ports=ports) as cluster:
        assert cluster.addresses[0] == f"127.0.0.1:{ports[0]}"
        assert cluster.addresses[1] != "127.0.0.1:0"
        async with await liftbridge.connect([cluster.addresses[0]]) as client:
            brokers = (await client.fetch_metadata()).brokers()
            assert sorted(b.address for b in brokers) == sorted(cluster.addresses)


async def test_a_port_in_use_fails_the_start(nats_server: NatsServer) -> None:
    async with LiftbridgeCluster(1, nats_url=nats_server.url) as first:
        port = int(first.addresses[0].rsplit(":", 1)[1])
        # gRPC servers share a port by default (SO_REUSEPORT): the emulator must not.
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            async with LiftbridgeCluster(1, nats_url=nats_server.url, ports=[port]):
                pass


@pytest.mark.parametrize("ports", [[1], [1, 2, 3], [-1, 2], [70000, 1]])
def test_ports_are_checked(ports: list[int]) -> None:
    with pytest.raises(InvalidArgumentError):
        LiftbridgeCluster(2, ports=ports)


async def test_its_own_nats_server_leaves_no_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    async with LiftbridgeCluster(1) as cluster:
        assert cluster.nats_url.startswith("nats://")
        assert _entries(tmp_path), "the nats-server keeps its log in a temporary folder"
    assert _entries(tmp_path) == []
