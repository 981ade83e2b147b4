"""The sans-I/O HTTP/2 gRPC client core, byte string in, bytes and events out.

A tiny scripted "server" (an ``hpack.Encoder`` and frame builders) plays the
other end; every check looks at the exact frames the client queued or the
events it returned.
"""

from __future__ import annotations

import collections
import itertools
import struct

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients import AioClientsError, LocalProtocolError, RemoteProtocolError
from aioclients._grpc_h2._protocol._http2 import (
    CONNECTION_PREFACE,
    ConnectionTerminated,
    H2Connection,
    Messages,
    PingAcked,
    ResponseHeaders,
    StatusCode,
    StreamEnded,
    encode_grpc_timeout,
)

DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIO = 0x20

Frame = tuple[int, int, int, bytes]


def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes((kind, flags))
        + sid.to_bytes(4, "big")
        + payload
    )


def settings_frame(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def window_update(sid: int, increment: int) -> bytes:
    return frame(WINDOW, 0, sid, increment.to_bytes(4, "big"))


def rst(sid: int, code: int) -> bytes:
    return frame(RST, 0, sid, code.to_bytes(4, "big"))


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def parse(data: bytes) -> list[Frame]:
    """Split bytes the client queued into frames (checks they are well formed)."""
    out: list[Frame] = []
    pos = 0
    while pos < len(data):
        assert len(data) - pos >= 9, "a truncated frame header"
        length = int.from_bytes(data[pos : pos + 3], "big")
        assert length <= 16_384
        kind, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5 : pos + 9], "big")
        payload = data[pos + 9 : pos + 9 + length]
        assert len(payload) == length, "a truncated frame payload"
        out.append((kind, flags, sid, payload))
        pos += 9 + length
    return out


def frames_of(conn: H2Connection) -> list[Frame]:
    return parse(conn.data_to_send())


class Server:
    """The server half: builds frames; its HPACK encoder matches the client's decoder."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()

    def headers(
        self, sid: int, headers: list[tuple[str, str]], *, end_stream: bool = False
    ) -> bytes:
        flags = END_HEADERS | (END_STREAM if end_stream else 0)
        return frame(HEADERS, flags, sid, self.encoder.encode(headers))

    def response(self, sid: int) -> bytes:
        return self.headers(sid, [(":status", "200"), ("content-type", "application/grpc")])

    def trailers(self, sid: int, status: int = 0, message: str | None = None) -> bytes:
        hdrs = [("grpc-status", str(status))]
        if message is not None:
            hdrs.append(("grpc-message", message))
        return self.headers(sid, hdrs, end_stream=True)


def ready(**kwargs: object) -> tuple[H2Connection, Server]:
    """A connection past the preface exchange (server SETTINGS received and acked)."""
    conn = H2Connection(authority="broker:9292", **kwargs)  # type: ignore[arg-type]
    conn.initiate()
    conn.data_to_send()
    assert conn.receive(settings_frame()) == []
    assert frames_of(conn) == [(SETTINGS, ACK, 0, b"")]
    return conn, Server()


def open_stream(conn: H2Connection, server: Server, path: str = "/proto.API/Subscribe") -> int:
    sid = conn.start_request(path)
    conn.data_to_send()
    assert conn.receive(server.response(sid)) == [
        ResponseHeaders(sid, ((":status", "200"), ("content-type", "application/grpc")))
    ]
    return sid


def messages_of(events: list[object]) -> list[bytes]:
    return [m for e in events if isinstance(e, Messages) for m in e.messages]


def ended(events: list[object]) -> list[StreamEnded]:
    return [e for e in events if isinstance(e, StreamEnded)]


# -- preface, settings, ping ------------------------------------------------------------


def test_preface_settings_and_connection_window_golden() -> None:
    conn = H2Connection(
        authority="h:1", stream_window=4 * 1024 * 1024, connection_window=64 * 1024 * 1024
    )
    assert not conn.has_output()
    conn.initiate()
    conn.initiate()  # idempotent
    assert conn.has_output()
    assert conn.data_to_send() == (
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        # SETTINGS: ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 4 MiB, MAX_HEADER_LIST_SIZE 1 MiB
        + bytes.fromhex("000012 04 00 00000000")
        + bytes.fromhex("0002 00000000")
        + bytes.fromhex("0004 00400000")
        + bytes.fromhex("0006 00100000")
        # WINDOW_UPDATE on the connection: 64 MiB - 65535
        + bytes.fromhex("000004 08 00 00000000 03ff0001")
    )
    assert conn.data_to_send() == b""
    assert CONNECTION_PREFACE == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def test_no_connection_window_update_at_the_default_size() -> None:
    conn = H2Connection(authority="h:1", connection_window=65_535)
    conn.initiate()
    kinds = [f[0] for f in parse(conn.data_to_send()[len(CONNECTION_PREFACE) :])]
    assert kinds == [SETTINGS]


@pytest.mark.parametrize(
    "kwargs", [{"stream_window": 0}, {"connection_window": 0}, {"stream_window": 2**31}]
)
def test_window_sizes_are_checked(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="windows must be between"):
        H2Connection(authority="h:1", **kwargs)


def test_bad_authority_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        H2Connection(authority="h:1\r\nx: y")


def test_server_settings_are_acked_and_settings_ack_is_quiet() -> None:
    conn = H2Connection(authority="h:1")
    conn.initiate()
    conn.data_to_send()
    assert conn.receive(settings_frame((3, 100), (4, 1 << 20), (5, 1 << 20))) == []
    assert frames_of(conn) == [(SETTINGS, ACK, 0, b"")]
    assert conn.receive(frame(SETTINGS, ACK, 0)) == []
    assert conn.data_to_send() == b""


def test_ping_is_answered_and_our_ping_ack_is_an_event() -> None:
    conn, _ = ready()
    assert conn.receive(frame(PING, 0, 0, b"12345678")) == []
    assert frames_of(conn) == [(PING, ACK, 0, b"12345678")]
    conn.ping(b"abcdefgh")
    assert frames_of(conn) == [(PING, 0, 0, b"abcdefgh")]
    assert conn.receive(frame(PING, ACK, 0, b"abcdefgh")) == [PingAcked(b"abcdefgh")]
    assert conn.data_to_send() == b""
    with pytest.raises(ValueError, match="8 bytes"):
        conn.ping(b"short")


def test_frames_split_at_every_byte_boundary_are_reassembled() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    wire = server.response(sid) + frame(DATA, 0, sid, grpc_message(b"hello")) + server.trailers(sid)
    events: list[object] = []
    for i in range(len(wire)):
        events += conn.receive(wire[i : i + 1])
    assert messages_of(events) == [b"hello"]
    assert ended(events) == [StreamEnded(sid, 0, "", (("grpc-status", "0"),))]


# -- requests ---------------------------------------------------------------------------


REQUEST_HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/proto.API/Subscribe"),
    (":authority", "broker:9292"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("user-agent", "aioclients-grpc-h2"),
    ("grpc-timeout", "1500000u"),
    ("x-trace", "abc"),
    ("k", "v"),
]


def test_request_headers_golden() -> None:
    conn, _ = ready()
    metadata = (("X-Trace", "abc"), ("k", "v"))
    sid = conn.start_request("/proto.API/Subscribe", timeout=1.5, metadata=metadata)
    assert sid == 1
    [(kind, flags, fsid, block)] = frames_of(conn)
    assert (kind, flags, fsid) == (HEADERS, END_HEADERS, 1)
    decoder = hpack.Decoder()
    headers = decoder.decode(block, raw=False)
    assert [tuple(h) for h in headers] == REQUEST_HEADERS
    # What every call repeats enters the dynamic table; metadata is never indexed.
    assert [h.indexable for h in headers[8:]] == [False, False]
    assert [(n.decode(), v.decode()) for n, v in decoder.header_table.dynamic_entries] == [
        ("grpc-timeout", "1500000u"),
        ("user-agent", "aioclients-grpc-h2"),
        ("te", "trailers"),
        ("content-type", "application/grpc"),
        (":authority", "broker:9292"),
        (":path", "/proto.API/Subscribe"),
    ]
    # The next call sends indices (62 is the newest entry), a new timeout by name.
    assert conn.start_request("/proto.API/Subscribe", timeout=1.5, metadata=metadata) == 3
    [(_, _, _, block)] = frames_of(conn)
    assert block == (b"\x83\x86\xc3\xc2\xc1\xc0\xbf\xbe\x10\x07x-trace\x03abc\x10\x01k\x01v")
    assert [tuple(h) for h in decoder.decode(block, raw=False)] == REQUEST_HEADERS
    conn.start_request("/proto.API/Subscribe", timeout=0.25)
    [(_, _, _, block)] = frames_of(conn)
    assert block == b"\x83\x86\xc3\xc2\xc1\xc0\xbf\x0f\x2f\x07250000u"
    assert ("grpc-timeout", "250000u") in decoder.decode(block, raw=False)
    assert len(decoder.header_table.dynamic_entries) == 6  # a changing value is not indexed
    assert conn.open_streams == 3


def test_server_header_table_size_zero_stops_indexing() -> None:
    conn, _ = ready()
    decoder = hpack.Decoder()
    conn.start_request("/a", timeout=1.0)
    [(_, _, _, block)] = frames_of(conn)
    decoder.decode(block)
    assert len(decoder.header_table.dynamic_entries) == 6
    conn.receive(settings_frame((1, 0)))  # SETTINGS_HEADER_TABLE_SIZE
    assert frames_of(conn) == [(SETTINGS, ACK, 0, b"")]
    decoder.max_allowed_table_size = 0  # our ACK went out before the next block
    conn.start_request("/a", timeout=1.0)
    [(_, _, _, block)] = frames_of(conn)
    assert block[0] == 0x20  # a size update to 0 opens the block
    assert [h[0] for h in decoder.decode(block, raw=False)][:3] == [":method", ":scheme", ":path"]
    assert decoder.header_table.dynamic_entries == collections.deque()
    conn.start_request("/a", timeout=1.0)
    [(_, _, _, block)] = frames_of(conn)
    assert block[0] != 0x20
    assert (":path", "/a") in decoder.decode(block, raw=False)


def test_a_refused_request_leaves_the_header_table_in_step() -> None:
    conn, _ = ready()
    decoder = hpack.Decoder()
    with pytest.raises(LocalProtocolError):
        conn.start_request("/a", timeout=1.0, metadata=(("k", "\u00e9"),))
    with pytest.raises(LocalProtocolError):
        conn.start_request("/b\n", timeout=1.0)
    assert conn.data_to_send() == b""
    conn.start_request("/a", timeout=1.0)
    [(_, _, _, block)] = frames_of(conn)
    assert (":path", "/a") in decoder.decode(block, raw=False)
    assert [n for n, _ in decoder.header_table.dynamic_entries][-1] == b":path"


_REQUEST = st.tuples(
    st.sampled_from(["/a.B/C", "/a.B/Dee", "/x"]),
    st.one_of(st.none(), st.floats(min_value=0.001, max_value=100.0)),
    st.lists(
        st.tuples(st.sampled_from(["k", "auth"]), st.sampled_from(["v", "w" * 40])), max_size=2
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_REQUEST, st.integers(min_value=0, max_value=300)), max_size=30))
def test_any_requests_and_table_sizes_decode_at_the_server(
    steps: list[tuple[str, float | None, list[tuple[str, str]]] | int],
) -> None:
    """The server's decoder (``hpack``) follows our SETTINGS ACKs and our blocks."""
    conn, _ = ready()
    decoder = hpack.Decoder()
    for step in steps:
        if isinstance(step, int):
            conn.receive(settings_frame((1, step)))
            assert frames_of(conn) == [(SETTINGS, ACK, 0, b"")]
            decoder.max_allowed_table_size = step
            continue
        path, timeout, metadata = step
        conn.start_request(path, timeout=timeout, metadata=tuple(metadata))
        [(_, _, _, block)] = frames_of(conn)
        headers = [tuple(h) for h in decoder.decode(block, raw=False)]
        assert headers[:7] == [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "broker:9292"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", "aioclients-grpc-h2"),
        ]
        rest = headers[7:]
        if timeout is not None:
            assert rest.pop(0) == ("grpc-timeout", encode_grpc_timeout(timeout))
        assert rest == metadata
        assert decoder.header_table.maxsize <= min(decoder.max_allowed_table_size, 4096)


