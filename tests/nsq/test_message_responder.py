"""A Message answers through the MessageResponder it was handed, and knows no Reader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients import InvalidArgumentError
from aioclients.nsq import Message, MessageRespondedError
from aioclients.nsq._message import MessageResponder, new_message, new_messages


@dataclass
class RecordingResponder:
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def requeue_delay_ms(self, msg: Message, delay: float | None) -> int:
        if delay is not None and delay < 0:
            raise InvalidArgumentError("delay must be >= 0")
        return 1000 * msg.attempts if delay is None else int(delay * 1000)

    async def finish(self, msg: Message) -> None:
        self.calls.append(("FIN", msg.id))

    async def requeue(self, msg: Message, delay_ms: int, backoff: bool) -> None:
        self.calls.append(("REQ", msg.id, delay_ms, backoff))

    async def touch(self, msg: Message) -> None:
        self.calls.append(("TOUCH", msg.id))


@dataclass
class Conn:
    address: str = "127.0.0.1:4150"


def _message(responder: MessageResponder, attempts: int = 3) -> Message:
    return Message(b"0" * 16, b"body", 1, attempts, Conn(), responder)  # type: ignore[arg-type]


async def test_finish_and_touch_go_to_the_responder() -> None:
    responder = RecordingResponder()
    msg = _message(responder)
    await msg.touch()
    await msg.finish()
    assert responder.calls == [("TOUCH", b"0" * 16), ("FIN", b"0" * 16)]
    assert msg.has_responded
    with pytest.raises(MessageRespondedError):
        await msg.finish()
    with pytest.raises(MessageRespondedError):
        await msg.touch()
    assert len(responder.calls) == 2


async def test_requeue_takes_the_responders_delay_policy() -> None:
    responder = RecordingResponder()
    await _message(responder, attempts=3).requeue()
    await _message(responder).requeue(0.25, backoff=False)
    assert responder.calls == [("REQ", b"0" * 16, 3000, True), ("REQ", b"0" * 16, 250, False)]


async def test_a_bad_delay_leaves_the_message_unanswered() -> None:
    responder = RecordingResponder()
    msg = _message(responder)
    with pytest.raises(InvalidArgumentError):
        await msg.requeue(-1)
    assert not msg.has_responded
    await msg.finish()
    assert responder.calls == [("FIN", b"0" * 16)]


@settings(max_examples=100, deadline=None)
@given(
    st.binary(min_size=16, max_size=16),
    st.binary(max_size=64),
    st.integers(0, 2**63 - 1),
    st.integers(0, 0xFFFF),
)
def test_new_message_is_the_message_the_class_makes(
    message_id: bytes, body: bytes, timestamp: int, attempts: int
) -> None:
    """The Reader's cheaper way of making a Message leaves every slot as
    ``Message(...)`` does (and the unset ones unset)."""
    conn, responder = Conn(), RecordingResponder()
    args = (message_id, body, timestamp, attempts, conn, responder)
    made = new_message(*args)  # type: ignore[arg-type]
    built = Message(*args)  # type: ignore[arg-type]
    assert type(made) is Message
    for name in Message.__slots__:
        assert hasattr(made, name) == hasattr(built, name), name
        if hasattr(built, name):
            assert getattr(made, name) is getattr(built, name), name
    assert made.give_up_reason is None
    assert made.body_size == len(body)
    assert not made.has_responded


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=16, max_size=16),
            st.binary(max_size=64),
            st.integers(0, 2**63 - 1),
            st.integers(0, 0xFFFF),
        ),
        max_size=5,
    )
)
def test_new_messages_are_the_messages_the_class_makes(
    rows: list[tuple[bytes, bytes, int, int]],
) -> None:
    """The rows' way of making a read's Messages leaves every slot of each as
    ``Message(...)`` does, in order."""
    conn, responder = Conn(), RecordingResponder()
    made = new_messages(
        [(ts, attempts, mid, body) for mid, body, ts, attempts in rows],
        conn,  # type: ignore[arg-type]
        responder,
    )
    assert len(made) == len(rows)
    for msg, row in zip(made, rows, strict=True):
        built = Message(*row, conn, responder)  # type: ignore[arg-type]
        assert type(msg) is Message
        for name in Message.__slots__:
            assert hasattr(msg, name) == hasattr(built, name), name
            if hasattr(built, name):
                assert getattr(msg, name) is getattr(built, name), name
