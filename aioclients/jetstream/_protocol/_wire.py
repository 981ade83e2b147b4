"""The NATS client protocol, server to client: an incremental frame scanner.

The server sends ``INFO {json}``, ``MSG <subject> <sid> [reply] <size>``,
``HMSG <subject> <sid> [reply] <header size> <total size>`` (each followed by
the payload and CRLF), ``PING``, ``PONG``, ``+OK`` and ``-ERR '<text>'``; every
control line ends in CRLF.

``scan(buffer, start)`` reads as many complete frames as ``buffer`` holds from
``start`` on and returns them with the position after the last one; a frame
cut short stays for the next call (its control line is simply read again).
``buffer`` is ``bytes`` so that each payload slice is its one copy. It walks
the buffer by index, which is what
makes it faster than nats-py's parser (a regex match and a ``del`` of the
buffer's head per message).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Container, Sequence
from itertools import repeat
from operator import add, getitem, le
from typing import Any

from aioclients._errors import RemoteProtocolError

__all__ = (
    "ERR",
    "INFO",
    "MAX_CONTROL_LINE",
    "MAX_INFO_LINE",
    "MSG",
    "OK",
    "PING",
    "PONG",
    "Deliveries",
    "Frame",
    "HeaderDeliveries",
    "first_delivery_sid",
    "first_header_delivery_sid",
    "frame_sizes",
    "known_sizes",
    "reply_frame_match",
    "reply_frame_pattern",
    "scan",
    "scan_deliveries",
    "scan_header_deliveries",
    "single_message",
)

MSG, PING, PONG, OK, ERR, INFO = range(6)
#: The server's default max_control_line; longer lines without CRLF are an error.
MAX_CONTROL_LINE = 4096
#: An INFO line may be longer (a large cluster's ``connect_urls``), up to this.
MAX_INFO_LINE = 1024 * 1024

#: ``(MSG, subject, sid, reply, header or None, payload)``, ``(PING,)``, ``(PONG,)``,
#: ``(OK,)``, ``(ERR, text)`` or ``(INFO, json bytes)``.
Frame = tuple[Any, ...]

#: What :func:`scan_deliveries` gives: ``(sid, subjects, replies, payloads,
#: payload_sizes, used)``, the messages as columns (one item per message, in order).
Deliveries = tuple[int, tuple[bytes, ...], tuple[bytes, ...], list[bytes], list[int], int]

#: What :func:`scan_header_deliveries` gives: ``(sid, subjects, replies, headers,
#: payloads, used)``, the messages as columns (one item per message, in order).
HeaderDeliveries = tuple[int, list[bytes], list[bytes], list[bytes], list[bytes], int]

_CRLF = b"\r\n"
#: what makes a repeat possessive in a pattern, where the interpreter has them (3.11+)
POSSESSIVE = b"+" if sys.version_info >= (3, 11) else b""
_SPLIT = bytes.split
_HMSG = b"HMSG "
#: Where one ``HMSG`` frame ends and the next begins (the payload's CRLF, the verb).
_HMSG_JOINT = b"\r\nHMSG "
#: How a header block that is no status begins.
_PLAIN_HEADER = b"NATS/1.0\r\n"
_PLAIN_SIZE = len(_PLAIN_HEADER)
#: Where an ``HMSG`` line ends and a header block that is no status begins.
_HEADER_JOINT = b"\r\n" + _PLAIN_HEADER
#: The whitespace ``bytes.split()`` splits at, but the space.
_SPACES = (b"\t", b"\n", b"\x0b", b"\x0c", b"\r")
#: What :func:`scan_header_deliveries` puts between two lines: a word of its own.
_LINE_JOINT = b" \n "

#: The numbers of control lines read so far (sids, sizes: few distinct values), by
#: their bytes: a look-up here costs about a fifth of ``int()`` on bytes, which
#: ``scan`` would otherwise call two or three times per message (``known(text) or
#: _number(text)``: a zero is read again). Bounded: short texts only, and emptied
#: when full.
_NUMBERS: dict[bytes, int] = {}
_NUMBERS_MAX = 4096


def _number(text: bytes) -> int:
    """``int(text)``, remembered in :data:`_NUMBERS` (raises ``ValueError`` as ``int``)."""
    value = int(text)
    if len(text) <= 12:
        if len(_NUMBERS) >= _NUMBERS_MAX:
            _NUMBERS.clear()
        _NUMBERS[text] = value
    return value


def scan(buffer: bytes, start: int = 0) -> tuple[list[Frame], int, int]:
    """Scan complete frames from ``buffer[start:]``.

    Returns:
        The frames in order, the offset just after the last complete one, and
        the size of the incomplete message that follows when its control line
        is already there (0 otherwise), so a caller can wait for that many bytes
        before scanning again.

    Raises:
        RemoteProtocolError: an unknown or malformed frame (``offset`` says where),
            or a control line longer than :data:`MAX_CONTROL_LINE` (an INFO line:
            :data:`MAX_INFO_LINE`).
    """
    frames: list[Frame] = []
    append = frames.append
    known = _NUMBERS.get
    need = 0
    pos = start
    size = len(buffer)
    find = buffer.find
    while pos < size:
        eol = find(_CRLF, pos)
        if eol < 0:
            if size - pos > MAX_CONTROL_LINE and (
                size - pos > MAX_INFO_LINE or buffer[pos : pos + 5].upper() != b"INFO "
            ):
                raise RemoteProtocolError("NATS control line too long", offset=pos)
            break
        op = buffer[pos]
        if op == 77 or op == 72:  # "M" or "H"
            # One split of the whole line: its first word checks the operation
            # ("MSG" / "HMSG" followed by a space or a tab) at no extra cost.
            args = buffer[pos:eol].split()
            n = len(args)
            try:
                verb = args[0]
                if verb == b"MSG":
                    if n == 5:
                        _, subject, sid_b, reply, total_b = args
                    elif n == 4:
                        _, subject, sid_b, total_b = args
                        reply = b""
                    else:
                        raise ValueError
                    hsize = 0
                    total = known(total_b) or _number(total_b)
                elif verb == b"HMSG":
                    if n == 6:
                        _, subject, sid_b, reply, hsize_b, total_b = args
                    elif n == 5:
                        _, subject, sid_b, hsize_b, total_b = args
                        reply = b""
                    else:
                        raise ValueError
                    hsize = known(hsize_b) or _number(hsize_b)
                    total = known(total_b) or _number(total_b)
                    if hsize < 0 or hsize > total:
                        raise ValueError
                else:
                    raise ValueError
                sid = known(sid_b) or _number(sid_b)
                if total < 0:
                    raise ValueError
            except (ValueError, IndexError):
                raise RemoteProtocolError(
                    f"malformed message line {buffer[pos:eol][:200]!r}", offset=pos
                ) from None
            body = eol + 2
            end = body + total
            if end + 2 > size:
                need = end + 2 - pos
                break  # the payload is still on its way
            if buffer[end] != 13 or buffer[end + 1] != 10:  # CRLF, without a slice
                raise RemoteProtocolError("message payload not followed by CRLF", offset=end)
            if hsize:
                header = buffer[body : body + hsize]
                append((MSG, subject, sid, reply, header, buffer[body + hsize : end]))
            else:
                append((MSG, subject, sid, reply, None, buffer[body:end]))
            pos = end + 2
            continue
        line = buffer[pos:eol]
        upper = line.upper()
        if upper.startswith(b"PING"):
            append((PING,))
        elif upper.startswith(b"PONG"):
            append((PONG,))
        elif upper.startswith(b"+OK"):
            append((OK,))
        elif upper.startswith(b"-ERR"):
            append((ERR, line[4:].strip()))
        elif upper.startswith(b"INFO"):
            append((INFO, line[4:].strip()))
        else:
            raise RemoteProtocolError(f"unknown NATS protocol line {line[:200]!r}", offset=pos)
        pos = eol + 2
    return frames, pos, need


def first_delivery_sid(buffer: bytes) -> int | None:
    """The sid of the frame ``buffer`` starts with, when its line is that of a
    ``MSG`` with a reply (the line :func:`scan_deliveries` asks of every frame)."""
    eol = buffer.find(_CRLF)
    if eol < 0:
        return None
    first = buffer[:eol].split()
    if len(first) != 5 or first[0] != b"MSG":
        return None
    return _sid_of(first[2])


def scan_deliveries(buffer: bytes, sids: Container[int]) -> Deliveries | None:
    """The messages at the start of ``buffer``, as columns, when it starts with
    ``MSG`` frames that all have a reply and no headers, for one sid in ``sids``
    (the usual socket read of a pull consumer); ``None`` otherwise (use :func:`scan`).

    ``scan(buffer)`` reads the same messages, as frames, up to ``used``; what follows
    (a frame cut short, a PING) is ``scan(buffer, used)``'s. One split of the whole
    buffer at CRLF and checks done in C over all of its pieces, where ``scan`` takes
    some 40 Python steps per message: a payload holding a CRLF, a header, another
    sid or a malformed line fails a check, and the buffer is left to ``scan``.
    """
    sid = first_delivery_sid(buffer)
    if sid is None or sid not in sids:
        return None
    sid_b = b"%d" % sid
    parts = buffer.split(_CRLF)
    # A whole frame is a line and a payload, each ending in CRLF; the last piece is
    # what follows the last CRLF, and an odd CRLF is a line whose payload is to come.
    count = (len(parts) - 1) // 2
    if not count:
        return None
    lines = parts[0 : 2 * count : 2]
    payloads = parts[1 : 2 * count : 2]
    try:
        # Every line 5 words: a line of more or fewer fails zip's strict check (or,
        # all of them, the unpacking), in C.
        verbs, subjects, sids_b, replies, totals = zip(*map(_SPLIT, lines), strict=True)
    except ValueError:
        return None
    if verbs.count(b"MSG") != count or sids_b.count(sid_b) != count:
        return None
    # Each payload is as long as its line says: no CRLF inside it, nothing cut short.
    # (A payload holding a CRLF is cut in two there, the first piece shorter.)
    sizes = list(map(len, payloads))
    # A run of one size (the usual: one producer's records) reads one text: the
    # counts compare in C, where a look-up of each text hashes it first.
    first = sizes[0]
    if (
        not (
            sizes.count(first) == count
            and totals.count(totals[0]) == count
            and _NUMBERS.get(totals[0]) == first
        )
        and list(map(_NUMBERS.get, totals)) != sizes
    ):
        try:
            if list(map(int, totals)) != sizes:
                return None
        except ValueError:
            return None
        for text in set(totals):
            _number(text)  # read from the cache next time
    # What the whole frames take: all but the pieces after the last payload's CRLF
    # (what follows, and a line whose payload is to come, with its CRLF).
    used = len(buffer) - len(parts[-1])
    if len(parts) % 2 == 0:
        used -= len(parts[-2]) + 2
    return sid, subjects, replies, payloads, sizes, used


def first_header_delivery_sid(buffer: bytes) -> int | None:
    """The sid of the frame ``buffer`` starts with, when its line is that of an
    ``HMSG`` with a reply (the line :func:`scan_header_deliveries` asks of every
    frame)."""
    if not buffer.startswith(_HMSG):
        return None
    eol = buffer.find(_CRLF)
    if eol < 0:
        return None
    first = buffer[5:eol].split()
    if len(first) != 5:
        return None
    return _sid_of(first[1])


def _sid_of(sid_b: bytes) -> int | None:
    """The sid ``sid_b`` says, when it is written as ``%d`` writes it."""
    sid = _NUMBERS.get(sid_b)
    if sid is None:
        try:
            sid = _number(sid_b)
        except ValueError:
            return None
    return sid if sid_b == b"%d" % sid else None


def _numbers(texts: Sequence[bytes]) -> list[int] | None:
    """``list(map(int, texts))``, from :data:`_NUMBERS` where it can (``None``: one
    is no number)."""
    count = len(texts)
    if count and texts.count(texts[0]) == count:
        # One text (a run of one size, the usual): one look-up, where each text
        # would be hashed first.
        value = _NUMBERS.get(texts[0])
        if value is not None:
            return [value] * count
    # (A miss raises: no comparison of each number with None.)
    try:
        return list(map(_NUMBERS.__getitem__, texts))
    except KeyError:
        pass
    try:
        got = list(map(int, texts))
    except ValueError:
        return None
    for text in set(texts):
        _number(text)  # read from the cache next time
    return got


def _whole_frame(piece: bytes) -> bytes | None:
    """The line and body of the frame ``piece`` starts with (the part after its
    ``HMSG``), when it is whole and followed by its CRLF; ``None`` otherwise."""
    eol = piece.find(_CRLF)
    if eol < 0:
        return None
    words = piece[:eol].split()
    if len(words) != 5:
        return None
    try:
        total = int(words[4])
    except ValueError:
        return None
    end = eol + 2 + total
    if total < 0 or piece[end : end + 2] != _CRLF:
        return None
    return piece[:end]


def scan_header_deliveries(buffer: bytes, sids: Container[int]) -> HeaderDeliveries | None:
    """The messages at the start of ``buffer``, as columns, when it starts with
    ``HMSG`` frames that all have a reply and a header block that is no status
    (``NATS/1.0`` then CRLF), for one sid in ``sids`` (a read of a headers-only
    consumer, such as a listing of KV keys); ``None`` otherwise (use :func:`scan`).

    ``scan(buffer)`` reads the same messages, as frames, up to ``used``; what follows
    (a frame cut short, a status, a PING) is ``scan(buffer, used)``'s. Header blocks
    hold CRLFs, so the buffer is split where one frame ends and the next begins
    (CRLF, ``HMSG``, a space), and each piece where its line ends and its header
    block begins (CRLF, ``NATS/1.0``, CRLF): every piece must be one line and the
    body its line announces, or the buffer is left to ``scan`` (a body holding the
    joint leaves a piece short; a line holding a CR or LF is refused). The lines
    are joined (a word of their own between each two) and split into their words at
    once, so a line must be as the server writes it: five words, one space between
    each. The checks are C calls over all the pieces.
    """
    sid = first_header_delivery_sid(buffer)
    if sid is None or sid not in sids:
        return None
    pieces = buffer[5:].split(_HMSG_JOINT)
    # Every piece but the last is a whole frame if the checks below pass; the last
    # one holds what follows the last joint: one whole frame and whatever comes after
    # it (another kind of frame, one cut short), or only a frame cut short.
    last = pieces.pop()
    tail = _whole_frame(last)
    if tail is not None:
        pieces.append(tail)
        used = len(buffer) - len(last) + len(tail) + 2  # up to the tail's CRLF
    else:
        used = len(buffer) - len(last) - 5  # up to the joint before ``last``: its CRLF
    count = len(pieces)
    if not count:
        return None
    try:
        # Each piece: its line, and what follows its header block's first line. A
        # piece without that joint (a status, no header) fails zip's strict check.
        lines, rests = zip(*map(_SPLIT, pieces, repeat(_HEADER_JOINT), repeat(1)), strict=True)
    except ValueError:
        return None
    # The lines joined with a word of their own between each two (a lone LF), and
    # split at single spaces: each line must give five words, so that word comes
    # sixth every time (the whole run's count would let a line of six words and
    # one of four pass, each word read as another's). No other whitespace in a
    # line (a CR or LF would put its end elsewhere) and no empty word (two spaces,
    # or one at an end: the numbers below are none; subjects and replies checked).
    joined = b"".join(lines)
    if any(map(joined.__contains__, _SPACES)):
        return None
    words = _LINE_JOINT.join(lines).split(b" ")
    if len(words) != 6 * count - 1 or words[5::6].count(b"\n") != count - 1:
        return None
    if words[1::6].count(b"%d" % sid) != count:
        return None
    subjects, replies = words[0::6], words[2::6]
    if not (all(subjects) and all(replies)):
        return None
    totals_b, hsizes_b = words[4::6], words[3::6]
    totals = _numbers(totals_b)
    # Headers only (a headers-only consumer's): the same texts, read once.
    hsizes = totals if hsizes_b == totals_b else _numbers(hsizes_b)
    if totals is None or hsizes is None:
        return None
    # Each body (the header block's first line, then the rest) as long as its line says.
    bodies = list(map(add, repeat(_PLAIN_HEADER), rests))
    if list(map(len, bodies)) != totals:
        return None
    # Header sizes that are the totals are the bodies' lengths: at least the plain
    # header's, which each body starts with.
    if hsizes is not totals and (min(hsizes) < _PLAIN_SIZE or not all(map(le, hsizes, totals))):
        return None
    headers: list[bytes]
    payloads: list[bytes]
    if hsizes == totals:  # headers only (a headers-only consumer's): no slicing
        headers, payloads = bodies, [b""] * count
    else:
        headers = list(map(getitem, bodies, map(slice, hsizes)))
        payloads = list(map(getitem, bodies, map(slice, hsizes, repeat(None))))
    return sid, subjects, replies, headers, payloads, used


#: The numbers of the control lines :func:`single_message` read (a reply's sid and
#: sizes repeat): a look-up instead of ``isdigit`` and ``int`` for each. Texts of
#: ASCII digits only (unlike :data:`_NUMBERS`, which holds whatever ``int`` read,
#: ``+3`` and `` 3`` too): a hit stands for both checks. Bounded like it.
_DIGIT_NUMBERS: dict[bytes, int] = {}
_DIGIT_NUMBERS_MAX = 4096
#: The largest buffer :func:`single_message` reads (larger ones are scan's).
_SINGLE_MAX = 32 * 1024

#: The sizes of the ``HMSG`` lines :func:`frame_sizes` read, by their text.
_SIZE_PAIRS: dict[bytes, tuple[int, int]] = {}
_SIZE_PAIRS_MAX = 4096
_NO_SIZES = (-1, -1)

#: ``known_sizes(text)``: what :func:`frame_sizes` read of ``text`` before, or
#: ``None`` (a look-up, for a hot path that calls :func:`frame_sizes` only then).
known_sizes = _SIZE_PAIRS.get


def frame_sizes(text: bytes) -> tuple[int, int]:
    """``(header size, total size)`` of ``text``, the end of an ``HMSG`` line:
    ``b"<header size> <total size>"``, two runs of ASCII digits and one space
    between; ``(-1, -1)`` for any other text. Remembered (short texts only; the
    memory is emptied when full), as the sizes of replies repeat.
    """
    pair = _SIZE_PAIRS.get(text)
    if pair is not None:
        return pair
    hsize, space, total = text.partition(b" ")
    if not (space and hsize.isdigit() and total.isdigit()):
        return _NO_SIZES
    pair = int(hsize), int(total)
    if len(text) <= 30:
        if len(_SIZE_PAIRS) >= _SIZE_PAIRS_MAX:
            _SIZE_PAIRS.clear()
        _SIZE_PAIRS[text] = pair
    return pair


def reply_frame_pattern(sid: int, header: bytes) -> bytes:
    """A regular expression (for ``re.DOTALL``) that a whole ``HMSG`` frame matches,
    alone, when it goes to subscription ``sid`` and its header block matches
    ``header``, in the form the server writes a reply (no reply subject).

    Its groups: the subject, the text of the two sizes (see :func:`frame_sizes`),
    the header block, ``header``'s own groups, the payload. A match reads the
    frame as :func:`single_message` does if :func:`frame_sizes` of that text are
    the sizes of the header block and of the header block and payload together
    (the caller checks: a read of two frames, or of one cut short, may match
    otherwise). A reply of the usual form is so read in one match, where
    :func:`single_message` and a match of its header block take several calls.
    (A subject is read as the server writes one, up to its space: a malformed
    line, with a CR or LF in it, may match, and its subject is then no reply's.)
    """
    # (the control line's repeats possessive where the interpreter has them: each
    # stops at a byte it does not take, so nothing given back would change a match)
    p = POSSESSIVE
    return b"".join(
        (b"HMSG ([^ ]+", p, rb") %d ([^\r]+" % sid, p, rb")\r\n(", header, rb")(.*)\r\n")
    )


def reply_frame_match(sid: int, header: re.Pattern[bytes]) -> Callable[[bytes], Any]:
    """``fullmatch`` of :func:`reply_frame_pattern` for ``sid`` and ``header``'s
    pattern, compiled with ``header``'s flags and ``re.DOTALL`` (the payload may
    hold any byte): what a reply inbox registers, and the tests read with."""
    pattern = reply_frame_pattern(sid, header.pattern)
    return re.compile(pattern, header.flags | re.DOTALL).fullmatch


def single_message(buffer: bytes) -> Frame | None:
    """The message ``buffer`` holds, when it holds exactly one whole ``MSG``/``HMSG``
    and nothing else, in at most 32 KiB; ``None`` otherwise (use :func:`scan`).

    A reply to a request usually arrives alone: this reads it with one split of
    its control line, where ``scan`` sets up a loop. Whatever it returns, ``scan``
    returns as the only frame of ``buffer``, ending at its end.
    """
    if len(buffer) > _SINGLE_MAX:
        return None  # partition would copy a large message once more: scan's
    # partition: the line and the rest in one call (find and a slice take two, and
    # find's arguments are parsed the slow way)
    line, crlf, rest = buffer.partition(_CRLF)
    if not crlf:
        return None
    args = line.split(b" ")
    n = len(args)
    if n == 6 and args[0] == b"HMSG":
        _, subject, sid_b, reply, hsize_b, total_b = args
    elif n == 5 and args[0] == b"HMSG":
        _, subject, sid_b, hsize_b, total_b = args
        reply = b""
    elif n == 5 and args[0] == b"MSG":
        _, subject, sid_b, reply, total_b = args
        hsize_b = b"0"
    elif n == 4 and args[0] == b"MSG":
        _, subject, sid_b, total_b = args
        reply, hsize_b = b"", b"0"
    else:
        return None
    known = _DIGIT_NUMBERS.get
    sid, hsize, total = known(sid_b), known(hsize_b), known(total_b)
    if sid is None or hsize is None or total is None:
        if not (sid_b.isdigit() and hsize_b.isdigit() and total_b.isdigit()):
            return None
        sid, hsize, total = int(sid_b), int(hsize_b), int(total_b)
        if len(sid_b) + len(hsize_b) + len(total_b) <= 30:  # short texts only
            if len(_DIGIT_NUMBERS) >= _DIGIT_NUMBERS_MAX:
                _DIGIT_NUMBERS.clear()
            _DIGIT_NUMBERS[sid_b] = sid
            _DIGIT_NUMBERS[hsize_b] = hsize
            _DIGIT_NUMBERS[total_b] = total
    if not subject or hsize > total or total + 2 != len(rest) or rest[total:] != _CRLF:
        return None
    if hsize:
        return (MSG, subject, sid, reply, rest[:hsize], rest[hsize:total])
    return (MSG, subject, sid, reply, None, rest[:total])