def test_https_scheme() -> None:
    conn = H2Connection(authority="h:1", scheme="https")
    conn.start_request("/p")
    [(_, _, _, block)] = frames_of(conn)
    assert (":scheme", "https") in hpack.Decoder().decode(block, raw=False)


def test_long_header_block_uses_continuation() -> None:
    conn, _ = ready()
    value = "v" * 40_000
    sid = conn.start_request("/p", metadata=(("big", value),))
    out = frames_of(conn)
    assert [(k, f) for k, f, _, _ in out] == [
        (HEADERS, 0),
        (CONT, 0),
        (CONT, END_HEADERS),
    ]
    assert {s for _, _, s, _ in out} == {sid}
    block = b"".join(p for _, _, _, p in out)
    assert ("big", value) in hpack.Decoder(max_header_list_size=1 << 20).decode(block, raw=False)


@pytest.mark.parametrize(
    ("path", "metadata"),
    [
        ("/p\r\n", ()),
        ("/p", ((":path", "x"),)),
        ("/p", (("te", "x"),)),
        ("/p", (("Content-Type", "x"),)),
        ("/p", (("grpc-timeout", "1S"),)),
        ("/p", (("k", "é"),)),
        ("/p", (("k", "a\nb"),)),
    ],
)
def test_bad_request_headers_are_refused(path: str, metadata: tuple[tuple[str, str], ...]) -> None:
    conn, _ = ready()
    with pytest.raises(LocalProtocolError):
        conn.start_request(path, metadata=metadata)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, "1n"),
        (-1.0, "1n"),
        (1e-9, "1n"),
        (0.05, "50000000n"),
        (0.5, "500000u"),
        (30.0, "30000000u"),
        (1000.0, "1000000m"),
        (86_400.0, "86400000m"),
        (10**6, "1000000S"),
        (10**9, "16666667M"),
        (10**12, "99999999H"),
    ],
)
def test_grpc_timeout_encoding(seconds: float, expected: str) -> None:
    assert encode_grpc_timeout(seconds) == expected


