"""A scripted fake nsqd on a loopback socket, for transcript tests of the drivers.

It records every command the client sends (``commands``: the command line, plus
the body for IDENTIFY/AUTH/PUB/MPUB/DPUB) and lets the test decide the answers
through ``on_command`` (default: nsqd's normal answers, without delivering messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import Callable
from typing import Any

_BODY_COMMANDS = {b"IDENTIFY", b"AUTH", b"PUB", b"MPUB", b"DPUB"}


def frame(ftype: int, data: bytes) -> bytes:
    return struct.pack(">II", len(data) + 4, ftype) + data


def message_frame(mid: bytes, body: bytes, attempts: int = 1) -> bytes:
    return frame(2, struct.pack(">qH", 1_700_000_000_000_000_000, attempts) + mid + body)


class FakeNsqd:
    """``async with FakeNsqd() as fake``; ``fake.address``; ``await fake.wait_for(pred)``."""

    def __init__(
        self,
        identify_answer: dict[str, Any] | bytes | None = None,
        on_command: Callable[[FakeNsqd, bytes, bytes | None], bytes | None] | None = None,
        silent: bool = False,
    ) -> None:
        self.identify_answer = identify_answer
        self.on_command = on_command
        self.silent = silent
        self.commands: list[bytes] = []
        self.bodies: list[bytes | None] = []
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self._changed = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def __aenter__(self) -> FakeNsqd:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self.writers:
            w.close()
        for task in list(self._handlers):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self._server.wait_closed()

    def send(self, data: bytes) -> None:
        """Write raw bytes to the most recent client."""
        self.writers[-1].write(data)

    async def wait_for(
        self, predicate: Callable[[list[bytes]], bool], timeout: float = 5.0
    ) -> None:
        async def loop() -> None:
            while not predicate(self.commands):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)

    def default_answer(self, command: bytes, body: bytes | None) -> bytes | None:
        name = command.split(b" ")[0]
        if name == b"IDENTIFY":
            answer = self.identify_answer
            if answer is None:
                answer = {"max_rdy_count": 2500, "version": "1.3.0", "auth_required": False}
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            return frame(0, data)
        if name in (b"SUB", b"PUB", b"MPUB", b"DPUB"):
            return frame(0, b"OK")
        if name == b"AUTH":
            return frame(0, b'{"identity":"x","identity_url":"","permission_count":1}')
        if name == b"CLS":
            return frame(0, b"CLOSE_WAIT")
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.writers.append(writer)
        try:
            magic = await reader.readexactly(4)
            self.commands.append(magic)
            self.bodies.append(None)
            while True:
                line = await reader.readline()
                if not line:
                    break
                command = line.rstrip(b"\n")
                body = None
                if command.split(b" ")[0] in _BODY_COMMANDS:
                    (size,) = struct.unpack(">I", await reader.readexactly(4))
                    body = await reader.readexactly(size)
                self.commands.append(command)
                self.bodies.append(body)
                self._changed.set()
                if self.silent:
                    continue
                answer = (
                    self.on_command(self, command, body)
                    if self.on_command is not None
                    else self.default_answer(command, body)
                )
                if answer:
                    writer.write(answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._changed.set()
            writer.close()
            self._handlers.discard(task)
