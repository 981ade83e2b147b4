"""JetStream Key-Value (NATS ADR-8) on our Direct Get, publish and ordered consumers.

Reads go through Direct Get (ADR-31): ``get`` is one ``last_by_subj`` request
in the subject-appended form, ``keys`` one ``multi_last`` pass over the
bucket's subjects, ``history`` one batched read of the key's subject. Writes
are publishes with the ADR-8 headers. ``watch`` (and ``keys`` on buckets too
large for one ``multi_last`` answer) runs an ordered consumer, so it survives
reconnects and server restarts. Behaviour follows nats.go ``jetstream/kv.go``;
``keys``, ``history`` and ``watch``'s initial values are snapshots judged by
``_protocol/_snapshot.py`` (exact while others write, also across a reset).

Their per-message work happens in the read loop (see ``OrderedMessageStream``'s
``make``): ``keys`` turns each headers-only message straight into its key (or
nothing, for a marker), ``watch`` into its entry; no :class:`Msg` in between.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from itertools import repeat
from types import TracebackType
from typing import Any, cast

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._api import JetStreamApi, direct_get_error
from aioclients.jetstream._consume import check_on_event
from aioclients.jetstream._errors import (
    BucketNotFoundError,
    DirectGetUnavailableError,
    JetStreamError,
    KeyDeletedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyWrongRevisionError,
    MessageNotFoundError,
    NoStreamResponseError,
    ServerTooOldError,
    StreamNameInUseError,
    StreamNotFoundError,
    TooManySubjectsError,
    WrongLastSequenceError,
)
from aioclients.jetstream._message import Msg, header_block_of
from aioclients.jetstream._models import StoredMessage, StreamInfo, StreamState
from aioclients.jetstream._ordered import (
    OrderedConsumeEvent,
    OrderedConsumer,
    OrderedItems,
    SnapshotReader,
    SnapshotStallGuard,
    initial_pending,
    open_ordered_consumer,
    ordered_consume_options,
    owned_iteration,
)
from aioclients.jetstream._protocol._direct import MAX_MULTI_SUBJECTS, ReplyKind, classify_reply
from aioclients.jetstream._protocol._headers import decode_headers, publish_headers
from aioclients.jetstream._protocol._kv import (
    DEL,
    KV_OPERATION,
    PURGE,
    PUT,
    ROLLUP,
    KeyValueEntry,
    PrefixedKeys,
    all_put,
    bucket_stream_config,
    direct_entry_fields,
    direct_put_stamp,
    key_filter_subjects,
    key_match,
    keys_of_subjects,
    matches_any,
    ns_time,
    operation_of,
    operation_of_header_block,
    plain_put_match,
    stamp_time,
    stream_name,
    validate_bucket,
    validate_key,
    write_prefix,
)
from aioclients.jetstream._protocol._msgopts import format_ttl
from aioclients.jetstream._protocol._ordered import ack_run_numbers, ack_sequences
from aioclients.jetstream._protocol._snapshot import (
    CountedStartSubjects,
    ScanVerdict,
    SnapshotScan,
    StartSubjects,
    same_messages,
)
from aioclients.jetstream._protocol._time import parse_server_time
from aioclients.jetstream._stream import Stream

__all__ = (
    "KeyLister",
    "KeyValue",
    "KeyValueStatus",
    "KeyWatcher",
    "create_key_value",
    "key_value_store_names",
    "delete_key_value",
    "key_value",
)

log = logging.getLogger("aioclients.jetstream.kv")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Buffer of the ordered consumers behind ``watch`` and ``history``.
_SCAN_BUFFER = 2000
#: Buffer of the headers-only ordered consumer of large ``keys`` scans (messages).
_KEYS_BUFFER = 20_000
#: The most keys ``keys()`` holds while it checks that the stream was not written
#: to during its read, by its consumer's pending count (one a subject, markers
#: included); above it the snapshot's subjects are named at once.
_KEYS_HELD = 1_000_000
#: How many consumers in a row ``keys()`` reads on a replica still catching up
#: (see ``KeyLister._read``) before it gives up with an error, and the wait before
#: the first new one (doubled for each after it: 1.55 s in all), time for the
#: replica to catch up should the next consumer be placed there again.
_REPLICA_BEHIND_TRIES = 5
_REPLICA_BEHIND_WAIT = 0.05


@dataclass(frozen=True, slots=True)
class KeyValueStatus:
    """What ``KeyValue.status()`` reports about a bucket."""

    bucket: str
    #: messages stored (every kept revision and marker)
    values: int
    history: int
    #: max age of a value, seconds (0: none)
    ttl: float
    bytes: int
    storage: str
    replicas: int
    backing_store: str
    stream_info: StreamInfo
    #: seconds a limit marker lives (ADR-48; 0: the bucket has none, no per-key TTLs)
    limit_marker_ttl: float = 0.0
    #: the bucket's stream is compressed (S2)
    compressed: bool = False
    #: the bucket's metadata (the server's own ``_nats.*`` keys left out)
    metadata: dict[str, str] | None = None


def _created(ts_ns: int) -> datetime:
    return ns_time(ts_ns)


def _fast_entry_constructor() -> Callable[..., KeyValueEntry]:
    """``KeyValueEntry(...)`` at a fraction of the cost, for watch()'s per-entry path.

    A frozen dataclass sets each field through ``object.__setattr__``. Here the
    fields are stored by a plain class with the same slots (a store to a slot is
    the interpreter's cheapest attribute write), and the object then becomes a
    ``KeyValueEntry`` (same layout: same object, same equality). Where that is
    refused, the slot descriptors set the fields; where there are no slots, the
    plain constructor.
    """
    fields = ("bucket", "key", "value", "revision", "created", "delta", "operation", "_headers")
    # (created's slot is read through a descriptor of its own: see _protocol/_kv.py)
    slots = [KeyValueEntry.__dict__.get(name) for name in fields]
    if not all(hasattr(slot, "__set__") for slot in slots) or not set(fields) <= set(
        getattr(KeyValueEntry, "__slots__", ())
    ):
        return KeyValueEntry  # not a slots class any more: the plain constructor

    class _Twin:
        __slots__ = KeyValueEntry.__slots__

        def __init__(
            self,
            bucket: str,
            key: str,
            value: bytes,
            revision: int,
            created: datetime,
            delta: int,
            operation: str,
            headers: bytes | None = None,
        ) -> None:
            self.bucket = bucket
            self.key = key
            self.value = value
            self.revision = revision
            self.created = created
            self.delta = delta
            self.operation = operation
            self._headers = headers
            # Becomes the entry here, so that constructing it is one call, no wrapper.
            self.__class__ = KeyValueEntry  # type: ignore[assignment]

    twin = cast("Callable[..., KeyValueEntry]", _Twin)

    try:
        probe = twin("b", "k", b"v", 1, _EPOCH, 0, PUT, None)
        if (
            type(probe) is KeyValueEntry
            and probe == KeyValueEntry("b", "k", b"v", 1, _EPOCH, 0, PUT)
            and tuple(getattr(probe, name) for name in fields)
            == ("b", "k", b"v", 1, _EPOCH, 0, PUT, None)
        ):
            return twin
    except TypeError:  # "object layout differs"
        pass
    sb, sk, sv, sr, sc, sd, so, sh = (slot.__set__ for slot in slots)  # type: ignore[union-attr]
    new = object.__new__

    def entry(
        bucket: str,
        key: str,
        value: bytes,
        revision: int,
        created: datetime,
        delta: int,
        operation: str,
        headers: bytes | None = None,
    ) -> KeyValueEntry:
        e = new(KeyValueEntry)
        sb(e, bucket)
        sk(e, key)
        sv(e, value)
        sr(e, revision)
        sc(e, created)
        sd(e, delta)
        so(e, operation)
        sh(e, headers)
        return e

    return entry


_new_entry = _fast_entry_constructor()


def _entry_shell() -> type | None:
    """A class of ``KeyValueEntry``'s slots and no ``__init__``: ``shell()``, eight
    slot stores and ``__class__ = KeyValueEntry`` make an entry at some two thirds
    of the cost of the one call of :data:`_new_entry` (no ``__init__`` frame, no
    arguments to bind), for ``get``, which does so inline. ``None`` where the
    entry cannot be made so (then ``get`` takes :data:`_new_entry`)."""
    if _new_entry is KeyValueEntry or not hasattr(KeyValueEntry, "__slots__"):
        return None

    class _Shell:
        __slots__ = KeyValueEntry.__slots__

    try:
        probe: Any = _Shell()
        probe.bucket, probe.key, probe.value, probe.revision = "b", "k", b"v", 1
        probe.created, probe.delta, probe.operation, probe._headers = _EPOCH, 0, PUT, None
        probe.__class__ = KeyValueEntry
    except (TypeError, AttributeError):  # "object layout differs"
        return None
    if probe != KeyValueEntry("b", "k", b"v", 1, _EPOCH, 0, PUT):
        return None
    return _Shell


_SHELL = _entry_shell()


class KeyValue:
    """A Key-Value bucket. Obtain one from ``js.create_key_value`` or ``js.key_value``.

    It talks to the server through the request layer (``api``) it is given.
    """

    def __init__(self, api: JetStreamApi, bucket: str, stream: Stream) -> None:
        self._api = api
        self.bucket = bucket
        self._stream = stream
        self._stream_name = stream.name
        self._prefix = f"$KV.{bucket}."
        #: where writes go: this bucket's subjects, or a mirror's origin (nats.go's putPre)
        self._write_prefix = write_prefix(bucket, stream.cached_info.config)
        self._direct = bool(stream.cached_info.config.get("allow_direct"))
        # ADR-48: the bucket takes per-key TTLs (it was created with limit_marker_ttl)
        self._ttl_ok = bool(stream.cached_info.config.get("allow_msg_ttl"))
        self._get_prefix = f"{api.prefix}.DIRECT.GET.{stream.name}.{self._prefix}"
        #: how many subjects the whole bucket held when last seen (the stream's info
        #: when bound, then each listing of all keys): above the ``multi_last``
        #: limit, ``keys()`` goes straight to its consumer (see KeyLister._read)
        self._subjects_seen = stream.cached_info.state.num_subjects

    def __repr__(self) -> str:
        return f"<KeyValue {self.bucket}>"

    @property
    def stream(self) -> Stream:
        """The bucket's stream (``KV_<bucket>``)."""
        return self._stream

    # -- reads --

    async def get(self, key: str, *, revision: int | None = None) -> KeyValueEntry:
        """The key's value, or its value at ``revision``.

        Raises:
            KeyNotFoundError: no such key (or ``revision`` is not one of this key).
            KeyDeletedError: the key (at ``revision``) is a delete or purge marker.
            InvalidArgumentError: an invalid key.
        """
        if revision is None and self._direct:
            # The hot path, inline (one coroutine fewer per get): one Direct Get of
            # the key's last message, its reply read straight from the header block.
            if key.__class__ is not str or key_match(key) is None:
                validate_key(key)  # raises, unless a str subclass holds a valid key
            api = self._api
            requests = api.requests
            # (formatted only for an error: most gets are answered)
            what = ("get of %r in %r", key, self.bucket)
            started = requests.start_raw(self._get_prefix, key, api.timeout, what)
            if started is None:  # the inbox is not open yet, or the socket is busy
                header, payload = await requests.request_raw(
                    self._get_prefix + key, api.timeout, what
                )
                seq: Any = None
            else:
                token, reply = started
                try:
                    got = await reply
                except BaseException:
                    # A caller that stops waiting (cancelled) takes its entry with it
                    # (a reply takes it out of the table; a failure may not have).
                    requests.forget(token)
                    raise
                # The usual reply, read whole at the socket's read callback: the
                # groups of its frame, PLAIN_PUT_REPLY's among them; any other: None
                # but the header block and payload (see ReplyMux.start_raw).
                _, _, header, seq, stamp, late_day, payload = got
            # The usual reply, a value as current servers write it: direct_put_stamp's
            # match, read here (unless read with the frame), and the entry made inline
            # (see _entry_shell).
            if seq is None and header:
                usual = plain_put_match(header)
                if usual is not None:
                    seq, stamp, late_day = usual.groups()
            if seq is not None and _SHELL is not None:
                made: Any = _SHELL()
                made.bucket = self.bucket
                made.key = key
                made.value = payload
                made.revision = int(seq)
                # a day that every month has: the stamp, read on first access
                made.created = stamp if late_day is None else stamp_time(stamp)
                made.delta = 0
                made.operation = PUT
                made._headers = header
                made.__class__ = KeyValueEntry
                return made  # type: ignore[no-any-return]
            put = direct_put_stamp(header)
            if put is not None:  # a value with headers of its own (or no shell)
                return _new_entry(self.bucket, key, payload, put[0], put[1], 0, PUT, header)
            fields = direct_entry_fields(header)
            if fields is None:
                entry = await self._decoded_entry(key, header, payload)
            else:
                seq, stamp, operation = fields
                entry = KeyValueEntry(
                    self.bucket, key, payload, seq, parse_server_time(stamp), 0, operation, header
                )
        else:
            entry = await self._entry(key, revision)
        if entry.operation != PUT:
            raise KeyDeletedError(
                f"key {key!r} of bucket {self.bucket!r} was deleted "
                f"({entry.operation} at revision {entry.revision})",
                entry=entry,
            )
        return entry

    async def _entry(self, key: str, revision: int | None = None) -> KeyValueEntry:
        """The key's last message (or the one at ``revision``), whatever its operation."""
        validate_key(key)
        if revision is not None:
            if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
                raise InvalidArgumentError(f"revision must be an int >= 1, got {revision!r}")
            stored = await self._stored(key, seq=revision)
            if stored.subject != self._prefix + key:
                raise KeyNotFoundError(
                    f"revision {revision} of bucket {self.bucket!r} is not a revision of {key!r}"
                )
            return self._from_stored(key, stored)
        if not self._direct:
            return self._from_stored(key, await self._stored(key, seq=None))
        api = self._api
        api.check_open()
        header, payload = await api.requests.request_raw(
            self._get_prefix + key, api.timeout, f"get of {key!r} in {self.bucket!r}"
        )
        fields = direct_entry_fields(header)
        if fields is None:
            return await self._decoded_entry(key, header, payload)
        seq, stamp, operation = fields
        return KeyValueEntry(
            self.bucket, key, payload, seq, parse_server_time(stamp), 0, operation, header
        )

    async def _decoded_entry(self, key: str, header: bytes | None, payload: bytes) -> KeyValueEntry:
        """A Direct Get reply that is not a plain stored message (a status, or headers
        the fast reading does not take), decoded in full: the entry, or its error."""
        if header is None:
            raise RemoteProtocolError("Direct Get reply without headers")
        reply = classify_reply(decode_headers(header, strict=False))
        if reply.kind is not ReplyKind.MESSAGE:
            if reply.kind is ReplyKind.NOT_FOUND:
                raise KeyNotFoundError(f"key {key!r} not found in bucket {self.bucket!r}", code=404)
            if reply.kind is ReplyKind.NO_RESPONDERS:
                # See _stored: the API's message get reads it from the stream's leader.
                return self._from_stored(key, await self._stored(key, seq=None))
            raise direct_get_error(self._stream_name, reply)
        assert reply.seq is not None
        assert reply.time is not None
        return KeyValueEntry(
            self.bucket, key, payload, reply.seq, reply.time, 0, operation_of(reply.headers), header
        )

    async def _stored(self, key: str, *, seq: int | None) -> StoredMessage:
        try:
            if seq is None:
                return await self._stream.get_msg(last_by_subj=self._prefix + key)
            if self._direct:
                try:
                    return await self._stream.direct_get(seq)
                except DirectGetUnavailableError:
                    # Nobody answered Direct Get: on a cluster, what this server
                    # says for a moment after the bucket is created (its replicas'
                    # interest not known here yet) or while they change; or
                    # allow_direct was turned off since. The API's message get,
                    # answered by the stream's leader, reads the same message (and
                    # says so when the bucket is gone).
                    pass
            return await self._stream.get_msg(seq)
        except MessageNotFoundError:
            what = f"revision {seq} of key {key!r}" if seq else f"key {key!r}"
            raise KeyNotFoundError(f"{what} not found in bucket {self.bucket!r}") from None
        except StreamNotFoundError:
            raise _bucket_not_found(self.bucket) from None

    def _from_stored(self, key: str, stored: StoredMessage) -> KeyValueEntry:
        return KeyValueEntry(
            self.bucket,
            key,
            stored.data,
            stored.seq,
            stored.time,
            0,
            operation_of(stored.headers),
            stored.headers,
        )

    async def history(self, key: str) -> list[KeyValueEntry]:
        """Every kept revision of ``key``, oldest first (markers included), up to
        the stream's last sequence at the call (later writes are left out).

        A key rewritten so fast that every revision kept at the call is replaced
        before the read reaches it gives the revisions found instead (all newer
        than the call), not an error.

        Raises:
            KeyNotFoundError: the key has no message at all.
        """
        validate_key(key)
        subject = self._prefix + key
        entries: list[KeyValueEntry] = []
        # A snapshot: the revisions up to the stream's last sequence now (those
        # written while it is read are left out).
        last = await _last_seq(self)
        if self._direct:
            try:
                entries = await self._history_direct(key, subject, last)
            except ServerTooOldError:
                entries = []
            else:
                return self._deltas(key, entries)
        if last == 0:
            return self._deltas(key, entries)
        oc = await open_ordered_consumer(self._api, self._stream_name, filter_subjects=[subject])
        try:
            scan = SnapshotScan(last, latest_only=False)
            async for msg, pending in _scan(self._api, oc, scan, [subject]):
                entries.append(self._from_msg(msg, pending))
        finally:
            await oc.close()
        return self._deltas(key, entries)

    async def _history_direct(self, key: str, subject: str, last: int) -> list[KeyValueEntry]:
        """``history`` through Direct Get batches: the revisions up to ``last``, or
        if none of those is left, the newer ones of the first batch."""
        entries: list[KeyValueEntry] = []
        newer: list[KeyValueEntry] = []
        seq = 1
        while seq <= last:
            batch = self._stream.direct_get_batch(batch=64, seq=seq, next_by_subj=subject)
            past = False  # the batch went past the snapshot: nothing more to read
            async with batch:
                async for stored in batch:
                    if stored.seq > last:
                        past = True
                        if not entries:
                            newer.append(self._from_stored(key, stored))
                    elif not entries or stored.seq > entries[-1].revision:
                        entries.append(self._from_stored(key, stored))
            if past or not batch.num_pending or not entries:
                break
            seq = entries[-1].revision + 1
        return entries or newer

    def _deltas(self, key: str, entries: list[KeyValueEntry]) -> list[KeyValueEntry]:
        if not entries:
            raise KeyNotFoundError(f"key {key!r} not found in bucket {self.bucket!r}")
        last = len(entries) - 1
        return [
            KeyValueEntry(
                e.bucket, e.key, e.value, e.revision, e.created, last - i, e.operation, e._headers
            )
            for i, e in enumerate(entries)
        ]

    def _from_msg(self, msg: Msg, pending: int) -> KeyValueEntry:
        sseq, _, _, ts = ack_sequences(msg.reply)
        return KeyValueEntry(
            self.bucket,
            msg.subject[len(self._prefix) :],
            msg.data,
            sseq,
            _created(ts),
            pending,
            operation_of_header_block(header_block_of(msg)),
            header_block_of(msg),
        )

    def keys(self, *filters: str) -> KeyLister:
        """The keys holding a value (deleted and purged keys left out), optionally
        only those matching ``filters`` (keys with ``*`` / ``>`` wildcards).

        ``async for key in kv.keys("config.>")``. One ``multi_last`` Direct Get
        pass; buckets with more than 1024 matching keys are listed through a
        headers-only ordered consumer instead (the server's ``multi_last`` limit).
        Either way a snapshot: each key holding a value at the start once, none
        created later. A key updated since is listed too (looked up as it is now
        when its value of the start is gone); one deleted since may be left out.
        Through the consumer, up to 1,000,000 keys are held until it is read to
        its end and a second look shows the bucket unchanged; when it changed, the
        server names the keys of the start (a ``STREAM.INFO`` listing each) and
        the listing may start over from that answer. Above that many, the keys
        are named at once and handed out once that answer has come.
        """
        subjects = key_filter_subjects(self.bucket, list(filters))
        return KeyLister(self, subjects)

    async def status(self) -> KeyValueStatus:
        """The bucket's settings and size."""
        try:
            info = await self._stream.info()
        except StreamNotFoundError:
            raise _bucket_not_found(self.bucket) from None
        config = info.config
        return KeyValueStatus(
            bucket=self.bucket,
            values=info.state.messages,
            history=int(config.get("max_msgs_per_subject") or 1),
            ttl=float(config.get("max_age") or 0),
            bytes=info.state.bytes,
            storage=str(config.get("storage") or "file"),
            replicas=int(config.get("num_replicas") or 1),
            backing_store="JetStream",
            stream_info=info,
            limit_marker_ttl=float(config.get("subject_delete_marker_ttl") or 0),
            compressed=(config.get("compression") or "none") != "none",
            metadata={
                k: v for k, v in (config.get("metadata") or {}).items() if not k.startswith("_nats")
            }
            or None,
        )

    # -- writes --

    async def put(self, key: str, value: bytes) -> int:
        """Store ``value`` under ``key``; returns the new revision."""
        validate_key(key)
        return await self._publish(key, value, None, None)

    async def create(self, key: str, value: bytes, *, ttl: float | None = None) -> int:
        """Store ``value`` only if ``key`` holds none (absent, deleted or purged).

        ``ttl`` (ADR-48): seconds (at least 1) or ``"never"`` this value lives; the
        bucket needs ``limit_marker_ttl``. When it ends the key reads as deleted
        while the server's marker lives, then as not found. With ``history > 1``
        the server raises a TTL below ``limit_marker_ttl`` to it.

        Raises:
            KeyExistsError: the key holds a value.
            InvalidArgumentError: a bad ``ttl``, or a bucket without limit markers.
        """
        validate_key(key)
        self._check_ttl(ttl)
        try:
            return await self._publish(key, value, None, 0, ttl)
        except KeyWrongRevisionError as exc:
            try:
                entry = await self._entry(key)
            except KeyNotFoundError:
                raise KeyExistsError(
                    f"key {key!r} of bucket {self.bucket!r} exists", code=exc.code
                ) from None
            if entry.operation != PUT:
                try:
                    return await self._publish(key, value, None, entry.revision, ttl)
                except KeyWrongRevisionError:
                    pass  # recreated meanwhile by someone else
            raise KeyExistsError(
                f"key {key!r} of bucket {self.bucket!r} exists (revision {entry.revision})",
                code=exc.code,
                err_code=exc.err_code,
            ) from None

    async def update(self, key: str, value: bytes, last: int) -> int:
        """Store ``value`` only if the key's revision is ``last``.

        Raises:
            KeyWrongRevisionError: the key's revision is another.
        """
        validate_key(key)
        _check_last(last, allow_zero=True)
        return await self._publish(key, value, None, last)

    async def delete(self, key: str, *, last: int | None = None) -> None:
        """Delete ``key`` (a ``DEL`` marker; history is kept).

        Raises:
            KeyWrongRevisionError: ``last`` is given and the key's revision is another.
        """
        validate_key(key)
        if last is not None:
            _check_last(last, allow_zero=True)
        await self._publish(key, b"", {KV_OPERATION: DEL}, last)

    async def purge(self, key: str, *, last: int | None = None, ttl: float | None = None) -> None:
        """Purge ``key``: a ``PURGE`` marker that removes its earlier revisions.

        ``ttl`` (ADR-48): the marker itself goes after that many seconds (at least
        1), and the key then reads as not found; the bucket needs
        ``limit_marker_ttl``.

        Raises:
            KeyWrongRevisionError: ``last`` is given and the key's revision is another.
            InvalidArgumentError: a bad ``ttl``, or a bucket without limit markers.
        """
        validate_key(key)
        if last is not None:
            _check_last(last, allow_zero=True)
        self._check_ttl(ttl)
        await self._publish(key, b"", {KV_OPERATION: PURGE, ROLLUP: "sub"}, last, ttl)

    async def purge_deletes(self, *, older_than: float = 1800.0) -> None:
        """Clean up the markers of deleted and purged keys (nats.go ``PurgeDeletes``).

        Each key whose current entry is a delete or purge marker loses its earlier
        revisions; a marker older than ``older_than`` seconds goes too, so the key
        then reads as never set. ``older_than <= 0`` removes every marker, whatever
        its age. Other clients watching the bucket see nothing of this.

        Raises:
            InvalidArgumentError: ``older_than`` is not a number.
        """
        if (
            not isinstance(older_than, (int, float))
            or isinstance(older_than, bool)
            or older_than != older_than
        ):
            raise InvalidArgumentError(f"older_than must be seconds, got {older_than!r}")
        markers: list[KeyValueEntry] = []
        async with self.watch() as watcher:
            if not watcher.initial_done.is_set():
                async for entry in watcher:
                    if entry.operation != PUT:
                        markers.append(entry)
                    if watcher.initial_done.is_set():
                        break
        limit = None
        if older_than > 0:
            limit = datetime.now(timezone.utc) - timedelta(seconds=older_than)
        for entry in markers:
            # A young marker stays (keep=1): a watcher or get still sees the delete.
            keep = 1 if limit is not None and entry.created > limit else None
            try:
                await self._stream.purge(subject=self._prefix + entry.key, keep=keep)
            except StreamNotFoundError:
                raise _bucket_not_found(self.bucket) from None

    def _check_ttl(self, ttl: object) -> None:
        if ttl is None:
            return
        format_ttl(ttl)  # a bad value fails here, before anything is sent
        if not self._ttl_ok:
            raise InvalidArgumentError(
                f"bucket {self.bucket!r} takes no per-key TTL: create it with "
                "limit_marker_ttl (js.create_key_value(..., limit_marker_ttl=...))"
            )

    async def _publish(
        self,
        key: str,
        value: bytes,
        headers: dict[str, str | list[str]] | None,
        last: int | None,
        ttl: float | str | None = None,
    ) -> int:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"value must be bytes, got {type(value).__name__}")
        if headers is None and last is None:
            hdrs = None
        else:
            hdrs = publish_headers(
                headers,
                msg_id=None,
                expected_stream=None,
                expected_last_seq=None,
                expected_last_subject_seq=last,
                expected_last_msg_id=None,
            )
        if ttl is not None:
            hdrs = await self._api.ttl_headers(hdrs, ttl)
        try:
            ack = await self._api.publish(self._write_prefix + key, bytes(value), hdrs)
        except WrongLastSequenceError as exc:
            raise KeyWrongRevisionError(
                f"key {key!r} of bucket {self.bucket!r} is not at revision {last}: "
                f"{exc.description}",
                code=exc.code,
                err_code=exc.err_code,
            ) from None
        except NoStreamResponseError:
            raise _bucket_not_found(self.bucket) from None
        return ack.seq

    # -- watch --

    def watch(
        self,
        keys: str | Sequence[str] = ">",
        *,
        include_history: bool = False,
        ignore_deletes: bool = False,
        meta_only: bool = False,
        updates_only: bool = False,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
        resume_from_revision: int | None = None,
    ) -> KeyWatcher:
        """Watch keys matching ``keys`` (a filter or a list of them).

        ``async with kv.watch("config.>") as watcher: async for entry in watcher``.
        First the current value of every matching key (every kept revision with
        ``include_history``; nothing with ``updates_only``), then each change as
        it happens. ``watcher.initial_done`` is set once the values present at
        the start have been yielded (at once when there are none). Markers of
        deleted and purged keys come as entries with that ``operation`` unless
        ``ignore_deletes``; ``meta_only`` leaves values out (headers only).
        ``on_event`` (a plain callable) hears of reconnects and of
        ``ConsumerReset``, when the watch's consumer is replaced.

        ``resume_from_revision`` (nats.go's ``ResumeFromRevision``) starts the
        watch at that revision: every revision of a matching key from it on
        (whatever ``include_history``), nothing before it. The initial values
        are then those stored from it up to the bucket's last revision at the
        start (``initial_done`` at once when there are none, as for a revision
        past the end: the watch waits for new entries). A replaced consumer
        goes on after the last revision delivered.

        Raises:
            InvalidArgumentError: a bad filter, ``include_history`` with
                ``updates_only``, a ``resume_from_revision`` that is not an int
                >= 1, or one given with ``updates_only``.
        """
        if include_history and updates_only:
            raise InvalidArgumentError("give include_history or updates_only, not both")
        if resume_from_revision is not None:
            if (
                not isinstance(resume_from_revision, int)
                or isinstance(resume_from_revision, bool)
                or resume_from_revision < 1
            ):
                raise InvalidArgumentError(
                    "resume_from_revision must be a revision (an int >= 1), "
                    f"got {resume_from_revision!r}"
                )
            if updates_only:
                raise InvalidArgumentError("give resume_from_revision or updates_only, not both")
        filters = [keys] if isinstance(keys, str) else list(keys)
        subjects = key_filter_subjects(self.bucket, filters)
        if resume_from_revision is not None:
            policy = "by_start_sequence"
        elif updates_only:
            policy = "new"
        elif include_history:
            policy = "all"
        else:
            policy = "last_per_subject"
        check_on_event(on_event)
        return KeyWatcher(
            self,
            subjects,
            policy,
            meta_only,
            ignore_deletes,
            updates_only,
            on_event,
            start_seq=resume_from_revision,
        )


