"""Fault soak: a producer and a consumer through a FaultProxy that freezes or resets the
connection every few seconds, for each protocol.

Every message carries its number. The producer publishes them one after another and
waits for each to be confirmed (a JetStream PubAck, an nsqd OK, a Liftbridge ack); a
failed publish is retried with the same number, so a message the server stored before
the fault was seen may arrive twice (JetStream de-duplicates it by msg_id). The
consumer acknowledges each message it receives. While the producer runs, a fault is
injected every --fault-every seconds, alternating a freeze of --freeze-for seconds (the
proxy stops forwarding both ways with the sockets open: a hung server) and a reset (RST
to both ends: a crash). Then the faults stop and the consumer is given --settle seconds
to receive every confirmed message.

Reported per protocol: faults injected, messages confirmed, received (distinct), lost
(confirmed but never received: must be 0, since all three promise at-least-once for a
confirmed message and an acknowledging consumer), duplicated deliveries, publish errors,
the longest stall (the longest time the consumer received nothing while the producer
was running) and this process's RSS before and after (the clients only: nats-server and
the emulators run in processes of their own).

    python benchmarks/fault_soak.py --duration 180              # each protocol 3 minutes
    python benchmarks/fault_soak.py --protocol nsq --duration 20 --fault-every 3
    python benchmarks/fault_soak.py --duration 60 --loop uvloop   # the clients on uvloop

Against servers of your own (the proxy stands in front of each):

    python benchmarks/fault_soak.py --duration 600 --nats-url nats://127.0.0.1:4222 \
        --nsqd 127.0.0.1:4150 --liftbridge 127.0.0.1:9292 --proxy-port 9293

A real Liftbridge broker must give the proxy's address as its own (Liftbridge config
``listen: 127.0.0.1:9292``, ``host: 127.0.0.1``, ``port: 9293``), so that the client's
every call, not only the first, goes through the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from _loop import add_loop_argument, run_async, use_loop
from _nsq_common import emulated_nsqd
from liftbridge_common import emulated_cluster

from aioclients import AioClientsError
from aioclients.testing import FaultProxy, NatsServer

Publish = Callable[[int], Awaitable[object]]
Consume = Callable[[Callable[[int], None]], Awaitable[None]]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Tally:
    """What was confirmed and delivered, per message number.

    Kept in two byte arrays indexed by the number (1 byte per message, not a set entry
    of ~100), so that the RSS the soak reports is the clients' and not its own.
    """

    faults: int = 0
    freezes: int = 0
    resets: int = 0
    confirmed_flags: bytearray = field(default_factory=bytearray)
    deliveries: bytearray = field(default_factory=bytearray)  # per number, saturating at 255
    confirmed: int = 0
    received_distinct: int = 0
    duplicated: int = 0
    lost: int = 0  # confirmed, not (yet) delivered
    all_received: asyncio.Event = field(default_factory=asyncio.Event)
    publish_errors: int = 0
    longest_stall: float = 0.0
    last_received: float = 0.0
    producing: bool = True

    @staticmethod
    def _grow(array: bytearray, n: int) -> None:
        if n >= len(array):
            array.extend(bytes(max(n + 1 - len(array), 65536)))

    def received(self, n: int) -> None:
        now = time.monotonic()
        if self.producing and self.last_received:
            self.longest_stall = max(self.longest_stall, now - self.last_received)
        self.last_received = now
        self._grow(self.deliveries, n)
        self._grow(self.confirmed_flags, n)
        count = self.deliveries[n]
        if count:
            self.duplicated += 1
        else:
            self.received_distinct += 1
            if self.confirmed_flags[n]:
                self.lost -= 1
        self.deliveries[n] = min(count + 1, 255)
        if not self.producing and not self.lost:
            self.all_received.set()

    def confirm(self, n: int) -> None:
        self._grow(self.deliveries, n)
        self._grow(self.confirmed_flags, n)
        if self.confirmed_flags[n]:
            return
        self.confirmed_flags[n] = 1
        self.confirmed += 1
        if not self.deliveries[n]:
            self.lost += 1

    def producer_done(self) -> None:
        self.producing = False
        if not self.lost:
            self.all_received.set()


async def inject_faults(
    proxy: FaultProxy, tally: Tally, every: float, freeze_for: float, stop: asyncio.Event
) -> None:
    freeze = True
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            break
        tally.faults += 1
        if freeze:
            tally.freezes += 1
            proxy.freeze()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), freeze_for)
            proxy.thaw()
        else:
            tally.resets += 1
            proxy.reset()
        freeze = not freeze


async def produce(publish: Publish, tally: Tally, stop: asyncio.Event) -> None:
    n = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(publish(n), 30)
        except (AioClientsError, TimeoutError, OSError, asyncio.TimeoutError) as exc:
            tally.publish_errors += 1
            logging.getLogger("soak").debug("publish %d failed: %r", n, exc)
            await asyncio.sleep(0.05)  # then the same number again
            continue
        tally.confirm(n)
        n += 1


async def run_soak(
    name: str,
    proxy: FaultProxy,
    publish: Publish,
    consume: Consume,
    args: argparse.Namespace,
) -> Tally:
    tally = Tally()
    rss_before = rss_mib()
    stop = asyncio.Event()
    consumer = asyncio.create_task(consume(tally.received))
    producer = asyncio.create_task(produce(publish, tally, stop))
    faults = asyncio.create_task(
        inject_faults(proxy, tally, args.fault_every, args.freeze_for, stop)
    )
    await asyncio.sleep(args.duration)  # the soak's own schedule
    stop.set()
    proxy.thaw()
    await asyncio.gather(producer, faults)
    tally.producer_done()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(tally.all_received.wait(), args.settle)
    consumer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await consumer
    rss_after = rss_mib()
    stats = proxy.statistics()
    print(
        f"{name:<11} faults {tally.faults:>3} ({tally.freezes} freezes, {tally.resets} resets)  "
        f"confirmed {tally.confirmed:>7}  received {tally.received_distinct:>7}  "
        f"lost {tally.lost:>3}  duplicated {tally.duplicated:>4}  "
        f"publish errors {tally.publish_errors:>4}  longest stall {tally.longest_stall:5.1f} s  "
        f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB  "
        f"(proxied: {stats.connections_accepted} connections, "
        f"{(stats.bytes_to_server + stats.bytes_to_client) / 1e6:.1f} MB)",
        flush=True,
    )
    return tally


# -- JetStream -----------------------------------------------------------------


async def soak_jetstream(args: argparse.Namespace) -> Tally:
    from aioclients import jetstream

    nats_options = {
        "ping_interval": 2,
        "max_outstanding_pings": 2,
        "reconnect_time_wait": 0.2,
        "max_reconnect_attempts": -1,
    }
    stream = f"SOAK{uuid.uuid4().hex[:8]}"
    subject = stream.lower()
    async with contextlib.AsyncExitStack() as stack:
        if args.nats_url:
            server_url = args.nats_url
        else:
            server = await stack.enter_async_context(NatsServer())
            server_url = server.url
        proxy = await stack.enter_async_context(FaultProxy(server_url))
        async with await jetstream.connect(server_url) as admin:
            await admin.create_stream(stream, subjects=[f"{subject}.>"], storage="memory")
            await admin.create_consumer(
                stream, durable_name="soak", ack_policy="explicit", ack_wait=5.0
            )

        async def delete_stream() -> None:
            async with await jetstream.connect(server_url) as admin:
                await admin.delete_stream(stream)

        stack.push_async_callback(delete_stream)
        url = f"nats://{proxy.address}"
        pub = await jetstream.connect(url, timeout=3.0, **nats_options)
        sub = await jetstream.connect(url, timeout=3.0, **nats_options)
        try:

            async def publish(n: int) -> object:
                return await pub.publish(
                    f"{subject}.{n % 8}", b"%d" % n, msg_id=str(n), timeout=3.0
                )

            async def consume(received: Callable[[int], None]) -> None:
                consumer = await sub.consumer(stream, "soak")
                async with consumer.consume(
                    max_messages=200, expires=5.0, idle_heartbeat=1.0
                ) as messages:
                    async for msg in messages:
                        received(int(msg.data))
                        with contextlib.suppress(AioClientsError):
                            await msg.ack()

            return await run_soak("jetstream", proxy, publish, consume, args)
        finally:
            for js in (pub, sub):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(js.close(), 10)


# -- NSQ -----------------------------------------------------------------------


async def soak_nsq(args: argparse.Namespace) -> Tally:
    from aioclients.nsq import Producer, Reader

    topic = f"soak{uuid.uuid4().hex[:8]}"
    with external_or_emulated_nsqd(args.nsqd) as nsqd_tcp:
        async with FaultProxy(nsqd_tcp) as proxy:
            producer = Producer(proxy.address, timeout=3.0)
            reader = Reader(
                topic,
                "soak",
                nsqd_tcp_addresses=[proxy.address],
                max_in_flight=100,
                heartbeat_interval=1.0,
                msg_timeout=10.0,
            )
            # Publish once before the Reader subscribes, so the channel exists when it does.
            async with Producer(nsqd_tcp) as direct:
                await direct.publish(topic, b"-1")
            try:
                await producer.__aenter__()
                await reader.__aenter__()

                async def publish(n: int) -> object:
                    return await producer.publish(topic, b"%d" % n)

                async def consume(received: Callable[[int], None]) -> None:
                    async for msg in reader:
                        n = int(msg.body)
                        if n >= 0:
                            received(n)
                        with contextlib.suppress(AioClientsError):
                            await msg.finish()

                return await run_soak("nsq", proxy, publish, consume, args)
            finally:
                for client in (reader, producer):
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(client.close(), 10)


# -- Liftbridge ----------------------------------------------------------------


async def soak_liftbridge(args: argparse.Namespace) -> Tally:
    from aioclients import liftbridge

    stream = f"soak{uuid.uuid4().hex[:8]}"
    # The broker gives the proxy's address as its own, so that every call (RPCs,
    # Subscribe, PublishAsync) goes through the proxy, not only the first one.
    proxy_port = args.proxy_port or free_port()
    with emulated_cluster(args.liftbridge, advertise=[f"127.0.0.1:{proxy_port}"]) as addresses:
        async with FaultProxy(addresses[0], port=proxy_port) as proxy:
            async with await liftbridge.connect(addresses) as admin:
                await admin.create_stream(stream, stream)
            client = await liftbridge.connect([proxy.address], ack_wait_time=3.0)
            try:

                async def publish(n: int) -> object:
                    return await client.publish(stream, b"%d" % n, timeout=3.0)

                async def consume(received: Callable[[int], None]) -> None:
                    async with client.subscribe(
                        stream, start_at=liftbridge.StartPosition.EARLIEST
                    ) as sub:
                        async for msg in sub:
                            received(int(msg.value))

                return await run_soak("liftbridge", proxy, publish, consume, args)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 10)
                with contextlib.suppress(Exception):
                    async with await liftbridge.connect(addresses) as admin:
                        await admin.delete_stream(stream)


@contextlib.contextmanager
def external_or_emulated_nsqd(address: str | None) -> Iterator[str]:
    """The nsqd at ``address`` (TCP), or an emulated one in a child process."""
    if address:
        yield address
        return
    with emulated_nsqd() as (tcp, _http):
        yield tcp


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


SOAKS: dict[str, Callable[[argparse.Namespace], Awaitable[Tally]]] = {
    "jetstream": soak_jetstream,
    "nsq": soak_nsq,
    "liftbridge": soak_liftbridge,
}


async def main(args: argparse.Namespace) -> int:
    names = list(SOAKS) if args.protocol == "all" else [args.protocol]
    print(
        f"fault soak: {args.duration:.0f} s per protocol, a fault every {args.fault_every} s "
        f"(freeze {args.freeze_for} s / reset, alternating), settle {args.settle:.0f} s",
        flush=True,
    )
    lost = 0
    for name in names:
        tally = await SOAKS[name](args)
        lost += tally.lost
    return 1 if lost else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=[*SOAKS, "all"], default="all")
    parser.add_argument("--duration", type=float, default=180.0, help="seconds per protocol")
    parser.add_argument("--fault-every", type=float, default=4.0)
    parser.add_argument("--freeze-for", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument(
        "--nats-url",
        default=None,
        help="a nats-server with JetStream to soak instead of a "
        "nats-server of our own (a stream SOAK<random> is created and deleted)",
    )
    parser.add_argument(
        "--nsqd", default=None, help="a real nsqd, TCP host:port, instead of the emulator"
    )
    parser.add_argument(
        "--liftbridge",
        type=lambda s: s.split(","),
        default=None,
        help="a real broker, host:port, to soak instead of the emulator (one broker: the proxy "
        "can only stand in front of one; the broker must advertise the proxy's address, see "
        "--proxy-port)",
    )
    parser.add_argument(
        "--proxy-port",
        type=int,
        default=0,
        help="the port the Liftbridge proxy listens on (with --liftbridge: the port the broker "
        "advertises as its own); default: a free one",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    add_loop_argument(parser)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    logging.basicConfig(level=logging.DEBUG if arguments.verbose else logging.ERROR)
    use_loop(arguments.loop)
    raise SystemExit(run_async(main(arguments)))