@given(st.floats(min_value=1e-9, max_value=1e9))
def test_grpc_timeout_is_8_digits_and_never_shorter(seconds: float) -> None:
    text = encode_grpc_timeout(seconds)
    digits, unit = text[:-1], text[-1]
    assert digits.isdigit()
    assert 1 <= len(digits) <= 8
    scale = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "S": 1.0, "M": 60.0, "H": 3600.0}[unit]
    assert int(digits) * scale >= seconds * (1 - 1e-12)


def test_message_framing_and_half_close() -> None:
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    conn.send_message(sid, b"abc")
    conn.send_message(sid, b"", end_stream=True)
    assert frames_of(conn) == [
        (DATA, 0, sid, b"\x00\x00\x00\x00\x03abc"),
        (DATA, END_STREAM, sid, b"\x00\x00\x00\x00\x00"),
    ]
    with pytest.raises(LocalProtocolError):
        conn.send_message(sid, b"more")
    conn.end_stream(sid)  # a second half-close is a no-op
    assert conn.data_to_send() == b""
    with pytest.raises(LocalProtocolError):
        conn.send_message(99, b"x")


def test_reset_stream_sends_rst_and_forgets_the_stream() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    conn.reset_stream(sid)
    assert frames_of(conn) == [(RST, 0, sid, (8).to_bytes(4, "big"))]
    assert conn.open_streams == 0
    conn.reset_stream(sid)
    assert conn.data_to_send() == b""
    # Late frames for the stream are dropped quietly.
    events = conn.receive(frame(DATA, 0, sid, grpc_message(b"late")) + server.trailers(sid))
    assert events == []


def test_close_queues_goaway_and_ignores_later_input() -> None:
    conn, _ = ready()
    conn.start_request("/p")
    conn.data_to_send()
    conn.close()
    conn.close()
    [(kind, flags, sid, payload)] = frames_of(conn)
    assert (kind, flags, sid) == (GOAWAY, 0, 0)
    # A client has no server-initiated streams to report: last stream id 0.
    assert payload == bytes(8)
    assert conn.receive(frame(PING, 0, 0, bytes(8))) == []
    assert not conn.can_start_stream()
    with pytest.raises(LocalProtocolError):
        conn.start_request("/p")


# -- responses ----------------------------------------------------------------------------


def test_response_messages_and_trailers() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    events = conn.receive(
        frame(DATA, 0, sid, grpc_message(b"one") + grpc_message(b"") + grpc_message(b"three"))
    )
    assert events == [Messages(sid, [b"one", b"", b"three"])]
    events = conn.receive(server.trailers(sid))
    assert events == [StreamEnded(sid, 0, "", (("grpc-status", "0"),))]
    assert conn.open_streams == 0


def test_trailers_only_error_with_percent_encoded_message() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    events = conn.receive(
        server.headers(
            sid,
            [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", "5"),
                ("grpc-message", "no such stream %E2%9C%93 100%25 %zz"),
            ],
            end_stream=True,
        )
    )
    [end] = events
    assert isinstance(end, StreamEnded)
    assert (end.stream_id, end.status, end.local) == (sid, StatusCode.NOT_FOUND, False)
    assert end.message == "no such stream \u2713 100% %zz"
    assert ("grpc-status", "5") in end.trailers
    # A trailers-only response carries no RST from us and nothing else is queued.
    assert conn.data_to_send() == b""


@pytest.mark.parametrize(
    ("http_status", "code"),
    [
        ("400", StatusCode.INTERNAL),
        ("401", StatusCode.UNAUTHENTICATED),
        ("403", StatusCode.PERMISSION_DENIED),
        ("404", StatusCode.UNIMPLEMENTED),
        ("429", StatusCode.UNAVAILABLE),
        ("502", StatusCode.UNAVAILABLE),
        ("503", StatusCode.UNAVAILABLE),
        ("504", StatusCode.UNAVAILABLE),
        ("500", StatusCode.UNKNOWN),
        ("abc", StatusCode.UNKNOWN),
        ("\u00b2", StatusCode.UNKNOWN),  # a digit to str.isdigit, not to int()
    ],
)
@pytest.mark.parametrize("end_stream", [False, True])
def test_http_status_mapping(http_status: str, code: int, end_stream: bool) -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    events = conn.receive(
        server.headers(
            sid, [(":status", http_status), ("content-type", "text/html")], end_stream=end_stream
        )
    )
    [end] = ended(events)
    assert (end.status, end.local) == (code, True)
    assert http_status in end.message
    assert conn.open_streams == 0
    out = frames_of(conn)
    if end_stream:
        assert out == []
    else:
        assert out == [(RST, 0, sid, (1).to_bytes(4, "big"))]


def test_response_without_status_is_internal() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    [end] = conn.receive(server.headers(sid, [("content-type", "application/grpc")]))
    assert isinstance(end, StreamEnded)
    assert end.status == StatusCode.INTERNAL


def test_non_grpc_content_type_is_unknown() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    [end] = conn.receive(server.headers(sid, [(":status", "200"), ("content-type", "text/html")]))
    assert isinstance(end, StreamEnded)
    assert end.status == StatusCode.UNKNOWN
    assert "text/html" in end.message
    assert frames_of(conn) == [(RST, 0, sid, (1).to_bytes(4, "big"))]


def test_grpc_content_type_with_suffix_is_accepted() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    [ev] = conn.receive(
        server.headers(sid, [(":status", "200"), ("content-type", "application/grpc+proto")])
    )
    assert isinstance(ev, ResponseHeaders)


@pytest.mark.parametrize("trailer", [[], [("grpc-status", "x")], [("grpc-status", "\u00b2")]])
def test_missing_or_bad_grpc_status_is_internal(trailer: list[tuple[str, str]]) -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    events = conn.receive(server.headers(sid, [("grpc-message", "m"), *trailer], end_stream=True))
    [end] = ended(events)
    assert end.status == StatusCode.INTERNAL
    assert "grpc-status" in end.message


def test_data_end_stream_without_trailers_is_internal_after_the_messages() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    events = conn.receive(frame(DATA, END_STREAM, sid, grpc_message(b"x")))
    assert events[0] == Messages(sid, [b"x"])
    [end] = ended(events)
    assert (end.status, end.local) == (StatusCode.INTERNAL, True)
    assert conn.data_to_send() == b""  # the server closed its side: no RST


def test_trailers_inside_a_message_are_internal() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    assert conn.receive(frame(DATA, 0, sid, grpc_message(b"abcdef")[:7])) == []
    [end] = conn.receive(server.trailers(sid))
    assert isinstance(end, StreamEnded)
    assert end.status == StatusCode.INTERNAL


def test_trailers_without_end_stream_and_data_before_headers_are_internal() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    [end] = ended(conn.receive(server.headers(sid, [("grpc-status", "0")])))
    assert end.status == StatusCode.INTERNAL
    sid = conn.start_request("/p")
    conn.data_to_send()
    [end] = ended(conn.receive(frame(DATA, 0, sid, grpc_message(b"x"))))
    assert end.status == StatusCode.INTERNAL
    assert frames_of(conn)[-1] == (RST, 0, sid, (1).to_bytes(4, "big"))


