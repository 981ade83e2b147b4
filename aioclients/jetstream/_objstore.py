"""JetStream Object Store (NATS ADR-20) on our publish window, Direct Get and
ordered consumers.

``put`` streams the data in chunks through the publish-ack window (at most
``_PUT_WINDOW_BYTES`` of chunks awaiting their acks), then publishes the meta
with ``Nats-Rollup: sub`` and purges the previous version's chunks. ``get``
reads the chunks through an ordered consumer on the version's chunk subject,
pulling by bytes (``_GET_BUFFER_BYTES``), so memory stays bounded whatever the
object's size; ``_protocol/_objstore.py``'s ``ChunkCheck`` judges each chunk and
the digest at the end. ``list`` and ``watch``'s initial values are snapshots
judged by ``_protocol/_snapshot.py`` (exact while others write, also across a
reset), as KV's ``keys()`` and ``watch()``. Behaviour follows nats.go
``jetstream/object.go``; layout and meta JSON are shared with nats.go and nats-py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import secrets
import string
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
)
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any

from aioclients._core import redact_text
from aioclients._errors import AioClientsError, InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._api import JetStreamApi
from aioclients.jetstream._errors import (
    BucketNotFoundError,
    BucketSealedError,
    DirectGetUnavailableError,
    JetStreamError,
    LinkIsABucketError,
    MessageNotFoundError,
    ObjectDeletedError,
    ObjectExistsError,
    ObjectIncompleteError,
    ObjectNotFoundError,
    StreamNameInUseError,
    StreamNotFoundError,
)
from aioclients.jetstream._models import PubAck, StoredMessage, StreamInfo
from aioclients.jetstream._ordered import (
    OrderedConsumer,
    OrderedItems,
    SnapshotReader,
    initial_pending,
    open_ordered_consumer,
    ordered_consume_options,
    owned_iteration,
)
from aioclients.jetstream._protocol._objstore import (
    DEFAULT_CHUNK_SIZE,
    ChunkCheck,
    Chunker,
    ObjectInfo,
    ObjectLink,
    chunk_subject,
    decode_meta,
    encode_meta,
    meta_filter,
    meta_subject,
    store_stream_config,
    stream_name,
    validate_bucket,
    validate_object_name,
)
from aioclients.jetstream._protocol._snapshot import ScanVerdict, SnapshotScan, StartSubjects
from aioclients.jetstream._stream import Stream

__all__ = (
    "ObjectLister",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreStatus",
    "ObjectWatcher",
    "create_object_store",
    "delete_object_store",
    "object_store",
    "object_store_names",
)

log = logging.getLogger("aioclients.jetstream.objstore")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: A chunk's (tries again, wait) after "no responders": none (see put).
_NO_RETRY = (0, 0.25)
#: Bytes of chunks a put may have awaiting their acks.
_PUT_WINDOW_BYTES = 8 * 1024 * 1024
#: Bytes a get's pulls ask for at once (the bound of its buffer).
_GET_BUFFER_BYTES = 8 * 1024 * 1024
#: Buffer (messages) of the ordered consumers behind list() and watch().
_SCAN_BUFFER = 1000
#: How many object links a get follows before giving up (a loop of links).
_MAX_LINK_DEPTH = 8
_ROLLUP = {"Nats-Rollup": "sub"}
_SEALED = 10109  # "invalid operation on sealed stream"
_NUID_ALPHABET = string.ascii_letters + string.digits


def _nuid() -> str:
    """A fresh chunk-subject id (22 characters of [A-Za-z0-9], like a NATS NUID)."""
    return "".join(secrets.choice(_NUID_ALPHABET) for _ in range(22))


def _modified(ts_ns: int) -> datetime:
    return _EPOCH + timedelta(0, ts_ns // 1_000_000_000, (ts_ns // 1000) % 1_000_000)


def _sealed(bucket: str, exc: JetStreamError) -> BucketSealedError:
    return BucketSealedError(
        f"object store {bucket!r} is sealed: no more writes",
        code=exc.code,
        err_code=exc.err_code,
    )


def _bucket_not_found(bucket: str) -> BucketNotFoundError:
    return BucketNotFoundError(
        f"object store {bucket!r} not found",
        code=404,
        hint=f"create it with js.create_object_store({bucket!r})",
    )


def _forget_outcome(future: asyncio.Future[Any]) -> None:
    """A done callback: the outcome of an ack nobody waits for any more is dropped."""
    if not future.cancelled():
        future.exception()


@dataclass(frozen=True, slots=True)
class ObjectStoreStatus:
    """What ``ObjectStore.status()`` reports about a store."""

    bucket: str
    description: str | None
    #: max age of an object, seconds (0: none)
    ttl: float
    storage: str
    replicas: int
    sealed: bool
    #: bytes stored (chunks and metas)
    size: int
    compressed: bool
    metadata: dict[str, str] | None
    backing_store: str
    stream_info: StreamInfo


class ObjectStore:
    """An Object Store. Obtain one from ``js.create_object_store`` or ``js.object_store``.

    It talks to the server through the request layer (``api``) it is given.
    """

    def __init__(self, api: JetStreamApi, bucket: str, stream: Stream) -> None:
        self._api = api
        self.bucket = bucket
        self._stream = stream
        self._stream_name = stream.name
        self._direct = bool(stream.cached_info.config.get("allow_direct"))

    def __repr__(self) -> str:
        return f"<ObjectStore {self.bucket}>"

    @property
    def stream(self) -> Stream:
        """The store's stream (``OBJ_<bucket>``)."""
        return self._stream

    # -- meta --

    async def _meta(self, name: str) -> ObjectInfo | None:
        """The object's last meta, whatever it says; ``None`` when there is none."""
        return await self._meta_at(meta_subject(self.bucket, name))

    async def _meta_at(self, subject: str) -> ObjectInfo | None:
        """The last meta on the meta subject ``subject`` (``None``: none)."""
        stored: StoredMessage | None = None
        try:
            if self._direct:
                # Nobody answering Direct Get is, on a cluster, what this server says
                # for a moment after the bucket is created (its replicas' interest not
                # known here yet) or while they change; or allow_direct was turned
                # off since. The API's message get, answered by the stream's leader,
                # reads the same message (and says so when the bucket is gone).
                with contextlib.suppress(DirectGetUnavailableError):
                    stored = await self._stream.direct_get(last_by_subj=subject)
            if stored is None:
                stored = await self._stream.get_msg(last_by_subj=subject)
        except MessageNotFoundError:
            return None
        except StreamNotFoundError:
            raise _bucket_not_found(self.bucket) from None
        info = decode_meta(stored.data, stored.time)
        if info.bucket != self.bucket:  # written by a client that left it out
            info = replace(info, bucket=self.bucket)
        return info

    async def info(self, name: str, *, show_deleted: bool = False) -> ObjectInfo:
        """The object's meta (a link's own meta: links are not followed here).

        Raises:
            ObjectNotFoundError: no such object.
            ObjectDeletedError: it was deleted (unless ``show_deleted``).
        """
        validate_object_name(name)
        info = await self._meta(name)
        if info is None:
            raise ObjectNotFoundError(
                f"object {name!r} not found in store {self.bucket!r}", code=404
            )
        if info.deleted and not show_deleted:
            raise ObjectDeletedError(
                f"object {name!r} of store {self.bucket!r} was deleted", code=404, info=info
            )
        return info

    async def _publish_meta(self, info: ObjectInfo) -> PubAck:
        try:
            return await self._api.publish(
                meta_subject(self.bucket, info.name), encode_meta(info), _ROLLUP
            )
        except JetStreamError as exc:
            if exc.err_code == _SEALED:
                raise _sealed(self.bucket, exc) from None
            raise

    async def _purge(self, subject: str) -> None:
        try:
            await self._stream.purge(subject=subject)
        except JetStreamError as exc:
            if exc.err_code == _SEALED:
                raise _sealed(self.bucket, exc) from None
            raise

    async def _purge_quietly(self, subject: str, in_flight: list[asyncio.Future[PubAck]]) -> None:
        """Clean up after a failed or cancelled put (bounded; failures are logged).

        The chunks still awaiting their acks are waited for first: the server may
        store a chunk after a purge that overtook it, which would then stay.
        """
        if in_flight:
            await asyncio.wait(in_flight, timeout=self._api.timeout)
        try:
            await asyncio.wait_for(self._purge(subject), self._api.timeout)
        except BucketSealedError:
            pass  # a sealed store stored none of them
        except (AioClientsError, asyncio.TimeoutError) as exc:
            log.warning(
                "store %s: could not purge the chunks of an unfinished put (%s)",
                self.bucket,
                redact_text(str(exc)),
            )

    # -- writes --

    async def put(
        self,
        name: str,
        data: bytes | bytearray | memoryview | AsyncIterable[bytes] | Any,
        *,
        description: str | None = None,
        headers: Mapping[str, str | list[str]] | None = None,
        metadata: Mapping[str, str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> ObjectInfo:
        """Store ``data`` under ``name`` (replacing the object of that name).

        Args:
            data: ``bytes``, an async iterable of ``bytes``, or a binary file
                object (read ``chunk_size`` at a time with ``readinto``/``read``,
                never whole).
            chunk_size: bytes per chunk message (nats.go's default: 128 KiB).

        Returns:
            The new meta (``modified`` is the meta message's time on the server).

        Raises:
            BucketSealedError: the store is sealed.
            InvalidArgumentError: a bad name, data or option (before anything is sent).

        The chunks go out through a window of acks; if anything fails (or the
        call is cancelled) before the meta is sent, the chunks sent so far are
        purged and the previous version stays as it was.
        """
        validate_object_name(name)
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            raise InvalidArgumentError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
        if description is not None and not isinstance(description, str):
            raise InvalidArgumentError("description must be a str")
        _check_headers(headers)
        _check_metadata(metadata)
        _check_data(data)
        previous = await self._meta(name)
        pieces = _pieces(data, chunk_size)
        nuid = _nuid()
        subject = chunk_subject(self.bucket, nuid)
        chunker = Chunker(chunk_size)
        window: collections.deque[asyncio.Future[PubAck]] = collections.deque()
        limit = max(2, _PUT_WINDOW_BYTES // chunk_size)
        acks = self._api.acks
        timeout = self._api.timeout
        sent_meta = False
        try:
            first = True

            async def send(chunk: bytes) -> None:
                nonlocal first
                if first:
                    # The first chunk alone, sent again after "no responders" as a
                    # publish is (ADR-22), and its ack awaited: on a cluster, what
                    # this server answers for a moment after the bucket is created
                    # (its replicas' interest not known here yet), and then no chunk
                    # of the object can be stored behind a later one.
                    first = False
                    await (await acks.publish(subject, chunk, None, timeout))
                    return
                while len(window) >= limit:
                    await window.popleft()
                # Never sent again after "no responders": a resend would store the
                # chunk behind later ones, and the object would not read back.
                future = await acks.publish(subject, chunk, None, timeout, retry=_NO_RETRY)
                future.add_done_callback(_forget_outcome)
                window.append(future)

            async for piece in pieces:
                for chunk in chunker.feed(piece):
                    await send(chunk)
            last = chunker.finish()
            if last is not None:
                await send(last)
            while window:
                await window.popleft()
            info = ObjectInfo(
                bucket=self.bucket,
                name=name,
                nuid=nuid,
                size=chunker.size,
                chunks=chunker.chunks,
                digest=chunker.digest(),
                modified=datetime.now(timezone.utc),
                description=description,
                headers=dict(headers) if headers else None,
                metadata=dict(metadata) if metadata else None,
                chunk_size=chunk_size,
            )
            future = await acks.publish(
                meta_subject(self.bucket, name), encode_meta(info), _ROLLUP, timeout
            )
            sent_meta = True  # from here on the new version may be the stored one
            future.add_done_callback(_forget_outcome)
            await future
        except BaseException as exc:
            in_flight = list(window)  # their outcomes are dropped by _forget_outcome
            window.clear()
            if not sent_meta:
                cleanup = asyncio.ensure_future(self._purge_quietly(subject, in_flight))
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(cleanup)
            if isinstance(exc, JetStreamError) and exc.err_code == _SEALED:
                raise _sealed(self.bucket, exc) from None
            raise
        finally:
            await pieces.aclose()
        if previous is not None and not previous.deleted and previous.nuid:
            await self._purge(chunk_subject(self.bucket, previous.nuid))
        fresh = await self._meta(name)
        return fresh if fresh is not None and fresh.nuid == nuid else info

    async def update_meta(
        self,
        name: str,
        *,
        new_name: str | None = None,
        description: str | None = None,
        headers: Mapping[str, str | list[str]] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ObjectInfo:
        """Change an object's name, description, headers or metadata; a field not
        given stays as it is. The data is not touched.

        Raises:
            ObjectNotFoundError / ObjectDeletedError: no such object.
            ObjectExistsError: ``new_name`` is held by another object.
            BucketSealedError: the store is sealed.
        """
        info = await self.info(name)
        if new_name is not None:
            validate_object_name(new_name)
        if description is not None and not isinstance(description, str):
            raise InvalidArgumentError("description must be a str")
        _check_headers(headers)
        _check_metadata(metadata)
        renaming = new_name is not None and new_name != name
        if renaming:
            assert new_name is not None
            other = await self._meta(new_name)
            if other is not None and not other.deleted:
                raise ObjectExistsError(
                    f"object {new_name!r} exists in store {self.bucket!r}",
                    hint="delete it first or pick another name",
                )
        updated = replace(
            info,
            name=new_name if renaming and new_name is not None else name,
            description=info.description if description is None else description,
            headers=info.headers if headers is None else dict(headers),
            metadata=info.metadata if metadata is None else dict(metadata),
        )
        await self._publish_meta(updated)
        if renaming:
            await self._purge(meta_subject(self.bucket, name))
        fresh = await self._meta(updated.name)
        return fresh if fresh is not None else updated

    async def delete(self, name: str) -> ObjectInfo:
        """Delete an object: a delete marker as its meta, and its chunks purged.

        Returns:
            The delete marker.

        Raises:
            ObjectNotFoundError / ObjectDeletedError: no such object.
            BucketSealedError: the store is sealed.
        """
        info = await self.info(name)
        marker = replace(info, deleted=True, size=0, chunks=0, digest="")
        try:
            await self._publish_meta(marker)
        finally:
            if info.nuid:
                await self._purge(chunk_subject(self.bucket, info.nuid))
        fresh = await self._meta(name)
        return fresh if fresh is not None else marker

    async def _add_link(self, name: str, link: ObjectLink) -> ObjectInfo:
        validate_object_name(name)
        current = await self._meta(name)
        if current is not None and not current.deleted and not current.is_link:
            raise ObjectExistsError(
                f"object {name!r} exists in store {self.bucket!r} and is not a link",
                hint="delete it first or pick another name",
            )
        info = ObjectInfo(
            bucket=self.bucket,
            name=name,
            nuid=_nuid(),
            size=0,
            chunks=0,
            digest="",
            modified=datetime.now(timezone.utc),
            link=link,
        )
        await self._publish_meta(info)
        fresh = await self._meta(name)
        return fresh if fresh is not None else info

    async def add_link(self, name: str, target: ObjectInfo) -> ObjectInfo:
        """Store ``name`` as a link to the object ``target`` (of this or another store).

        Raises:
            InvalidArgumentError: ``target`` is deleted or is a link itself.
            ObjectExistsError: ``name`` holds an object that is not a link.
        """
        if not isinstance(target, ObjectInfo):
            raise InvalidArgumentError(f"target must be an ObjectInfo, got {target!r}")
        if target.deleted:
            raise InvalidArgumentError(f"cannot link to the deleted object {target.name!r}")
        if target.is_link:
            raise InvalidArgumentError(f"cannot link to a link ({target.name!r})")
        return await self._add_link(name, ObjectLink(target.bucket, target.name))

    async def add_bucket_link(self, name: str, target: ObjectStore) -> ObjectInfo:
        """Store ``name`` as a link to the whole store ``target``."""
        if not isinstance(target, ObjectStore):
            raise InvalidArgumentError(f"target must be an ObjectStore, got {target!r}")
        return await self._add_link(name, ObjectLink(target.bucket))

    async def seal(self) -> None:
        """Seal the store: no more writes, deletes or meta updates (for good)."""
        info = await self._api.update_stream(self._stream_name, {"sealed": True})
        self._stream.cached_info = info

    async def status(self) -> ObjectStoreStatus:
        """The store's settings and size."""
        try:
            info = await self._stream.info()
        except StreamNotFoundError:
            raise _bucket_not_found(self.bucket) from None
        config = info.config
        metadata = {
            k: v for k, v in (config.get("metadata") or {}).items() if not k.startswith("_nats")
        }
        return ObjectStoreStatus(
            bucket=self.bucket,
            description=config.get("description") or None,
            ttl=float(config.get("max_age") or 0),
            storage=str(config.get("storage") or "file"),
            replicas=int(config.get("num_replicas") or 1),
            sealed=bool(config.get("sealed")),
            size=info.state.bytes,
            compressed=(config.get("compression") or "none") != "none",
            metadata=metadata or None,
            backing_store="JetStream",
            stream_info=info,
        )

    # -- reads --

    def get(self, name: str) -> ObjectReader:
        """Read an object as it streams in: ``async with store.get(name) as obj``,
        then ``async for chunk in obj`` (or ``await obj.read()``); ``obj.info``.

        Links to objects are followed. The SHA-256 is checked at the end.

        Raises (on entering, or while reading):
            ObjectNotFoundError / ObjectDeletedError: no such object (or deleted
                while being read).
            LinkIsABucketError: ``name`` links to a whole store.
            ObjectIncompleteError: chunks missing (deleted, replaced or purged
                while being read).
            DigestMismatchError: the data does not match its digest.
        """
        validate_object_name(name)
        return ObjectReader(self, name)

    async def get_bytes(self, name: str) -> bytes:
        """The whole object in memory (see :meth:`get` for a streaming read)."""
        async with self.get(name) as obj:
            return await obj.read()

    async def _resolve(self, name: str) -> tuple[ObjectStore, ObjectInfo]:
        """The store and meta of what ``name`` holds, object links followed."""
        store: ObjectStore = self
        info = await store.info(name)
        for _ in range(_MAX_LINK_DEPTH):
            link = info.link
            if link is None:
                return store, info
            if not link.name:
                raise LinkIsABucketError(
                    f"object {info.name!r} of store {store.bucket!r} links to the whole "
                    f"store {link.bucket!r}",
                    hint=f"open it with js.object_store({link.bucket!r})",
                )
            if link.bucket != store.bucket:
                store = await object_store(self._api, link.bucket)
            info = await store.info(link.name)
        raise InvalidArgumentError(f"object {name!r}: more than {_MAX_LINK_DEPTH} links in a row")

    def list(self, *, show_deleted: bool = False) -> ObjectLister:
        """The objects of the store (deleted ones only with ``show_deleted``), as
        they were when the call started: ``async for info in store.list()``.

        Each object stored at the start is listed once, none created later; one
        rewritten since, before the listing reached it, comes with its new meta.
        """
        return ObjectLister(self, show_deleted)

    def watch(
        self,
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        updates_only: bool = False,
    ) -> ObjectWatcher:
        """Metas as they change: ``async with store.watch() as w: async for info in w``.

        First every object's current meta (each meta kept with
        ``include_history``), then ``initial_done`` is set, then updates;
        ``updates_only`` gives only what changes after the start.
        """
        if include_history and updates_only:
            raise InvalidArgumentError("include_history and updates_only do not go together")
        policy = "new" if updates_only else ("all" if include_history else "last_per_subject")
        return ObjectWatcher(self, policy, ignore_deletes, updates_only)

    async def _last_seq(self) -> int:
        try:
            info = await self._api.stream_info(self._stream_name)
        except StreamNotFoundError:
            raise _bucket_not_found(self.bucket) from None
        return info.state.last_seq

    def _info_maker(self) -> Callable[[str, bytes, int], ObjectInfo | None]:
        bucket = self.bucket

        def info_of(subject: str, data: bytes, ts: int) -> ObjectInfo | None:
            try:
                info = decode_meta(data, _modified(ts))
            except RemoteProtocolError as exc:
                log.warning("store %s: unreadable meta on %s left out: %s", bucket, subject, exc)
                return None
            return info if info.bucket == bucket else replace(info, bucket=bucket)

        return info_of


async def _pieces(
    data: object, chunk_size: int
) -> AsyncGenerator[bytes | bytearray | memoryview, None]:
    """``data`` as pieces of at most ``chunk_size`` bytes, never read whole."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        for start in range(0, len(view), chunk_size):
            yield view[start : start + chunk_size]
        return
    if isinstance(data, str):
        raise InvalidArgumentError("data must be bytes, not str: encode it first")
    if hasattr(data, "__aiter__"):
        async for piece in data:
            if not isinstance(piece, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(
                    f"an async iterable of data must yield bytes, got {type(piece).__name__}"
                )
            yield piece
        return
    read = getattr(data, "read", None)
    if read is not None:
        while True:
            piece = read(chunk_size)
            if inspect.isawaitable(piece):  # an async file object (aiofiles and the like)
                piece = await piece
            if isinstance(piece, str):
                raise InvalidArgumentError("the file must be opened in binary mode ('rb')")
            if not piece:
                return
            yield piece
    readinto = getattr(data, "readinto", None)
    if readinto is None:
        raise InvalidArgumentError(
            "data must be bytes, an async iterable of bytes or a binary file object, "
            f"got {type(data).__name__}"
        )
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    while True:
        n = readinto(buffer)
        if inspect.isawaitable(n):
            n = await n
        if not n:
            return
        yield view[:n]  # copied by the Chunker before the buffer is read into again


def _check_data(data: object) -> None:
    if isinstance(data, str):
        raise InvalidArgumentError("data must be bytes, not str: encode it first")
    if not (
        isinstance(data, (bytes, bytearray, memoryview))
        or hasattr(data, "__aiter__")
        or hasattr(data, "readinto")
        or hasattr(data, "read")
    ):
        raise InvalidArgumentError(
            "data must be bytes, an async iterable of bytes or a binary file object, "
            f"got {type(data).__name__}"
        )


def _check_headers(headers: object) -> None:
    if headers is None:
        return
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str)
        and (isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)))
        for k, v in headers.items()
    ):
        raise InvalidArgumentError("headers must map str to str or list[str]")


def _check_metadata(metadata: object) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidArgumentError("metadata must map str to str")


class ObjectReader:
    """One ``ObjectStore.get()``: an async context manager and async iterator of
    ``bytes`` chunks. ``info`` is the object's meta (set on entering).

    The chunks are pulled by bytes into a bounded buffer; each is checked as it
    is handed out, and the SHA-256 after the last one, so a complete iteration
    means a complete, intact object.
    """

    def __init__(self, store: ObjectStore, name: str) -> None:
        self._store = store
        self._name = name
        self._info: ObjectInfo | None = None
        self._check: ChunkCheck | None = None
        self._oc: OrderedConsumer | None = None
        self._items: OrderedItems | None = None
        self._source: ObjectStore = store
        self._closed = False
        self._entered = False

    def __repr__(self) -> str:
        return f"<ObjectReader {self._store.bucket}/{self._name}>"

    @property
    def info(self) -> ObjectInfo:
        """The object's meta (after ``async with``; a followed link's target)."""
        if self._info is None:
            raise InvalidArgumentError("enter the reader first: async with store.get(name) as obj")
        return self._info

    async def _open(self) -> None:
        if self._info is not None:
            return
        source, info = await self._store._resolve(self._name)
        self._source = source
        self._info = info
        check = ChunkCheck(info)
        self._check = check
        if check.done:
            return
        if not info.nuid:
            raise RemoteProtocolError(f"object {info.name!r} has data but no nuid in its meta")
        oc = await open_ordered_consumer(
            source._api,
            source._stream_name,
            filter_subjects=[chunk_subject(source.bucket, info.nuid)],
        )
        self._oc = oc
        if initial_pending(oc) < info.chunks - check.chunks:
            raise check.missing()

        def chunk_of(
            subject: str,
            reply: bytes,
            data: bytes,
            header: bytes | None,
            sseq: int,
            pending: int,
            ts: int,
        ) -> tuple[bytes, int]:
            return data, pending

        buffer = max(_GET_BUFFER_BYTES, 4 * (info.chunk_size or DEFAULT_CHUNK_SIZE))
        items = OrderedItems(oc, ordered_consume_options(max_bytes=buffer), chunk_of)
        await items.__aenter__()
        self._items = items

    async def _fill(self, items: OrderedItems, check: ChunkCheck) -> None:
        """Wait for chunks; when none come for the request timeout, find out why
        (deleted, replaced or purged: a typed error) rather than wait for ever."""
        task = asyncio.ensure_future(items.fill())
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._source._api.timeout)
                if done:
                    task.result()
                    return
                await self._still_there(check)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await task

    async def _still_there(self, check: ChunkCheck) -> None:
        source, info = self._source, check.info
        meta = await source._meta(info.name)
        if meta is None or meta.deleted:
            raise ObjectDeletedError(
                f"object {info.name!r} of store {source.bucket!r} was deleted while being read",
                info=meta,
            )
        if meta.nuid != info.nuid:
            raise ObjectIncompleteError(
                f"object {info.name!r} of store {source.bucket!r} was replaced while being "
                "read (its chunks are purged)"
            )
        stream = await source._api.stream_info(
            source._stream_name, subjects_filter=chunk_subject(source.bucket, info.nuid)
        )
        if sum((stream.state.subjects or {}).values()) < info.chunks:
            raise check.missing()

    def __aiter__(self) -> AsyncIterator[bytes]:
        # Inside ``async with`` the context manager cleans up; a bare ``async for``
        # gets a generator that deletes the consumer when the loop is left.
        return self if self._entered else owned_iteration(self, self.aclose)

    async def __anext__(self) -> bytes:
        check = self._check
        if check is None:
            if self._closed:
                raise StopAsyncIteration
            try:
                await self._open()
            except BaseException:
                await self.aclose()
                raise
            check = self._check
            assert check is not None
        if check.done:
            await self.aclose()
            raise StopAsyncIteration
        items = self._items
        if items is None:
            raise StopAsyncIteration
        try:
            if not items.ready:
                await self._fill(items, check)
            data: bytes
            pending: int
            data, pending = items.ready.popleft()
            check.take(data, pending)
        except StopAsyncIteration:
            # The consume ended under us (closed): never a short read as success.
            await self.aclose()
            raise check.missing() from None
        except BaseException:
            await self.aclose()
            raise
        if check.done:
            await self.aclose()
        return data

    async def read(self) -> bytes:
        """The rest of the object in memory (all of it, on a fresh reader)."""
        parts = []
        while True:
            try:
                parts.append(await self.__anext__())
            except StopAsyncIteration:
                return b"".join(parts)

    async def aclose(self) -> None:
        """Stop reading and delete the consumer (the reader cannot be read again)."""
        self._closed = True
        items, self._items = self._items, None
        oc, self._oc = self._oc, None
        if items is not None:
            await items.aclose()
        if oc is not None:
            await oc.close()

    async def __aenter__(self) -> ObjectReader:
        self._entered = True
        try:
            await self._open()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ObjectLister:
    """``ObjectStore.list()``: the metas of a snapshot of the store, as an async
    iterator (also an async context manager)."""

    def __init__(self, store: ObjectStore, show_deleted: bool) -> None:
        self._store = store
        self._show_deleted = show_deleted
        self._infos = self._read()

    def __aiter__(self) -> ObjectLister:
        return self

    def __anext__(self) -> Awaitable[ObjectInfo]:
        return self._infos.__anext__()

    async def _read(self) -> AsyncGenerator[ObjectInfo, None]:
        store = self._store
        # The snapshot: the stream's last sequence now, and the meta subjects then;
        # metas written after it are not listed; a reset starts last_per_subject
        # over (see _snapshot.py). An object rewritten after the start before the
        # scan reached it lost its meta of then (a meta is a rollup): those are
        # what remains of ``unreached`` at the end, each looked up as it is now.
        try:
            subjects, last = await store._api.subjects_and_last_seq(
                store._stream_name, meta_filter(store.bucket)
            )
        except StreamNotFoundError:
            raise _bucket_not_found(store.bucket) from None
        start = StartSubjects(subjects, last)
        reached = start.delivered
        scan = SnapshotScan(last, latest_only=True)
        if scan.done:
            return
        try:
            oc = await open_ordered_consumer(
                store._api,
                store._stream_name,
                filter_subjects=[meta_filter(store.bucket)],
                deliver_policy="last_per_subject",
            )
        except StreamNotFoundError:
            raise _bucket_not_found(store.bucket) from None
        oc.restart_on_reset()
        try:
            pending_at_start = initial_pending(oc)
            if pending_at_start == 0:
                return
            deliver = scan.deliver
            take = ScanVerdict.TAKE
            info_of = store._info_maker()
            show_deleted = self._show_deleted

            def opened(generation: int) -> None:
                scan.opened(initial_pending(oc))
                if scan.done:
                    asyncio.get_running_loop().call_soon(messages.stop)

            def make(
                subject: str,
                reply: bytes,
                data: bytes,
                header: bytes | None,
                sseq: int,
                pending: int,
                ts: int,
            ) -> ObjectInfo | None:
                reached(subject, sseq)
                if deliver(sseq) is not take:
                    return None
                info = info_of(subject, data, ts)
                if info is None or (info.deleted and not show_deleted):
                    return None
                return info

            messages = OrderedItems(
                oc,
                ordered_consume_options(max_messages=min(_SCAN_BUFFER, max(pending_at_start, 10))),
                make,
                on_open=opened,
            )
            filters = [meta_filter(store.bucket)]
            async with SnapshotReader(store._api, scan, filters, messages) as reader:
                while (infos := await reader.next_batch()) is not None:
                    for info in infos:
                        yield info
        finally:
            await oc.close()
        for subject in start.left():
            info = await store._meta_at(subject)
            if info is not None and (show_deleted or not info.deleted):
                yield info

    async def aclose(self) -> None:
        await self._infos.aclose()

    async def __aenter__(self) -> ObjectLister:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ObjectWatcher:
    """Metas of ``ObjectStore.watch()``: an async iterator and async context manager.

    Attributes:
        initial_done: an ``asyncio.Event`` set once the metas present at the
            start have been yielded (at once when there were none).
    """

    def __init__(
        self, store: ObjectStore, policy: str, ignore_deletes: bool, updates_only: bool
    ) -> None:
        self._store = store
        self._policy = policy
        self._ignore_deletes = ignore_deletes
        self._updates_only = updates_only
        self.initial_done = asyncio.Event()
        self._messages: OrderedItems | None = None
        self._stopped = False
        self._entered = False
        self._last_initial: ObjectInfo | None = None

    def __repr__(self) -> str:
        return f"<ObjectWatcher {self._store.bucket}>"

    async def _start(self) -> None:
        if self._messages is not None:
            return
        store = self._store
        latest = self._policy == "last_per_subject"
        scan = SnapshotScan(
            0 if self._updates_only else await store._last_seq(), latest_only=latest
        )
        try:
            oc = await open_ordered_consumer(
                store._api,
                store._stream_name,
                filter_subjects=[meta_filter(store.bucket)],
                deliver_policy=self._policy,
            )
        except StreamNotFoundError:
            raise _bucket_not_found(store.bucket) from None
        scanning = not scan.done and initial_pending(oc) > 0
        if not scanning:
            self.initial_done.set()
        elif latest:
            oc.restart_on_reset()
        info_of = store._info_maker()
        deliver = scan.deliver
        TAKE = ScanVerdict.TAKE
        last: ObjectInfo | None = None

        def opened(generation: int) -> None:
            if scanning:
                scan.opened(initial_pending(oc))
                if scan.done:
                    end_scan()
                    oc.resume_after(scan.last_seq)

        def end_scan(taking: ObjectInfo | None = None) -> None:
            nonlocal scanning
            scanning = False
            if taking is not None:
                self._last_initial = taking
                return
            incoming, ready = messages.incoming, messages.ready
            queued = (incoming[-1] is last) if incoming else bool(ready) and ready[-1] is last
            if last is not None and queued:
                self._last_initial = last
            else:
                self.initial_done.set()

        def scan_over(verdict: ScanVerdict, info: ObjectInfo | None, sseq: int) -> bool:
            end_scan(info if verdict is TAKE else None)
            if scan.restarts:
                oc.resume_after(scan.last_seq)
                messages.request_reset("snapshot")
                return verdict is TAKE
            # After the last delivery, not the look's last sequence: see KeyWatcher
            # (a replica behind the look gives the writes it had yet to apply next).
            oc.resume_after(sseq)
            return verdict is not ScanVerdict.SKIP

        def make(
            subject: str,
            reply: bytes,
            data: bytes,
            header: bytes | None,
            sseq: int,
            pending: int,
            ts: int,
        ) -> ObjectInfo | None:
            nonlocal last
            info = info_of(subject, data, ts)
            if scanning:
                verdict = deliver(sseq)
                if scan.done:
                    if info is None:
                        end_scan()
                        if scan.restarts:
                            oc.resume_after(scan.last_seq)
                            messages.request_reset("snapshot")
                        else:
                            oc.resume_after(sseq)
                        return None
                    return info if scan_over(verdict, info, sseq) else None
                if verdict is not TAKE or info is None:
                    return None
                last = info
            return info

        messages = OrderedItems(
            oc, ordered_consume_options(max_messages=_SCAN_BUFFER), make, on_open=opened
        )
        await messages.__aenter__()
        self._messages = messages

    def __aiter__(self) -> AsyncIterator[ObjectInfo]:
        return self if self._entered else owned_iteration(self, self.stop)

    async def __anext__(self) -> ObjectInfo:
        if self._messages is None:
            if self._stopped:
                raise StopAsyncIteration
            await self._start()
        messages = self._messages
        assert messages is not None
        ready = messages.ready
        while True:
            if not ready:
                await messages.fill()
            info: ObjectInfo = ready.popleft()
            if info is self._last_initial:
                self.initial_done.set()
            if self._ignore_deletes and info.deleted:
                continue
            return info

    async def stop(self) -> None:
        """End the watch and delete its consumer."""
        self._stopped = True
        if self._messages is not None:
            await self._messages.aclose()

    async def aclose(self) -> None:
        await self.stop()

    async def __aenter__(self) -> ObjectWatcher:
        self._entered = True
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


# -- the store's lifetime ---------------------------------------------------------------------


async def create_object_store(
    api: JetStreamApi,
    bucket: str,
    *,
    description: str | None,
    ttl: float | None,
    max_bytes: int | None,
    storage: str,
    replicas: int,
    compression: bool,
    metadata: Mapping[str, str] | None,
) -> ObjectStore:
    """``JetStream.create_object_store``'s body (see there)."""
    config = store_stream_config(
        bucket,
        description=description,
        ttl=ttl,
        max_bytes=max_bytes,
        storage=storage,
        replicas=replicas,
        compression=compression,
        metadata=metadata,
    )
    name = stream_name(bucket)
    try:
        stream = Stream(api, name, await api.create_stream(name, config))
    except StreamNameInUseError as exc:
        stream = Stream(api, name, await api.stream_info(name))
        if not _same_settings(stream.cached_info.config, config):
            raise StreamNameInUseError(
                f"object store {bucket!r} exists with other settings",
                code=exc.code,
                err_code=exc.err_code,
                hint="open it with js.object_store() or delete it first",
            ) from None
    return ObjectStore(api, bucket, stream)


def _same_settings(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    for key in ("max_age", "max_bytes", "storage"):
        if current.get(key) != wanted.get(key):
            return False
    if (current.get("compression") or "none") != wanted.get("compression", "none"):
        return False
    return int(current.get("num_replicas") or 1) == int(wanted["num_replicas"])


async def object_store(api: JetStreamApi, bucket: str) -> ObjectStore:
    """``JetStream.object_store``'s body (see there)."""
    validate_bucket(bucket)
    name = stream_name(bucket)
    try:
        stream = Stream(api, name, await api.stream_info(name))
    except StreamNotFoundError:
        raise _bucket_not_found(bucket) from None
    return ObjectStore(api, bucket, stream)


async def delete_object_store(api: JetStreamApi, bucket: str) -> None:
    """``JetStream.delete_object_store``'s body (see there)."""
    validate_bucket(bucket)
    try:
        await api.delete_stream(stream_name(bucket))
    except StreamNotFoundError:
        raise _bucket_not_found(bucket) from None


async def object_store_names(api: JetStreamApi) -> AsyncIterator[str]:
    """``JetStream.object_store_names``'s body: the stores' names."""
    async for name in api.stream_names("$O.*.M.>"):
        if isinstance(name, str) and name.startswith("OBJ_"):
            yield name[4:]