def _check_last(last: object, *, allow_zero: bool) -> None:
    if not isinstance(last, int) or isinstance(last, bool) or last < (0 if allow_zero else 1):
        raise InvalidArgumentError(f"last must be a revision (an int >= 0), got {last!r}")


def _bucket_not_found(bucket: str) -> BucketNotFoundError:
    return BucketNotFoundError(
        f"bucket {bucket!r} not found",
        code=404,
        hint=f"create it with js.create_key_value({bucket!r})",
    )


def _forget(answer: asyncio.Future[Any]) -> None:
    """Stop waiting for ``answer``: cancel it, or take its error if it has one (it
    is not logged as never retrieved)."""
    if not answer.done():
        answer.cancel()
    elif not answer.cancelled():
        answer.exception()


async def _stream_state(kv: KeyValue) -> StreamState:
    """The state of the bucket's stream now (a plain ``STREAM.INFO``)."""
    try:
        info = await kv._api.stream_info(kv._stream_name)
    except StreamNotFoundError:
        raise _bucket_not_found(kv.bucket) from None
    return info.state


async def _last_seq(kv: KeyValue) -> int:
    """The last sequence of the bucket's stream: the snapshot a listing reads."""
    return (await _stream_state(kv)).last_seq


async def _subjects_at_start(kv: KeyValue, filters: list[str]) -> tuple[set[str], int]:
    """The subjects matching ``filters`` that hold a message now (keys, markers
    included) and the stream's last sequence (see ``subjects_and_last_seq``)."""
    single = filters[0] if len(filters) == 1 else kv._prefix + ">"
    try:
        subjects, last_seq = await kv._api.subjects_and_last_seq(kv._stream_name, single)
    except StreamNotFoundError:
        raise _bucket_not_found(kv.bucket) from None
    if len(filters) > 1:
        subjects = {subject for subject in subjects if matches_any(filters, subject)}
    return subjects, last_seq