def test_padded_and_prioritised_frames() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    block = server.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    padded_headers = frame(
        HEADERS, END_HEADERS | PADDED | PRIO, sid, b"\x03" + bytes(5) + block + b"pad"
    )
    [hdrs] = conn.receive(padded_headers)
    assert isinstance(hdrs, ResponseHeaders)
    body = grpc_message(b"payload")
    events = conn.receive(frame(DATA, PADDED, sid, bytes((10,)) + body + bytes(10)))
    assert events == [Messages(sid, [b"payload"])]
    events = conn.receive(frame(DATA, PADDED, sid, b"\x00" + grpc_message(b"p2")))
    assert events == [Messages(sid, [b"p2"])]


@pytest.mark.parametrize(
    "bad",
    [
        frame(DATA, PADDED, 1, b""),
        frame(DATA, PADDED, 1, b"\x05abc"),
        frame(HEADERS, END_HEADERS | PADDED, 1, b"\x09abc"),
        frame(HEADERS, END_HEADERS | PRIO, 1, b"abc"),
    ],
)
def test_bad_padding_is_a_connection_error(bad: bytes) -> None:
    conn, _ = ready()
    conn.start_request("/p")
    conn.data_to_send()
    with pytest.raises(RemoteProtocolError):
        conn.receive(bad)
    assert frames_of(conn)[-1][0] == GOAWAY


def test_headers_with_continuation() -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    block = server.encoder.encode(
        [(":status", "200"), ("content-type", "application/grpc"), ("x-long", "y" * 100)]
    )
    wire = (
        frame(HEADERS, 0, sid, block[:10])
        + frame(CONT, 0, sid, block[10:20])
        + frame(CONT, END_HEADERS, sid, block[20:])
    )
    [ev] = conn.receive(wire)
    assert isinstance(ev, ResponseHeaders)
    assert ("x-long", "y" * 100) in ev.headers


def test_large_trailers_over_continuation_are_accepted() -> None:
    # We advertise a 1 MiB header list: a 200 kB grpc-message must decode.
    conn, server = ready()
    sid = open_stream(conn, server)
    text = "e" * 200_000
    block = server.encoder.encode([("grpc-status", "13"), ("grpc-message", text)], huffman=False)
    chunks = [block[i : i + 16_384] for i in range(0, len(block), 16_384)]
    wire = frame(HEADERS, END_STREAM, sid, chunks[0])
    for i, chunk in enumerate(chunks[1:], 2):
        wire += frame(CONT, END_HEADERS if i == len(chunks) else 0, sid, chunk)
    [end] = conn.receive(wire)
    assert isinstance(end, StreamEnded)
    assert (end.status, end.message) == (StatusCode.INTERNAL, text)


@pytest.mark.parametrize(
    "wire",
    [
        frame(CONT, END_HEADERS, 1, b""),  # no HEADERS before
        frame(HEADERS, 0, 1, b"\x88") + frame(PING, 0, 0, bytes(8)),  # interrupted
        frame(HEADERS, 0, 1, b"\x88") + frame(CONT, END_HEADERS, 3, b""),  # other stream
    ],
)
def test_continuation_errors(wire: bytes) -> None:
    conn, _ = ready()
    conn.start_request("/p")
    conn.start_request("/p")
    conn.data_to_send()
    with pytest.raises(RemoteProtocolError):
        conn.receive(wire)
    assert frames_of(conn)[-1][0] == GOAWAY
    assert conn.closed
    assert not conn.can_start_stream()


def test_a_repeated_indexed_block_means_what_the_table_says_now() -> None:
    conn, server = ready()
    s1 = conn.start_request("/p")
    s3 = conn.start_request("/p")
    conn.data_to_send()
    conn.receive(server.response(s1))  # content-type enters the server's table (62)
    indexed = server.encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    assert indexed == b"\x88\xbe"
    wanted = ((":status", "200"), ("content-type", "application/grpc"))
    assert conn.receive(frame(HEADERS, END_HEADERS, s3, indexed)) == [ResponseHeaders(s3, wanted)]
    # A block that inserts: index 62 is now the new entry, the same bytes mean another thing.
    assert ended(conn.receive(server.trailers(s1, 0, "done"))) == [
        StreamEnded(s1, 0, "done", (("grpc-status", "0"), ("grpc-message", "done")))
    ]
    s5 = conn.start_request("/p")
    conn.data_to_send()
    [event] = conn.receive(frame(HEADERS, END_HEADERS, s5, indexed))
    assert isinstance(event, StreamEnded)
    assert event.status == StatusCode.UNKNOWN  # content-type is gone from the answer


_SERVER_FIELD = st.sampled_from(
    [("content-type", "application/grpc"), ("grpc-status", "0"), ("x", "b" * 30), ("y", "a")]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_SERVER_FIELD, min_size=1, max_size=2), max_size=12), st.data())
def test_decoded_blocks_match_a_fresh_decoder(
    header_lists: list[list[tuple[str, str]]], data: st.DataObject
) -> None:
    """Whatever the server's table does, remembered blocks decode as a decoder would."""
    conn, _ = ready()
    encoder = hpack.Encoder()
    encoder.header_table_size = data.draw(st.sampled_from([4096, 120]))
    reference = hpack.Decoder()
    blocks: list[bytes] = []
    for headers in header_lists:
        blocks.append(encoder.encode(headers))
        if blocks and data.draw(st.booleans()):  # a block sent before, bytes for bytes
            blocks.append(data.draw(st.sampled_from(blocks)))
    for block in blocks:
        try:
            expected = [tuple(h) for h in reference.decode(block, raw=False)]
        except hpack.HPACKError:
            with pytest.raises(RemoteProtocolError):
                conn._decode_headers(block)
            return
        assert list(conn._decode_headers(block)) == expected


def test_undecodable_header_block_is_a_compression_error() -> None:
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    with pytest.raises(RemoteProtocolError):
        conn.receive(frame(HEADERS, END_HEADERS, sid, b"\xff\xff\xff\xff\xff\xff"))
    [(kind, _, _, payload)] = frames_of(conn)
    assert kind == GOAWAY
    assert int.from_bytes(payload[4:8], "big") == 9  # COMPRESSION_ERROR


def test_headers_for_a_forgotten_stream_keep_hpack_in_step() -> None:
    conn, server = ready()
    sid1 = conn.start_request("/p")
    sid2 = conn.start_request("/p")
    conn.data_to_send()
    conn.reset_stream(sid1)
    conn.data_to_send()
    # Both header blocks index into the server's dynamic table.
    assert conn.receive(server.response(sid1)) == []
    [ev] = conn.receive(server.response(sid2))
    assert ev == ResponseHeaders(sid2, ((":status", "200"), ("content-type", "application/grpc")))


@pytest.mark.parametrize("sid", [3, 2, 4])  # not opened yet, or server-initiated
@pytest.mark.parametrize("kind", ["data", "headers", "rst", "window"])
def test_frames_on_idle_streams_are_connection_errors(sid: int, kind: str) -> None:
    conn, server = ready()
    open_stream(conn, server)  # stream 1 exists
    wire = {
        "data": lambda: frame(DATA, 0, sid, grpc_message(b"x")),
        "headers": lambda: server.response(sid),
        "rst": lambda: rst(sid, 8),
        "window": lambda: window_update(sid, 100),
    }[kind]()
    with pytest.raises(RemoteProtocolError, match="idle stream"):
        conn.receive(wire)
    assert frames_of(conn)[-1][0] == GOAWAY


