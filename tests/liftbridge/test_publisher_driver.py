"""The PublishAsync driver against a scripted stream: window, correlation, timeouts, close."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc
import pytest

from aioclients import InvalidArgumentError
from aioclients.liftbridge import (
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeTimeoutError,
    NoSuchStreamError,
)
from aioclients.liftbridge._pb import api_pb2 as pb
from aioclients.liftbridge._publisher import AsyncPublisher


class FakeCall:
    """A PublishAsync stream: records writes; the test feeds responses."""

    def __init__(self) -> None:
        self.written: list[pb.PublishRequest] = []
        self.responses: asyncio.Queue[Any] = asyncio.Queue()
        self.done_writing_called = False
        self.cancelled = False

    async def write(self, request: pb.PublishRequest) -> None:
        self.written.append(request)

    async def read(self) -> Any:
        return await self.responses.get()

    async def done_writing(self) -> None:
        self.done_writing_called = True

    def cancel(self) -> None:
        self.cancelled = True
        self.responses.put_nowait(grpc.aio.EOF)

    def ack(self, cid: str, offset: int) -> None:
        self.responses.put_nowait(
            pb.PublishResponse(
                correlationId=cid, ack=pb.Ack(stream="s", offset=offset, correlationId=cid)
            )
        )


class FakeStub:
    def __init__(self) -> None:
        self.calls: list[FakeCall] = []

    def PublishAsync(self) -> FakeCall:
        call = FakeCall()
        self.calls.append(call)
        return call


class FakeClient:
    """Stands in for the broker layer (``_brokers.Brokers``) the publisher takes."""

    def __init__(self) -> None:
        self.rng = random.Random(7)
        self.max_rpc_attempts = 3
        self.closed = False
        self.stub = FakeStub()

    def jitter(self) -> float:
        return 0.0

    async def any_stream_stub(self) -> tuple[str, FakeStub]:
        return "b:1", self.stub

    def broker_unavailable(self, address: str) -> None:
        pass


def _req(cid: str, policy: int = pb.LEADER) -> pb.PublishRequest:
    return pb.PublishRequest(stream="s", value=b"v", correlationId=cid, ackPolicy=policy)  # type: ignore[arg-type]


async def test_acks_resolve_futures_by_correlation_id_and_the_window_bounds_sends() -> None:
    client = FakeClient()
    pub = AsyncPublisher(client, window=2)  # type: ignore[arg-type]
    f1 = await pub.send(_req("a"), partition=0, timeout=5)
    f2 = await pub.send(_req("b"), partition=1, timeout=5)
    third = asyncio.ensure_future(pub.send(_req("c"), partition=0, timeout=5))
    await asyncio.sleep(0.01)
    assert not third.done()  # two acks outstanding: the third send waits
    assert pub.outstanding == 2
    call = client.stub.calls[0]
    call.ack("b", 7)  # out of order
    f3 = await asyncio.wait_for(third, 1)
    ack_b = await asyncio.wait_for(f2, 1)
    assert (ack_b.offset, ack_b.partition, ack_b.correlation_id) == (7, 1, "b")
    assert not f1.done()
    call.ack("a", 6)
    call.ack("c", 8)
    assert (await f1).offset == 6
    assert (await f3).offset == 8
    assert [r.correlationId for r in call.written] == ["a", "b", "c"]
    await pub.close()


async def test_ack_policy_none_resolves_at_once_and_frees_the_window() -> None:
    client = FakeClient()
    pub = AsyncPublisher(client, window=1)  # type: ignore[arg-type]
    for i in range(3):
        fut = await pub.send(_req(f"n{i}", pb.NONE), partition=0, timeout=5)
        assert fut.done()
        assert fut.result() is None
    assert pub.outstanding == 0
    await pub.close()


async def test_a_missing_ack_times_out_and_frees_the_window() -> None:
    client = FakeClient()
    pub = AsyncPublisher(client, window=1)  # type: ignore[arg-type]
    fut = await pub.send(_req("t"), partition=0, timeout=0.05)
    with pytest.raises(LiftbridgeTimeoutError):
        await asyncio.wait_for(fut, 1)
    # the late ack is ignored; the window is free again
    client.stub.calls[0].ack("t", 1)
    nxt = await asyncio.wait_for(pub.send(_req("u"), partition=0, timeout=5), 1)
    client.stub.calls[0].ack("u", 2)
    assert (await nxt).offset == 2
    await pub.close()


async def test_deadlines_of_different_lengths_expire_in_their_own_order() -> None:
    # One timer serves every pending ack: a short deadline sent after a long one
    # must still fire first, and an answered ack must never time out. The
    # answered ack's deadline lies between the others (the timer must skip its
    # stale entry). The deadlines are seconds apart, not tenths: a loop stalled
    # on a busy machine must still read the answered ack in time, and must not
    # reach the slow deadline before the fast one fired (both would then expire
    # in one timer callback, as they would if the timer were not re-armed).
    client = FakeClient()
    pub = AsyncPublisher(client, window=10)  # type: ignore[arg-type]
    slow = await pub.send(_req("slow"), partition=0, timeout=1.5)
    answered = await pub.send(_req("answered"), partition=0, timeout=1.0)
    fast = await pub.send(_req("fast"), partition=0, timeout=0.05)
    kept = await pub.send(_req("kept"), partition=0, timeout=30)
    client.stub.calls[0].ack("answered", 3)
    order: list[str] = []
    for name, fut in (("slow", slow), ("fast", fast)):
        fut.add_done_callback(lambda _f, n=name: order.append(n))
    with pytest.raises(LiftbridgeTimeoutError):
        await asyncio.wait_for(fast, 5)
    assert not slow.done()
    with pytest.raises(LiftbridgeTimeoutError):
        await asyncio.wait_for(slow, 5)
    assert order == ["fast", "slow"]
    assert (await answered).offset == 3
    assert not kept.done()
    assert pub.outstanding == 1
    client.stub.calls[0].ack("kept", 4)
    assert (await asyncio.wait_for(kept, 1)).offset == 4
    assert pub.outstanding == 0
    assert pub._timer is None  # nothing left to time out
    await pub.close()


async def test_async_errors_fail_their_future() -> None:
    client = FakeClient()
    pub = AsyncPublisher(client, window=4)  # type: ignore[arg-type]
    fut = await pub.send(_req("e"), partition=0, timeout=5)
    client.stub.calls[0].responses.put_nowait(
        pb.PublishResponse(
            correlationId="e",
            asyncError=pb.PublishAsyncError(
                code=pb.PublishAsyncError.NOT_FOUND, message="no such stream: s"
            ),
        )
    )
    with pytest.raises(NoSuchStreamError):
        await asyncio.wait_for(fut, 1)
    await pub.close()


async def test_close_waits_for_outstanding_acks_then_refuses() -> None:
    client = FakeClient()
    pub = AsyncPublisher(client, window=4)  # type: ignore[arg-type]
    fut = await pub.send(_req("w"), partition=0, timeout=5)
    closing = asyncio.ensure_future(pub.close())
    await asyncio.sleep(0.01)
    assert not closing.done()  # the ack is still outstanding
    assert client.stub.calls[0].done_writing_called
    client.stub.calls[0].ack("w", 3)
    await asyncio.wait_for(closing, 1)
    assert (await fut).offset == 3
    with pytest.raises(LiftbridgeClosedError):
        await pub.send(_req("x"), partition=0, timeout=5)


async def test_a_broken_stream_fails_pending_acks() -> None:
    client = FakeClient()
    pub = AsyncPublisher(client, window=4)  # type: ignore[arg-type]
    fut = await pub.send(_req("p"), partition=0, timeout=5)
    client.stub.calls[0].responses.put_nowait(grpc.aio.EOF)  # the broker ended the stream
    from aioclients.liftbridge import LiftbridgeConnectError

    with pytest.raises(LiftbridgeConnectError):
        await asyncio.wait_for(fut, 1)
    # the next send opens a new stream
    nxt = await pub.send(_req("q"), partition=0, timeout=5)
    assert len(client.stub.calls) == 2
    client.stub.calls[1].ack("q", 0)
    assert (await nxt).offset == 0
    await pub.close()


async def test_a_repeated_correlation_id_that_waited_for_the_window_is_refused() -> None:
    # Both sends of "dup" wait for the full window; the first one registers.
    # The second must not replace it (its future would never resolve and its
    # window permit would leak): it is refused at once, naming the id.
    client = FakeClient()
    pub = AsyncPublisher(client, window=2)  # type: ignore[arg-type]
    fa = await pub.send(_req("a"), partition=0, timeout=5)
    fz = await pub.send(_req("z"), partition=0, timeout=5)
    first = asyncio.ensure_future(pub.send(_req("dup"), partition=0, timeout=5))
    second = asyncio.ensure_future(pub.send(_req("dup"), partition=0, timeout=5))
    for _ in range(100):  # both are waiting for a window permit (bounded)
        if len(pub._window._waiters or ()) == 2:
            break
        await asyncio.sleep(0)
    assert len(pub._window._waiters or ()) == 2
    call = client.stub.calls[0]
    call.ack("a", 0)
    f_dup = await asyncio.wait_for(first, 1)
    call.ack("z", 1)
    with pytest.raises(InvalidArgumentError, match="'dup'"):
        await asyncio.wait_for(second, 1)
    assert [r.correlationId for r in call.written] == ["a", "z", "dup"]
    call.ack("dup", 2)
    assert (await asyncio.wait_for(f_dup, 1)).offset == 2
    assert (await fa).offset == 0
    assert (await fz).offset == 1
    assert pub.outstanding == 0
    # Every permit came back: two sends go out without waiting.
    f1 = await asyncio.wait_for(pub.send(_req("n1"), partition=0, timeout=5), 1)
    f2 = await asyncio.wait_for(pub.send(_req("n2"), partition=0, timeout=5), 1)
    call.ack("n1", 3)
    call.ack("n2", 4)
    assert [(await f).offset for f in (f1, f2)] == [3, 4]
    await asyncio.wait_for(pub.close(), 5)


class ChannelClosedCall(FakeCall):
    """A stream made on a channel the broker layer closed before its first write:
    our HTTP/2 channel's calls fail so (grpc.aio's own fail likewise)."""

    async def write(self, request: pb.PublishRequest) -> None:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.CANCELLED,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(),
            details="the channel is closed",
        )


async def test_a_stream_whose_channel_was_closed_under_it_is_replaced() -> None:
    # Another call found the broker unavailable and dropped its channels just after
    # this stream was made on one: the request was not written, so it goes on a new
    # stream instead of failing the publish with CANCELLED.
    client = FakeClient()
    made: list[FakeCall] = []

    def publish_async() -> FakeCall:
        call = ChannelClosedCall() if not made else FakeCall()
        made.append(call)
        return call

    client.stub.PublishAsync = publish_async  # type: ignore[method-assign]
    pub = AsyncPublisher(client, window=4)  # type: ignore[arg-type]
    fut = await pub.send(_req("p"), partition=0, timeout=5)
    assert len(made) == 2
    assert [r.correlationId for r in made[1].written] == ["p"]
    made[1].ack("p", 0)
    assert (await asyncio.wait_for(fut, 5)).offset == 0
    await pub.close()


class ChannelClosedWhileReadingCall(FakeCall):
    """A stream whose channel the broker layer closes after the requests went out
    (another call found the broker unavailable): the channel cancels its calls, and
    read() raises CancelledError (our HTTP/2 channel's calls and grpc.aio's alike)."""

    async def read(self) -> Any:
        response = await self.responses.get()
        if response is asyncio.CancelledError:
            raise asyncio.CancelledError
        return response


async def test_a_stream_cancelled_by_its_closed_channel_fails_acks_as_a_lost_connection() -> None:
    # The client is open: the pending acks are lost with the connection (retriable),
    # not "the client was closed" (which says: do not try again). Which of the two
    # came out depended on whether the publish stream or another call on the same
    # broker saw the broker go first.
    client = FakeClient()
    client.stub.PublishAsync = ChannelClosedWhileReadingCall  # type: ignore[method-assign]
    pub = AsyncPublisher(client, window=4)  # type: ignore[arg-type]
    fut = await pub.send(_req("p"), partition=0, timeout=5)
    client.stub.PublishAsync = FakeCall  # type: ignore[method-assign]
    pub._call.responses.put_nowait(asyncio.CancelledError)
    with pytest.raises(LiftbridgeConnectError):
        await asyncio.wait_for(fut, 5)
    # the next send opens a new stream
    nxt = await pub.send(_req("q"), partition=0, timeout=5)
    assert isinstance(pub._call, FakeCall)
    assert not isinstance(pub._call, ChannelClosedWhileReadingCall)
    pub._call.ack("q", 1)
    assert (await asyncio.wait_for(nxt, 5)).offset == 1
    await pub.close()


async def test_a_cancelled_stream_of_a_closed_client_still_says_closed() -> None:
    # The client closing cancels its streams: that is no dropped channel to retry.
    client = FakeClient()

    class ClosingCall(ChannelClosedCall):
        async def write(self, request: pb.PublishRequest) -> None:
            client.closed = True
            await super().write(request)

    client.stub.PublishAsync = ClosingCall  # type: ignore[method-assign]
    pub = AsyncPublisher(client, window=4)  # type: ignore[arg-type]
    with pytest.raises(LiftbridgeClosedError):
        await pub.send(_req("p"), partition=0, timeout=5)
    await pub.close()
