"""NSQ publish throughput: aioclients vs pynsq vs ansq on the same nsqd, in one run.

Two scenarios per client, 100-byte messages over TCP:

- PUB: one message, wait for nsqd's OK, repeat (--count messages);
- MPUB: batches of --batch messages, each batch awaited (--count messages in all).

The nsqd is the emulator in a process of its own unless --nsqd-tcp names a real
one. Each scenario runs --rounds times per client, interleaved; the best is shown.

    python benchmarks/nsq_publish.py --count 20000
    python benchmarks/nsq_publish.py --count 500 --rounds 1      # quick check
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

from _loop import add_loop_argument, run_async, use_loop
from _nsq_common import PAYLOAD, emulated_nsqd, report

from aioclients.nsq import Producer


async def ours_pub(tcp: str, topic: str, count: int, batch: int) -> float:
    async with Producer(tcp) as producer:
        start = time.perf_counter()
        for _ in range(count):
            await producer.publish(topic, PAYLOAD)
        return count / (time.perf_counter() - start)


async def ours_mpub(tcp: str, topic: str, count: int, batch: int) -> float:
    async with Producer(tcp) as producer:
        bodies = [PAYLOAD] * batch
        start = time.perf_counter()
        for _ in range(count // batch):
            await producer.mpublish(topic, bodies)
        return (count // batch) * batch / (time.perf_counter() - start)


async def _pynsq(tcp: str, topic: str, count: int, batch: int, multi: bool) -> float:
    import nsq

    loop = asyncio.get_running_loop()
    writer = nsq.Writer([tcp])
    try:
        for _ in range(200):  # pynsq connects in the background
            if writer.conns:
                break
            await asyncio.sleep(0.01)

        async def one(send: Callable[..., object], body: object) -> None:
            fut = loop.create_future()

            def done(conn: object, data: object) -> None:
                if isinstance(data, Exception):
                    fut.set_exception(data)
                else:
                    fut.set_result(None)

            send(topic, body, callback=done)
            await fut

        start = time.perf_counter()
        if multi:
            bodies = [PAYLOAD] * batch
            for _ in range(count // batch):
                await one(writer.mpub, bodies)
            count = (count // batch) * batch
        else:
            for _ in range(count):
                await one(writer.pub, PAYLOAD)
        return count / (time.perf_counter() - start)
    finally:
        for conn in list(writer.conns.values()):
            conn.close()
        await asyncio.sleep(0.05)


async def pynsq_pub(tcp: str, topic: str, count: int, batch: int) -> float:
    return await _pynsq(tcp, topic, count, batch, multi=False)


async def pynsq_mpub(tcp: str, topic: str, count: int, batch: int) -> float:
    return await _pynsq(tcp, topic, count, batch, multi=True)


async def _ansq(tcp: str, topic: str, count: int, batch: int, multi: bool) -> float:
    from ansq import open_connection

    host, port = tcp.rsplit(":", 1)
    conn = await open_connection(host, int(port))
    try:
        start = time.perf_counter()
        if multi:
            bodies = [PAYLOAD] * batch
            for _ in range(count // batch):
                await conn.mpub(topic, *bodies)
            count = (count // batch) * batch
        else:
            for _ in range(count):
                await conn.pub(topic, PAYLOAD)
        return count / (time.perf_counter() - start)
    finally:
        await conn.close()


async def ansq_pub(tcp: str, topic: str, count: int, batch: int) -> float:
    return await _ansq(tcp, topic, count, batch, multi=False)


async def ansq_mpub(tcp: str, topic: str, count: int, batch: int) -> float:
    return await _ansq(tcp, topic, count, batch, multi=True)


Run = Callable[[str, str, int, int], Awaitable[float]]
SCENARIOS: dict[str, dict[str, Run]] = {
    "PUB": {"aioclients": ours_pub, "pynsq": pynsq_pub, "ansq": ansq_pub},
    "MPUB": {"aioclients": ours_mpub, "pynsq": pynsq_mpub, "ansq": ansq_mpub},
}


@contextlib.contextmanager
def servers(args: argparse.Namespace) -> Iterator[str]:
    if args.nsqd_tcp:
        yield args.nsqd_tcp
    else:
        with emulated_nsqd() as (tcp, _http):
            yield tcp


async def main(args: argparse.Namespace, tcp: str) -> None:
    for scenario, clients in SCENARIOS.items():
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, run in clients.items():
                if name not in args.clients:
                    continue
                topic = f"bench_pub_{uuid.uuid4().hex[:8]}"
                try:
                    rate = await asyncio.wait_for(run(tcp, topic, args.count, args.batch), 300)
                except ImportError as exc:
                    print(f"{name}: not installed ({exc})")
                    continue
                best[name] = max(best.get(name, 0.0), rate)
        extra = f" in batches of {args.batch}" if scenario == "MPUB" else ""
        report(f"{scenario}: {args.count} x {len(PAYLOAD)}-byte messages{extra}", best)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", nargs="+", default=["aioclients", "pynsq", "ansq"])
    parser.add_argument("--nsqd-tcp", help="a real nsqd's TCP address (host:port)")
    add_loop_argument(parser)
    ns = parser.parse_args()
    use_loop(ns.loop)
    with servers(ns) as tcp_address:
        run_async(main(ns, tcp_address))