async def _newest_of(kv: KeyValue, subject: str) -> int:
    """The stream sequence of the newest message on ``subject`` (wildcards allowed),
    0 for none, as the stream leader holds it (``STREAM.MSG.GET``, not a Direct Get
    that a replica still catching up may answer)."""
    try:
        return (await kv._stream.get_msg(last_by_subj=subject)).seq
    except MessageNotFoundError:
        return 0
    except StreamNotFoundError:
        raise _bucket_not_found(kv.bucket) from None


async def _holding_values(kv: KeyValue, subjects: list[str]) -> AsyncIterator[str]:
    """The keys of ``subjects`` whose last message now is a ``PUT``."""
    cut = len(kv._prefix)
    if kv._direct:
        for start in range(0, len(subjects), MAX_MULTI_SUBJECTS):
            batch = kv._stream.direct_get_last_for(subjects[start : start + MAX_MULTI_SUBJECTS])
            async with batch:
                async for stored in batch:
                    if operation_of(stored.headers) == PUT:
                        yield stored.subject[cut:]
        return
    for subject in subjects:
        try:
            await kv.get(subject[cut:])
        except KeyNotFoundError:  # deleted or purged since the start
            continue
        yield subject[cut:]


async def _scan(
    api: JetStreamApi, oc: OrderedConsumer, scan: SnapshotScan, filter_subjects: list[str]
) -> AsyncGenerator[tuple[Msg, int], None]:
    """The messages of the snapshot ``scan`` reads (an ordered consumer filtered on
    ``filter_subjects``), with their pending counts."""
    generation = oc.generation
    scan.opened(initial_pending(oc))
    if scan.done:
        return
    messages = oc.consume(max_messages=min(_SCAN_BUFFER, max(initial_pending(oc), 10)))
    async with messages:
        guard = SnapshotStallGuard(api, oc, scan, filter_subjects, messages.drain)
        guard.start()
        try:
            async for msg in messages:
                if oc.generation != generation:  # a replacement, after a reset
                    generation = oc.generation
                    scan.opened(initial_pending(oc))
                sseq, _, pending, _ = ack_sequences(msg.reply)
                if scan.deliver(sseq) is ScanVerdict.TAKE:
                    yield msg, pending
                if scan.done:
                    return
        finally:
            await guard.aclose()


