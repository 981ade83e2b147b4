"""Run the NSQ emulators in a process of their own (for benchmarks).

``python -m aioclients.testing._nsq_serve [--lookupd] [--nsqd N] [...]`` starts
an optional nsqlookupd emulator and N nsqd emulators (registered with it), prints
one line per server once they listen::

    nsqlookupd tcp=127.0.0.1:PORT http=127.0.0.1:PORT
    nsqd tcp=127.0.0.1:PORT http=127.0.0.1:PORT

then ``ready``, and runs until SIGINT or SIGTERM. A benchmark thus measures its
client, not a server sharing the client's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from aioclients.testing.nsqd import NsqdEmulator
from aioclients.testing.nsqlookupd import NsqlookupdEmulator


async def serve(args: argparse.Namespace) -> None:
    """Start the servers, print their addresses, wait for a signal, stop them."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lookupd: NsqlookupdEmulator | None = None
    nsqds: list[NsqdEmulator] = []
    try:
        if args.lookupd:
            lookupd = NsqlookupdEmulator(host=args.host)
            await lookupd.start()
            print(f"nsqlookupd tcp={lookupd.tcp_address} http={lookupd.http_address}", flush=True)
        for i in range(args.nsqd):
            nsqd = NsqdEmulator(
                host=args.host,
                tcp_port=args.tcp_port + i if args.tcp_port else 0,
                http_port=args.http_port + i if args.http_port else 0,
                msg_timeout=args.msg_timeout,
                max_rdy_count=args.max_rdy_count,
            )
            await nsqd.start()
            nsqds.append(nsqd)
            if lookupd is not None:
                lookupd.register(nsqd)
            print(f"nsqd tcp={nsqd.tcp_address} http={nsqd.http_address}", flush=True)
        print("ready", flush=True)
        await stop.wait()
    finally:
        for nsqd in nsqds:
            await nsqd.close()
        if lookupd is not None:
            await lookupd.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until a signal."""
    parser = argparse.ArgumentParser(prog="python -m aioclients.testing._nsq_serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--nsqd", type=int, default=1, help="how many nsqd emulators")
    parser.add_argument("--lookupd", action="store_true", help="also an nsqlookupd emulator")
    parser.add_argument("--tcp-port", type=int, default=0, help="first nsqd TCP port (0: free)")
    parser.add_argument("--http-port", type=int, default=0, help="first nsqd HTTP port (0: free)")
    parser.add_argument("--msg-timeout", type=float, default=60.0)
    parser.add_argument("--max-rdy-count", type=int, default=2500)
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
