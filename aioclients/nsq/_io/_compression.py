"""Stream codecs negotiated through IDENTIFY: deflate (raw zlib) and snappy (framed).

Both directions of the connection switch at the same point (right after nsqd's
IDENTIFY answer), so each codec is a pair of stateful functions: ``encode`` for what
we write, ``decode`` for what we read. Decoders work incrementally on arbitrary
chunks and never produce more than :data:`MAX_DECODE_CHUNK` bytes per step, so a
small compressed input cannot make us hold a huge buffer (the frame decoder behind
them rejects oversized frames).

Snappy uses the framing format (stream identifier ``ff 06 00 00 "sNaPpY"``, then
chunks ``[type][3-byte LE length][data]``; types 0x00 compressed and 0x01
uncompressed carry a 4-byte masked CRC-32C first). Encoding uses the maintained
``cramjam`` binding; checksums of received chunks are not verified (TCP and TLS
already protect the stream, as go-nsq's reader also skips them).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Any, Final

from aioclients.nsq._errors import NSQProtocolError

__all__ = ("MAX_DECODE_CHUNK", "Codec", "DeflateCodec", "SnappyCodec", "make_codec")

MAX_DECODE_CHUNK: Final = 256 * 1024
_SNAPPY_STREAM_ID: Final = b"\xff\x06\x00\x00sNaPpY"
_SNAPPY_MAX_CHUNK: Final = 1 << 17


class Codec:
    """Interface: ``encode(bytes) -> bytes``, ``decode(bytes) -> iterator of bytes``."""

    def encode(self, data: bytes) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def decode(self, data: bytes) -> Iterator[bytes]:  # pragma: no cover - interface
        raise NotImplementedError


class DeflateCodec(Codec):
    def __init__(self, level: int) -> None:
        self._compress = zlib.compressobj(level, zlib.DEFLATED, -15)
        self._decompress = zlib.decompressobj(-15)

    def encode(self, data: bytes) -> bytes:
        return self._compress.compress(data) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, data: bytes) -> Iterator[bytes]:
        d = self._decompress
        try:
            out = d.decompress(data, MAX_DECODE_CHUNK)
            while True:
                if out:
                    yield out
                if not d.unconsumed_tail:
                    return
                out = d.decompress(d.unconsumed_tail, MAX_DECODE_CHUNK)
        except zlib.error as exc:
            raise NSQProtocolError(f"invalid deflate stream from nsqd: {exc}") from None


class SnappyCodec(Codec):
    def __init__(self) -> None:
        import cramjam  # imported here: deflate-only users never load it

        self._compress: Callable[[bytes], Any] = cramjam.snappy.compress
        self._decompress_raw: Callable[[bytes], Any] = cramjam.snappy.decompress_raw
        self._sent_stream_id = False
        self._buf = bytearray()
        self._offset = 0

    def encode(self, data: bytes) -> bytes:
        out: bytes = bytes(self._compress(data))
        if self._sent_stream_id and out.startswith(_SNAPPY_STREAM_ID):
            return out[len(_SNAPPY_STREAM_ID) :]
        self._sent_stream_id = True
        return out

    def decode(self, data: bytes) -> Iterator[bytes]:
        buf = self._buf
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= 4:
                ctype = buf[pos]
                length = buf[pos + 1] | buf[pos + 2] << 8 | buf[pos + 3] << 16
                if length > _SNAPPY_MAX_CHUNK:
                    raise NSQProtocolError(
                        f"snappy chunk of {length} bytes is too large", offset=self._offset + pos
                    )
                if len(buf) - pos - 4 < length:
                    break
                chunk = bytes(buf[pos + 4 : pos + 4 + length])
                start = self._offset + pos
                pos += 4 + length
                if ctype == 0x00:
                    if length < 4:
                        raise NSQProtocolError("short snappy chunk", offset=start)
                    try:
                        plain: bytes = bytes(self._decompress_raw(chunk[4:]))
                        yield plain
                    except NSQProtocolError:
                        raise
                    except Exception as exc:
                        raise NSQProtocolError(
                            f"invalid snappy data: {exc}", offset=start
                        ) from None
                elif ctype == 0x01:
                    if length < 4:
                        raise NSQProtocolError("short snappy chunk", offset=start)
                    yield chunk[4:]
                elif ctype == 0xFF:
                    if chunk != b"sNaPpY":
                        raise NSQProtocolError("bad snappy stream identifier", offset=start)
                elif 0x02 <= ctype <= 0x7F:
                    raise NSQProtocolError(f"reserved snappy chunk type {ctype:#x}", offset=start)
                # 0x80-0xfe: skippable (padding and reserved)
        finally:
            if pos:
                del buf[:pos]
                self._offset += pos


def make_codec(kind: str, level: int) -> Codec:
    """The codec for ``"deflate"`` or ``"snappy"``."""
    if kind == "deflate":
        return DeflateCodec(level)
    if kind == "snappy":
        return SnappyCodec()
    raise NSQProtocolError(f"unknown compression {kind!r}")  # pragma: no cover