def test_initial_window_size_overflowing_a_stream_is_a_connection_error() -> None:
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.receive(window_update(sid, 2**31 - 1 - 65_535))
    with pytest.raises(RemoteProtocolError, match="overflowed"):
        conn.receive(settings_frame((4, 65_536)))


def test_push_promise_is_a_connection_error() -> None:
    conn, _ = ready()
    conn.start_request("/p")
    conn.data_to_send()
    with pytest.raises(RemoteProtocolError):
        conn.receive(frame(PUSH, END_HEADERS, 1, bytes(4)))


def test_unknown_frame_types_and_priority_are_ignored() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    assert conn.receive(frame(0x42, 0xFF, sid, b"whatever")) == []
    assert conn.receive(frame(PRIORITY, 0, sid, bytes(5))) == []
    assert conn.data_to_send() == b""


# -- gRPC message framing -------------------------------------------------------------------


def test_message_split_at_every_byte_boundary() -> None:
    payloads = [b"", b"a", b"hello world", bytes(range(256)) * 3]
    stream = b"".join(grpc_message(p) for p in payloads)
    for cut in range(len(stream) + 1):
        conn, server = ready()
        sid = open_stream(conn, server)
        events = conn.receive(frame(DATA, 0, sid, stream[:cut]))
        events += conn.receive(frame(DATA, 0, sid, stream[cut:]))
        assert messages_of(events) == payloads, cut


@settings(max_examples=200)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=20),
    socket_cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=8),
)
def test_any_chunking_yields_the_same_messages(
    payloads: list[bytes], cuts: list[int], socket_cuts: list[int]
) -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    stream = b"".join(grpc_message(p) for p in payloads)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    wire = b"".join(frame(DATA, 0, sid, stream[a:b]) for a, b in itertools.pairwise(bounds))
    wire += server.trailers(sid)
    sbounds = sorted({0, len(wire), *(c for c in socket_cuts if c < len(wire))})
    events: list[object] = []
    for a, b in itertools.pairwise(sbounds):
        events += conn.receive(wire[a:b])
    assert messages_of(events) == payloads
    assert ended(events) == [StreamEnded(sid, 0, "", (("grpc-status", "0"),))]
    assert all(isinstance(m, bytes) for m in messages_of(events))


def test_compressed_message_is_internal() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    events = conn.receive(frame(DATA, 0, sid, grpc_message(b"ok") + b"\x01\x00\x00\x00\x01z"))
    assert messages_of(events) == [b"ok"]
    [end] = ended(events)
    assert (end.status, end.local) == (StatusCode.INTERNAL, True)
    assert "compressed" in end.message
    assert frames_of(conn)[-1] == (RST, 0, sid, (1).to_bytes(4, "big"))


def test_message_over_the_limit_is_resource_exhausted() -> None:
    conn, server = ready(max_message_size=100)
    sid = open_stream(conn, server)
    assert messages_of(conn.receive(frame(DATA, 0, sid, grpc_message(b"x" * 100)))) == [b"x" * 100]
    # Only the 5-byte prefix of the large one has arrived: that is enough.
    [end] = conn.receive(frame(DATA, 0, sid, b"\x00" + (101).to_bytes(4, "big")))
    assert isinstance(end, StreamEnded)
    assert end.status == StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max (101 vs. 100)" in end.message
    assert frames_of(conn)[-1][:3] == (RST, 0, sid)
    assert conn.open_streams == 0


def test_large_message_across_many_frames() -> None:
    conn, server = ready(stream_window=8 * 1024 * 1024)
    sid = open_stream(conn, server)
    payload = bytes(range(256)) * (3 * 4096)  # 3 MiB
    body = grpc_message(payload)
    events: list[object] = []
    for i in range(0, len(body), 16_384):
        events += conn.receive(frame(DATA, 0, sid, body[i : i + 16_384]))
    assert messages_of(events) == [payload]


# -- flow control: receiving ----------------------------------------------------------------


class FlowServer:
    """Tracks what the client allows the server to send (windows as the server sees them)."""

    def __init__(self, conn: H2Connection, server: Server, sid: int, stream_window: int) -> None:
        self.conn = conn
        self.server = server
        self.sid = sid
        self.stream = stream_window
        self.connection = 65_535
        self.sent = 0

    def absorb(self) -> list[Frame]:
        out = frames_of(self.conn)
        for kind, _, sid, payload in out:
            if kind == WINDOW:
                inc = int.from_bytes(payload, "big")
                if sid == 0:
                    self.connection += inc
                elif sid == self.sid:
                    self.stream += inc
        return out

    def send(self, data: bytes) -> list[object]:
        assert len(data) <= min(self.stream, self.connection), "the server would overrun"
        self.stream -= len(data)
        self.connection -= len(data)
        self.sent += len(data)
        return list(self.conn.receive(frame(DATA, 0, self.sid, data)))


def test_stream_credit_is_given_only_when_consumed() -> None:
    conn, server = ready(stream_window=1000, connection_window=1 << 20)
    sid = open_stream(conn, server)
    flow = FlowServer(conn, server, sid, 1000)
    msg = grpc_message(b"x" * 95)  # 100 bytes on the wire
    got = []
    for _ in range(10):
        got += messages_of(flow.send(msg))
    assert len(got) == 10
    flow.absorb()
    assert flow.stream == 0  # nothing consumed: the window stays shut
    conn.consumed(sid, 100)
    conn.consumed(sid, 100)
    assert not any(k == WINDOW and s == sid for k, _, s, _ in flow.absorb())  # 200 < 1000 // 4
    conn.consumed(sid, 100)
    out = flow.absorb()
    assert (WINDOW, 0, sid, (300).to_bytes(4, "big")) in out
    assert flow.stream == 300


def test_connection_window_is_credited_on_receipt() -> None:
    conn, server = ready(stream_window=1 << 20, connection_window=4000)
    sid = open_stream(conn, server)
    flow = FlowServer(conn, server, sid, 1 << 20)
    flow.absorb()
    flow.connection = 4000
    flow.send(grpc_message(b"x" * 995))
    out = flow.absorb()
    assert (WINDOW, 0, 0, (1000).to_bytes(4, "big")) in out
    assert flow.connection == 4000


def test_server_overrunning_the_stream_window_fails_the_stream() -> None:
    conn, server = ready(stream_window=100)
    sid = open_stream(conn, server)
    events = conn.receive(frame(DATA, 0, sid, grpc_message(b"x" * 95)))
    assert messages_of(events) == [b"x" * 95]
    events = conn.receive(frame(DATA, 0, sid, grpc_message(b"")))
    [end] = ended(events)
    assert (end.status, end.local) == (StatusCode.INTERNAL, True)
    assert "flow-control window" in end.message
    assert frames_of(conn)[-1] == (RST, 0, sid, (3).to_bytes(4, "big"))


def test_padding_is_credited_at_once() -> None:
    conn, server = ready(stream_window=1000)
    sid = open_stream(conn, server)
    conn.receive(frame(DATA, PADDED, sid, bytes((250,)) + grpc_message(b"x") + bytes(250)))
    assert (WINDOW, 0, sid, (251).to_bytes(4, "big")) in frames_of(conn)


