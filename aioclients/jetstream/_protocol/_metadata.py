"""Message metadata from a JetStream ack subject (the reply of a delivered message).

Two layouts exist:

    $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>           (9 tokens)
    $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<dseq>
        .<ts>.<pending>[.<random>...]                                               (>= 11 tokens)

The second (server 2.9+ with domains or account hashes) writes ``_`` for no domain.
``ts`` is nanoseconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from aioclients._errors import RemoteProtocolError

__all__ = ("MsgMetadata", "SequencePair", "parse_ack_subject")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class SequencePair:
    """A message's position: in the stream and in the consumer's delivery order."""

    stream: int
    consumer: int


@dataclass(frozen=True, slots=True)
class MsgMetadata:
    """What the ack subject says about a delivered message."""

    stream: str
    consumer: str
    sequence: SequencePair
    num_delivered: int
    num_pending: int
    timestamp: datetime
    timestamp_ns: int
    domain: str | None = None


def parse_ack_subject(reply: str) -> MsgMetadata:
    """Parse an ack subject into :class:`MsgMetadata`.

    Raises:
        RemoteProtocolError: ``reply`` is not a JetStream ack subject.
    """
    tokens = reply.split(".")
    n = len(tokens)
    if n < 9 or tokens[0] != "$JS" or tokens[1] != "ACK" or n == 10:
        raise RemoteProtocolError(f"not a JetStream ack subject: {reply!r}")
    if n == 9:
        domain: str | None = None
        rest = tokens[2:]
    else:
        domain = None if tokens[2] == "_" else tokens[2]
        rest = tokens[4:]
    try:
        stream, consumer = rest[0], rest[1]
        delivered, sseq, dseq, ts, pending = (int(t) for t in rest[2:7])
    except ValueError:
        raise RemoteProtocolError(f"malformed JetStream ack subject: {reply!r}") from None
    if not stream or not consumer or min(delivered, sseq, dseq, ts, pending) < 0:
        raise RemoteProtocolError(f"malformed JetStream ack subject: {reply!r}")
    return MsgMetadata(
        stream=stream,
        consumer=consumer,
        sequence=SequencePair(stream=sseq, consumer=dseq),
        num_delivered=delivered,
        num_pending=pending,
        timestamp=_EPOCH + timedelta(microseconds=ts // 1000),
        timestamp_ns=ts,
        domain=domain,
    )
