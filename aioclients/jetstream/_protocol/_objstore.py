"""JetStream Object Store (NATS ADR-20): names, the bucket's stream, meta JSON, chunks.

A store ``B`` is the stream ``OBJ_B`` holding two kinds of subject:

- ``$O.B.C.<nuid>``: the chunks of one version of an object, in order (a new
  ``nuid`` per ``put``, so a re-put never mixes with the old chunks);
- ``$O.B.M.<name, base64url with padding>``: the object's meta, a JSON document
  (nats.go's ``ObjectInfo``), published with ``Nats-Rollup: sub`` so each name
  keeps only its latest meta.

A ``put`` stores the chunks first, then the meta; a reader that finds the meta
therefore finds every chunk (unless they were purged since: a delete, a re-put,
a limit). The SHA-256 of the whole object travels in the meta as
``SHA-256=<base64url>``; :class:`ChunkCheck` recomputes it while the chunks are
read and judges the end: a wrong digest, a missing chunk or an extra byte is an
error, never a short read passed off as the object.

Same layout and JSON field names as nats.go ``jetstream/object.go`` and nats-py,
so stores are shared with them. Pure: no I/O, no clock (``hashlib`` and
``json`` only). The asyncio side lives in ``aioclients.jetstream._objstore``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream._errors import DigestMismatchError, ObjectIncompleteError
from aioclients.jetstream._protocol._time import parse_server_time

__all__ = (
    "DEFAULT_CHUNK_SIZE",
    "DIGEST_PREFIX",
    "ZERO_TIME",
    "ChunkCheck",
    "Chunker",
    "ObjectInfo",
    "ObjectLink",
    "chunk_subject",
    "decode_meta",
    "decode_name",
    "digest_of",
    "encode_meta",
    "encode_name",
    "meta_filter",
    "meta_subject",
    "parse_digest",
    "store_stream_config",
    "stream_name",
    "validate_bucket",
    "validate_object_name",
)

#: nats.go's and nats-py's default chunk size: 128 KiB.
DEFAULT_CHUNK_SIZE = 128 * 1024
DIGEST_PREFIX = "SHA-256="
#: What nats.go stores as ``mtime`` (the real time is the meta message's own).
ZERO_TIME = "0001-01-01T00:00:00Z"

_BUCKET = re.compile(r"[a-zA-Z0-9_-]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def validate_bucket(bucket: object) -> str:
    """A store name: ``[a-zA-Z0-9_-]+``.

    Raises:
        InvalidArgumentError: anything else.
    """
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
        raise InvalidArgumentError(
            f"invalid object store name {bucket!r}: use letters, digits, '_' and '-' only"
        )
    return bucket


def validate_object_name(name: object) -> str:
    """An object name: any non-empty text (it travels base64url-encoded).

    Raises:
        InvalidArgumentError: not a ``str``, or empty.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"an object name must be a non-empty str, got {name!r}")
    return name


def stream_name(bucket: str) -> str:
    return f"OBJ_{bucket}"


def encode_name(name: str) -> str:
    """The subject token of an object name: base64url with padding (as nats.go)."""
    return base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii")


def decode_name(token: str) -> str:
    """The object name a meta subject's last token stands for.

    Raises:
        RemoteProtocolError: not base64url of UTF-8 text.
    """
    try:
        padded = token + "=" * (-len(token) % 4)
        return _b64url(padded).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise RemoteProtocolError(f"not an encoded object name: {token!r}") from None


def _b64url(text: str) -> bytes:
    """Strict base64url (padded): anything outside the alphabet is an error."""
    return base64.b64decode(text.encode("ascii"), altchars=b"-_", validate=True)


def chunk_subject(bucket: str, nuid: str) -> str:
    return f"$O.{bucket}.C.{nuid}"


def meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{encode_name(name)}"


def meta_filter(bucket: str) -> str:
    """Every meta subject of the store."""
    return f"$O.{bucket}.M.>"


def digest_of(sha256: bytes) -> str:
    """``SHA-256=<base64url>`` of a raw SHA-256 digest (padded, as nats.go writes it)."""
    return DIGEST_PREFIX + base64.urlsafe_b64encode(sha256).decode("ascii")


