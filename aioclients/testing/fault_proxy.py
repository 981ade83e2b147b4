"""A loopback TCP proxy that injects network faults, for tests.

Put it between a client and a server and make the network misbehave on cue::

    async with FaultProxy(nats_server_address) as proxy:
        js = await jetstream.connect(f"nats://{proxy.address}")
        proxy.freeze()   # the server seems to stop reading and answering
        ...
        proxy.thaw()     # and comes back

The faults:

- :meth:`FaultProxy.freeze`: nothing is forwarded either way and the proxy stops
  reading, so the sender's socket buffers fill and its writes block, exactly as
  with a server that hangs (SIGSTOP) or a network path that black-holes packets.
  The connections stay open. :meth:`FaultProxy.thaw` forwards what was held
  back and carries on.
- :meth:`FaultProxy.reset`: every proxied connection is reset (RST on both
  sides), as when a server crashes or a middlebox drops its state.
- :meth:`FaultProxy.refuse`: the proxy stops listening, so new connections are
  refused (ECONNREFUSED) while open ones go on; ``refuse(False)`` listens again
  on the same port.
- :meth:`FaultProxy.delay`: every chunk is forwarded ``seconds`` after it was
  read, in order, in both directions.

It runs in the event loop that starts it and binds to loopback only. Its tasks
(connecting to the target, the two pumps of each connection, listening again)
belong to one :class:`~aioclients._tasks.TaskOwner`: :meth:`FaultProxy.aclose`
cancels and awaits them all, then raises the first one that failed (a bug in
the proxy, not a network error: those end the connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import struct
from dataclasses import dataclass
from types import TracebackType

from aioclients._errors import InvalidArgumentError
from aioclients._tasks import TaskOwner
from aioclients.testing._done import DONE, Done, DoneCount

__all__ = ("FaultProxy", "FaultProxyStatistics")

log = logging.getLogger("aioclients.testing.fault_proxy")

_CHUNK = 64 * 1024
# The proxy's own sockets buffer little, so that a frozen proxy pushes back on
# the sender soon, as a stopped server would.
_SOCKET_BUFFER = 64 * 1024


@dataclass(frozen=True, slots=True)
class FaultProxyStatistics:
    """What the proxy has done so far."""

    connections_accepted: int
    connections_open: int
    bytes_to_server: int
    bytes_to_client: int
    resets: int


def _parse_target(target: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(target, tuple):
        host, port = target
        return str(host), int(port)
    if not isinstance(target, str):
        raise TypeError(f"target must be 'host:port' or (host, port), got {type(target).__name__}")
    text = target.split("://", 1)[-1].rstrip("/")
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise InvalidArgumentError(f"target must be 'host:port', got {target!r}")
    return host.strip("[]") or "127.0.0.1", int(port_text)


def _shrink_buffers(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            # Linger on with a zero timeout: close() sends RST instead of FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One client connection and its connection to the target."""

    def __init__(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.client_reader, self.client_writer = client
        self.server_reader, self.server_writer = server
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self, *, rst: bool) -> None:
        for writer in (self.client_writer, self.server_writer):
            if rst:
                _abort_with_rst(writer)
            else:
                writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target`` (``"host:port"``).

    Use it as ``async with FaultProxy("127.0.0.1:4222") as proxy`` and point the
    client at :attr:`address`. All methods but :meth:`start` and :meth:`aclose`
    are synchronous and take effect at once.

    Args:
        target: the server to forward to, ``"host:port"`` (a ``scheme://`` prefix
            is ignored) or ``(host, port)``.
        port: the port to listen on; a free one when 0.
        connect_timeout: how long to wait for the target when a client connects;
            a client whose target cannot be reached is reset.
    """

    def __init__(
        self,
        target: str | tuple[str, int],
        *,
        port: int = 0,
        connect_timeout: float = 5.0,
    ) -> None:
        self._target = _parse_target(target)
        self._port = port
        self._connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._relisten: asyncio.Task[None] | None = None
        self._tasks = TaskOwner(f"FaultProxy({self.target})")
        self._links: set[_Link] = set()
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._delay = 0.0
        self._refusing = False
        self._closed = False
        self._accepted = 0
        self._to_server = 0
        self._to_client = 0
        self._resets = 0

    # -- lifecycle ---------------------------------------------------------

    @property
    def address(self) -> str:
        """``"127.0.0.1:PORT"``, where clients connect."""
        return f"127.0.0.1:{self.port}"

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("FaultProxy is not started; use `async with FaultProxy(...)`")
        return self._port

    @property
    def target(self) -> str:
        host, port = self._target
        return f"{host}:{port}"

    @property
    def frozen(self) -> bool:
        return not self._thawed.is_set()

    async def start(self) -> None:
        """Start listening (on a free port unless one was given)."""
        if self._closed:
            raise RuntimeError("FaultProxy was closed")
        if self._server is None and not self._refusing:
            await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._on_client, "127.0.0.1", self._port, reuse_address=True, limit=_CHUNK
        )
        self._port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        """Stop listening, abort every proxied connection and end every task.

        Raises:
            Exception: the first error one of the proxy's tasks failed with (a bug:
                network errors only end their connection).
        """
        self._closed = True
        if self._relisten is not None:
            await asyncio.wait([self._relisten], timeout=5.0)
            self._relisten = None
        server, self._server = self._server, None
        if server is not None:
            server.close()
        links = list(self._links)
        self._links.clear()
        tasks = [task for link in links for task in link.tasks]
        for link in links:
            link.abort(rst=False)
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        await self._tasks.aclose()
        if server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 5.0)
        failure = self._tasks.failure
        if failure is not None:
            raise failure

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- faults ------------------------------------------------------------
    # Plain calls whose fault is in place when they return; their results can be
    # awaited too (``await proxy.freeze()`` returns at once), as the API contract
    # writes them without a "(sync)".

    def freeze(self) -> Done:
        """Stop forwarding in both directions; connections stay open."""
        self._thawed.clear()
        return DONE

    def thaw(self) -> Done:
        """Forward again, starting with what was held back."""
        self._thawed.set()
        return DONE

    def reset(self) -> DoneCount:
        """Reset every open proxied connection (RST to both ends); returns how many."""
        links = list(self._links)
        self._links.clear()
        for link in links:
            link.abort(rst=True)
        self._resets += len(links)
        return DoneCount(len(links))

    def refuse(self, flag: bool = True) -> Done:
        """Refuse new connections (stop listening) or, with ``False``, accept them again.

        Connections already open are not touched.
        """
        if flag == self._refusing:
            return DONE
        self._refusing = flag
        if flag:
            server, self._server = self._server, None
            if server is not None:
                server.close()
        elif not self._closed:
            # Listening again is synchronous so that the next connect finds the port open.
            sock = socket.create_server(("127.0.0.1", self._port), reuse_port=False)
            sock.setblocking(False)
            self._relisten = self._tasks.start(self._serve_on(sock), name="listen again")
        return DONE

    async def _serve_on(self, sock: socket.socket) -> None:
        if self._refusing or self._closed:
            sock.close()
            return
        self._server = await asyncio.start_server(self._on_client, sock=sock, limit=_CHUNK)

    def delay(self, seconds: float) -> Done:
        """Forward every chunk ``seconds`` after it was read (0 for no delay)."""
        if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
            raise InvalidArgumentError(
                f"delay must be a finite number of seconds >= 0, got {seconds!r}"
            )
        self._delay = float(seconds)
        return DONE

    def statistics(self) -> FaultProxyStatistics:
        return FaultProxyStatistics(
            connections_accepted=self._accepted,
            connections_open=len(self._links),
            bytes_to_server=self._to_server,
            bytes_to_client=self._to_client,
            resets=self._resets,
        )

    # -- forwarding --------------------------------------------------------

    def _on_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        # A plain callback, so that the task serving the client is the proxy's own.
        if self._tasks.closed:
            client_writer.transport.abort()
            return
        self._tasks.start(self._link(client_reader, client_writer), name="connect to the target")

    async def _link(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self._accepted += 1
        _shrink_buffers(client_writer)
        host, port = self._target
        try:
            server_reader, server_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=_CHUNK), self._connect_timeout
            )
        except (OSError, asyncio.TimeoutError) as exc:
            log.debug("fault proxy: target %s:%s unreachable: %s", host, port, exc)
            _abort_with_rst(client_writer)
            return
        except BaseException:  # cancelled by aclose() while connecting
            client_writer.transport.abort()
            raise
        if self._closed:
            server_writer.transport.abort()
            client_writer.transport.abort()
            return
        _shrink_buffers(server_writer)
        link = _Link((client_reader, client_writer), (server_reader, server_writer))
        self._links.add(link)
        link.tasks = [
            self._tasks.start(
                self._pump(link, client_reader, server_writer, to_server=True), name="to server"
            ),
            self._tasks.start(
                self._pump(link, server_reader, client_writer, to_server=False), name="to client"
            ),
        ]

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        to_server: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                # While frozen, do not even read: the peer's writes must back up.
                await self._thawed.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    break
                read_at = loop.time()
                await self._thawed.wait()
                if self._delay:
                    await asyncio.sleep(max(0.0, read_at + self._delay - loop.time()))
                    await self._thawed.wait()
                if writer.transport.is_closing():
                    # The link was aborted (aclose, a reset) after this chunk was read:
                    # it goes nowhere, as a closed socket's would. (uvloop raises on a
                    # write to a closed transport; asyncio's loop drops it.)
                    break
                writer.write(data)
                await writer.drain()
                if to_server:
                    self._to_server += len(data)
                else:
                    self._to_client += len(data)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side ended: end the whole link, as a server closing its socket would.
            if link in self._links:
                self._links.discard(link)
                for other in (link.client_writer, link.server_writer):
                    other.transport.abort()
                for task in link.tasks:
                    if task is not asyncio.current_task():
                        task.cancel()