class KeyLister:
    """The keys of a bucket, as an async iterator (also an async context manager)."""

    def __init__(self, kv: KeyValue, subjects: list[str]) -> None:
        self._kv = kv
        self._subjects = subjects
        self._keys = self._read()

    def __aiter__(self) -> AsyncIterator[str]:
        # The generator itself: ``async for`` then takes each key with no call of
        # ours in between (closing it is still aclose()'s).
        return self._keys

    def __anext__(self) -> Awaitable[str]:
        return self._keys.__anext__()

    async def _read(self) -> AsyncGenerator[str, None]:
        kv = self._kv
        cut = len(kv._prefix)
        # Every key (no filter): the count of subjects seen last time decides. One
        # above the multi_last limit is refused by the server after it has looked
        # at every subject (30 ms for 100,000): go to the consumer at once. Either
        # way lists the same snapshot; a count gone stale costs time, not keys.
        whole = self._subjects == [kv._prefix + ">"]
        if kv._direct and not (whole and kv._subjects_seen > MAX_MULTI_SUBJECTS):
            try:
                batch = kv._stream.direct_get_last_for(self._subjects)
                seen = 0
                async with batch:
                    async for stored in batch:
                        seen += 1
                        if operation_of(stored.headers) == PUT:
                            yield stored.subject[cut:]
                if whole:
                    kv._subjects_seen = seen
                return
            except TooManySubjectsError:
                # nothing was yielded yet: these come as the first answer
                if whole:
                    kv._subjects_seen = MAX_MULTI_SUBJECTS + 1
            except (ServerTooOldError, DirectGetUnavailableError):
                pass
        # The snapshot: the stream's last sequence now, and the subjects holding a
        # message then. Keys written after it are not listed; a reset starts
        # last_per_subject over (see _snapshot.py).
        # A key re-put (or deleted) after the start loses its message of then when
        # the bucket keeps one revision: the server passes over it, and the scan
        # never sees the key at or before ``last``. Those keys are what remains
        # here once the scan is over; each is looked up as it is now. With one
        # filter, the subjects are only counted until then (CountedStartSubjects).
        start: StartSubjects | CountedStartSubjects
        #: with one filter: the answer naming the subjects (for 100,000 keys the
        #: server takes some 100 ms of CPU to write it), and the stream's
        #: (last_seq, messages) it must show
        naming: asyncio.Future[tuple[CountedStartSubjects | set[str], int, int]] | None
        naming = None
        look = (0, 0)
        #: the subjects of the start are neither named nor settled yet
        unsettled = False
        #: consumers that read a replica behind the look at the stream
        behind = 0
        if len(self._subjects) == 1:
            state = await _stream_state(kv)
            last = state.last_seq
            look = (last, state.messages)
            start = CountedStartSubjects.before_answer(last)
            unsettled = last > 0
        else:
            start = StartSubjects(*await _subjects_at_start(kv, self._subjects))
            last = start.last_seq
        try:
            while True:
                scan = SnapshotScan(last, latest_only=True)
                if scan.done:
                    if whole:
                        kv._subjects_seen = 0  # an empty stream
                    return
                oc = await open_ordered_consumer(
                    kv._api,
                    kv._stream_name,
                    filter_subjects=self._subjects,
                    deliver_policy="last_per_subject",
                    headers_only=True,
                )
                oc.restart_on_reset()
                #: the answer naming the subjects showed another stream: start over
                over: tuple[CountedStartSubjects | set[str], int] | None = None
                #: the keys read, held until the stream is known to be the start's
                held: list[list[str]] | None = None
                #: the consumer read a replica behind the look at the stream
                lagged = False
                try:
                    pending_at_start = initial_pending(oc)
                    if whole:
                        kv._subjects_seen = pending_at_start  # last_per_subject: one a subject
                    if pending_at_start == 0 and not (unsettled and look[1] > 0):
                        return  # (else a replica behind the look, or all removed since)
                    if unsettled:
                        if pending_at_start > _KEYS_HELD:
                            # Too many to hold: name the subjects now, while the
                            # consumer is read.
                            naming = asyncio.ensure_future(
                                kv._api.counted_subjects(kv._stream_name, self._subjects[0])
                            )
                        else:
                            held = []
                    messages = self._key_items(oc, scan, start, pending_at_start)
                    async with SnapshotReader(kv._api, scan, self._subjects, messages) as reader:
                        if naming is not None:
                            # Deliveries are read meanwhile; keys are handed out
                            # only if the answer shows the stream of ``look``.
                            over = await self._settle(start, look, naming)
                            naming = None
                        while over is None and (keys := await reader.next_batch()) is not None:
                            if held is not None:
                                held.append(keys)
                                continue
                            for key in keys:
                                yield key
                    if held is not None:
                        # Read to its end: a second look shows whether the stream
                        # was the start's all along (then the consumer's skip list
                        # was each subject of the start, once); if not, name them.
                        # The filter's newest message, the leader's answer, asked
                        # before the look: a write between the two shows there.
                        newest = last if whole else await _newest_of(kv, self._subjects[0])
                        now = await _stream_state(kv)
                        counted = cast(CountedStartSubjects, start)
                        unchanged = same_messages(look, (now.last_seq, now.messages))
                        if unchanged and scan.reached != newest:
                            # The stream held the filter's newest message all along,
                            # the last of its subject (for the whole bucket, the one
                            # at ``last``), yet the consumer's skip list did not
                            # reach it: the consumer (R1, placed on any replica)
                            # read a follower still catching up, whose skip list was
                            # older than the leader's look (a key deleted meanwhile
                            # shows its earlier value). Nothing was handed out: read
                            # a new consumer.
                            lagged = True
                            behind += 1
                            if behind > _REPLICA_BEHIND_TRIES:
                                raise JetStreamError(
                                    f"keys() of bucket {kv.bucket!r}: {behind} consumers in"
                                    " a row read a replica behind the stream leader"
                                )
                        elif not (unchanged and counted.settle_from_pending(pending_at_start)):
                            over = await self._settle(
                                start,
                                look,
                                kv._api.counted_subjects(kv._stream_name, self._subjects[0]),
                            )
                finally:
                    await oc.close()
                if lagged:
                    start = CountedStartSubjects.before_answer(last)
                    await asyncio.sleep(_REPLICA_BEHIND_WAIT * 2 ** (behind - 1))
                    continue  # the same snapshot, still to settle
                unsettled = False
                if over is None:
                    break
                # Written to meanwhile: the answer's subjects and last sequence are
                # the snapshot, and a new consumer is created after it.
                named, last = over
                if isinstance(named, CountedStartSubjects):
                    start = named
                else:
                    start = StartSubjects(named, last)
        finally:
            if naming is not None:
                _forget(naming)
        if held:
            for keys in held:
                for key in keys:
                    yield key
        unreached = start.left()
        if unreached:
            async for key in _holding_values(kv, unreached):
                yield key

    async def _settle(
        self,
        start: StartSubjects | CountedStartSubjects,
        look: tuple[int, int],
        answer: Awaitable[tuple[CountedStartSubjects | set[str], int, int]],
    ) -> tuple[CountedStartSubjects | set[str], int] | None:
        """Settle ``start`` (a CountedStartSubjects yet to be named) from the
        ``answer`` naming the subjects when it shows the stream of ``look``;
        otherwise the answer's subjects and last sequence, the snapshot to start
        over from."""
        try:
            named, named_last, named_messages = await answer
        except StreamNotFoundError:
            raise _bucket_not_found(self._kv.bucket) from None
        if same_messages(look, (named_last, named_messages)):
            cast(CountedStartSubjects, start).settle(named)
            return None
        return named, named_last

    def _key_items(
        self,
        oc: OrderedConsumer,
        scan: SnapshotScan,
        start: StartSubjects | CountedStartSubjects,
        pending_at_start: int,
    ) -> OrderedItems:
        """The keys ``oc`` delivers, judged by ``scan`` (``start`` told of each)."""
        kv = self._kv
        cut = len(kv._prefix)
        reached = start.delivered
        deliver = scan.deliver
        take = ScanVerdict.TAKE

        def opened(generation: int) -> None:
            # The first consumer, or a replacement that starts over.
            scan.opened(initial_pending(oc))
            if scan.consumers > 1 and isinstance(start, CountedStartSubjects):
                start.restarted()  # its deliveries may repeat subjects
            if scan.done:  # a replacement with nothing to deliver: no key left
                asyncio.get_running_loop().call_soon(messages.stop)

        def key_of(
            subject: str,
            reply: bytes,
            data: bytes,
            header: bytes | None,
            sseq: int,
            pending: int,
            ts: int,
        ) -> str | None:
            # The read loop's work per key: no Msg, no entry (and no pending
            # count or timestamp: meta=False).
            reached(subject, sseq)
            if deliver(sseq) is not take:
                return None  # listed already, or written after the start
            if header is not None and (
                b"KV-Operation" in header or b"Nats-Marker-Reason" in header
            ):
                if operation_of_header_block(header) != PUT:
                    return None
            return subject[cut:]

        take_run = scan.take_run
        reached_run = start.delivered_run
        prefix = kv._prefix

        def keys_of(
            subjects: Sequence[bytes],
            replies: Sequence[bytes],
            headers: Sequence[bytes | None],
            datas: Sequence[bytes],
            seqs: Sequence[int],
        ) -> tuple[list[str], Sequence[int], int] | None:
            # key_of for a whole run, when every key of it is taken: no
            # Python call per key, the keys cut from one split of the joined
            # subjects (their full texts made only if the start's subjects
            # are ever looked at). Nothing changes before the last check.
            keys = keys_of_subjects(subjects, prefix)
            if keys is None or not all_put(headers) or not take_run(seqs):
                return None
            reached_run(PrefixedKeys(prefix, keys), seqs)
            return keys, seqs, len(seqs)

        messages = OrderedItems(
            oc,
            ordered_consume_options(
                max_messages=min(_KEYS_BUFFER, max(pending_at_start, 10)),
                expires=30.0,
            ),
            key_of,
            on_open=opened,
            meta=False,
            make_run=keys_of,
        )
        return messages

    async def aclose(self) -> None:
        await self._keys.aclose()

    async def __aenter__(self) -> KeyLister:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class KeyWatcher:
    """Entries of ``KeyValue.watch()``: an async iterator and async context manager.

    Attributes:
        initial_done: an ``asyncio.Event`` set once the values present at the
            start have been yielded (at once when there were none).
    """

    def __init__(
        self,
        kv: KeyValue,
        subjects: list[str],
        policy: str,
        meta_only: bool,
        ignore_deletes: bool,
        updates_only: bool,
        on_event: Callable[[OrderedConsumeEvent], object] | None = None,
        *,
        start_seq: int | None = None,
    ) -> None:
        self._kv = kv
        self._on_event = on_event
        #: the first revision to watch (``by_start_sequence``), None: the policy's own
        self._start_seq = start_seq
        self._subjects = subjects
        self._policy = policy
        self._meta_only = meta_only
        self._ignore_deletes = ignore_deletes
        self._updates_only = updates_only
        self.initial_done = asyncio.Event()
        self._oc: OrderedConsumer | None = None
        self._messages: OrderedItems | None = None
        self._stopped = False
        self._entered = False
        #: the last initial value: ``initial_done`` is set when it is handed out
        self._last_initial: KeyValueEntry | None = None
        #: ends the initial values if the snapshot's messages vanish meanwhile
        self._guard: SnapshotStallGuard | None = None

    def __repr__(self) -> str:
        return f"<KeyWatcher {self._kv.bucket} {self._subjects}>"

    async def _start(self) -> None:
        if self._messages is not None:
            return
        kv = self._kv
        latest = self._policy == "last_per_subject"
        # The initial values are a snapshot: the messages up to the stream's last
        # sequence now, each key once (see _snapshot.py); what comes after them
        # are updates.
        start = self._start_seq
        last_seq = 0 if self._updates_only else await _last_seq(kv)
        if start is not None and start > last_seq:
            last_seq = 0  # resumed past the end: no initial values, only what comes
        scan = SnapshotScan(last_seq, latest_only=latest, first_seq=start or 1)
        try:
            oc = await open_ordered_consumer(
                kv._api,
                kv._stream_name,
                filter_subjects=self._subjects,
                deliver_policy=self._policy,
                opt_start_seq=start,
                headers_only=self._meta_only,
            )
        except StreamNotFoundError:
            raise _bucket_not_found(kv.bucket) from None
        self._oc = oc
        scanning = not scan.done and initial_pending(oc) > 0
        if not scanning:
            self.initial_done.set()
        elif latest:
            # A reset before the snapshot is read starts last_per_subject over
            # (resuming by sequence would give older revisions as initial values).
            oc.restart_on_reset()
        bucket = kv.bucket
        cut = len(kv._prefix)
        meta_only = self._meta_only
        new_entry = _new_entry
        deliver = scan.deliver
        TAKE = ScanVerdict.TAKE

        last: KeyValueEntry | None = None  # the last initial value made so far

        def opened(generation: int) -> None:
            # The first consumer, or a replacement while the snapshot is read
            # (with last_per_subject, it starts over).
            if scanning:
                scan.opened(initial_pending(oc))
                if scan.done:  # a replacement with nothing to deliver
                    end_scan()
                    oc.resume_after(scan.last_seq)

        def end_scan(taking: KeyValueEntry | None = None) -> None:
            """The snapshot is read: initial_done is set when the last initial value
            (``taking``, the one being made, or else ``last``) is handed out, at once
            if that happened already."""
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

        def scan_over(verdict: ScanVerdict, entry: KeyValueEntry, sseq: int) -> bool:
            """The delivery that ended the scan: False to leave it out."""
            end_scan(entry if verdict is TAKE else None)
            if scan.restarts:
                # A restarted consumer's skip list would give only the last of the
                # updates since the snapshot: read them all, by sequence, from there.
                oc.resume_after(scan.last_seq)
                messages.request_reset("snapshot")
                return verdict is TAKE
            # A reset resumes after the last delivery. Not after the snapshot's last
            # sequence when the scan ended before it: deliveries up to it are then
            # the writes a replica still catching up had not applied when the
            # consumer (R1, on any replica of a cluster) was created, its skip list
            # older than the leader's look; they come next, as updates. (On a
            # current replica no message of the filters lies between the two.)
            oc.resume_after(sseq)
            return verdict is not ScanVerdict.SKIP

        def entry_of(
            subject: str,
            reply: bytes,
            data: bytes,
            header: bytes | None,
            sseq: int,
            pending: int,
            ts: int,
        ) -> KeyValueEntry | None:
            # Built in the read loop as the message arrives (no Msg in between);
            # its created time the ack subject's nanoseconds until first read.
            nonlocal last
            entry = new_entry(
                bucket,
                subject[cut:],
                b"" if meta_only else data,
                sseq,
                ts,
                pending,
                PUT if header is None else operation_of_header_block(header),
                header,
            )
            if scanning:
                verdict = deliver(sseq)
                if scan.done:
                    return entry if scan_over(verdict, entry, sseq) else None
                if verdict is not TAKE:
                    return None
                last = entry
            return entry

        prefix = kv._prefix
        take_head = scan.take_head
        no_values = repeat(b"")
        puts = repeat(PUT)

        def entries_of(
            subjects: Sequence[bytes],
            replies: Sequence[bytes],
            headers: Sequence[bytes | None],
            datas: Sequence[bytes],
            seqs: Sequence[int],
        ) -> tuple[list[KeyValueEntry], Sequence[int], int] | None:
            # entry_of for a run after the snapshot, or for its head that the
            # snapshot takes and goes on after (the delivery that ends it is
            # entry_of's): no Python call per entry but its making. The keys come
            # from one split of the joined subjects, the times and pending counts
            # from one of the joined ack subjects, the operations from one look
            # at the joined header blocks (each read only when one names an
            # operation or marker). Nothing changes before the last check.
            nonlocal last
            keys = keys_of_subjects(subjects, prefix)
            if keys is None:
                return None
            numbers = ack_run_numbers(replies)
            if numbers is None:
                return None
            try:
                stamps = list(map(int, numbers[2::5]))
                pendings = list(map(int, numbers[3::5]))
                operations: Iterable[str] = (
                    puts if all_put(headers) else list(map(operation_of_header_block, headers))
                )
            except Exception:
                return None  # one by one: the unreadable one ends the watch with its reason
            used = len(seqs)
            if scanning:
                used = take_head(seqs)
                if not used:
                    return None
                if used < len(seqs):
                    seqs = seqs[:used]
            entries = list(
                map(
                    new_entry,
                    repeat(bucket),
                    keys,
                    no_values if meta_only else datas,
                    seqs,
                    stamps,
                    pendings,
                    operations,
                    headers,
                )
            )
            if scanning:
                last = entries[-1]
            return entries, seqs, used

        def stalled() -> None:
            # The rest of the snapshot vanished (see SnapshotScan.stalled): what
            # was taken are the initial values; what comes next are updates, read
            # by sequence from the snapshot's end. A last_per_subject consumer
            # whose skip list was purged under it delivers nothing more
            # (nats-server 2.15 keeps one pull waiting, a message pending): replace it.
            if scanning:
                end_scan()
                oc.resume_after(scan.last_seq)
                if latest:
                    messages.request_reset("snapshot")

        options = ordered_consume_options(max_messages=_SCAN_BUFFER)
        messages = OrderedItems(
            oc, options, entry_of, self._on_event, on_open=opened, make_run=entries_of
        )
        await messages.__aenter__()
        self._messages = messages
        if scanning:
            self._guard = SnapshotStallGuard(kv._api, oc, scan, self._subjects, stalled)
            self._guard.start()

    def __aiter__(self) -> AsyncIterator[KeyValueEntry]:
        # A bare ``async for`` (no ``async with``) stops the watch when left.
        return self if self._entered else owned_iteration(self, self.stop)

    async def __anext__(self) -> KeyValueEntry:
        if self._messages is None:
            if self._stopped:
                raise StopAsyncIteration
            await self._start()
        messages = self._messages
        assert messages is not None
        ready = messages.ready
        done = self.initial_done
        while True:
            if not ready:
                await messages.fill()
            entry: KeyValueEntry = ready.popleft()
            if entry is self._last_initial:
                done.set()
            if self._ignore_deletes and entry.operation != PUT:
                continue
            return entry

    async def stop(self) -> None:
        """End the watch and delete its consumer."""
        self._stopped = True
        guard, self._guard = self._guard, None
        if guard is not None:
            await guard.aclose()
        if self._messages is not None:
            await self._messages.aclose()

    async def aclose(self) -> None:
        await self.stop()

    async def __aenter__(self) -> KeyWatcher:
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


