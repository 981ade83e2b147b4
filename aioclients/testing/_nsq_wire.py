"""Wire facts shared by the nsqd and nsqlookupd emulators.

The error nsqd answers a command with (:class:`ClientError`) and the MPUB body
parser are shared by the TCP server and the HTTP API. Topic and channel names
follow nsqd's rule: 1 to 64 characters of
``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral`` (the suffix counts
towards the 64). Frames are ``[size u32][type u32][data]`` where ``size``
counts the type and the data; nsqlookupd answers with ``[size u32][data]``.
"""

from __future__ import annotations

import re
import struct

__all__ = (
    "FRAME_ERROR",
    "FRAME_MESSAGE",
    "FRAME_RESPONSE",
    "NSQ_VERSION",
    "ClientError",
    "frame",
    "is_valid_name",
    "lookupd_response",
    "read_mpub",
)

#: The nsqd / nsqlookupd version the emulators answer with (the one they imitate).
NSQ_VERSION = "1.3.0"

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2

_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")
_HEADER = struct.Struct(">II")
_SIZE = struct.Struct(">I")
_SIGNED = struct.Struct(">i")


class ClientError(Exception):
    """An error nsqd would send as an error frame; ``fatal`` ones close the connection."""

    def __init__(self, code: str, desc: str, *, fatal: bool = True) -> None:
        super().__init__(f"{code} {desc}")
        self.code = code
        self.fatal = fatal


def read_mpub(
    buf: bytes | bytearray, pos: int, max_msg_size: int, max_body_size: int
) -> tuple[list[bytes], int] | None:
    """Parse an MPUB body the way nsqd's readMPUB does; None when more bytes are needed.

    Raises:
        ClientError: a bad message count or message size (``E_BAD_BODY`` /
            ``E_BAD_MESSAGE``).
    """
    if len(buf) < pos + 4:
        return None
    count = _SIGNED.unpack_from(buf, pos)[0]
    pos += 4
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    bodies = []
    for i in range(count):
        if len(buf) < pos + 4:
            return None
        size = _SIGNED.unpack_from(buf, pos)[0]
        if size <= 0:
            raise ClientError("E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}")
        if size > max_msg_size:
            raise ClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
        pos += 4
        if len(buf) < pos + size:
            return None
        bodies.append(bytes(buf[pos : pos + size]))
        pos += size
    return bodies, pos


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid nsqd topic or channel name."""
    return 1 <= len(name) <= 64 and _NAME.fullmatch(name) is not None


def frame(frame_type: int, data: bytes) -> bytes:
    """One nsqd frame: size (type + data), type, data."""
    return _HEADER.pack(len(data) + 4, frame_type) + data


def lookupd_response(data: bytes) -> bytes:
    """One nsqlookupd TCP answer: size, data (no frame type)."""
    return _SIZE.pack(len(data)) + data
