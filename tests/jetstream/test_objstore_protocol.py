"""The Object Store's pure core (ADR-20): names, meta JSON, chunking and the chunk
and digest accounting of a get. Synchronous, no server."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._errors import InvalidArgumentError, RemoteProtocolError
from aioclients.jetstream import DigestMismatchError, ObjectIncompleteError
from aioclients.jetstream._protocol._objstore import (
    ZERO_TIME,
    ChunkCheck,
    Chunker,
    ObjectInfo,
    ObjectLink,
    chunk_subject,
    decode_meta,
    decode_name,
    digest_of,
    encode_meta,
    encode_name,
    meta_subject,
    parse_digest,
    store_stream_config,
    validate_bucket,
    validate_object_name,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _info(**changes: object) -> ObjectInfo:
    fields: dict[str, object] = {
        "bucket": "B",
        "name": "a/b c",
        "nuid": "N" * 22,
        "size": 5,
        "chunks": 1,
        "digest": digest_of(hashlib.sha256(b"hello").digest()),
        "modified": T0,
    }
    fields.update(changes)
    return ObjectInfo(**fields)  # type: ignore[arg-type]


# -- names ---------------------------------------------------------------------------------


def test_subjects_match_nats_go_layout() -> None:
    assert chunk_subject("B", "abc") == "$O.B.C.abc"
    # base64url WITH padding, as nats.go's base64.URLEncoding and nats-py write it
    assert meta_subject("B", "a") == "$O.B.M.YQ=="
    assert meta_subject("B", "??>") == "$O.B.M." + base64.urlsafe_b64encode(b"??>").decode()
    assert "/" not in encode_name("???")
    assert "+" not in encode_name(">>>")


@given(st.text(min_size=1))
def test_any_name_round_trips_through_its_subject_token(name: str) -> None:
    token = encode_name(name)
    assert not set(token) & set(" .*>\t\r\n")
    assert decode_name(token) == name
    assert decode_name(token.rstrip("=")) == name  # unpadded from other writers


def test_bad_names_are_refused_before_sending() -> None:
    for bad in ("", None, 3):
        with pytest.raises(InvalidArgumentError):
            validate_object_name(bad)
    for bad in ("", "a.b", "a b", "a*", None):
        with pytest.raises(InvalidArgumentError):
            validate_bucket(bad)
    assert validate_bucket("Ab_9-") == "Ab_9-"
    with pytest.raises(RemoteProtocolError):
        decode_name("!!!")


# -- digest --------------------------------------------------------------------------------


@given(st.binary(max_size=2000))
def test_digest_round_trips_padded_or_not(data: bytes) -> None:
    raw = hashlib.sha256(data).digest()
    text = digest_of(raw)
    assert text.startswith("SHA-256=")
    assert text.endswith("=")
    assert parse_digest(text) == raw
    assert parse_digest(text.rstrip("=")) == raw
    assert parse_digest("sha-256=" + text[8:]) == raw


def test_bad_digests_are_protocol_errors() -> None:
    for bad in ("", "MD5=abcd", "SHA-256=!!", "SHA-256=" + base64.urlsafe_b64encode(b"x").decode()):
        with pytest.raises(RemoteProtocolError):
            parse_digest(bad)


# -- meta JSON -----------------------------------------------------------------------------


def test_meta_json_uses_nats_go_field_names() -> None:
    info = _info(
        description="d",
        headers={"One": "1", "Two": ["a", "b"]},
        metadata={"k": "v"},
        chunk_size=1024,
    )
    doc = json.loads(encode_meta(info))
    assert doc == {
        "name": "a/b c",
        "description": "d",
        "headers": {"One": ["1"], "Two": ["a", "b"]},
        "metadata": {"k": "v"},
        "options": {"max_chunk_size": 1024},
        "bucket": "B",
        "nuid": "N" * 22,
        "size": 5,
        "mtime": ZERO_TIME,
        "chunks": 1,
        "digest": info.digest,
    }


def test_links_and_delete_markers_encode_like_nats_go() -> None:
    link = json.loads(encode_meta(_info(size=0, chunks=0, digest="", link=ObjectLink("O", "x"))))
    assert link["options"] == {"link": {"bucket": "O", "name": "x"}}
    bucket_link = json.loads(encode_meta(_info(digest="", link=ObjectLink("O"))))
    assert bucket_link["options"] == {"link": {"bucket": "O"}}
    marker = json.loads(encode_meta(_info(deleted=True, size=0, chunks=0, digest="")))
    assert marker["deleted"] is True
    assert "digest" not in marker


@given(
    name=st.text(min_size=1, max_size=30),
    size=st.integers(0, 2**40),
    chunks=st.integers(0, 2**20),
    description=st.none() | st.text(min_size=1, max_size=20),
    headers=st.none()
    | st.dictionaries(
        st.text("abcXYZ-", min_size=1, max_size=8),
        st.text(max_size=8) | st.lists(st.text(max_size=5), min_size=2, max_size=3),
        min_size=1,
        max_size=3,
    ),
    metadata=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=8), min_size=1),
    link=st.none()
    | st.builds(ObjectLink, st.text("ab", min_size=1), st.none() | st.text(min_size=1)),
    deleted=st.booleans(),
)
def test_meta_round_trips(
    name: str,
    size: int,
    chunks: int,
    description: str | None,
    headers: dict[str, str | list[str]] | None,
    metadata: dict[str, str] | None,
    link: ObjectLink | None,
    deleted: bool,
) -> None:
    info = _info(
        name=name,
        size=size,
        chunks=chunks,
        description=description,
        headers=headers,
        metadata=metadata,
        link=link,
        deleted=deleted,
    )
    assert decode_meta(encode_meta(info), T0) == info


def test_what_nats_py_writes_is_read() -> None:
    # nats-py 2.16: no metadata field, mtime in isoformat, mtime "" on delete,
    # headers as given (text values), options with max_chunk_size.
    put = {
        "name": "n",
        "bucket": "B",
        "nuid": "x",
        "size": 3,
        "mtime": "2026-01-02T03:04:05.123456+00:00",
        "chunks": 1,
        "digest": "SHA-256=abc",
        "deleted": False,
        "headers": {"A": "1"},
        "options": {"max_chunk_size": 131072},
    }
    info = decode_meta(json.dumps(put).encode())
    assert info.modified == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
    assert info.headers == {"A": "1"}
    assert info.chunk_size == 131072
    assert info.metadata is None
    deleted = dict(put, deleted=True, mtime="", size=0, chunks=0, digest="")
    marker = decode_meta(json.dumps(deleted).encode(), T0)
    assert marker.deleted
    assert marker.modified == T0
    assert marker.digest == ""
    assert decode_meta(json.dumps(dict(put, mtime=ZERO_TIME)).encode()).modified.year == 1970


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"nuid": "x"}',
        b'{"name": "n", "size": -1}',
        b'{"name": "n", "size": "3"}',
        b'{"name": "n", "options": {"link": {"name": "x"}}}',
        b'{"name": "n", "metadata": {"a": 1}}',
        b'{"name": "n", "headers": {"a": 1}}',
    ],
)
def test_broken_metas_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_meta(data, T0)


# -- chunking (put) and accounting (get) -----------------------------------------------------


@given(
    pieces=st.lists(st.binary(max_size=300), max_size=30),
    chunk_size=st.integers(1, 128),
)
def test_chunker_cuts_any_pieces_into_full_chunks(pieces: list[bytes], chunk_size: int) -> None:
    chunker = Chunker(chunk_size)
    chunks: list[bytes] = []
    for piece in pieces:
        chunks += chunker.feed(bytearray(piece))
    last = chunker.finish()
    if last is not None:
        chunks.append(last)
    whole = b"".join(pieces)
    assert b"".join(chunks) == whole
    assert all(len(c) == chunk_size for c in chunks[:-1])
    assert not chunks or 0 < len(chunks[-1]) <= chunk_size
    assert chunker.size == len(whole)
    assert chunker.chunks == len(chunks)
    assert chunker.digest() == digest_of(hashlib.sha256(whole).digest())


def test_chunker_copies_the_callers_buffer() -> None:
    chunker = Chunker(4)
    buffer = bytearray(b"abcdef")
    first = chunker.feed(buffer)
    buffer[:] = b"XXXXXX"
    assert first == [b"abcd"]
    assert chunker.finish() == b"ef"
    with pytest.raises(InvalidArgumentError):
        Chunker(0)


def _meta_of(data: bytes, chunk_size: int) -> tuple[ObjectInfo, list[bytes]]:
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)]
    info = _info(
        size=len(data), chunks=len(chunks), digest=digest_of(hashlib.sha256(data).digest())
    )
    return info, chunks


@given(data=st.binary(min_size=1, max_size=500), chunk_size=st.integers(1, 64))
def test_a_complete_read_is_done_exactly_at_the_last_chunk(data: bytes, chunk_size: int) -> None:
    info, chunks = _meta_of(data, chunk_size)
    check = ChunkCheck(info)
    for i, chunk in enumerate(chunks):
        assert not check.done
        check.take(chunk, len(chunks) - i - 1)
    assert check.done
    assert check.size == len(data)
    with pytest.raises(ObjectIncompleteError):
        check.take(b"x", 0)


@given(
    data=st.binary(min_size=2, max_size=300),
    chunk_size=st.integers(1, 32),
    cut=st.integers(0, 10_000),
)
def test_a_short_read_is_never_done(data: bytes, chunk_size: int, cut: int) -> None:
    info, chunks = _meta_of(data, chunk_size)
    if len(chunks) < 2:
        chunks = [data[:1], data[1:]]
        info = _info(size=len(data), chunks=2, digest=info.digest)
    keep = cut % len(chunks)  # 0 .. len-1 chunks arrive, then the stream holds no more
    check = ChunkCheck(info)
    for chunk in chunks[:keep]:
        check.take(chunk, len(chunks))  # the server says more are coming
    assert not check.done
    with pytest.raises(ObjectIncompleteError):
        check.finish()  # but the iteration ends here
    if keep:
        check = ChunkCheck(info)
        for chunk in chunks[: keep - 1]:
            check.take(chunk, len(chunks))
        with pytest.raises(ObjectIncompleteError):
            check.take(chunks[keep - 1], 0)  # the server holds nothing more


def test_pending_counts_say_when_chunks_are_missing() -> None:
    info, chunks = _meta_of(b"abcdefgh", 2)
    check = ChunkCheck(info)
    check.take(chunks[0], 3)
    with pytest.raises(ObjectIncompleteError, match="missing"):
        check.take(chunks[1], 0)  # the server holds nothing after the 2nd of 4


@given(data=st.binary(min_size=1, max_size=200), flip=st.integers(0, 10_000))
def test_a_corrupt_byte_is_a_digest_mismatch(data: bytes, flip: int) -> None:
    info, _chunks = _meta_of(data, 16)
    at = flip % len(data)
    bad = bytearray(data)
    bad[at] ^= 0xFF
    check = ChunkCheck(info)
    pieces = [bytes(bad[i : i + 16]) for i in range(0, len(bad), 16)]
    for piece in pieces[:-1]:
        check.take(piece, 1)
    with pytest.raises(DigestMismatchError):
        check.take(pieces[-1], 0)
    assert not check.done


def test_more_data_than_the_meta_says_is_an_error() -> None:
    info, _chunks = _meta_of(b"abcd", 4)
    check = ChunkCheck(info)
    with pytest.raises(ObjectIncompleteError, match="more data"):
        check.take(b"abcde", 0)


def test_an_empty_object_is_done_at_once() -> None:
    check = ChunkCheck(_info(size=0, chunks=0, digest=""))
    assert check.done


# -- the store's stream ----------------------------------------------------------------------


def test_store_stream_config_is_nats_go_s() -> None:
    config = store_stream_config(
        "B",
        description="d",
        ttl=60,
        max_bytes=None,
        storage="memory",
        replicas=1,
        compression=True,
        metadata={"a": "b"},
    )
    assert config == {
        "subjects": ["$O.B.C.>", "$O.B.M.>"],
        "max_age": 60.0,
        "max_bytes": -1,
        "storage": "memory",
        "num_replicas": 1,
        "discard": "new",
        "allow_rollup_hdrs": True,
        "allow_direct": True,
        "compression": "s2",
        "description": "d",
        "metadata": {"a": "b"},
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"ttl": -1},
        {"max_bytes": 0},
        {"storage": "disk"},
        {"replicas": 6},
        {"compression": "yes"},
        {"metadata": {"a": 1}},
    ],
)
def test_bad_store_settings_are_refused(changes: dict[str, object]) -> None:
    settings: dict[str, object] = {
        "description": None,
        "ttl": None,
        "max_bytes": None,
        "storage": "file",
        "replicas": 1,
        "compression": False,
        "metadata": None,
    }
    settings.update(changes)
    with pytest.raises(InvalidArgumentError):
        store_stream_config("B", **settings)  # type: ignore[arg-type]