async def create_key_value(
    api: JetStreamApi,
    bucket: str,
    *,
    history: int,
    ttl: float | None,
    max_value_size: int | None,
    max_bytes: int | None,
    storage: str,
    replicas: int,
    description: str | None,
    limit_marker_ttl: float | None = None,
    compression: bool = False,
    metadata: Mapping[str, str] | None = None,
    republish: Mapping[str, Any] | None = None,
    placement: Mapping[str, Any] | None = None,
    mirror: str | Mapping[str, Any] | None = None,
    sources: Sequence[str | Mapping[str, Any]] | None = None,
) -> KeyValue:
    """``JetStream.create_key_value``'s body (see there)."""
    config = bucket_stream_config(
        bucket,
        history=history,
        ttl=ttl,
        max_value_size=max_value_size,
        max_bytes=max_bytes,
        storage=storage,
        replicas=replicas,
        description=description,
        limit_marker_ttl=limit_marker_ttl,
        compression=compression,
        metadata=metadata,
        republish=republish,
        placement=placement,
        mirror=mirror,
        sources=sources,
    )
    name = stream_name(bucket)
    try:
        stream = Stream(api, name, await api.create_stream(name, config))
    except StreamNameInUseError as exc:
        stream = Stream(api, name, await api.stream_info(name))
        if not _same_settings(stream.cached_info.config, config):
            raise StreamNameInUseError(
                f"bucket {bucket!r} exists with other settings",
                code=exc.code,
                err_code=exc.err_code,
                hint="open it with js.key_value() or delete it first",
            ) from None
    return KeyValue(api, bucket, stream)


