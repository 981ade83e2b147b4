"""A real Liftbridge cluster of processes, for fault tests run by hand.

:class:`LiftbridgeProcessCluster` starts ``brokers`` Liftbridge servers from a
binary you built (the project ships none) on free loopback ports, all on one
NATS server, each with its own YAML config and data directory in a temporary
directory, and can kill one with SIGKILL (``kill -9``) and start it again.
It mirrors :class:`aioclients.testing.LiftbridgeCluster`'s ``addresses``,
``stop_broker`` and ``start_broker`` so a test can take either.

Facts it relies on (Liftbridge v1.9): there is no bind flag, so ``host:
127.0.0.1`` goes in the config; cursors need ``cursors: {stream.partitions:
1}``; a cluster starts all at once with ``clustering: {raft.bootstrap.peers:
[...]}``; clusters sharing a NATS server need their own
``clustering.namespace``. Raft runs over NATS, so each broker needs one port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

__all__ = ("LiftbridgeProcessCluster",)

_START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LiftbridgeProcessCluster:
    """``brokers`` real Liftbridge processes on loopback (``async with``).

    Args:
        binary: the ``liftbridge`` executable.
        brokers: how many (all are Raft bootstrap peers).
        nats_url: the NATS server they share (JetStream is not needed).
        settings: extra ``clustering`` settings (e.g. ``{"replica.max.leader.timeout":
            "3s"}``), written as YAML scalars.
    """

    def __init__(
        self,
        binary: str,
        brokers: int = 3,
        *,
        nats_url: str,
        settings: dict[str, str] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        self.binary = binary
        self.nats_url = nats_url
        self.namespace = f"aioc-{uuid.uuid4().hex[:12]}"
        self.ids = [f"n{i}" for i in range(brokers)]
        self._ports = [_free_port() for _ in range(brokers)]
        self._settings = dict(settings or {})
        self._dir: Path | None = None
        self._procs: list[asyncio.subprocess.Process | None] = [None] * brokers

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self._ports]

    @property
    def broker_ids(self) -> list[str]:
        return list(self.ids)

    def log_path(self, index: int) -> str:
        assert self._dir is not None
        return str(self._dir / f"{self.ids[index]}.log")

    def _config(self, index: int) -> Path:
        assert self._dir is not None
        peers = ", ".join(self.ids)
        extra = "".join(f"  {k}: {v}\n" for k, v in self._settings.items())
        text = (
            "host: 127.0.0.1\n"
            f"port: {self._ports[index]}\n"
            f"data.dir: {self._dir / self.ids[index]}\n"
            "logging.level: info\n"
            f'nats.servers: ["{self.nats_url}"]\n'
            "clustering:\n"
            f"  server.id: {self.ids[index]}\n"
            f"  namespace: {self.namespace}\n"
            f"  raft.bootstrap.peers: [{peers}]\n"
            f"{extra}"
            "cursors:\n"
            "  stream.partitions: 1\n"
        )
        path = self._dir / f"{self.ids[index]}.yaml"
        path.write_text(text)
        return path

    async def start(self) -> None:
        """Start every broker; return once each accepts connections."""
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="aioclients-liftbridge-"))
        for index in range(len(self.ids)):
            await self._spawn(index)
        await asyncio.gather(*(self._wait_port(i) for i in range(len(self.ids))))

    async def _spawn(self, index: int) -> None:
        config = self._config(index)
        with self._open_log(index) as log:
            self._procs[index] = await asyncio.create_subprocess_exec(
                self.binary,
                "--config",
                str(config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )

    def _open_log(self, index: int) -> BinaryIO:
        return open(self.log_path(index), "ab")

    async def _wait_port(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT
        while True:
            proc = self._procs[index]
            if proc is None or proc.returncode is not None:
                raise RuntimeError(
                    f"liftbridge {self.ids[index]} exited; see {self.log_path(index)}"
                )
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self._ports[index]), 1.0
                )
            except (OSError, asyncio.TimeoutError):
                if loop.time() > deadline:
                    raise TimeoutError(
                        f"liftbridge {self.ids[index]} did not listen within {_START_TIMEOUT}s; "
                        f"see {self.log_path(index)}"
                    ) from None
                await asyncio.sleep(0.1)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return

    def is_running(self, index: int) -> bool:
        proc = self._procs[index]
        return proc is not None and proc.returncode is None

    async def stop_broker(self, index: int) -> None:
        """Kill broker ``index`` with SIGKILL (no clean shutdown) and reap it."""
        proc = self._procs[index]
        if proc is None or proc.returncode is not None:
            return
        proc.kill()
        await asyncio.wait_for(proc.wait(), 10.0)

    async def start_broker(self, index: int) -> None:
        """Start broker ``index`` again with its config and data."""
        if self.is_running(index):
            return
        await self._spawn(index)
        await self._wait_port(index)

    async def stop(self) -> None:
        """Kill every broker and remove the temporary directory."""
        try:
            for index in range(len(self.ids)):
                await self.stop_broker(index)
        finally:
            if self._dir is not None and not os.environ.get("AIOCLIENTS_KEEP_LIFTBRIDGE_DIR"):
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    async def __aenter__(self) -> LiftbridgeProcessCluster:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
