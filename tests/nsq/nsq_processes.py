"""Real nsqd / nsqlookupd processes for hand-run fault tests.

The binaries come from the directory named by ``AIOCLIENTS_TEST_NSQ_BIN_DIR`` (it
must hold ``nsqd`` and ``nsqlookupd``, e.g. nsq v1.3.0); nothing here builds them.
Each server listens on free loopback ports, keeps its ports across restarts, and an
nsqd keeps its data directory, so a test can ``kill()`` (SIGKILL) one and ``start()``
it again on the same data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path

BIN_DIR_ENV = "AIOCLIENTS_TEST_NSQ_BIN_DIR"


def nsq_bin_dir() -> Path | None:
    """The directory of the real nsqd / nsqlookupd binaries, or None when not given."""
    value = os.environ.get(BIN_DIR_ENV)
    return Path(value) if value else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _accepts(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


class ServerProcess:
    """One server process: ``start()`` waits until its ports accept connections."""

    def __init__(self, name: str, argv: list[str], ports: list[int], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.ports = ports
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.proc.returncode is None:
            return
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=log, stderr=asyncio.subprocess.STDOUT
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for port in self.ports:
            while not await _accepts(port):
                if self.proc.returncode is not None or loop.time() > deadline:
                    tail = self.log_path.read_text(errors="replace")[-2000:]
                    await self.kill()
                    raise RuntimeError(f"{self.name} did not start listening on {port}:\n{tail}")
                await asyncio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL: no flush, no goodbye to nsqlookupd."""
        await self._signal(signal.SIGKILL)

    async def stop(self) -> None:
        """SIGTERM: nsqd writes its queues and in-flight messages to disk and exits."""
        await self._signal(signal.SIGTERM)

    async def _signal(self, sig: int) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await asyncio.wait_for(proc.wait(), 15)


def nsqlookupd_process(bin_dir: Path, work: Path) -> tuple[ServerProcess, str, str]:
    """An nsqlookupd and its (tcp, http) addresses."""
    tcp, http = free_port(), free_port()
    argv = [
        str(bin_dir / "nsqlookupd"),
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        "--broadcast-address=127.0.0.1",
    ]
    server = ServerProcess("nsqlookupd", argv, [tcp, http], work / "nsqlookupd.log")
    return server, f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"


def nsqd_process(
    bin_dir: Path, work: Path, name: str, lookupd_tcp: str, *extra: str
) -> tuple[ServerProcess, str, str]:
    """An nsqd registered with ``lookupd_tcp``, with its own data directory under
    ``work``, and its (tcp, http) addresses."""
    tcp, http = free_port(), free_port()
    data = work / name
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        str(bin_dir / "nsqd"),
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
        f"--data-path={data}",
        f"--lookupd-tcp-address={lookupd_tcp}",
        "--broadcast-address=127.0.0.1",
        *extra,
    ]
    server = ServerProcess(name, argv, [tcp, http], work / f"{name}.log")
    return server, f"127.0.0.1:{tcp}", f"127.0.0.1:{http}"
