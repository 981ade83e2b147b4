"""An NSQ worker: lookupd discovery, concurrent handlers, a give-up handler, and a graceful
shutdown on SIGTERM that neither loses a message nor finishes one twice.

The worker (``python examples/nsq_worker.py --worker LOOKUPD_HTTP TOPIC``) finds the nsqd
that have TOPIC through nsqlookupd and runs ``Reader.run(handle, concurrency=8)``. A handler
that returns finishes its message; one that raises requeues it with backoff; a message
delivered more than ``max_attempts`` times goes to ``give_up`` (a dead-letter log here).
On SIGTERM it sets ``max_in_flight`` to 0 (RDY 0: nsqd sends nothing more), lets the
handlers finish every message already received, then closes: what it finished is finished
once, and what it never received stays in nsqd for the next worker.

Run without arguments, the example queues 400 jobs (3 of them poison) on a topic of its
own, starts a worker, sends it SIGTERM midway, starts a second worker for the rest, and
checks the two workers' logs: every job finished exactly once, every poison message given
up exactly once, nothing left in nsqd (then it deletes the topic). Run it against the
local servers (nsqd and nsqlookupd emulators among them), from a checkout (`./run demo`
or `./run test` made `.venv`), each command in a terminal of its own:

    .venv/bin/aioclients-servers
    .venv/bin/python examples/nsq_worker.py

With pip: `pip install "aioclients[servers]"`, then the same without `.venv/bin/`. Real
nsqd and nsqlookupd work too; NSQD_TCP, NSQD_HTTP and NSQLOOKUPD_HTTP (defaults
127.0.0.1:4150, 127.0.0.1:4151 and 127.0.0.1:4161) name them.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import aiohttp

from aioclients.nsq import Message, NSQConnectError, Producer, Reader

NSQD_TCP = os.environ.get("NSQD_TCP", "127.0.0.1:4150")
NSQD_HTTP = os.environ.get("NSQD_HTTP", "127.0.0.1:4151")
NSQLOOKUPD_HTTP = os.environ.get("NSQLOOKUPD_HTTP", "127.0.0.1:4161")
CHANNEL = "workers"
JOBS = 400
POISON = 3
CONCURRENCY = 8


# -- the worker -------------------------------------------------------------------------------


async def handle(msg: Message) -> None:
    """The business logic. Raising requeues the message (with backoff)."""
    if msg.body.startswith(b"poison"):
        raise ValueError(f"cannot handle {msg.body!r}")
    await asyncio.sleep(0.002)  # the work
    print("done", msg.body.decode(), flush=True)


def give_up(msg: Message) -> None:
    """Called (instead of ``handle``) once a message exceeded ``max_attempts``; the Reader
    finishes it. A real service would store it in a dead-letter topic or table."""
    print("gave-up", msg.body.decode(), msg.attempts, flush=True)


async def worker(lookupd_http: str, topic: str) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    async with Reader(
        topic,
        CHANNEL,
        lookupd_http_addresses=[lookupd_http],
        max_in_flight=32,
        max_attempts=3,
        on_give_up=give_up,
        requeue_delay=0.05,  # per attempt; a real service keeps the default (90 s)
        backoff_multiplier=0.05,  # first backoff window, seconds (default 1)
        max_backoff_duration=0.5,
        msg_timeout=5,  # nsqd re-delivers what a crashed worker held after this
        lookupd_poll_interval=1,
    ) as reader:
        running = asyncio.create_task(reader.run(handle, concurrency=CONCURRENCY))
        stop = asyncio.create_task(stopping.wait())
        await asyncio.wait({running, stop}, return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            running.result()  # run() only ends on its own when something failed
        print("worker: SIGTERM, draining", flush=True)
        # No new messages (RDY 0); the handlers finish what was received. A message nsqd
        # sent before it saw RDY 0 can still arrive: wait until nothing is in flight
        # for a moment.
        reader.set_max_in_flight(0)
        deadline = loop.time() + 30
        quiet_since: float | None = None
        while loop.time() < deadline:
            if reader.statistics().in_flight == 0:
                quiet_since = quiet_since or loop.time()
                if loop.time() - quiet_since >= 0.2:
                    break
            else:
                quiet_since = None
            await asyncio.sleep(0.01)
        stats = reader.statistics()
    # Leaving `async with` closed the Reader (CLS); run() ends once its handlers are idle.
    await asyncio.wait_for(running, timeout=10)
    print(
        f"worker: stopped; finished {stats.messages_finished}, requeued "
        f"{stats.messages_requeued}, gave up {stats.messages_given_up}, "
        f"{stats.in_flight} left in flight",
        flush=True,
    )


# -- the self-contained demonstration ---------------------------------------------------------


async def run_worker(
    lookupd_http: str, topic: str, log: list[str], stop_when: Callable[[list[str]], bool]
) -> int:
    """Start a worker process, collect its log, SIGTERM it once ``stop_when(log)`` holds."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", lookupd_http, topic, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    signalled = False
    deadline = time.monotonic() + 90
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=deadline - time.monotonic())
        if not line:
            break
        log.append(line.decode().rstrip("\n"))
        if not signalled and stop_when(log):
            proc.send_signal(signal.SIGTERM)
            signalled = True
    return await asyncio.wait_for(proc.wait(), timeout=30)


