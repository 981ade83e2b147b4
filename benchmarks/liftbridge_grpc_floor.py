"""What a bare grpc.aio server costs per streamed message: the ceiling of the emulator.

The Liftbridge benchmarks run against ``aioclients.testing.LiftbridgeCluster``,
a Python emulator built on ``grpc.aio``. This script measures a server that does
nothing but the gRPC part, in a child process, to show how much of the
emulator's CPU per message is gRPC's own and so how fast any client can go
against it:

* ``PublishAsync`` echo: for each request read, one pre-encoded response is
  written (what the emulator must at least do per pipelined publish);
* ``Subscribe``: the server writes ``--count`` pre-encoded messages.

Both are driven by the aioclients stream transport (``Http2Channel``); the
server's CPU per message is read from /proc, the client's is this process's.

    python benchmarks/liftbridge_grpc_floor.py --count 20000
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

from _loop import add_loop_argument, run_async, use_loop
from liftbridge_common import process_cpu, stop_child

from aioclients.liftbridge._io._h2 import Http2Channel
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._pb import api_pb2_grpc as pb_grpc


def _serve(port: int, count: int) -> None:
    import grpc
    import grpc.aio

    message = pb.Message(
        offset=123_456, value=b"x" * 100, timestamp=time.time_ns(), stream="s", subject="s"
    ).SerializeToString()
    response = pb.PublishResponse(
        correlationId="abcdef.1", ack=pb.Ack(stream="s", offset=5, correlationId="abcdef.1")
    ).SerializeToString()

    async def publish_async(requests: object, context: object) -> object:
        async for _ in requests:  # type: ignore[attr-defined]
            yield response

    async def subscribe(request: object, context: object) -> object:
        yield b""
        for _ in range(count):
            yield message

    async def main() -> None:
        server = grpc.aio.server()
        handlers = {
            "PublishAsync": grpc.stream_stream_rpc_method_handler(publish_async),
            "Subscribe": grpc.unary_stream_rpc_method_handler(
                subscribe, request_deserializer=pb.SubscribeRequest.FromString
            ),
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("proto.API", handlers),)
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)
        await server.stop(None)

    asyncio.run(main())


def _cpu(pid: int) -> float:
    cpu = process_cpu(pid)
    if cpu is None:
        raise RuntimeError("reading a process's CPU time needs Linux /proc")
    return cpu


async def _publish_async(address: str, n: int) -> float:
    channel = Http2Channel(address)
    call = pb_grpc.APIStub(channel).PublishAsync()
    request = pb.PublishRequest(stream="s", value=b"x" * 100, correlationId="abcdef.1")
    window = asyncio.Semaphore(1024)  # like publish_async_window

    async def read() -> None:
        for _ in range(n):
            await call.read()
            window.release()

    start = time.perf_counter()
    reader = asyncio.ensure_future(read())
    for _ in range(n):
        await window.acquire()
        if not call.write_nowait(request):
            await call.write(request)
    await reader
    elapsed = time.perf_counter() - start
    await call.done_writing()
    call.cancel()
    await channel.close()
    return n / elapsed


async def _subscribe(address: str, n: int) -> float:
    channel = Http2Channel(address)
    call = pb_grpc.APIStub(channel).Subscribe(pb.SubscribeRequest(stream="s"))
    await call.read()  # the empty first message
    start = time.perf_counter()
    for _ in range(n):
        await call.read()
    elapsed = time.perf_counter() - start
    call.cancel()
    await channel.close()
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    add_loop_argument(parser)
    args = parser.parse_args()
    if args.serve:
        _serve(*args.serve)
        return
    use_loop(args.loop)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), str(args.count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the gRPC server did not start")
        address = f"127.0.0.1:{port}"
        n = args.count
        print(f"bare grpc.aio server, {n} messages, 100-byte payloads")
        for name, run in (("PublishAsync echo", _publish_async), ("Subscribe", _subscribe)):
            before = _cpu(proc.pid)
            mine = time.process_time()
            rate = run_async(run(address, n))
            client = (time.process_time() - mine) / n * 1e6
            server = (_cpu(proc.pid) - before) / n * 1e6
            print(
                f"{name:<18} {rate:>9,.0f} msgs/s   server CPU {server:6.0f} us/msg   "
                f"client CPU {client:6.0f} us/msg"
            )
    finally:
        stop_child(proc)


if __name__ == "__main__":
    main()