@pytest.mark.parametrize("message_size", [3000, 800, 999 - 4])
def test_message_larger_than_the_free_window_still_arrives(message_size: int) -> None:
    """A message that cannot fit in what is left of the window must not stall the stream."""
    window = 1000
    conn, server = ready(stream_window=window, connection_window=1 << 20)
    sid = open_stream(conn, server)
    flow = FlowServer(conn, server, sid, window)
    flow.absorb()
    # Leave consumed-but-unannounced credit behind (below the quarter threshold).
    small = grpc_message(b"s" * 195)
    assert messages_of(flow.send(small)) == [b"s" * 195]
    conn.consumed(sid, len(small))
    flow.absorb()
    body = grpc_message(b"L" * message_size)
    got: list[bytes] = []
    pos = 0
    for _ in range(100):
        room = min(flow.stream, flow.connection, 16_384, len(body) - pos)
        if room <= 0:
            break
        got += messages_of(flow.send(body[pos : pos + room]))
        pos += room
        flow.absorb()
    assert got == [b"L" * message_size], "the stream stalled: the server has no window left"
    conn.consumed(sid, len(body))
    flow.absorb()
    # Everything is consumed: the server may send a window's worth again (less
    # what waits for the quarter threshold), never more.
    assert window - window // 4 <= flow.stream <= window


def test_padding_does_not_stall_a_message() -> None:
    window = 1000
    conn, server = ready(stream_window=window, connection_window=1 << 20)
    sid = open_stream(conn, server)
    flow = FlowServer(conn, server, sid, window)
    flow.absorb()
    body = grpc_message(b"P" * 895)  # 900 bytes: fits the window, without padding
    got = messages_of(flow.send(body[:100]))
    pos = 100
    for _ in range(100):
        flow.absorb()
        if pos == len(body):
            break
        # Each frame carries 40 bytes of the message and 150 of padding.
        take = min(40, len(body) - pos, flow.stream)
        assert take > 0, "the stream stalled: padding used up the window"
        pad = min(150, flow.stream - take - 1)
        if pad >= 0:
            payload = bytes((pad,)) + body[pos : pos + take] + bytes(pad)
            flow.stream -= len(payload)
            got += messages_of(conn.receive(frame(DATA, PADDED, sid, payload)))
        else:
            got += messages_of(flow.send(body[pos : pos + take]))
        pos += take
    assert got == [b"P" * 895]


@settings(max_examples=150)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=2500), min_size=1, max_size=30),
    consume_every=st.integers(min_value=1, max_value=4),
    chunk=st.integers(min_value=7, max_value=700),
)
def test_receive_windows_never_leak_or_stall(
    sizes: list[int], consume_every: int, chunk: int
) -> None:
    """The server's view of the windows stays within what we advertised, and a
    reader that keeps consuming always gets everything."""
    window, conn_window = 1000, 5000
    conn, server = ready(stream_window=window, connection_window=conn_window)
    flow = FlowServer(conn, server, 0, window)
    flow.absorb()
    flow.connection = conn_window
    for n_stream in range(2):
        sid = open_stream(conn, server)
        flow.sid, flow.stream = sid, window
        body = b"".join(grpc_message(bytes([i % 256]) * n) for i, n in enumerate(sizes))
        pending: list[bytes] = []
        got: list[bytes] = []
        pos = 0
        steps = 0
        while pos < len(body):
            assert steps < 10 * len(body) + 100, "no progress"
            steps += 1
            room = min(flow.stream, flow.connection, chunk, len(body) - pos)
            if room <= 0:
                assert pending, "stalled with nothing left to consume"
            else:
                pending += messages_of(flow.send(body[pos : pos + room]))
                pos += room
            if pending and (room <= 0 or steps % consume_every == 0):
                m = pending.pop(0)
                got.append(m)
                conn.consumed(sid, len(m) + 5)
            flow.absorb()
            assert flow.connection <= conn_window
            assert flow.stream <= window + 2505
        got += pending
        assert got == [bytes([i % 256]) * n for i, n in enumerate(sizes)]
        if n_stream == 0:
            # End the first stream with credit still unannounced: it must not
            # be handed to the connection a second time.
            conn.receive(server.trailers(sid))
        else:
            conn.reset_stream(sid)
        flow.absorb()
        assert flow.connection <= conn_window


def test_stream_end_does_not_credit_the_connection_twice() -> None:
    conn_window = 4000
    conn, server = ready(stream_window=1000, connection_window=conn_window)
    flow = FlowServer(conn, server, 0, 1000)
    flow.absorb()
    flow.connection = conn_window
    for i in range(40):
        sid = open_stream(conn, server)
        flow.sid, flow.stream = sid, 1000
        for _ in range(2):
            assert messages_of(flow.send(grpc_message(b"x" * 95))) == [b"x" * 95]
            conn.consumed(sid, 100)
        if i % 3 == 0:
            conn.receive(rst(sid, 8))
        elif i % 3 == 1:
            conn.receive(server.trailers(sid))
        else:
            conn.receive(frame(DATA, END_STREAM, sid))
        if i % 4 == 3:
            conn.reset_stream(sid)
        flow.absorb()
        assert flow.connection <= conn_window, i


# -- flow control: sending ------------------------------------------------------------------


def test_send_is_held_by_the_peer_windows_and_released_by_window_update() -> None:
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    payload = bytes(100_000)
    conn.send_message(sid, payload, end_stream=True)
    out = frames_of(conn)
    assert all(k == DATA and f == 0 for k, f, _, _ in out)
    assert sum(len(p) for _, _, _, p in out) == 65_535
    assert max(len(p) for _, _, _, p in out) == 16_384
    assert conn.blocked_bytes(sid) == 100_005 - 65_535
    # The stream's window alone is not enough: the connection is shut too.
    conn.receive(window_update(sid, 10_000))
    assert frames_of(conn) == []
    conn.receive(window_update(0, 10_000))
    out = frames_of(conn)
    assert sum(len(p) for _, _, _, p in out) == 10_000
    assert conn.blocked_bytes(sid) == 100_005 - 75_535
    conn.receive(window_update(0, 1 << 20) + window_update(sid, 1 << 20))
    out = frames_of(conn)
    assert sum(len(p) for _, _, _, p in out) == 100_005 - 75_535
    # END_STREAM rides on the frame with the request's last byte, no frame of its own.
    assert [f for _, f, _, _ in out] == [0] * (len(out) - 1) + [END_STREAM]
    assert conn.blocked_bytes(sid) == 0
    with pytest.raises(LocalProtocolError):
        conn.send_message(sid, b"x")


def test_queued_messages_keep_their_order() -> None:
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    sent = b""
    payloads = [bytes([i]) * 30_000 for i in range(5)]
    for p in payloads:
        conn.send_message(sid, p)
    sent += b"".join(p for _, _, _, p in frames_of(conn))
    conn.end_stream(sid)
    assert frames_of(conn) == []  # END_STREAM waits for the data
    conn.receive(window_update(0, 1 << 20) + window_update(sid, 1 << 20))
    out = frames_of(conn)
    sent += b"".join(p for k, _, _, p in out if k == DATA)
    assert sent == b"".join(grpc_message(p) for p in payloads)
    assert [f for _, f, _, _ in out] == [0] * (len(out) - 1) + [END_STREAM]
    assert out[-1][3]  # the last queued data carries END_STREAM


