"""consume()'s counts of messages and bytes, against a model, with no server.

A ``MessageStream`` on an in-memory transport is handed deliveries the ways the read
loop hands them over (a read as columns, a run of frames, a run with a status among
the deliveries, one message alone) and taken from in between, through the iterator's
fast path and outside it, with looks at the statistics at any point (each look ends
a grant to the fast path). Whatever the order, the statistics say exactly what the
model says: messages and bytes delivered and still buffered, as the pull buffer
counts them (subject, reply, headers and payload).
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aioclients.jetstream._consume import MessageStream
from aioclients.jetstream._message import Msg, message_size
from aioclients.jetstream._protocol._pull import consume_options
from aioclients.jetstream._protocol._wire import MSG

HEARTBEAT = b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"


class _Transport:
    """Just what a MessageStream asks of its transport: pulls are counted, not sent."""

    def __init__(self) -> None:
        self.pulls = 0

    def new_inbox(self) -> str:
        return "_INBOX.accounting"

    async def subscribe_runs(self, inbox: str, run: Any, deliveries: Any = None) -> Any:
        return types.SimpleNamespace(unsubscribe_nowait=lambda **_: None)

    def frame(self, subject: str, body: bytes, reply: str, headers: Any) -> bytes:
        return b"PUB"

    def write_now(self, frame: bytes) -> bool:
        self.pulls += 1
        return True


class _Api:
    closed = False
    timeout = 5.0

    def __init__(self) -> None:
        self.transport = _Transport()

    def subject(self, name: str) -> str:
        return "$JS.API." + name

    def check_open(self) -> None:
        pass

    def add_listener(self, listener: object) -> None:
        pass

    def remove_listener(self, listener: object) -> None:
        pass


def _message(seq: int, header: bool) -> tuple[bytes, bytes, bytes | None, bytes]:
    subject = b"acc.%d" % (seq % 7)
    reply = b"$JS.ACK.S.C.1.%d.%d.1764168000000000000.%d" % (seq, seq, seq % 5)
    payload = b"p" * (seq * 37 % 90)
    return subject, reply, (b"NATS/1.0\r\nK: %d\r\n\r\n" % seq if header else None), payload


#: (how the read loop hands them over, how many, whether some carry headers)
ARRIVALS = st.tuples(
    st.sampled_from(["columns", "frames", "with-status", "alone"]),
    st.integers(1, 40),
    st.booleans(),
)
STEPS = st.lists(
    st.one_of(
        ARRIVALS,
        st.tuples(st.just("take"), st.integers(1, 60)),
        st.tuples(st.just("look"), st.just(0)),
    ),
    max_size=40,
)


@given(max_messages=st.integers(2, 80), steps=STEPS)
def test_statistics_count_what_was_delivered_and_is_left(
    max_messages: int, steps: list[tuple[Any, ...]]
) -> None:
    asyncio.run(_run(max_messages, steps))


async def _run(max_messages: int, steps: list[tuple[Any, ...]]) -> None:
    api: Any = _Api()
    consumer: Any = types.SimpleNamespace(
        stream_name="S", name="C", cached_info=types.SimpleNamespace(config={})
    )
    stream = MessageStream(api, consumer, consume_options(max_messages=max_messages))
    model: list[tuple[bytes, int]] = []  # (payload, size) of each buffered message
    seq = delivered = 0
    async with stream:
        for step in steps:
            kind = step[0]
            if kind == "take":
                for _ in range(min(step[1], len(model))):
                    msg = await stream.__anext__()
                    payload, size = model.pop(0)
                    assert (msg.data, message_size(msg)) == (payload, size)
                    delivered += 1
            elif kind == "look":
                pass
            else:
                count, headers = step[1], step[2]
                made = []
                for i in range(count):
                    seq += 1
                    made.append(_message(seq, headers and (kind == "alone" or i % 2 == 0)))
                _hand_over(stream, kind, made)
                for subject, reply, header, payload in made:
                    size = len(subject) + len(reply) + len(payload) + len(header or b"")
                    model.append((payload, size))
            # what is buffered and not granted, in runs: whole, in order
            ungranted = model[stream._ready :]
            runs = stream._runs
            assert sum(count for count, _ in runs) == len(ungranted)
            assert sum(size for _, size in runs) == sum(size for _, size in ungranted)
            s = stream.statistics()
            assert (s.delivered, s.buffered_messages) == (delivered, len(model))
            assert s.buffered_bytes == sum(size for _, size in model)
            assert s.received == delivered + len(model)


def _hand_over(stream: MessageStream, kind: str, made: list[Any]) -> None:
    if kind == "columns" and all(header is None for _, _, header, _ in made):
        subjects, replies, _, payloads = zip(*made, strict=True)
        stream._on_deliveries(subjects, replies, payloads)
    elif kind == "alone":
        for subject, reply, header, payload in made:
            stream._on_raw(subject, reply, payload, header)
    else:
        frames = [(MSG, s, 1, r, h, p) for s, r, h, p in made]
        if kind == "with-status":  # a heartbeat among them: each one alone, in order
            frames.insert(len(frames) // 2, (MSG, b"_INBOX.accounting", 1, b"", HEARTBEAT, b""))
        stream._on_run(frames)


def test_message_size_is_what_the_pull_buffer_counts() -> None:
    plain = Msg(None, b"a.b", b"$JS.ACK.x", b"12345", None)  # type: ignore[arg-type]
    headed = Msg(None, b"a.b", b"r", b"", b"NATS/1.0\r\n\r\n")  # type: ignore[arg-type]
    assert message_size(plain) == 3 + 9 + 5
    assert message_size(headed) == 3 + 1 + 0 + 12
