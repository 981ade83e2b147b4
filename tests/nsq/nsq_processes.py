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
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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


# -- a fresh real nsqd per test, with the emulator's test helpers over its HTTP API ------

# NsqdEmulator keyword -> nsqd flag (durations in ms); any other keyword needs the emulator.
_DURATION_FLAGS = {"msg_timeout": "--msg-timeout", "max_msg_timeout": "--max-msg-timeout"}
_INT_FLAGS = {"max_rdy_count": "--max-rdy-count", "max_msg_size": "--max-msg-size"}


def tls_server_context(cert: Any) -> ssl.SSLContext:
    """A server-side context holding ``cert`` (a ``trustme`` LeafCert), for
    ``nsqd_server(tls=...)``: the emulator uses the context, a real nsqd the PEM files
    written from the certificate it remembers."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    context.nsqd_pem = (  # type: ignore[attr-defined]
        b"".join(blob.bytes() for blob in cert.cert_chain_pems),
        cert.private_key_pem.bytes(),
    )
    return context


class AuthServer:
    """What nsqd's ``--auth-http-address`` asks (``GET /auth?secret=...``), answering as
    the emulator's ``auth_secret`` / ``auth_identity`` / ``auth_topics`` do: the right
    secret gets one authorization per topic pattern (every channel, publish and
    subscribe), any other secret a 403 (nsqd then says ``E_AUTH_FAILED``)."""

    def __init__(self, secret: str, identity: str, topics: list[str] | None) -> None:
        self.secret = secret
        self.identity = identity
        self.topics = [".*"] if topics is None else topics
        self.port = free_port()
        self._runner: Any = None

    async def _auth(self, request: Any) -> Any:
        from aiohttp import web

        if request.query.get("secret") != self.secret:
            return web.json_response({"message": "NOT_AUTHORIZED"}, status=403)
        return web.json_response(
            {
                "ttl": 3600,
                "identity": self.identity,
                "identity_url": "",
                "authorizations": [
                    {"topic": t, "channels": [".*"], "permissions": ["subscribe", "publish"]}
                    for t in self.topics
                ],
            }
        )

    async def start(self) -> None:
        from aiohttp import web

        if self._runner is not None:
            return
        app = web.Application()
        app.router.add_get("/auth", self._auth)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class RealNsqd:
    """A real nsqd started for one test, with what the byte-level tests use of
    :class:`NsqdEmulator`: addresses, ``publish``, ``stats``, ``channel_names``,
    ``stop`` (SIGTERM) / ``start`` (same ports and data). ``auth_secret`` runs an
    :class:`AuthServer` beside it; ``tls`` must come from :func:`tls_server_context`."""

    real = True

    def __init__(self, bin_dir: Path, work: Path, **kwargs: object) -> None:
        import pytest

        extra: list[str] = []
        self.auth: AuthServer | None = None
        auth_keys = ("auth_secret", "auth_identity", "auth_topics")
        auth = {key: kwargs.pop(key) for key in auth_keys if key in kwargs}
        if auth.get("auth_secret") is not None:
            topics = auth.get("auth_topics")
            self.auth = AuthServer(
                str(auth["auth_secret"]),
                str(auth.get("auth_identity", "emulator")),
                None if topics is None else list(topics),  # type: ignore[call-overload]
            )
            extra.append(f"--auth-http-address=127.0.0.1:{self.auth.port}")
        for key, value in kwargs.items():
            if key in _DURATION_FLAGS and isinstance(value, int | float):
                extra.append(f"{_DURATION_FLAGS[key]}={round(value * 1000)}ms")
            elif key in _INT_FLAGS:
                extra.append(f"{_INT_FLAGS[key]}={value}")
            elif key == "snappy":
                extra.append(f"--snappy={'true' if value else 'false'}")
            elif key == "tls" and value is not None:
                pem = getattr(value, "nsqd_pem", None)
                if pem is None:
                    pytest.skip("needs the emulator: make the context with tls_server_context()")
                (work / "cert.pem").write_bytes(pem[0])
                (work / "key.pem").write_bytes(pem[1])
                extra += [
                    f"--tls-cert={work / 'cert.pem'}",
                    f"--tls-key={work / 'key.pem'}",
                    # with a certificate nsqd also serves HTTPS, by default on
                    # 0.0.0.0:4152: a port of its own on loopback
                    f"--https-address=127.0.0.1:{free_port()}",
                ]
            elif key == "tls_required":
                extra.append(f"--tls-required={'true' if value else 'false'}")
            else:
                pytest.skip(f"needs the emulator: nsqd has no {key}= the test can set")
        tcp, http = free_port(), free_port()
        data = work / "nsqd"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            str(bin_dir / "nsqd"),
            f"--tcp-address=127.0.0.1:{tcp}",
            f"--http-address=127.0.0.1:{http}",
            f"--data-path={data}",
            "--broadcast-address=127.0.0.1",
            *extra,
        ]
        self.process = ServerProcess("nsqd", argv, [tcp, http], work / "nsqd.log")
        self.tcp_address = f"127.0.0.1:{tcp}"
        self.http_address = f"127.0.0.1:{http}"

    async def start(self) -> None:
        if self.auth is not None:
            await self.auth.start()
        await self.process.start()

    async def stop(self) -> None:
        await self.process.stop()

    async def close(self) -> None:
        """Kill nsqd and stop its auth server."""
        await self.process.kill()
        if self.auth is not None:
            await self.auth.close()

    def _http(self, method: str, path: str, body: bytes | None = None) -> bytes:
        # Blocking on purpose: the emulator's helpers are synchronous; nsqd is another
        # process and answers at once.
        import urllib.request

        request = urllib.request.Request(
            f"http://{self.http_address}{path}", data=body, method=method
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            data: bytes = resp.read()
            return data

    def publish(self, topic: str, *bodies: bytes, defer: float = 0.0) -> None:
        for body in bodies:
            query = f"?topic={topic}" + (f"&defer={round(defer * 1000)}" if defer else "")
            self._http("POST", f"/pub{query}", body)

    def stats(self, topic: str | None = None) -> dict[str, Any]:
        import json

        query = "?format=json" + (f"&topic={topic}" if topic else "")
        doc: dict[str, Any] = json.loads(self._http("GET", f"/stats{query}"))
        return doc

    def create_topic(self, topic: str, *channels: str) -> None:
        self._http("POST", f"/topic/create?topic={topic}")
        for channel in channels:
            self._http("POST", f"/channel/create?topic={topic}&channel={channel}")

    def topic_names(self) -> list[str]:
        return sorted(t["topic_name"] for t in self.stats()["topics"])

    def channel_names(self, topic: str) -> list[str]:
        for t in self.stats(topic)["topics"] or ():  # null: nsqd has no such topic
            if t["topic_name"] == topic:
                return sorted(c["channel_name"] for c in t["channels"])
        return []


@contextlib.asynccontextmanager
async def nsqd_server(**kwargs: Any) -> AsyncIterator[Any]:
    """An :class:`NsqdEmulator` built with ``kwargs``, or, with ``$AIOCLIENTS_TEST_NSQ_BIN_DIR``
    set, a fresh real nsqd with the matching flags (skips for emulator-only settings)."""
    bin_dir = nsq_bin_dir()
    if bin_dir is None:
        from aioclients.testing import NsqdEmulator

        async with NsqdEmulator(**kwargs) as emulator:
            yield emulator
        return
    with tempfile.TemporaryDirectory(prefix="aioclients-nsqd-") as tmp:
        server = RealNsqd(bin_dir, Path(tmp), **kwargs)
        try:
            await server.start()
            yield server
        finally:
            await server.close()


def is_real(server: object) -> bool:
    """Whether ``server`` is a real nsqd (from :func:`nsqd_server`)."""
    return getattr(server, "real", False)


class RealNsqlookupd:
    """A real nsqlookupd started for one test; ``register`` (attaching an emulator
    directly, without TCP) exists only on the emulator, so it skips the test."""

    real = True

    def __init__(self, bin_dir: Path, work: Path) -> None:
        self.process, self.tcp_address, self.http_address = nsqlookupd_process(bin_dir, work)
        self.tcp_port = int(self.tcp_address.rsplit(":", 1)[1])
        self.http_port = int(self.http_address.rsplit(":", 1)[1])

    def register(self, nsqd: object) -> None:
        import pytest

        pytest.skip("needs the emulator: attaches an nsqd to nsqlookupd without TCP")

    unregister = register


@contextlib.asynccontextmanager
async def nsqlookupd_server() -> AsyncIterator[Any]:
    """An :class:`NsqlookupdEmulator`, or with ``$AIOCLIENTS_TEST_NSQ_BIN_DIR`` set a
    fresh real nsqlookupd."""
    bin_dir = nsq_bin_dir()
    if bin_dir is None:
        from aioclients.testing import NsqlookupdEmulator

        async with NsqlookupdEmulator() as emulator:
            yield emulator
        return
    with tempfile.TemporaryDirectory(prefix="aioclients-nsqlookupd-") as tmp:
        server = RealNsqlookupd(bin_dir, Path(tmp))
        try:
            await server.process.start()
            yield server
        finally:
            await server.process.kill()