def test_initial_window_size_setting_releases_and_shrinks() -> None:
    conn, _ = ready()
    conn.receive(window_update(0, 1 << 20))
    sid = conn.start_request("/p")
    conn.data_to_send()
    conn.send_message(sid, bytes(100_000))
    assert sum(len(p) for _, _, _, p in frames_of(conn)) == 65_535
    conn.receive(settings_frame((4, 200_000)))
    out = frames_of(conn)
    assert sum(len(p) for k, _, _, p in out if k == DATA) == 100_005 - 65_535
    assert (SETTINGS, ACK, 0, b"") in out
    # Shrinking below what was sent makes the window negative: nothing goes out.
    conn.receive(settings_frame((4, 0)))
    frames_of(conn)
    conn.send_message(sid, b"x")
    assert conn.blocked_bytes(sid) == 6
    assert [k for k, _, _, _ in frames_of(conn)] == []
    conn.receive(settings_frame((4, 200_000)))
    assert [k for k, _, _, _ in frames_of(conn)] == [SETTINGS, DATA]


@pytest.mark.parametrize("size", [65_530, 65_531, 16_379, 16_380, 200_000])
def test_end_stream_rides_on_the_last_data_frame(size: int) -> None:
    """A message that fills the windows exactly, or overflows them by a byte."""
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    conn.send_message(sid, bytes(size), end_stream=True)
    out = frames_of(conn)
    while conn.blocked_bytes(sid):
        assert all(f == 0 for _, f, _, _ in out)
        conn.receive(window_update(0, 10_000) + window_update(sid, 10_000))
        out += frames_of(conn)
    assert [k for k, _, _, _ in out] == [DATA] * len(out)
    assert [f for _, f, _, _ in out] == [0] * (len(out) - 1) + [END_STREAM]
    assert all(p for _, _, _, p in out)  # no empty frame
    assert b"".join(p for _, _, _, p in out) == grpc_message(bytes(size))
    conn.receive(window_update(0, 1 << 20) + window_update(sid, 1 << 20))
    assert frames_of(conn) == []


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=70_000), min_size=1, max_size=4),
    end_apart=st.booleans(),
    updates=st.lists(st.integers(min_value=1, max_value=40_000), max_size=40),
)
def test_any_messages_and_windows_end_the_stream_once_after_the_data(
    sizes: list[int], end_apart: bool, updates: list[int]
) -> None:
    conn, _ = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    payloads = [bytes([i]) * n for i, n in enumerate(sizes)]
    for i, p in enumerate(payloads):
        conn.send_message(sid, p, end_stream=not end_apart and i == len(payloads) - 1)
    if end_apart:
        conn.end_stream(sid)
    out = [f for f in frames_of(conn) if f[0] == DATA]
    for n in updates:
        conn.receive(window_update(0, n) + window_update(sid, n))
        out += [f for f in frames_of(conn) if f[0] == DATA]
    conn.receive(window_update(0, 1 << 20) + window_update(sid, 1 << 20))
    out += [f for f in frames_of(conn) if f[0] == DATA]
    assert b"".join(p for _, _, _, p in out) == b"".join(grpc_message(p) for p in payloads)
    assert [f for _, f, _, _ in out] == [0] * (len(out) - 1) + [END_STREAM]
    # An empty frame only when the end came apart from data already sent.
    assert all(p for _, _, _, p in out[:-1])
    assert out[-1][3] or end_apart


def test_larger_max_frame_size_is_used() -> None:
    conn, _ = ready()
    conn.receive(settings_frame((5, 32_768), (4, 1 << 20)) + window_update(0, 1 << 20))
    sid = conn.start_request("/p")
    conn.data_to_send()
    conn.send_message(sid, bytes(40_000))
    data = conn.data_to_send()
    lengths = []
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 3], "big")
        lengths.append(n)
        pos += 9 + n
    assert lengths == [32_768, 40_005 - 32_768]


def test_window_update_errors() -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    [end] = conn.receive(window_update(sid, 0))
    assert isinstance(end, StreamEnded)
    assert end.status == StatusCode.INTERNAL
    sid = open_stream(conn, server)
    [end] = conn.receive(window_update(sid, 2**31 - 1))
    assert isinstance(end, StreamEnded)
    assert frames_of(conn)[-1] == (RST, 0, sid, (3).to_bytes(4, "big"))
    assert conn.receive(window_update(sid, 5)) == []  # a forgotten stream: ignored
    with pytest.raises(RemoteProtocolError):
        conn.receive(window_update(0, 0))
    conn, _ = ready()
    with pytest.raises(RemoteProtocolError):
        conn.receive(window_update(0, 2**31 - 1))


# -- GOAWAY and RST_STREAM ----------------------------------------------------------------------


def test_goaway_fails_streams_above_last_stream_id() -> None:
    conn, server = ready()
    s1 = open_stream(conn, server)
    s3 = conn.start_request("/p")
    s5 = conn.start_request("/p")
    conn.data_to_send()
    events = conn.receive(frame(GOAWAY, 0, 0, (3).to_bytes(4, "big") + bytes(4) + b"bye"))
    assert events[0] == ConnectionTerminated(0, 3, "bye")
    assert ended(events) == [
        StreamEnded(s5, StatusCode.UNAVAILABLE, "the server is going away (GOAWAY)", local=True)
    ]
    assert conn.goaway == ConnectionTerminated(0, 3, "bye")
    assert not conn.can_start_stream()
    with pytest.raises(LocalProtocolError):
        conn.start_request("/p")
    # Streams the server took may still finish.
    events = conn.receive(frame(DATA, 0, s1, grpc_message(b"x")) + server.trailers(s1))
    assert messages_of(events) == [b"x"]
    assert ended(events)[0].status == 0
    assert conn.open_streams == 1  # s3
    _ = s3


def test_rst_stream_codes_map_to_statuses() -> None:
    conn, server = ready()
    for code, status in [
        (0, StatusCode.INTERNAL),
        (1, StatusCode.INTERNAL),
        (2, StatusCode.INTERNAL),
        (3, StatusCode.INTERNAL),
        (7, StatusCode.UNAVAILABLE),
        (8, StatusCode.CANCELLED),
        (11, StatusCode.RESOURCE_EXHAUSTED),
        (12, StatusCode.PERMISSION_DENIED),
        (0x1234, StatusCode.INTERNAL),
    ]:
        sid = open_stream(conn, server)
        events = conn.receive(frame(DATA, 0, sid, grpc_message(b"x")) + rst(sid, code))
        assert messages_of(events) == [b"x"]
        [end] = ended(events)
        assert (end.status, end.local) == (status, True), code
        assert f"RST_STREAM with error code {code}" in end.message
        assert conn.open_streams == 0
        assert conn.data_to_send() == b""  # no RST back


def test_connection_lost_ends_every_stream_unavailable() -> None:
    conn, server = ready()
    s1 = open_stream(conn, server)
    s3 = conn.start_request("/p")
    ends = conn.connection_lost("gone")
    assert ends == [
        StreamEnded(s1, StatusCode.UNAVAILABLE, "gone", local=True),
        StreamEnded(s3, StatusCode.UNAVAILABLE, "gone", local=True),
    ]
    assert not conn.can_start_stream()


def test_max_concurrent_streams_limits_new_streams() -> None:
    conn, server = ready()
    conn.receive(settings_frame((3, 1)))
    conn.data_to_send()
    sid = open_stream(conn, server)
    assert not conn.can_start_stream()
    conn.receive(server.trailers(sid))
    assert conn.can_start_stream()


