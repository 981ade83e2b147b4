"""The ordered consumer's read-loop sink, fed by hand (no server): what it keeps, and
the stream sequence ``last_stream_seq`` reports while the kept messages are handed
out, whichever way each read was judged (a counting run, a run read number by number,
one delivery at a time)."""

from __future__ import annotations

from typing import Any

from aioclients.jetstream._ordered import OrderedConsumer, OrderedMessageStream
from aioclients.jetstream._protocol._pull import consume_options


def _reply(stream_seq: int, consumer_seq: int, pending: int = 0) -> bytes:
    return b"$JS.ACK.ORD.c1.1.%d.%d.1764168000123456789.%d" % (
        stream_seq,
        consumer_seq,
        pending,
    )


def _columns(pairs: list[tuple[int, int]]) -> tuple[Any, ...]:
    subjects = tuple(b"ord.%d" % sseq for sseq, _ in pairs)
    replies = tuple(_reply(sseq, cseq) for sseq, cseq in pairs)
    payloads = tuple(b"m%d" % sseq for sseq, _ in pairs)
    return subjects, replies, (None,) * len(pairs), payloads


async def test_last_stream_seq_follows_the_hand_out_across_reads_of_every_kind() -> None:
    api: Any = None  # the Msgs keep it; nothing here calls it
    oc = OrderedConsumer(api, "ORD", {})
    generation = oc._cursor.created()
    stream = OrderedMessageStream(oc, consume_options(max_messages=100), None)
    oc._active = stream
    _, columns = stream._sink(generation)
    reads = [
        # both sequences count up by one: judged as a range
        [(1, 1), (2, 2), (3, 3)],
        # stream sequences with holes (a filtered consumer): read number by number
        [(5, 4), (9, 5), (10, 6)],
        # a stream sequence seen already (dropped): one delivery at a time
        [(10, 7), (12, 8)],
        # and a range again
        [(13, 9), (14, 10)],
    ]
    for pairs in reads:
        columns(*_columns(pairs))
    kept = [1, 2, 3, 5, 9, 10, 12, 13, 14]
    # What a replacement consumer would resume after: just short of the first
    # message kept and not handed out yet.
    assert oc.last_stream_seq == 0
    got = []
    for at, expected in enumerate(kept):
        msg = await stream.__anext__()
        got.append(msg.metadata.sequence.stream)
        assert msg.data == b"m%d" % expected
        following = kept[at + 1] - 1 if at + 1 < len(kept) else expected
        assert oc.last_stream_seq == following
    assert got == kept
    assert stream._first_unyielded() is None
    assert oc.last_stream_seq == 14


async def test_reads_left_out_entirely_leave_no_runs_behind() -> None:
    """A run whose deliveries were all dropped keeps no sequences, so the first
    unyielded sequence is that of the next kept message."""
    api: Any = None
    oc = OrderedConsumer(api, "ORD", {})
    generation = oc._cursor.created()
    stream = OrderedMessageStream(oc, consume_options(max_messages=100), None)
    oc._active = stream
    _, columns = stream._sink(generation)
    columns(*_columns([(1, 1), (2, 2)]))
    assert await stream.__anext__() is not None
    assert await stream.__anext__() is not None
    columns(*_columns([(2, 3)]))  # already seen: dropped, nothing kept
    assert stream._first_unyielded() is None
    columns(*_columns([(3, 4)]))
    assert stream._first_unyielded() == 3
    msg = await stream.__anext__()
    assert msg.metadata.sequence.stream == 3
    assert oc.last_stream_seq == 3


async def test_a_run_maker_may_make_a_head_and_leave_the_rest_one_by_one() -> None:
    """``make_run`` makes the first ``used`` deliveries of a run; ``make`` takes the
    rest in order, with their pending counts and times, and the cursor has judged
    them all."""
    api: Any = None
    oc = OrderedConsumer(api, "ORD", {})
    generation = oc._cursor.created()
    alone: list[int] = []

    def make(subject: str, reply: bytes, data: bytes, *rest: Any) -> Any:
        alone.append(rest[1])
        return ("one", subject, data, rest[1:])

    def make_run(
        subjects: Any, replies: Any, headers: Any, datas: Any, seqs: Any
    ) -> tuple[list[Any], Any, int]:
        used = 2 if len(seqs) > 2 else len(seqs)
        return [("run", s) for s in seqs[:used]], seqs[:used], used

    stream = OrderedMessageStream(
        oc, consume_options(max_messages=100), None, make, make_run=make_run
    )
    oc._active = stream
    _, columns = stream._sink(generation)
    subjects, replies, headers, payloads = _columns([(1, 1), (2, 2), (3, 3), (4, 4)])
    replies = (*replies[:3], _reply(4, 4, pending=7))
    columns(subjects, replies, headers, payloads)
    columns(*_columns([(6, 5)]))
    got = [await stream.__anext__() for _ in range(5)]
    assert [g[0] for g in got] == ["run", "run", "one", "one", "run"]
    assert got[:2] == [("run", 1), ("run", 2)]
    assert got[2] == ("one", "ord.3", b"m3", (3, 0, 1764168000123456789))
    assert got[3][3] == (4, 7, 1764168000123456789)  # its pending count and time
    assert alone == [3, 4]
    assert oc._cursor.stream_seq == 6
    assert oc._cursor.expected == 6
    assert oc.last_stream_seq == 6