def _same_settings(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    for field in ("max_msgs_per_subject", "max_age", "max_msg_size", "max_bytes", "storage"):
        if current.get(field) != wanted.get(field):
            return False
    if (current.get("subject_delete_marker_ttl") or 0) != (
        wanted.get("subject_delete_marker_ttl") or 0
    ):
        return False
    if (current.get("compression") or "none") != (wanted.get("compression") or "none"):
        return False
    if (current.get("republish") or None) != (wanted.get("republish") or None):
        return False
    return int(current.get("num_replicas") or 1) == int(wanted["num_replicas"])


async def key_value_store_names(api: JetStreamApi) -> AsyncIterator[str]:
    """``JetStream.key_value_store_names``'s body: the buckets' names."""
    async for name in api.stream_names("$KV.*.>"):
        if isinstance(name, str) and name.startswith("KV_"):
            yield name[3:]


async def key_value(api: JetStreamApi, bucket: str) -> KeyValue:
    """``JetStream.key_value``'s body (see there)."""
    validate_bucket(bucket)
    name = stream_name(bucket)
    try:
        stream = Stream(api, name, await api.stream_info(name))
    except StreamNotFoundError:
        raise _bucket_not_found(bucket) from None
    return KeyValue(api, bucket, stream)


async def delete_key_value(api: JetStreamApi, bucket: str) -> None:
    """``JetStream.delete_key_value``'s body (see there)."""
    validate_bucket(bucket)
    try:
        await api.delete_stream(stream_name(bucket))
    except StreamNotFoundError:
        raise _bucket_not_found(bucket) from None