def parse_digest(text: str) -> bytes:
    """The raw SHA-256 of a meta's ``digest`` (padded or not, any case of the prefix).

    Raises:
        RemoteProtocolError: no ``SHA-256=`` prefix, or not 32 bytes of base64url.
    """
    if not isinstance(text, str) or text[:8].upper() != DIGEST_PREFIX:
        raise RemoteProtocolError(f"not a SHA-256 object digest: {text!r}")
    body = text[8:]
    try:
        raw = _b64url(body + "=" * (-len(body) % 4))
    except (binascii.Error, UnicodeError, ValueError):
        raise RemoteProtocolError(f"not a SHA-256 object digest: {text!r}") from None
    if len(raw) != 32:
        raise RemoteProtocolError(f"not a SHA-256 object digest: {text!r}")
    return raw


@dataclass(frozen=True, slots=True)
class ObjectLink:
    """Where a link points: an object (``name``) or a whole store (``name`` ``None``)."""

    bucket: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """An object's meta, as stored in its store (nats.go ``ObjectInfo``).

    Attributes:
        bucket: the store.
        name: the object's name.
        nuid: the id of the chunk subject of this version.
        size: bytes.
        chunks: how many chunks.
        digest: ``"SHA-256=<base64url>"`` (empty for deleted objects and links).
        modified: when the meta was stored (aware ``datetime``).
        deleted: a delete marker.
        description, headers, metadata: what the writer gave.
        link: the target of a link (``None``: not a link).
        chunk_size: the chunk size the writer used (0 when not given).
    """

    bucket: str
    name: str
    nuid: str
    size: int
    chunks: int
    digest: str
    modified: datetime
    deleted: bool = False
    description: str | None = None
    headers: dict[str, str | list[str]] | None = None
    metadata: dict[str, str] | None = None
    link: ObjectLink | None = None
    chunk_size: int = field(default=0, compare=False)

    @property
    def is_link(self) -> bool:
        return self.link is not None


