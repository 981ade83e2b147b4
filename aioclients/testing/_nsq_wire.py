"""Wire facts shared by the nsqd and nsqlookupd emulators.

Topic and channel names follow nsqd's rule: 1 to 64 characters of
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
    "frame",
    "is_valid_name",
    "lookupd_response",
)

#: The nsqd / nsqlookupd version the emulators answer with (the one they imitate).
NSQ_VERSION = "1.3.0"

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2

_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")
_HEADER = struct.Struct(">II")
_SIZE = struct.Struct(">I")


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a valid nsqd topic or channel name."""
    return 1 <= len(name) <= 64 and _NAME.fullmatch(name) is not None


def frame(frame_type: int, data: bytes) -> bytes:
    """One nsqd frame: size (type + data), type, data."""
    return _HEADER.pack(len(data) + 4, frame_type) + data


def lookupd_response(data: bytes) -> bytes:
    """One nsqlookupd TCP answer: size, data (no frame type)."""
    return _SIZE.pack(len(data)) + data
