"""Instructions per sequential Liftbridge ``publish``, counted by valgrind.

``publish`` waits for each ack before the next message, so its time per message
is mostly the round trip, and the CPU it reports moves with the machine's load.
This runs each client under ``valgrind --tool=cachegrind --cache-sim=no`` twice,
publishing N and 2N 100-byte messages one at a time (LEADER acks), and prints the
difference divided by N: the instructions per publish, start-up and connecting
left out. valgrind counts every thread of the process (gRPC's own included) but
not the kernel's work, so read it next to ``liftbridge_publish.py``'s CPU. Clients:

- ``ours``: ``client.publish``;
- ``grpc``: a bare ``grpc.aio`` stub's ``Publish`` with the same request (the
  transport ``publish`` runs on, with nothing of the client around it);
- ``http2``: the same call on the client's own HTTP/2 channel (the one of the
  Subscribe and PublishAsync streams).

    python benchmarks/liftbridge_publish_instructions.py --addresses 127.0.0.1:9292
    python benchmarks/liftbridge_publish_instructions.py --addresses ... \\
        --tree /tmp/base --clients ours                      # another checkout
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from _valgrind import count_instructions

HERE = Path(__file__).resolve().parent
PAYLOAD = b"x" * 100


async def publishes(addresses: list[str], client: str, n: int) -> None:
    """One run: a fresh stream, then ``n`` publishes awaited one at a time."""
    from aioclients import liftbridge

    name = f"bench_{uuid.uuid4().hex[:8]}"
    async with await liftbridge.connect(addresses) as ours:
        await ours.create_stream(name, name)
        if client == "ours":
            for _ in range(n):
                await ours.publish(name, PAYLOAD)
            return
    import grpc.aio

    from aioclients.liftbridge._io._grpc import Http2Channel
    from aioclients.liftbridge._pb import api_pb2 as pb
    from aioclients.liftbridge._pb import api_pb2_grpc as pb_grpc

    req = pb.PublishRequest(stream=name, value=PAYLOAD, ackPolicy=pb.AckPolicy.LEADER)
    address = addresses[0]
    channel = grpc.aio.insecure_channel(address) if client == "grpc" else Http2Channel(address)
    stub = pb_grpc.APIStub(channel)
    for _ in range(n):
        await stub.Publish(req, timeout=10)
    await channel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", required=True, help="host:port[,host:port...]")
    parser.add_argument("--count", type=int, default=300, help="N (runs of N and 2N)")
    parser.add_argument(
        "--clients", nargs="+", default=["ours", "grpc", "http2"], help="clients to count"
    )
    parser.add_argument("--tree", default=str(HERE.parent), help="the checkout to measure")
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    parser.add_argument("--run", nargs=2, metavar=("CLIENT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    from _loop import run_async, use_loop

    use_loop(args.loop)
    addresses = args.addresses.split(",")
    if args.run:
        run_async(publishes(addresses, args.run[0], int(args.run[1])))
        return
    print(
        f"instructions per publish, {args.loop}, checkout {args.tree} "
        f"({2 * args.count} minus {args.count} publishes):"
    )
    for client in args.clients:
        counts = []
        for n in (args.count, 2 * args.count):
            run = ["--addresses", args.addresses, "--run", client, str(n), "--loop", args.loop]
            counts.append(count_instructions(__file__, run, [args.tree, str(HERE)]))
        print(f"  {client:<6} {(counts[1] - counts[0]) / args.count:>12,.0f}", flush=True)


if __name__ == "__main__":
    main()
