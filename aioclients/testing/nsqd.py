"""An in-process nsqd that speaks the real TCP and HTTP protocols, for tests.

Theory of operation. :class:`NsqdEmulator` assembles four parts, none of which
imports another's private names:

* ``_nsqd_state.py``: topics, channels, in-flight, deferred and timed-out
  messages, as nsqd's ``topic.go`` / ``channel.go`` keep them; a pure state
  machine (time is an argument; it reports its next deadline);
* ``_nsqd_server.py``: the TCP protocol (``protocol_v2.go``) and the driver of
  that state: one delivery per event-loop turn, one timer for every channel's
  deadlines;
* ``_nsq_http.py``: the HTTP API (``http.go``), on this class's public methods;
* ``_nsqd_lookup.py``: registration with nsqlookupd over its TCP protocol.

Test-only knobs (``min_heartbeat_interval``, ``min_msg_timeout``) let tests
use intervals shorter than nsqd's one-second minimum; the defaults are nsqd's.

Not copied from nsqd v1.3.0 (checked against it; the client does not depend on
them): its REQ / DPUB / msg_timeout timers fire up to ~5 s late on a channel its
queue scan has not picked up yet (the list is refreshed every 5 s, then scanned
every 100 ms), here they fire on time; a silent client gets two heartbeats before
nsqd closes it, here one; text ``/stats`` has no start_time/uptime/memory lines,
and ``/info``'s hostname is the listening host rather than the OS hostname.
"""

from __future__ import annotations

import logging
import random
import ssl
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from aioclients._errors import InvalidArgumentError
from aioclients._tasks import TaskOwner
from aioclients.testing._nsq_http import start_http
from aioclients.testing._nsq_wire import is_valid_name
from aioclients.testing._nsqd_lookup import LookupdPeer
from aioclients.testing._nsqd_server import NsqdServer, snappy_available
from aioclients.testing._nsqd_state import NsqdState, RegistryChange

__all__ = ("NsqdEmulator",)

log = logging.getLogger("aioclients.testing.nsqd")