async def wait_until(condition: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    """Ask ``condition`` every 50 ms for at most ``timeout`` seconds; whether it held."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def _count(logs: list[str], kind: str) -> collections.Counter[str]:
    return collections.Counter(line.split()[1] for line in logs if line.startswith(kind + " "))


async def demonstrate() -> None:
    topic = f"jobs_{uuid.uuid4().hex[:8]}"
    bodies = [b"job-%d" % i for i in range(JOBS)]
    for i in range(POISON):
        bodies.insert(i * 100 + 50, b"poison-%d" % i)
    async with Producer(NSQD_TCP) as producer:
        await producer.mpublish(topic, bodies)
    async with aiohttp.ClientSession() as http:
        try:
            await check_workers(http, topic, bodies)
        finally:  # leave the servers as they were
            async with http.post(f"http://{NSQD_HTTP}/topic/delete", params={"topic": topic}):
                pass


async def check_workers(http: aiohttp.ClientSession, topic: str, bodies: list[bytes]) -> None:
    async def registered() -> bool:  # nsqd registers the topic with nsqlookupd over TCP
        lookup = f"http://{NSQLOOKUPD_HTTP}/lookup"
        async with http.get(lookup, params={"topic": topic}) as answer:
            return answer.status == 200 and bool((await answer.json())["producers"])

    if not await wait_until(registered, 10):
        raise SystemExit("nsqd did not register the topic with nsqlookupd")
    print(f"queued {JOBS} jobs and {POISON} poison messages on topic {topic!r}")

    first: list[str] = []
    code = await run_worker(
        NSQLOOKUPD_HTTP, topic, first, lambda log: len(_count(log, "done")) >= JOBS // 4
    )
    print(f"worker 1 (SIGTERM after {JOBS // 4} jobs) exited {code}: {first[-1]}")

    second: list[str] = []

    def all_handled(log: list[str]) -> bool:
        logs = first + log
        return len(_count(logs, "done")) == JOBS and len(_count(logs, "gave-up")) == POISON

    code2 = await run_worker(NSQLOOKUPD_HTTP, topic, second, all_handled)
    print(f"worker 2 (SIGTERM when everything was handled) exited {code2}: {second[-1]}")

    done = _count(first + second, "done")
    gave_up = _count(first + second, "gave-up")
    twice = sorted(body for body, n in (done + gave_up).items() if n > 1)
    lost = sorted({b.decode() for b in bodies} - set(done) - set(gave_up))
    stats_url = f"http://{NSQD_HTTP}/stats"
    params = {"format": "json", "topic": topic, "channel": CHANNEL}
    async with http.get(stats_url, params=params) as answer:
        (stats,) = (await answer.json())["topics"]
    (channel,) = stats["channels"]
    left = channel["depth"] + channel["in_flight_count"] + channel["deferred_count"]
    print(
        f"finished: {sum(done.values())} jobs ({len(_count(first, 'done'))} by worker 1, "
        f"{len(_count(second, 'done'))} by worker 2); given up: {sorted(gave_up)}"
    )
    if code or code2 or twice or lost or left:
        raise SystemExit(f"check failed: twice={twice} lost={lost} left in nsqd={left}")
    print("nothing finished twice, nothing lost, nothing left in nsqd")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        asyncio.run(worker(sys.argv[2], sys.argv[3]))
    else:
        try:
            asyncio.run(demonstrate())
        except NSQConnectError as exc:  # no nsqd: say so in one line
            raise SystemExit(exc) from None
