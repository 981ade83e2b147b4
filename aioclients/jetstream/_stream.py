"""A stream handle: info, purge, stored messages, consumers, and ADR-31 Direct Get."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any

from nats.aio.msg import Msg as NatsMsg

from aioclients._core._checks import check_int
from aioclients._errors import InvalidArgumentError
from aioclients.jetstream._api import JetStreamApi, direct_get_error
from aioclients.jetstream._consumer import Consumer, consumer_of, upsert_consumer
from aioclients.jetstream._errors import DirectGetUnavailableError, ServerTooOldError
from aioclients.jetstream._models import StoredMessage, StreamInfo
from aioclients.jetstream._ordered import (
    OrderedConsumeEvent,
    OrderedConsumer,
    open_ordered_consumer,
)
from aioclients.jetstream._protocol._direct import (
    DirectReply,
    ReplyKind,
    batch_request,
    classify_reply,
    multi_last_request,
    multi_last_subjects,
    single_request,
)
from aioclients.jetstream._protocol._headers import decode_headers
from aioclients.jetstream._protocol._msgopts import counter_value_of
from aioclients.jetstream._protocol._names import validate_filter_subject, validate_publish_subject
from aioclients.jetstream._protocol._time import parse_server_time
from aioclients.jetstream._push import PushConsumer, push_consumer_of, upsert_push_consumer
from aioclients.jetstream._transport import ReplyInbox

__all__ = ("DirectGetBatch", "Stream")


class Stream:
    """A JetStream stream (ADR-37 "Streams"). Obtain one from ``JetStream``.

    It talks to the server through the request layer (``api``) it is given.
    """

    def __init__(self, api: JetStreamApi, name: str, info: StreamInfo) -> None:
        self._api = api
        self.name = name
        self.cached_info = info

    def __repr__(self) -> str:
        return f"<Stream {self.name}>"

    async def info(
        self, *, subjects_filter: str | None = None, deleted_details: bool = False
    ) -> StreamInfo:
        """Fetch fresh info (also stored in ``cached_info``)."""
        self.cached_info = await self._api.stream_info(
            self.name, subjects_filter=subjects_filter, deleted_details=deleted_details
        )
        return self.cached_info

    async def purge(
        self, *, subject: str | None = None, seq: int | None = None, keep: int | None = None
    ) -> int:
        """Remove messages; return how many were purged.

        Args:
            subject: only messages on this subject (wildcards allowed).
            seq: remove everything below this sequence (exclusive with ``keep``).
            keep: keep this many newest messages (exclusive with ``seq``).
        """
        if seq is not None and keep is not None:
            raise InvalidArgumentError("give seq or keep, not both")
        for name, value in (("seq", seq), ("keep", keep)):
            if value is not None:
                check_int(name, value, minimum=0)
        payload: dict[str, Any] = {}
        if subject is not None:
            payload["filter"] = validate_filter_subject(subject)
        if seq is not None:
            payload["seq"] = seq
        if keep is not None:
            payload["keep"] = keep
        data = await self._api.request(f"STREAM.PURGE.{self.name}", payload or None)
        purged: int = data.get("purged", 0)
        return purged

    async def get_msg(
        self,
        seq: int | None = None,
        *,
        last_by_subj: str | None = None,
        next_by_subj: str | None = None,
    ) -> StoredMessage:
        """Read a message through the stream leader (``STREAM.MSG.GET``): read-after-write.

        Raises:
            MessageNotFoundError: nothing matches.
        """
        if seq is not None:
            check_int("seq", seq, minimum=1)
        payload: dict[str, Any] = {}
        if last_by_subj is not None:
            if seq is not None or next_by_subj is not None:
                raise InvalidArgumentError("last_by_subj cannot be combined with seq/next_by_subj")
            payload["last_by_subj"] = last_by_subj
        else:
            if seq is not None:
                payload["seq"] = seq
            if next_by_subj is not None:
                payload["next_by_subj"] = next_by_subj
        if not payload:
            raise InvalidArgumentError("get_msg needs seq, last_by_subj or next_by_subj")
        data = await self._api.request(f"STREAM.MSG.GET.{self.name}", payload)
        raw = data["message"]
        hdrs = base64.b64decode(raw["hdrs"]) if raw.get("hdrs") else b""
        headers = decode_headers(hdrs) if hdrs else None
        return StoredMessage(
            subject=raw["subject"],
            seq=raw["seq"],
            data=base64.b64decode(raw.get("data") or b""),
            headers=headers or None,
            time=parse_server_time(raw["time"]),
        )

    async def delete_msg(self, seq: int, *, erase: bool = False) -> None:
        """Delete one message; ``erase`` overwrites its bytes on disk too."""
        check_int("seq", seq, minimum=1)
        await self._api.request(
            f"STREAM.MSG.DELETE.{self.name}", {"seq": seq, "no_erase": not erase}
        )

    # -- ADR-31 Direct Get ---------------------------------------------------------------------

    async def direct_get(
        self,
        seq: int | None = None,
        *,
        last_by_subj: str | None = None,
        next_by_subj: str | None = None,
        start_time: datetime | None = None,
    ) -> StoredMessage:
        """Read one message from any replica (ADR-31; needs ``allow_direct``).

        ``last_by_subj`` (wildcards allowed) gives the newest message on matching
        subjects; a concrete subject is sent in the subject-appended form
        (``$JS.API.DIRECT.GET.<stream>.<subject>``). ``seq`` with ``next_by_subj``
        gives the first message at or after ``seq`` on that subject.

        Raises:
            MessageNotFoundError: nothing matches (404).
            DirectGetUnavailableError: the stream has no Direct Get responders.
        """
        payload = single_request(
            seq=seq, last_by_subj=last_by_subj, next_by_subj=next_by_subj, start_time=start_time
        )
        api = self._api
        if payload is None:
            assert last_by_subj is not None
            subject = f"{api.prefix}.DIRECT.GET.{self.name}.{last_by_subj}"
            payload = b""
        else:
            subject = f"{api.prefix}.DIRECT.GET.{self.name}"
        api.check_open()
        msg = await api.requests.request(
            subject, payload, api.timeout, f"Direct Get on {self.name!r}"
        )
        reply = classify_reply(msg.headers)
        if reply.kind is not ReplyKind.MESSAGE:
            raise direct_get_error(self.name, reply)
        return _stored(reply, msg)

    def direct_get_batch(
        self,
        *,
        batch: int,
        seq: int | None = None,
        start_time: datetime | None = None,
        next_by_subj: str | None = None,
        max_bytes: int | None = None,
    ) -> DirectGetBatch:
        """Read up to ``batch`` messages in sequence order in one request (server 2.11+).

        Starts at ``seq`` (default 1) or at ``start_time``; ``next_by_subj``
        filters by subject (wildcards allowed); ``max_bytes`` bounds the reply.
        Returns an async iterator (also an async context manager) that ends when
        the server's end-of-batch marker arrives; afterwards ``num_pending`` and
        ``last_seq`` tell whether more messages follow.

        Raises (while iterating):
            ServerTooOldError: the server answered without batch support.
            DirectGetUnavailableError: the stream has no Direct Get responders.
        """
        payload = batch_request(
            batch=batch,
            seq=seq,
            start_time=start_time,
            next_by_subj=next_by_subj,
            max_bytes=max_bytes,
        )
        return DirectGetBatch(self, payload, multi=None)

    def direct_get_last_for(
        self,
        subjects: Sequence[str] | str,
        *,
        up_to_seq: int | None = None,
        up_to_time: datetime | None = None,
        batch: int | None = None,
    ) -> DirectGetBatch:
        """The last message of every subject matching ``subjects`` (``multi_last``).

        ``up_to_seq`` / ``up_to_time`` read the subjects as they were at that
        point. With ``batch`` the answer comes in pages of that size; every page
        after the first asks for the point in time the first reported
        (``Nats-UpTo-Sequence``), so the result is consistent across pages.

        Raises (while iterating):
            TooManySubjectsError: more than 1024 subjects match (413).
        """
        subjects = multi_last_subjects(subjects)
        first = multi_last_request(
            subjects, up_to_seq=up_to_seq, up_to_time=up_to_time, batch=batch
        )
        return DirectGetBatch(self, first, multi=(subjects, batch))

    # -- consumers -----------------------------------------------------------------------------

    async def create_consumer(self, **config: Any) -> Consumer:
        return await upsert_consumer(self._api, self.name, config, "create")

    async def update_consumer(self, **config: Any) -> Consumer:
        return await upsert_consumer(self._api, self.name, config, "update")

    async def create_or_update_consumer(self, **config: Any) -> Consumer:
        return await upsert_consumer(self._api, self.name, config, "")

    async def consumer(self, name: str) -> Consumer:
        return await consumer_of(self._api, self.name, name)

    async def create_push_consumer(
        self, *, deliver_subject: str | None = None, **config: Any
    ) -> PushConsumer:
        """A push consumer of this stream (see ``JetStream.create_push_consumer``)."""
        return await upsert_push_consumer(self._api, self.name, config, "create", deliver_subject)

    async def create_or_update_push_consumer(
        self, *, deliver_subject: str | None = None, **config: Any
    ) -> PushConsumer:
        """See ``JetStream.create_or_update_push_consumer``."""
        return await upsert_push_consumer(self._api, self.name, config, "", deliver_subject)

    async def push_consumer(self, name: str) -> PushConsumer:
        """Look up a push consumer of this stream (``InvalidArgumentError`` for a pull one)."""
        return await push_consumer_of(self._api, self.name, name)

    async def delete_consumer(self, name: str) -> None:
        await self._api.delete_consumer(self.name, name)

    def list_consumers(self) -> AsyncIterator[Any]:
        return self._api.list_consumers(self.name)

    def consumer_names(self) -> AsyncIterator[str]:
        return self._api.consumer_names(self.name)

    async def unpin_consumer(self, consumer: str, group: str) -> None:
        await self._api.unpin_consumer(self.name, consumer, group)

    async def ordered_consumer(
        self,
        *,
        filter_subjects: list[str] | None = None,
        deliver_policy: str = "all",
        opt_start_seq: int | None = None,
        opt_start_time: datetime | None = None,
        headers_only: bool = False,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
    ) -> OrderedConsumer:
        """An ordered consumer (ADR-17) on this stream; see ``JetStream.ordered_consumer``."""
        return await open_ordered_consumer(
            self._api,
            self.name,
            filter_subjects=filter_subjects,
            deliver_policy=deliver_policy,
            opt_start_seq=opt_start_seq,
            opt_start_time=opt_start_time,
            headers_only=headers_only,
            on_event=on_event,
        )

    # -- counters (ADR-49) ---------------------------------------------------------------------

    async def counter_value(self, subject: str) -> int:
        """The total of the counter of ``subject`` (a stream with
        ``allow_msg_counter=True`` and ``allow_direct=True``), by Direct Get.

        Raises:
            MessageNotFoundError: the subject has no counter yet.
            DirectGetUnavailableError: the stream has ``allow_direct`` off (the
                message says to turn it on).
            StreamNotFoundError: no such stream.
        """
        validate_publish_subject(subject)
        try:
            stored = await self.direct_get(last_by_subj=subject)
        except DirectGetUnavailableError as exc:
            raise await self._counter_read_error(exc) from None
        return counter_value_of(stored.data, what=f"the counter of {subject!r}")

    async def counter_values(self, subjects: str | Sequence[str]) -> AsyncIterator[tuple[str, int]]:
        """``(subject, total)`` of every counter matching ``subjects`` (a subject, a
        wildcard or a list of them), read in one ``multi_last`` Direct Get pass.

        Raises (while iterating):
            DirectGetUnavailableError: the stream has ``allow_direct`` off.
            TooManySubjectsError: more than 1024 subjects match.
        """
        batch = self.direct_get_last_for(subjects)
        try:
            async with batch:
                async for stored in batch:
                    yield (
                        stored.subject,
                        counter_value_of(stored.data, what=f"the counter of {stored.subject!r}"),
                    )
        except DirectGetUnavailableError as exc:
            raise await self._counter_read_error(exc) from None

    async def _counter_read_error(self, exc: DirectGetUnavailableError) -> Exception:
        """After "no Direct Get responder": a missing stream, or one with allow_direct off."""
        info = await self.info()  # raises StreamNotFoundError for a missing stream
        if info.config.get("allow_direct"):
            return exc
        return DirectGetUnavailableError(
            f"stream {self.name!r} has allow_direct off: counter reads use Direct Get",
            code=exc.code,
            hint=f"counter streams need allow_direct=True: "
            f"update_stream({self.name!r}, allow_direct=True)",
        )


def _stored(reply: DirectReply, msg: NatsMsg) -> StoredMessage:
    assert reply.subject is not None
    assert reply.seq is not None
    assert reply.time is not None
    return StoredMessage(
        subject=reply.subject,
        seq=reply.seq,
        data=msg.data,
        headers=reply.headers,
        time=reply.time,
        num_pending=reply.num_pending,
    )


class DirectGetBatch:
    """The answer to a batched or ``multi_last`` Direct Get, as an async iterator.

    After the iteration ends, ``num_pending`` is how many matching messages
    remained beyond the batch, ``last_seq`` the sequence of the last message
    sent and ``up_to_seq`` (``multi_last``) the point in time that was read.
    """

    def __init__(
        self,
        stream: Stream,
        payload: bytes,
        *,
        multi: tuple[list[str], int | None] | None,
    ) -> None:
        self._stream = stream
        self._payload = payload
        self._multi = multi
        self._last_delivered: int | None = None
        self.num_pending: int | None = None
        self.last_seq: int | None = None
        self.up_to_seq: int | None = None
        # The reading runs in an async generator: if the caller stops iterating
        # without aclose(), the event loop finalizes the generator when it is
        # garbage-collected, and its ``finally`` releases the reply subscription.
        self._messages = self._read()

    def __aiter__(self) -> DirectGetBatch:
        return self

    def __anext__(self) -> Awaitable[StoredMessage]:
        return self._messages.__anext__()

    async def _read(self) -> AsyncGenerator[StoredMessage, None]:
        api = self._stream._api
        inbox = await api.open_inbox()
        what = f"Direct Get on {self._stream.name!r}"
        try:
            payload: bytes | None = self._payload
            first = True
            while payload is not None:
                await self._send(inbox, payload)
                payload = None
                while True:
                    msg = await inbox.get(api.timeout, what)
                    reply = classify_reply(msg.headers)
                    if reply.kind is ReplyKind.MESSAGE:
                        if first and reply.num_pending is None:
                            raise ServerTooOldError(
                                "the server answered a batched Direct Get without Nats-Num-Pending",
                                hint="batched and multi_last Direct Get need nats-server 2.11+",
                            )
                        first = False
                        self._last_delivered = reply.seq
                        yield _stored(reply, msg)
                    elif reply.kind is ReplyKind.END_OF_BATCH:
                        self.num_pending = reply.num_pending
                        self.last_seq = reply.last_seq
                        if reply.up_to_seq is not None:
                            self.up_to_seq = reply.up_to_seq
                        payload = self._next_page()
                        break
                    elif reply.kind is ReplyKind.NOT_FOUND:
                        # Nothing (more) matches: an empty answer, not an error.
                        self.num_pending = 0
                        break
                    else:
                        raise direct_get_error(self._stream.name, reply)
        finally:
            await inbox.close()

    async def _send(self, inbox: ReplyInbox, payload: bytes) -> None:
        api = self._stream._api
        api.check_open()
        subject = f"{api.prefix}.DIRECT.GET.{self._stream.name}"
        frame = api.transport.frame(subject, payload, inbox.subject, None)
        deadline = asyncio.get_running_loop().time() + api.timeout
        await api.transport.send(frame, deadline, f"the Direct Get on {self._stream.name!r}")

    def _next_page(self) -> bytes | None:
        """For multi_last: the request for the next page at the same point in time."""
        if self._multi is None or not self.num_pending or self._last_delivered is None:
            return None
        subjects, batch = self._multi
        return multi_last_request(
            subjects,
            up_to_seq=self.up_to_seq,
            up_to_time=None,
            batch=batch,
            seq=self._last_delivered + 1,
        )

    async def aclose(self) -> None:
        """Stop reading and release the reply subscription."""
        await self._messages.aclose()

    async def __aenter__(self) -> DirectGetBatch:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
