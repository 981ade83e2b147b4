"""An NSQ worker: lookupd discovery, concurrent handlers, a give-up handler, and a graceful
shutdown on SIGTERM that neither loses a message nor finishes one twice.

The worker (``python examples/nsq_worker.py --worker LOOKUPD_HTTP TOPIC``) finds the nsqd
that have TOPIC through nsqlookupd and runs ``Reader.run(handle, concurrency=8)``. A handler
that returns finishes its message; one that raises requeues it with backoff; a message
delivered more than ``max_attempts`` times goes to ``give_up`` (a dead-letter log here).
On SIGTERM it sets ``max_in_flight`` to 0 (RDY 0: nsqd sends nothing more), lets the
handlers finish every message already received, then closes: what it finished is finished
once, and what it never received stays in nsqd for the next worker.

Run without arguments, the example is self-contained: it starts an nsqlookupd and an nsqd
emulator, queues 400 jobs (3 of them poison), starts a worker, sends it SIGTERM midway,
starts a second worker for the rest, and checks the two workers' logs: every job finished
exactly once, every poison message given up exactly once, nothing left in nsqd.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import sys
import time
from collections.abc import Callable

from aioclients.nsq import Message, Producer, Reader
from aioclients.testing import NsqdEmulator, NsqlookupdEmulator

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


async def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every 10 ms for at most ``timeout`` seconds; whether it held."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


def _count(logs: list[str], kind: str) -> collections.Counter[str]:
    return collections.Counter(line.split()[1] for line in logs if line.startswith(kind + " "))


async def demonstrate() -> None:
    topic = "jobs"
    async with NsqlookupdEmulator() as lookupd:
        async with NsqdEmulator(lookupd_tcp_addresses=[lookupd.tcp_address]) as nsqd:
            await check_workers(lookupd, nsqd, topic)
        # Stop nsqlookupd only once the stopped nsqd's registration ended (Python 3.11's
        # asyncio logs a cancelled connection handler as an error).
        await wait_until(lambda: not (lookupd.lookup(topic) or {}).get("producers"), 10)


async def check_workers(lookupd: NsqlookupdEmulator, nsqd: NsqdEmulator, topic: str) -> None:
    bodies = [b"job-%d" % i for i in range(JOBS)]
    for i in range(POISON):
        bodies.insert(i * 100 + 50, b"poison-%d" % i)
    async with Producer(nsqd.tcp_address) as producer:
        await producer.mpublish(topic, bodies)
    # nsqd registers the topic with nsqlookupd over its TCP protocol.
    if not await wait_until(lambda: lookupd.lookup(topic) is not None, 10):
        raise SystemExit("nsqd did not register the topic with nsqlookupd")
    print(f"queued {JOBS} jobs and {POISON} poison messages on topic {topic!r}")

    first: list[str] = []
    code = await run_worker(
        lookupd.http_address, topic, first, lambda log: len(_count(log, "done")) >= JOBS // 4
    )
    print(f"worker 1 (SIGTERM after {JOBS // 4} jobs) exited {code}: {first[-1]}")

    second: list[str] = []

    def all_handled(log: list[str]) -> bool:
        logs = first + log
        return len(_count(logs, "done")) == JOBS and len(_count(logs, "gave-up")) == POISON

    code2 = await run_worker(lookupd.http_address, topic, second, all_handled)
    print(f"worker 2 (SIGTERM when everything was handled) exited {code2}: {second[-1]}")

    done = _count(first + second, "done")
    gave_up = _count(first + second, "gave-up")
    twice = sorted(body for body, n in (done + gave_up).items() if n > 1)
    lost = sorted({b.decode() for b in bodies} - set(done) - set(gave_up))
    (stats,) = nsqd.stats(topic=topic, include_clients=False)["topics"]
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
        asyncio.run(demonstrate())
