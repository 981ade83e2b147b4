"""Consume hands subject and reply over undecoded: Msg decodes them when read, and
an ack sends the reply's bytes as they came."""

from __future__ import annotations

import pytest
from support import WaitFor

from aioclients.jetstream import JetStream, Msg

pytestmark = pytest.mark.timeout(60)


class _Sent:
    """Records what a Msg writes (the ``api.transport.send_nowait`` it uses)."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.transport = self

    def send_nowait(self, frame: bytes) -> None:
        self.frames.append(frame)


async def test_msg_from_bytes_decodes_subject_and_reply_and_acks_with_the_bytes() -> None:
    sent = _Sent()
    reply = b"$JS.ACK.S.C.1.7.7.1764168000000000000.0"
    msg = Msg(sent, "orders.ü".encode(), reply, b"x", None)  # type: ignore[arg-type]
    assert msg.subject == "orders.ü"
    assert msg.reply == reply.decode()
    assert isinstance(msg.subject, str)
    assert isinstance(msg.reply, str)
    assert msg.metadata.sequence.stream == 7
    await msg.ack()
    assert sent.frames == [b"PUB " + reply + b" 4\r\n+ACK\r\n"]
    assert repr(msg).startswith("<Msg orders.ü reply='$JS.ACK.S.C.1.7.7.")


async def test_msg_from_str_still_works() -> None:
    sent = _Sent()
    msg = Msg(sent, "a.b", "r.1", b"x", None)  # type: ignore[arg-type]
    assert (msg.subject, msg.reply) == ("a.b", "r.1")
    await msg.nak()
    assert sent.frames == [b"PUB r.1 4\r\n-NAK\r\n"]


async def test_consume_reads_a_utf8_subject_and_its_acks_are_taken(
    js: JetStream, unique_name: str, wait_for: WaitFor
) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    subjects = [f"{unique_name}.é.{i}" for i in range(20)]
    for subject in subjects:
        await js.publish(subject, b"x", headers={"K": "v"} if len(subject) % 2 else None)
    consumer = await stream.create_consumer(durable_name="c", ack_policy="explicit")
    seen = []
    async with consumer.consume(max_messages=5) as messages:
        nc = js.nc
        assert len(nc._run_handlers) == 1  # type: ignore[attr-defined]  # the pull inbox
        async for msg in messages:
            seen.append(msg.subject)
            assert msg.reply.startswith(f"$JS.ACK.{unique_name}.c.")
            await msg.ack()
            if len(seen) == len(subjects):
                break
        assert messages.statistics().delivered == len(subjects)
    assert seen == subjects

    # The PONG of a round trip says the server has read the acks, not that the
    # consumer has applied them (it takes them from a queue of its own): wait for it.
    async def all_acked() -> bool:
        return (await consumer.info()).num_ack_pending == 0

    await wait_for(all_acked, timeout=5, what="no acks pending")
    info = await consumer.info()
    assert info.num_ack_pending == 0
    assert info.delivered.consumer_seq == len(subjects)
    assert not nc._run_handlers  # type: ignore[attr-defined]  # released