class NsqdEmulator:
    """An nsqd speaking the real TCP and HTTP protocols, in this process, on loopback.

    Use ``async with NsqdEmulator() as nsqd`` inside a running event loop. The
    defaults are nsqd v1.3's; seconds are floats (nsqd's flags are durations).

    Args:
        host: the address to listen on.
        tcp_port: the TCP port; a free one when 0 (kept across :meth:`stop`/:meth:`start`).
        http_port: the HTTP port; a free one when 0.
        auth_secret: when set, clients must AUTH with this secret (``auth_required``).
        auth_identity: the identity AUTH answers with.
        auth_topics: regular expressions of the topics an authenticated client may use
            (all when ``None``); others get ``E_UNAUTHORIZED``. As in nsqd, a pattern
            matches anywhere in the name (anchor it with ``^...$``); an empty list
            refuses AUTH itself (``E_UNAUTHORIZED AUTH no authorizations found``).
        tls: a server-side :class:`ssl.SSLContext`; enables the ``tls_v1`` upgrade.
        tls_required: refuse every command but IDENTIFY before TLS.
        max_rdy_count: the largest RDY a client may send.
        msg_timeout: the default in-flight timeout.
        max_msg_timeout: the largest timeout a client may ask for (and TOUCH cap).
        max_req_timeout: the largest REQ / DPUB delay.
        max_msg_size: the largest message body.
        max_body_size: the largest IDENTIFY/AUTH/MPUB body.
        heartbeat_interval: the default heartbeat interval.
        min_heartbeat_interval: the smallest heartbeat interval a client may ask for
            (nsqd: 1 s; lower it for fast tests).
        max_heartbeat_interval: the largest heartbeat interval a client may ask for.
        min_msg_timeout: the smallest ``msg_timeout`` a client may ask for (nsqd: 1 s).
        output_buffer_timeout: the default output buffer timeout (echoed only).
        deflate: whether deflate may be negotiated.
        max_deflate_level: the highest deflate level.
        snappy: whether snappy may be negotiated; ``None``: when the ``cramjam``
            package is installed (nsqd enables snappy by default).
        lookupd_tcp_addresses: ``"host:port"`` of nsqlookupd TCP listeners to register with.
        lookupd_ping_interval: seconds between PINGs to each lookupd.
        broadcast_address: the address announced to lookupd (default: ``host``).
        seed: seed of the generator behind message ids and ``sample_rate``.
        http: whether to serve the HTTP API.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        tcp_port: int = 0,
        http_port: int = 0,
        auth_secret: str | None = None,
        auth_identity: str = "emulator",
        auth_topics: Iterable[str] | None = None,
        tls: ssl.SSLContext | None = None,
        tls_required: bool = False,
        max_rdy_count: int = 2500,
        msg_timeout: float = 60.0,
        max_msg_timeout: float = 900.0,
        max_req_timeout: float = 3600.0,
        max_msg_size: int = 1024 * 1024,
        max_body_size: int = 5 * 1024 * 1024,
        heartbeat_interval: float = 30.0,
        min_heartbeat_interval: float = 1.0,
        max_heartbeat_interval: float = 60.0,
        min_msg_timeout: float = 1.0,
        output_buffer_timeout: float = 0.25,
        deflate: bool = True,
        max_deflate_level: int = 6,
        snappy: bool | None = None,
        lookupd_tcp_addresses: Iterable[str] = (),
        lookupd_ping_interval: float = 15.0,
        broadcast_address: str | None = None,
        seed: int | None = None,
        http: bool = True,
    ) -> None:
        self.host = host
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.auth_secret = auth_secret
        self.auth_identity = auth_identity
        self.auth_topics = tuple(auth_topics) if auth_topics is not None else None
        self.tls = tls
        self.tls_required = tls_required
        self.max_rdy_count = max_rdy_count
        self.msg_timeout = msg_timeout
        self.max_msg_timeout = max_msg_timeout
        self.max_req_timeout = max_req_timeout
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        self.heartbeat_interval = heartbeat_interval
        self.min_heartbeat_interval = min_heartbeat_interval
        self.max_heartbeat_interval = max_heartbeat_interval
        self.min_msg_timeout = min_msg_timeout
        self.output_buffer_timeout = output_buffer_timeout
        self.deflate_enabled = deflate
        self.max_deflate_level = max_deflate_level
        self.snappy_enabled = snappy_available() if snappy is None else snappy
        if self.snappy_enabled and not snappy_available():
            raise InvalidArgumentError(
                "snappy=True needs the cramjam package (pip install cramjam)"
            )
        self.lookupd_ping_interval = lookupd_ping_interval
        self.broadcast_address = broadcast_address or host
        self._http_enabled = http
        self._http_runner: Any = None
        self._state = NsqdState(random.Random(seed))
        self._server = NsqdServer(self, self._state, self._registry_changed)
        # TLS upgrades, lookupd registrations; a new owner for each start()
        self._tasks = TaskOwner("NsqdEmulator")
        self._lookupd_peers = [LookupdPeer(a, self, self._state) for a in lookupd_tcp_addresses]

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def tcp_address(self) -> str:
        """``"host:port"`` of the TCP listener."""
        return f"{self.host}:{self.tcp_port}"

    @property
    def http_address(self) -> str:
        """``"host:port"`` of the HTTP listener."""
        return f"{self.host}:{self.http_port}"

    @property
    def running(self) -> bool:
        """Whether the listeners are open (between :meth:`start` and :meth:`stop`)."""
        return self._server.running

    @property
    def start_time(self) -> int:
        """When the emulator last started (seconds since the epoch; ``/info``, ``/stats``)."""
        return self._server.start_time

    async def start(self) -> None:
        """Listen (again, on the same ports) and register with the configured lookupds.

        Raises:
            OSError: a port is taken (for instance by another server since :meth:`stop`).
        """
        if self._server.running:
            return
        self._tasks = TaskOwner(f"NsqdEmulator({self.host}:{self.tcp_port or 'new'})")
        self.tcp_port = await self._server.listen(self.host, self.tcp_port, self._tasks)
        if self._http_enabled:
            self._http_runner, self.http_port = await start_http(self, self.host, self.http_port)
        for peer in self._lookupd_peers:
            peer.start(self._tasks)
        log.debug("nsqd emulator listening on %s (http %s)", self.tcp_address, self.http_address)

    async def stop(self) -> None:
        """Close the listeners and every client connection; topics and messages are kept.

        In-flight and deferred messages go back to their channel's queue, as nsqd
        flushes them to disk on exit and reads them back when it starts again.

        Raises:
            Exception: the first error one of the emulator's tasks (a TLS upgrade,
                a lookupd registration) failed with: a bug in the emulator.
        """
        if not self._server.running:
            return
        for peer in self._lookupd_peers:
            await peer.stop()
        self._server.close()
        if self._http_runner is not None:
            runner, self._http_runner = self._http_runner, None
            await runner.cleanup()
        await self._server.wait_closed()
        self._server.flush_for_restart()
        await self._tasks.aclose()
        failure = self._tasks.failure
        if failure is not None:
            raise failure

    async def close(self) -> None:
        """Stop and forget every topic."""
        await self.stop()
        self._server.clear()

    async def __aenter__(self) -> NsqdEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def add_lookupd(self, tcp_address: str) -> None:
        """Register with one more nsqlookupd over its TCP protocol.

        Args:
            tcp_address: ``"host:port"`` of the nsqlookupd TCP listener.
        """
        peer = LookupdPeer(tcp_address, self, self._state)
        self._lookupd_peers.append(peer)
        if self._server.running:
            peer.start(self._tasks)

    def _registry_changed(self, changes: list[RegistryChange]) -> None:
        for peer in self._lookupd_peers:
            peer.send(changes)

    # -- topics, channels, messages ---------------------------------------------------------

    def publish(self, topic: str, *bodies: bytes, defer: float = 0.0) -> None:
        """Put messages on ``topic`` as if a producer had published them.

        Args:
            topic: the topic (created when missing).
            bodies: the message bodies, each non-empty.
            defer: seconds before the messages become available, as with DPUB.

        Raises:
            InvalidArgumentError: invalid topic name or empty body.
        """
        if not is_valid_name(topic):
            raise InvalidArgumentError(f"invalid topic name {topic!r}")
        if any(not b for b in bodies):
            raise InvalidArgumentError("message bodies must not be empty")
        self._server.publish(topic, bodies, defer=defer)

    def create_topic(self, topic: str, *channels: str) -> None:
        """Create a topic (and channels), as ``/topic/create`` and ``/channel/create`` do.

        Args:
            topic: the topic name.
            channels: channel names to create on it.

        Raises:
            InvalidArgumentError: an invalid topic or channel name.
        """
        for name in (topic, *channels):
            if not is_valid_name(name):
                raise InvalidArgumentError(f"invalid topic or channel name {name!r}")
        self._server.create_topic(topic, channels)

    def topic_names(self) -> list[str]:
        """Names of the topics that exist, sorted."""
        return sorted(self._state.topics)

    def channel_names(self, topic: str) -> list[str]:
        """Names of the channels of ``topic`` (empty when it does not exist), sorted."""
        t = self._state.topics.get(topic)
        return sorted(t.channels) if t else []

    def delete_topic(self, topic: str) -> None:
        """Delete a topic, its channels and messages, as ``/topic/delete`` does: the
        channels' clients are disconnected.

        Raises:
            LookupError: no such topic.
        """
        self._server.delete_topic(topic)

    def delete_channel(self, topic: str, channel: str) -> None:
        """Delete a channel and its messages, as ``/channel/delete`` does: its clients
        are disconnected; an ephemeral topic goes with its last channel.

        Raises:
            LookupError: no such topic or channel.
        """
        self._server.delete_channel(topic, channel)

    def empty_topic(self, topic: str) -> None:
        """Drop the messages the topic keeps for channels to come, as ``/topic/empty`` does.

        Raises:
            LookupError: no such topic.
        """
        self._server.empty_topic(topic)

    def empty_channel(self, topic: str, channel: str) -> None:
        """Drop the channel's queued, in-flight and deferred messages, as
        ``/channel/empty`` does (FIN of a dropped in-flight message fails).

        Raises:
            LookupError: no such topic or channel.
        """
        self._server.empty_channel(topic, channel)

    def pause_topic(self, topic: str) -> None:
        """Keep the topic's new messages from its channels, as ``/topic/pause`` does.

        Raises:
            LookupError: no such topic.
        """
        self._server.pause_topic(topic, True)

    def unpause_topic(self, topic: str) -> None:
        """Pass the topic's messages to its channels again (``/topic/unpause``).

        Raises:
            LookupError: no such topic.
        """
        self._server.pause_topic(topic, False)

    def pause_channel(self, topic: str, channel: str) -> None:
        """Stop delivering the channel's messages, as ``/channel/pause`` does.

        Raises:
            LookupError: no such topic or channel.
        """
        self._server.pause_channel(topic, channel, True)

    def unpause_channel(self, topic: str, channel: str) -> None:
        """Deliver the channel's messages again (``/channel/unpause``).

        Raises:
            LookupError: no such topic or channel.
        """
        self._server.pause_channel(topic, channel, False)

    def stats(
        self, topic: str | None = None, channel: str | None = None, include_clients: bool = True
    ) -> dict[str, Any]:
        """The document ``/stats?format=json`` answers with (without ``memory``).

        Args:
            topic: only this topic (all when ``None``).
            channel: only this channel (all when ``None``).
            include_clients: list the clients of each channel and the producers.

        Returns:
            ``{"version", "health", "start_time", "topics", "producers"}`` shaped as nsqd's;
            as in nsqd, ``"topics"`` is ``None`` when ``topic`` names no topic.
        """
        return self._server.stats(topic, channel, include_clients)

    def fail_next(self, command: str, times: int = 1) -> None:
        """Make the next ``times`` ``PUB``/``MPUB``/``DPUB`` commands fail as nsqd does
        when the topic is exiting: ``E_PUB_FAILED PUB failed exiting`` (fatal).

        For testing how producers handle a server-side publish failure.

        Raises:
            InvalidArgumentError: ``command`` is not PUB, MPUB or DPUB.
        """
        if command not in ("PUB", "MPUB", "DPUB"):
            raise InvalidArgumentError(f"fail_next() takes PUB, MPUB or DPUB, not {command!r}")
        self._server.fail_next(command, times)