# -- malformed frames -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        frame(DATA, 0, 0, b"x"),
        frame(HEADERS, END_HEADERS, 0, b"\x88"),
        frame(PING, 0, 0, bytes(7)),
        frame(PING, 0, 1, bytes(8)),
        frame(SETTINGS, 0, 0, bytes(5)),
        frame(SETTINGS, 0, 1, b""),
        frame(SETTINGS, ACK, 0, bytes(6)),
        settings_frame((4, 2**31)),
        settings_frame((5, 100)),
        settings_frame((5, 1 << 24)),
        settings_frame((2, 2)),
        frame(WINDOW, 0, 0, bytes(3)),
        frame(WINDOW, 0, 1, bytes(5)),
        frame(RST, 0, 1, bytes(3)),
        frame(RST, 0, 0, bytes(4)),
        frame(GOAWAY, 0, 0, bytes(7)),
        frame(GOAWAY, 0, 1, bytes(8)),
        frame(PRIORITY, 0, 1, bytes(4)),
        b"\x00\x40\x01" + bytes((DATA, 0)) + (1).to_bytes(4, "big"),  # 16385 > max frame
    ],
)
def test_malformed_frames_are_connection_errors(bad: bytes) -> None:
    conn, server = ready()
    sid = open_stream(conn, server)
    with pytest.raises(RemoteProtocolError):
        conn.receive(bad)
    out = frames_of(conn)
    assert out[-1][:3] == (GOAWAY, 0, 0)
    assert int.from_bytes(out[-1][3][4:8], "big") in (1, 9)
    assert conn.closed
    assert conn.receive(frame(DATA, 0, sid, grpc_message(b"x"))) == []
    assert [e.stream_id for e in conn.connection_lost("x")] == [sid]


_FRAME = st.tuples(
    st.integers(min_value=0, max_value=10),
    st.integers(min_value=0, max_value=255),
    st.sampled_from([0, 1, 3, 5, 2, 2**31 - 1]),
    st.binary(max_size=40),
)


@settings(max_examples=400)
@given(
    frames=st.lists(_FRAME, max_size=12),
    tail=st.binary(max_size=64),
    valid_prefix=st.booleans(),
)
def test_arbitrary_input_raises_only_remote_protocol_error(
    frames: list[Frame], tail: bytes, valid_prefix: bool
) -> None:
    conn, server = ready()
    s1 = conn.start_request("/p")
    conn.start_request("/p")
    conn.send_message(s1, b"request")
    conn.data_to_send()
    wire = server.response(s1) + frame(DATA, 0, s1, b"\x00\x00") if valid_prefix else b""
    wire += b"".join(frame(*f) for f in frames) + tail
    try:
        for i in range(0, len(wire), 37):
            for ev in conn.receive(wire[i : i + 37]):
                assert isinstance(
                    ev, (ResponseHeaders, Messages, StreamEnded, ConnectionTerminated, PingAcked)
                )
            parse(conn.data_to_send())
    except RemoteProtocolError:  # any other exception type fails the test
        assert conn.closed
        assert parse(conn.data_to_send())[-1][0] == GOAWAY


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_remote_protocol_error(data: bytes) -> None:
    conn, _ = ready()
    conn.start_request("/p")
    conn.data_to_send()
    try:
        conn.receive(data)
    except RemoteProtocolError:
        assert conn.closed


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([":status", "content-type", "grpc-status", "grpc-message", "x"]),
            st.text(max_size=8),
        ),
        max_size=5,
    ),
    st.booleans(),
    st.booleans(),
)
def test_arbitrary_header_values_raise_nothing_unexpected(
    headers: list[tuple[str, str]], end_stream: bool, twice: bool
) -> None:
    conn, server = ready()
    sid = conn.start_request("/p")
    conn.data_to_send()
    try:
        conn.receive(server.headers(sid, headers, end_stream=end_stream))
        if twice:
            conn.receive(server.headers(sid, headers, end_stream=True))
    except RemoteProtocolError:
        assert conn.closed


def test_remote_protocol_error_is_in_the_aioclients_family() -> None:
    conn, _ = ready()
    with pytest.raises(AioClientsError, match="malformed PING"):
        conn.receive(frame(PING, 0, 0, b"x"))


# -- control-frame flood --------------------------------------------------------------------

MAX_QUEUED_CONTROL = 1000  # nghttp2's default max_outbound_ack
ENHANCE_YOUR_CALM = 0xB


def test_control_replies_are_not_capped_while_the_driver_writes() -> None:
    conn, _ = ready()
    pings = b"".join(frame(PING, 0, 0, i.to_bytes(8, "big")) for i in range(3000))
    assert conn.receive(pings) == []
    acks = frames_of(conn)
    assert acks == [(PING, ACK, 0, i.to_bytes(8, "big")) for i in range(3000)]
    assert conn.queued_control_replies == 0
    assert not conn.closed


def test_control_replies_up_to_the_cap_wait_while_paused() -> None:
    conn, _ = ready()
    conn.set_output_paused(True)
    pings = b"".join(frame(PING, 0, 0, i.to_bytes(8, "big")) for i in range(MAX_QUEUED_CONTROL))
    assert conn.receive(pings) == []
    assert conn.queued_control_replies == MAX_QUEUED_CONTROL
    acks = frames_of(conn)
    assert acks == [(PING, ACK, 0, i.to_bytes(8, "big")) for i in range(MAX_QUEUED_CONTROL)]
    # Written out: the count starts again.
    assert conn.queued_control_replies == 0
    assert conn.receive(pings) == []
    assert len(frames_of(conn)) == MAX_QUEUED_CONTROL
    assert not conn.closed


@pytest.mark.parametrize("flood_kind", [PING, SETTINGS])
def test_a_control_flood_the_driver_cannot_write_closes_with_enhance_your_calm(
    flood_kind: int,
) -> None:
    conn, _ = ready()
    one = frame(PING, 0, 0, b"12345678") if flood_kind == PING else settings_frame()
    # Many while the driver still writes, then the driver stops (its
    # transport is paused): the replies stay queued in the core.
    assert conn.receive(one * 2000) == []
    assert len(frames_of(conn)) == 2000
    conn.set_output_paused(True)
    assert conn.receive(one * (MAX_QUEUED_CONTROL - 1)) == []
    with pytest.raises(RemoteProtocolError, match="ENHANCE_YOUR_CALM"):
        conn.receive(one * 2)
    assert conn.closed
    out = frames_of(conn)
    assert out[-1] == (GOAWAY, 0, 0, bytes(4) + ENHANCE_YOUR_CALM.to_bytes(4, "big"))
    assert len(out) == MAX_QUEUED_CONTROL + 1  # the queued replies, then GOAWAY: no more
    assert conn.receive(one) == []  # closed: nothing more is accepted


def test_settings_and_ping_replies_share_one_count() -> None:
    conn, _ = ready()
    conn.set_output_paused(True)
    half = MAX_QUEUED_CONTROL // 2
    conn.receive(settings_frame() * half + frame(PING, 0, 0, bytes(8)) * half)
    with pytest.raises(RemoteProtocolError, match="ENHANCE_YOUR_CALM"):
        conn.receive(frame(PING, 0, 0, bytes(8)))
    assert conn.queued_control_replies == MAX_QUEUED_CONTROL