def encode_meta(info: ObjectInfo) -> bytes:
    """The meta JSON of ``info`` with nats.go's field names (``mtime`` is Go's zero
    time: the real one is the meta message's timestamp)."""
    doc: dict[str, Any] = {"name": info.name}
    if info.description:
        doc["description"] = info.description
    if info.headers:
        doc["headers"] = {
            k: [v] if isinstance(v, str) else list(v) for k, v in info.headers.items()
        }
    if info.metadata:
        doc["metadata"] = dict(info.metadata)
    options: dict[str, Any] = {}
    if info.link is not None:
        link: dict[str, Any] = {"bucket": info.link.bucket}
        if info.link.name:
            link["name"] = info.link.name
        options["link"] = link
    if info.chunk_size:
        options["max_chunk_size"] = info.chunk_size
    if options:
        doc["options"] = options
    doc["bucket"] = info.bucket
    doc["nuid"] = info.nuid
    doc["size"] = info.size
    doc["mtime"] = ZERO_TIME
    doc["chunks"] = info.chunks
    if info.digest:
        doc["digest"] = info.digest
    if info.deleted:
        doc["deleted"] = True
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _count(doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RemoteProtocolError(f"object meta: {key!r} is not a count: {value!r}")
    return value


def _text(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RemoteProtocolError(f"object meta: {key!r} is not text: {value!r}")
    return value


def _headers(value: object) -> dict[str, str | list[str]] | None:
    if not value:
        return None
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"object meta: 'headers' is not an object: {value!r}")
    out: dict[str, str | list[str]] = {}
    for k, v in value.items():
        if isinstance(v, str):
            out[str(k)] = v
        elif isinstance(v, list) and all(isinstance(x, str) for x in v):
            out[str(k)] = v[0] if len(v) == 1 else list(v)
        else:
            raise RemoteProtocolError(f"object meta: header {k!r} is not text: {v!r}")
    return out or None


def decode_meta(data: bytes, modified: datetime | None = None) -> ObjectInfo:
    """The :class:`ObjectInfo` of a meta message (``modified``: its timestamp; without
    it the JSON's ``mtime``, and the epoch when that is absent or Go's zero time).

    Tolerant of what other clients write: nats-py leaves out ``metadata`` and
    writes ``mtime`` as ``""`` on deletes; header values may be text or lists.

    Raises:
        RemoteProtocolError: not a JSON object with a ``name``, or a field of the
            wrong type.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise RemoteProtocolError(f"object meta is not JSON: {bytes(data[:80])!r}") from None
    if not isinstance(doc, dict):
        raise RemoteProtocolError("object meta is not a JSON object")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise RemoteProtocolError("object meta without a name")
    options = doc.get("options") or {}
    if not isinstance(options, dict):
        raise RemoteProtocolError("object meta: 'options' is not an object")
    link: ObjectLink | None = None
    raw_link = options.get("link")
    if raw_link:
        if not isinstance(raw_link, dict) or not isinstance(raw_link.get("bucket"), str):
            raise RemoteProtocolError(f"object meta: bad link {raw_link!r}")
        link = ObjectLink(raw_link["bucket"], _text(raw_link, "name"))
    metadata = doc.get("metadata") or None
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise RemoteProtocolError(f"object meta: 'metadata' is not text to text: {metadata!r}")
    if modified is None:
        modified = _EPOCH
        mtime = doc.get("mtime")
        if isinstance(mtime, str) and mtime and not mtime.startswith("0001-"):
            try:
                modified = parse_server_time(mtime)
            except RemoteProtocolError:
                pass  # an mtime we cannot read: the meta is still good
    return ObjectInfo(
        bucket=_text(doc, "bucket") or "",
        name=name,
        nuid=_text(doc, "nuid") or "",
        size=_count(doc, "size"),
        chunks=_count(doc, "chunks"),
        digest=_text(doc, "digest") or "",
        modified=modified,
        deleted=bool(doc.get("deleted")),
        description=_text(doc, "description"),
        headers=_headers(doc.get("headers")),
        metadata=dict(metadata) if metadata else None,
        link=link,
        chunk_size=_count(options, "max_chunk_size"),
    )


class Chunker:
    """Cuts a stream of byte pieces of any size into chunks of ``chunk_size``
    (the last one shorter), hashing and counting them for the meta.

    ``feed(piece)`` returns the full chunks it completes; ``finish()`` the rest.
    """

    __slots__ = ("_buffer", "_sha", "chunk_size", "chunks", "size")

    def __init__(self, chunk_size: int) -> None:
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
            raise InvalidArgumentError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
        self.chunk_size = chunk_size
        self.size = 0
        self.chunks = 0
        self._sha = hashlib.sha256()
        self._buffer = bytearray()

    def _emit(self, chunk: bytes) -> bytes:
        self._sha.update(chunk)
        self.size += len(chunk)
        self.chunks += 1
        return chunk

    def feed(self, piece: bytes | bytearray | memoryview) -> list[bytes]:
        """The full chunks ``piece`` completes (it is copied; the caller may reuse it)."""
        n = self.chunk_size
        buffer = self._buffer
        out: list[bytes] = []
        view = memoryview(piece).cast("B")
        start = 0
        if buffer:
            take = min(n - len(buffer), len(view))
            buffer += view[:take]
            start = take
            if len(buffer) < n:
                return out
            out.append(self._emit(bytes(buffer)))
            buffer.clear()
        while len(view) - start >= n:
            out.append(self._emit(bytes(view[start : start + n])))
            start += n
        if start < len(view):
            buffer += view[start:]
        return out

    def finish(self) -> bytes | None:
        """The last, short chunk (``None`` when there is none)."""
        if not self._buffer:
            return None
        chunk = self._emit(bytes(self._buffer))
        self._buffer.clear()
        return chunk

    def digest(self) -> str:
        return digest_of(self._sha.digest())


class ChunkCheck:
    """Judges the chunks of one ``get`` against the meta: the count, the size and
    the SHA-256 at the end.

    ``take(chunk, pending)`` for each chunk in order (``pending``: how many more
    the server holds after it). Raises as soon as the chunks cannot add up to the
    object: more bytes or chunks than the meta says, or nothing more stored
    (``pending`` 0) while some are missing. ``done`` once every chunk is in and
    the digest matched.
    """

    __slots__ = ("_sha", "_want", "chunks", "done", "info", "size")

    def __init__(self, info: ObjectInfo) -> None:
        self.info = info
        self._want = parse_digest(info.digest) if info.size else b""
        self._sha = hashlib.sha256()
        self.size = 0
        self.chunks = 0
        self.done = info.size == 0 and info.chunks == 0

    def _where(self) -> str:
        return f"object {self.info.name!r} of store {self.info.bucket!r}"

    def take(self, chunk: bytes, pending: int) -> None:
        """Account for one chunk (raises on the first sign of a broken object)."""
        if self.done:
            raise ObjectIncompleteError(f"{self._where()}: a chunk beyond its end")
        self._sha.update(chunk)
        self.size += len(chunk)
        self.chunks += 1
        info = self.info
        if self.size > info.size or self.chunks > info.chunks:
            raise ObjectIncompleteError(
                f"{self._where()}: more data than its meta says "
                f"({self.chunks} chunks, {self.size} bytes; meta: {info.chunks}, {info.size})"
            )
        if self.chunks == info.chunks:
            self.finish()
        elif pending <= 0:
            raise self.missing()

    def missing(self) -> ObjectIncompleteError:
        info = self.info
        return ObjectIncompleteError(
            f"{self._where()}: chunks are missing ({self.chunks} of {info.chunks} "
            f"read, {self.size} of {info.size} bytes); it was deleted, replaced or purged "
            "while being read, or removed by a limit"
        )

    def finish(self) -> None:
        """Every chunk is in: check the size and digest.

        Raises:
            ObjectIncompleteError: fewer bytes or chunks than the meta says.
            DigestMismatchError: the SHA-256 differs from the meta's.
        """
        info = self.info
        if self.chunks != info.chunks or self.size != info.size:
            raise self.missing()
        if self._sha.digest() != self._want:
            raise DigestMismatchError(
                f"{self._where()}: SHA-256 of the data read does not match its meta "
                f"({digest_of(self._sha.digest())} != {info.digest})"
            )
        self.done = True


def store_stream_config(
    bucket: str,
    *,
    description: str | None,
    ttl: float | None,
    max_bytes: int | None,
    storage: str,
    replicas: int,
    compression: bool,
    metadata: Mapping[str, str] | None,
) -> dict[str, Any]:
    """The stream config of a store, as nats.go's ``CreateObjectStore`` builds it
    (user form: durations in seconds).

    Raises:
        InvalidArgumentError: an out-of-range setting.
    """
    validate_bucket(bucket)
    if ttl is not None and (
        not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or ttl < 0 or ttl != ttl
    ):
        raise InvalidArgumentError(f"ttl must be seconds >= 0 (or None), got {ttl!r}")
    if max_bytes is not None and (
        not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1
    ):
        raise InvalidArgumentError(f"max_bytes must be an int >= 1 (or None), got {max_bytes!r}")
    if storage not in ("file", "memory"):
        raise InvalidArgumentError(f"storage must be 'file' or 'memory', got {storage!r}")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or not 1 <= replicas <= 5:
        raise InvalidArgumentError(f"replicas must be an int from 1 to 5, got {replicas!r}")
    if not isinstance(compression, bool):
        raise InvalidArgumentError(f"compression must be a bool, got {compression!r}")
    if metadata is not None and (
        not isinstance(metadata, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise InvalidArgumentError("metadata must map str to str")
    config: dict[str, Any] = {
        "subjects": [f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        "max_age": float(ttl or 0),
        "max_bytes": max_bytes if max_bytes is not None else -1,
        "storage": storage,
        "num_replicas": replicas,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
    }
    if compression:
        config["compression"] = "s2"
    if description is not None:
        config["description"] = description
    if metadata:
        config["metadata"] = dict(metadata)
    return config
