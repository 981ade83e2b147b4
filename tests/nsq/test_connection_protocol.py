"""The pure connection state machine: handshake transcripts, steady state, timers."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioclients import LocalProtocolError
from aioclients.nsq import NSQError, NSQProtocolError
from aioclients.nsq._errors import NSQConnectError
from aioclients.nsq._protocol import _connection as C
from aioclients.nsq._protocol import _frames as F


def frame(ftype: int, data: bytes) -> bytes:
    return struct.pack(">II", len(data) + 4, ftype) + data


def msg(mid: bytes, body: bytes = b"b", attempts: int = 1) -> bytes:
    return frame(2, struct.pack(">qH", 5, attempts) + mid + body)


MID = b"0000000000000001"
FEATURES = {"max_rdy_count": 50, "version": "1.3.0", "tls_v1": False, "auth_required": False}


def consumer(**kw: object) -> C.ConnectionCore:
    core = C.ConnectionCore(identify={"client_id": "me"}, topic="t", channel="c", **kw)  # type: ignore[arg-type]
    core.start(0.0)
    return core


def subscribed() -> C.ConnectionCore:
    core = consumer()
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 0.0)
    assert core.data_to_send().endswith(b"SUB t c\n")
    return core


def test_consumer_handshake_transcript() -> None:
    core = consumer()
    out = core.data_to_send()
    assert out.startswith(b"  V2IDENTIFY\n")
    body = json.loads(out[4 + 9 + 4 :])
    assert body == {"client_id": "me", "feature_negotiation": True}
    events = core.receive_data(frame(0, json.dumps(FEATURES).encode()), 1.0)
    assert isinstance(events[0], C.Identified)
    assert events[0].response.max_rdy_count == 50
    assert core.data_to_send() == b"SUB t c\n"
    events = core.receive_data(frame(0, b"OK"), 1.0)
    assert events == [C.Subscribed(50)]
    core.send_rdy(1)
    assert core.data_to_send() == b"RDY 1\n"


def test_plain_ok_means_max_rdy_2500() -> None:
    core = consumer()
    events = core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 0.0)
    assert events[-1] == C.Subscribed(2500)
    assert core.state is C.ConnectionState.SUBSCRIBED


def test_messages_in_flight_fin_req_touch() -> None:
    core = subscribed()
    core.send_rdy(2)
    core.data_to_send()
    mid2 = b"0000000000000002"
    events = core.receive_data(msg(MID, b"one") + msg(mid2, b"two", attempts=4), 0.0)
    assert events == [C.MessageReceived(5, 1, MID, b"one"), C.MessageReceived(5, 4, mid2, b"two")]
    assert core.in_flight.keys() == {MID, mid2}
    core.touch(MID)
    core.fin(MID)
    core.req(mid2, 1500)
    assert core.data_to_send() == b"TOUCH %b\nFIN %b\nREQ %b 1500\n" % (MID, MID, mid2)
    assert not core.in_flight
    with pytest.raises(LocalProtocolError, match="not in flight"):
        core.fin(MID)


def test_made_messages_collect_per_read_and_the_too_often_delivered_stay_events() -> None:
    core = subscribed()
    core.send_rdy(4)
    core.data_to_send()
    core.make_message = lambda *args: ("made", *args)
    core.make_with = ("conn", "responder")
    core.attempts_limit = 3
    mid2, mid3 = b"0000000000000002", b"0000000000000003"
    events = core.receive_data(
        msg(MID, b"one")
        + msg(mid2, b"two", attempts=4)
        + frame(0, b"_heartbeat_")
        + msg(mid3, b"three", attempts=3),
        2.0,
    )
    # the made ones wait in `received` for the owner; the rest are events, in order
    assert core.received == [
        ("made", MID, b"one", 5, 1, "conn", "responder"),
        ("made", mid3, b"three", 5, 3, "conn", "responder"),
    ]
    assert events == [C.MessageReceived(5, 4, mid2, b"two"), C.Heartbeat()]
    assert core.in_flight == {MID: 2.0, mid2: 2.0, mid3: 2.0}
    assert core.data_to_send() == b"NOP\n"
    # a frame split over two reads is made when it is complete
    core.received = []
    mid4 = b"0000000000000004"
    whole = msg(mid4, b"four")
    assert core.receive_data(whole[:20], 3.0) == []
    assert core.received == []
    assert core.receive_data(whole[20:], 3.0) == []
    assert core.received == [("made", mid4, b"four", 5, 1, "conn", "responder")]


def test_fin_if_in_flight_answers_once() -> None:
    core = subscribed()
    core.send_rdy(1)
    core.data_to_send()
    core.receive_data(msg(MID), 0.0)
    assert core.fin_if_in_flight(MID) is True
    assert core.fin_if_in_flight(MID) is False  # answered already: nothing queued
    assert core.data_to_send() == b"FIN %b\n" % MID
    assert not core.in_flight
    core.receive_data(msg(MID), 0.0)
    core.connection_lost()
    assert core.fin_if_in_flight(MID) is None  # closed: nothing to say
    assert not core.has_data_to_send


def test_heartbeat_is_answered_with_nop() -> None:
    core = subscribed()
    assert core.receive_data(frame(0, b"_heartbeat_"), 0.0) == [C.Heartbeat()]
    assert core.data_to_send() == b"NOP\n"


def test_heartbeat_during_handshake_is_answered() -> None:
    core = consumer()
    core.data_to_send()
    core.receive_data(frame(0, b"_heartbeat_"), 0.0)
    assert core.data_to_send() == b"NOP\n"


def test_non_fatal_and_fatal_errors() -> None:
    core = consumer()
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 0.0)
    (ev,) = core.receive_data(frame(1, b"E_FIN_FAILED FIN x failed"), 0.0)
    assert isinstance(ev, C.ErrorReceived)
    assert not ev.error.fatal
    assert core.state is C.ConnectionState.SUBSCRIBED
    (ev,) = core.receive_data(frame(1, b"E_INVALID nope"), 0.0)
    assert isinstance(ev, C.ErrorReceived)
    assert ev.error.fatal
    assert ev.error.code == "E_INVALID"
    assert core.state is C.ConnectionState.CLOSED


def test_sub_refused_raises_with_code() -> None:
    core = consumer()
    core.receive_data(frame(0, b"OK"), 0.0)
    with pytest.raises(NSQError) as err:
        core.receive_data(frame(1, b"E_BAD_TOPIC SUB topic name is not valid"), 0.0)
    assert err.value.code == "E_BAD_TOPIC"
    assert not err.value.settings_refused  # a SUB refusal is not about the IDENTIFY settings


def test_tls_required_refusal_says_to_pass_tls() -> None:
    """nsqd --tls-required refuses every command but IDENTIFY from a plain client
    (nsqd/protocol_v2.go enforceTLSPolicy): the error says what to change."""
    core = consumer()
    core.receive_data(frame(0, b"OK"), 0.0)
    answer = b"E_INVALID cannot SUB in current state (TLS required)"
    with pytest.raises(NSQError) as err:
        core.receive_data(frame(1, answer), 0.0)
    assert (err.value.code, err.value.description) == ("E_INVALID", answer[10:].decode())
    assert str(err.value).startswith(answer.decode() + " - ")
    assert "pass tls=True or an ssl.SSLContext" in str(err.value)
    assert not err.value.settings_refused


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (b"E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid", "from 1 s up to"),
        (b"E_BAD_BODY IDENTIFY msg timeout (10) is invalid", "msg_timeout from 1 s"),
        (b"E_BAD_BODY IDENTIFY output buffer size (1) is invalid", "output_buffer_size from 64"),
        (b"E_BAD_BODY IDENTIFY output buffer timeout (1) is invalid", "25 ms by default"),
        (b"E_BAD_BODY IDENTIFY sample rate (100) is invalid", "sample_rate must be 0 to 99"),
        (b"E_BAD_BODY IDENTIFY failed to decode JSON body", "refused this client's IDENTIFY"),
    ],
)
def test_identify_refused_is_a_settings_error_with_a_hint(answer: bytes, hint: str) -> None:
    core = consumer()
    with pytest.raises(NSQError) as err:
        core.receive_data(frame(1, answer), 0.0)
    assert (err.value.code, err.value.settings_refused) == ("E_BAD_BODY", True)
    assert str(err.value).startswith(answer.decode() + " - ")
    assert hint in str(err.value)
    assert core.state is C.ConnectionState.CLOSED


def test_cls_and_close_wait() -> None:
    core = subscribed()
    core.send_rdy(1)
    core.data_to_send()
    core.cls()
    assert core.data_to_send() == b"CLS\n"
    events = core.receive_data(msg(MID) + frame(0, b"CLOSE_WAIT"), 0.0)
    assert isinstance(events[0], C.MessageReceived)
    assert events[1] == C.CloseWait()
    core.fin(MID)  # responding is still allowed while closing
    core.send_rdy(5)  # ignored after CLS
    assert core.data_to_send() == b"FIN %b\n" % MID


def test_auth_required() -> None:
    core = consumer(auth_secret="s")
    core.data_to_send()
    core.receive_data(frame(0, json.dumps({**FEATURES, "auth_required": True}).encode()), 0.0)
    assert core.data_to_send() == b"AUTH\n\x00\x00\x00\x01s"
    events = core.receive_data(
        frame(0, b'{"identity":"i","identity_url":"u","permission_count":2}'), 0.0
    )
    assert events == [C.Authenticated("i", "u", 2)]
    assert core.data_to_send() == b"SUB t c\n"


def test_auth_required_without_secret_is_a_clear_error() -> None:
    core = consumer()
    with pytest.raises(NSQConnectError, match="auth_secret"):
        core.receive_data(frame(0, json.dumps({**FEATURES, "auth_required": True}).encode()), 0.0)


def test_no_auth_when_not_required_even_with_a_secret() -> None:
    core = consumer(auth_secret="s")
    core.data_to_send()
    core.receive_data(frame(0, json.dumps(FEATURES).encode()), 0.0)
    assert core.data_to_send() == b"SUB t c\n"


def test_tls_upgrade_then_ok() -> None:
    core = consumer(tls=True)
    events = core.receive_data(frame(0, json.dumps({**FEATURES, "tls_v1": True}).encode()), 0.0)
    assert events[-1] == C.UpgradeTLS()
    assert core.data_to_send().endswith(b"}")  # nothing after IDENTIFY until TLS is up
    core.tls_started()
    core.receive_data(frame(0, b"OK"), 0.0)
    assert core.data_to_send() == b"SUB t c\n"


def test_tls_refused_is_a_clear_error() -> None:
    core = consumer(tls=True)
    with pytest.raises(NSQConnectError, match="TLS was requested"):
        core.receive_data(frame(0, json.dumps(FEATURES).encode()), 0.0)


def test_compression_stops_decoding_at_the_identify_answer() -> None:
    core = consumer()
    core.data_to_send()
    compressed_ok = b"\x99garbage-that-is-compressed"
    events = core.receive_data(
        frame(0, json.dumps({**FEATURES, "deflate": True, "deflate_level": 3}).encode())
        + compressed_ok,
        0.0,
    )
    assert events[-1] == C.UpgradeCompression("deflate", 3)
    assert core.take_buffered() == compressed_ok
    core.receive_data(frame(0, b"OK"), 0.0)  # the driver decompressed it
    assert core.data_to_send() == b"SUB t c\n"


def test_message_during_handshake_is_a_protocol_error() -> None:
    core = consumer()
    with pytest.raises(NSQProtocolError, match="during the handshake"):
        core.receive_data(msg(MID), 0.0)


def test_garbage_identify_answer() -> None:
    core = consumer()
    with pytest.raises(NSQProtocolError, match="neither OK nor JSON"):
        core.receive_data(frame(0, b"<html>"), 0.0)


def test_producer_publishes_and_matches_answers() -> None:
    core = C.ConnectionCore(identify={})
    core.start(0.0)
    core.data_to_send()
    assert core.receive_data(frame(0, b"OK"), 0.0) == [
        C.Identified(C.IdentifyResponse()),
        C.Ready(),
    ]
    core.publish(b"PUB t\n\x00\x00\x00\x01x")
    core.publish(b"PUB t\n\x00\x00\x00\x01y")
    assert core.pending_responses == 2
    events = core.receive_data(frame(0, b"OK") + frame(1, b"E_BAD_MESSAGE too big"), 0.0)
    assert events[0] == C.Response(b"OK")
    assert isinstance(events[1], C.ErrorReceived)
    assert events[1].error.code == "E_BAD_MESSAGE"
    assert core.pending_responses == 0
    with pytest.raises(LocalProtocolError):
        core.publish(b"PUB t\n\x00\x00\x00\x01z")  # nsqd closes after a fatal error


def test_publish_before_ready_is_refused() -> None:
    core = C.ConnectionCore(identify={})
    with pytest.raises(LocalProtocolError, match="READY"):
        core.publish(b"PUB t\n")


def test_handshake_and_heartbeat_timers() -> None:
    core = consumer(handshake_timeout=5.0, heartbeat_interval=10.0)
    assert core.get_timer() == 5.0
    assert core.handle_timer(4.9) == []
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 1.0)
    assert core.get_timer() == 1.0 + 20.0 + C.HEARTBEAT_MARGIN
    core.receive_data(frame(0, b"_heartbeat_"), 11.0)
    assert core.get_timer() == 11.0 + 20.0 + C.HEARTBEAT_MARGIN
    (ev,) = core.handle_timer(100.0)
    assert isinstance(ev, C.TimedOut)
    assert "heartbeats stopped" in ev.reason
    assert core.get_timer() is None


def test_handshake_timeout_fires() -> None:
    core = consumer(handshake_timeout=5.0)
    (ev,) = core.handle_timer(5.0)
    assert isinstance(ev, C.TimedOut)
    assert "handshake" in ev.reason


def test_no_heartbeat_watchdog_when_disabled() -> None:
    core = consumer(heartbeat_interval=None)
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 1.0)
    assert core.get_timer() is None


def test_topic_without_channel_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        C.ConnectionCore(identify={}, topic="t")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_fuzz_subscribed_core_raises_only_protocol_errors(chunks: list[bytes]) -> None:
    core = subscribed()
    try:
        for chunk in chunks:
            for event in core.receive_data(chunk, 0.0):
                assert isinstance(event, (C.Event, C.MessageReceived))
    except NSQProtocolError as err:
        offset = err.offset
        assert offset is not None


def test_an_oversized_message_is_reported_in_flight_and_the_connection_stays() -> None:
    core = C.ConnectionCore(
        identify={}, topic="t", channel="c", max_message_size=10, heartbeat_interval=None
    )
    core.start(0.0)
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 0.0)
    core.send_rdy(2)
    core.data_to_send()
    mid2 = b"0000000000000002"
    stream = msg(MID, b"x" * 1000, attempts=2) + msg(mid2, b"small")
    events: list[object] = []
    for i in range(0, len(stream), 7):
        events += core.receive_data(stream[i : i + 7], 1.0)
        assert core.decoder.buffered <= 10 + 26 + 8
    assert events == [
        C.OversizedMessage(5, 2, MID, 1000),
        C.MessageReceived(5, 1, mid2, b"small"),
    ]
    assert core.state is C.ConnectionState.SUBSCRIBED
    assert core.in_flight.keys() == {MID, mid2}
    core.fin(MID)
    assert core.data_to_send() == b"FIN " + MID + b"\n"


def test_an_oversized_message_during_the_handshake_is_an_error() -> None:
    core = consumer()
    with pytest.raises(NSQProtocolError, match="message frame during the handshake"):
        core.receive_data(msg(MID, b"x" * (2 * 1024 * 1024)), 0.0)


# ---- RDY accounting: a server that ignores RDY is cut off ------------------------------


def mid(i: int) -> bytes:
    return b"%016d" % i


def ready(rdy: int, msg_timeout_ms: int = 60_000) -> C.ConnectionCore:
    core = consumer(heartbeat_interval=None)
    answer = json.dumps({"max_rdy_count": 2500, "msg_timeout": msg_timeout_ms}).encode()
    core.receive_data(frame(0, answer) + frame(0, b"OK"), 0.0)
    core.send_rdy(rdy)
    core.data_to_send()
    return core


def test_more_messages_than_rdy_is_a_protocol_error_that_closes() -> None:
    core = ready(2)
    core.receive_data(msg(mid(1)) + msg(mid(2)), 1.0)
    with pytest.raises(NSQProtocolError, match=r"3 messages in flight .* at most RDY 2"):
        core.receive_data(msg(mid(3)), 1.0)
    assert core.state is C.ConnectionState.CLOSED
    assert core.receive_data(msg(mid(4)), 1.0) == []  # nothing more is taken


def test_a_message_before_any_rdy_is_a_protocol_error() -> None:
    core = ready(0)
    with pytest.raises(NSQProtocolError, match="ignores RDY"):
        core.receive_data(msg(mid(1)), 1.0)


def test_answered_messages_free_their_slot_and_a_redelivery_is_one_slot() -> None:
    core = ready(1)
    for i in range(5):
        core.receive_data(msg(mid(i)), 1.0)
        core.receive_data(msg(mid(i), attempts=2), 1.0)  # same id again: same slot
        core.fin(mid(i))
    assert not core.in_flight


def test_messages_sent_before_nsqd_saw_a_lower_rdy_are_allowed() -> None:
    core = ready(3)
    core.receive_data(msg(mid(1)), 1.0)
    core.send_rdy(0)  # backoff; nsqd may have sent two more already
    core.receive_data(msg(mid(2)) + msg(mid(3)), 1.0)
    with pytest.raises(NSQProtocolError, match=r"4 messages in flight .* at most RDY 3"):
        core.receive_data(msg(mid(4)), 1.0)


def test_messages_that_timed_out_at_nsqd_no_longer_count() -> None:
    core = ready(1, msg_timeout_ms=2000)
    core.receive_data(msg(mid(1)), 0.0)  # held by the application, never answered
    core.receive_data(msg(mid(2)), 2.5)  # nsqd re-queued #1 at 2.0 and may send more
    assert core.in_flight.keys() == {mid(1), mid(2)}  # both may still be answered
    with pytest.raises(NSQProtocolError, match="2 messages in flight"):
        core.receive_data(msg(mid(3)), 3.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["rdy", "fin", "send", "deliver"]), st.integers(0, 5))))
def test_a_correct_nsqd_is_never_taken_for_a_flooding_one(ops: list[tuple[str, int]]) -> None:
    """nsqd applies our commands late (they queue in the socket) and sends a message
    only while its own in-flight count is below its RDY; whatever the interleaving,
    the client never sees a violation."""
    core = ready(0)
    to_nsqd: list[tuple[str, bytes | int]] = []  # commands not yet read by nsqd
    to_client: list[bytes] = []  # messages not yet read by the client
    nsqd_rdy = 0
    nsqd_in_flight: set[bytes] = set()
    counter = 0
    for op, n in ops:
        if op == "rdy":
            core.send_rdy(n)
            to_nsqd.append(("rdy", n))
        elif op == "fin" and core.in_flight:
            message_id = sorted(core.in_flight)[n % len(core.in_flight)]
            core.fin(message_id)
            to_nsqd.append(("fin", message_id))
        elif op == "send":  # nsqd reads some commands, then sends what RDY allows
            for command, arg in to_nsqd[: n + 1]:
                if command == "rdy":
                    assert isinstance(arg, int)
                    nsqd_rdy = arg
                else:
                    assert isinstance(arg, bytes)
                    nsqd_in_flight.discard(arg)
            del to_nsqd[: n + 1]
            while len(nsqd_in_flight) < nsqd_rdy:
                counter += 1
                nsqd_in_flight.add(mid(counter))
                to_client.append(msg(mid(counter)))
        elif op == "deliver":
            chunk, to_client[: n + 1] = b"".join(to_client[: n + 1]), []
            core.receive_data(chunk, 1.0)
    core.receive_data(b"".join(to_client), 1.0)
    assert core.state is C.ConnectionState.SUBSCRIBED


def test_a_short_heartbeat_interval_gets_a_short_margin() -> None:
    core = consumer(heartbeat_interval=0.2)
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 1.0)
    assert core.get_timer() == pytest.approx(1.0 + 0.4 + 0.2)
    (ev,) = core.handle_timer(1.6)
    assert isinstance(ev, C.TimedOut)


def _made_core(max_message_size: int = 1024 * 1024) -> C.ConnectionCore:
    core = C.ConnectionCore(identify={}, topic="t", channel="c", max_message_size=max_message_size)
    core.start(0.0)
    core.receive_data(frame(0, b"OK") + frame(0, b"OK"), 0.0)
    core.send_rdy(1000)
    core.data_to_send()
    return core


_frames_st = st.lists(
    st.one_of(
        st.tuples(st.just("msg"), st.binary(max_size=40), st.integers(1, 6)),
        st.tuples(st.just("heartbeat"), st.just(b""), st.just(0)),
        st.tuples(st.just("ok"), st.just(b""), st.just(0)),
        st.tuples(st.just("fin_failed"), st.just(b""), st.just(0)),
    ),
    max_size=30,
)


def _fed_alike(
    plain: C.ConnectionCore,
    made: C.ConnectionCore,
    stream: bytes,
    cuts: list[int],
    limit: int,
) -> None:
    """Feed ``stream`` cut at ``cuts`` (then the rest) to a plain core and to one
    that makes messages (``attempts_limit`` ``limit``): the decoders stay in step
    after every read, the made one holds the plain one's messages (those over the
    limit aside), and its events are the plain one's other events."""
    plain_events: list[object] = []
    made_events: list[object] = []
    pos = 0
    for cut in [*cuts, len(stream)]:
        chunk, pos = stream[pos : pos + cut], pos + cut
        plain_events += plain.receive_data(chunk, 1.0)
        made_events += made.receive_data(chunk, 1.0)
        assert plain.decoder.offset == made.decoder.offset
        assert plain.decoder.buffered == made.decoder.buffered
    messages = [e for e in plain_events if isinstance(e, C.MessageReceived)]
    over = [m for m in messages if limit and m.attempts > limit]
    assert made.received == [m for m in messages if m not in over]
    # (NSQError compares by identity: the events are compared by their repr)
    assert [repr(e) for e in made_events] == [
        repr(e) for e in plain_events if e not in made.received
    ]


@settings(max_examples=300, deadline=None)
@given(_frames_st, st.lists(st.integers(1, 80), max_size=40), st.integers(0, 4))
def test_made_messages_are_the_events_any_chunking(
    frames: list[tuple[str, bytes, int]], cuts: list[int], limit: int
) -> None:
    """A core that makes its messages reads any stream, cut anywhere, into the same
    messages, events, in-flight ids and bytes to send as one that reports each
    message as an event (bodies above max_message_size included)."""
    stream = b""
    for i, (kind, body, attempts) in enumerate(frames):
        if kind == "msg":
            stream += msg(b"%016d" % i, body, attempts=attempts)
        elif kind == "heartbeat":
            stream += frame(0, b"_heartbeat_")
        elif kind == "ok":
            stream += frame(0, b"OK")
        else:
            stream += frame(1, b"E_FIN_FAILED FIN x failed")
    plain, made = _made_core(30), _made_core(30)
    made.make_message = lambda *args: C.MessageReceived(args[2], args[3], args[0], args[1])
    made.attempts_limit = limit
    _fed_alike(plain, made, stream, cuts, limit)
    assert made.in_flight == plain.in_flight
    assert made.data_to_send() == plain.data_to_send()


# Streams where most message frames have one size (the column read's case): a
# body of another size, an attempts count above the limit, a heartbeat or a body
# above max_message_size (30) now and then, so that reads start with same-sized
# runs of every length, out of step with the frames where a read is cut.
_same_size_st = st.tuples(
    st.integers(0, 40),
    st.lists(
        st.one_of(
            st.tuples(st.just("msg"), st.integers(0, 0), st.integers(1, 6)),
            st.tuples(st.just("msg"), st.integers(0, 0), st.integers(1, 6)),
            st.tuples(st.just("msg"), st.integers(0, 0), st.integers(1, 6)),
            st.tuples(st.just("msg"), st.integers(0, 45), st.integers(1, 6)),
            st.tuples(st.just("heartbeat"), st.just(0), st.just(0)),
        ),
        max_size=40,
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    _same_size_st,
    st.lists(st.integers(1, 400), max_size=12),
    st.integers(0, 4),
    st.booleans(),
)
def test_same_sized_messages_read_as_columns_are_the_events(
    stream_spec: tuple[int, list[tuple[str, int, int]]],
    cuts: list[int],
    limit: int,
    many: bool,
) -> None:
    """Reads that start with message frames of one size are taken as rows
    (message_rows, then make_messages or make_message over them): the same
    messages, events, in-flight ids (in order) and bytes to send as a core that
    reports each message as an event, cut anywhere."""
    size, items = stream_spec
    stream = b""
    for i, (kind, other_size, attempts) in enumerate(items):
        if kind == "msg":  # other_size 0: the stream's common size
            body = bytes([i % 256]) * (other_size or size)
            stream += msg(b"%016d" % i, body, attempts=attempts)
        else:
            stream += frame(0, b"_heartbeat_")
    plain, made = _made_core(30), _made_core(30)
    made.make_message = lambda *args: C.MessageReceived(args[2], args[3], args[0], args[1])
    calls: list[int] = []
    if many:

        def make_many(rows: list[tuple[int, int, bytes, bytes]], *with_: Any) -> list[object]:
            assert with_ == made.make_with
            calls.append(len(rows))
            return [C.MessageReceived(*row) for row in rows]

        made.make_messages = make_many
    made.attempts_limit = limit
    _fed_alike(plain, made, stream, cuts, limit)
    assert list(made.in_flight.items()) == list(plain.in_flight.items())
    assert made.data_to_send() == plain.data_to_send()
    assert all(n >= 2 for n in calls)


def test_a_read_of_same_sized_messages_is_made_in_one_call() -> None:
    core = _made_core()
    core.make_message = lambda *args: pytest.fail("made one at a time")
    calls: list[tuple[Any, ...]] = []
    core.make_messages = lambda *args: calls.append(args) or ["m1", "m2", "m3"]
    core.make_with = ("conn", "responder")
    mids = [b"%016d" % i for i in range(4)]
    data = b"".join(msg(m, b"abc", attempts=2) for m in mids)
    # three whole frames, the fourth cut short: it waits for the rest
    assert core.receive_data(data[:-1], 2.0) == []
    assert calls == [([(5, 2, m, b"abc") for m in mids[:3]], "conn", "responder")]
    assert core.received == ["m1", "m2", "m3"]
    assert list(core.in_flight) == mids[:3]
    assert core.decoder.buffered == len(data) // 4 - 1


def test_message_rows_read_same_sized_frames_only() -> None:
    mids = [b"%016d" % i for i in range(5)]
    same = b"".join(msg(m, b"abc", attempts=i + 1) for i, m in enumerate(mids))
    rows = [(5, i + 1, m, b"abc") for i, m in enumerate(mids)]
    assert F.message_rows(same, 30, 1000) == (rows, len(same))
    # the frames that fit whole; a frame cut short is left
    assert F.message_rows(same[:-1], 30, 1000) == (rows[:4], len(same) // 5 * 4)
    one = msg(mids[0], b"abc")
    assert F.message_rows(one, 30, 1000) is None  # one frame: walk it
    assert F.message_rows(one[:7], 30, 1000) is None
    # another size anywhere among the frames taken, even where the first, the second
    # and the last of them agree: refused
    mixed = same[: 2 * len(one)] + msg(mids[2], b"ab") + msg(mids[3], b"abcd") + same[-len(one) :]
    assert len(mixed) == len(same)
    assert F.message_rows(mixed, 30, 1000) is None
    # a frame of another type among them: refused
    heartbeat = frame(0, b"_heartbeat_" + b"x" * (len(one) - 8 - 11))
    assert len(heartbeat) == len(one)
    assert (
        F.message_rows(same[: 2 * len(one)] + heartbeat + same[-2 * len(one) :], 30, 1000) is None
    )
    # each byte of the size and the type of a frame among them, changed: refused
    third = 2 * len(one)
    for k in range(8):
        changed = bytearray(same)
        changed[third + k] ^= 0x40
        assert F.message_rows(bytes(changed), 30, 1000) is None, k
    # sizes a message frame may not have: refused
    assert F.message_rows(same, 33, 1000) == F.message_rows(same, 30, 1000)
    assert F.message_rows(same, 34, 1000) is None
    assert F.message_rows(same, 30, 32) is None


_attempts_st = st.one_of(
    st.integers(0, 7), st.integers(250, 260), st.integers(0, 0xFFFF), st.just(0xFFFF)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_attempts_st, min_size=2, max_size=6), _attempts_st)
def test_message_rows_refuse_a_read_with_attempts_above_the_limit(
    attempts: list[int], limit: int
) -> None:
    """The rows of a read are refused (walked, to give some up) exactly when one
    of its messages was delivered more than ``max_attempts`` times (0: no limit),
    high and low bytes of the counts alike."""
    mids = [b"%016d" % i for i in range(len(attempts))]
    data = b"".join(msg(m, b"abc", attempts=n) for m, n in zip(mids, attempts, strict=True))
    rows = [(5, n, m, b"abc") for m, n in zip(mids, attempts, strict=True)]
    expected = (rows, len(data)) if not limit or max(attempts) <= limit else None
    assert F.message_rows(data, 30, 1000, limit) == expected
    assert F.message_rows(data, 30, 1000) == (rows, len(data))


def test_message_rows_attempts_at_the_byte_edges() -> None:
    mids = [b"%016d" % i for i in range(3)]
    for counts, limit, taken in [
        ((1, 5, 2), 5, True),
        ((1, 6, 2), 5, False),
        ((255, 1, 1), 254, False),
        ((255, 1, 1), 255, True),
        ((256, 1, 1), 255, False),
        ((256, 1, 1), 256, True),
        ((1, 300, 1), 299, False),
        ((1, 300, 1), 300, True),
        ((0xFFFF, 1, 1), 0xFFFE, False),
        ((0xFFFF, 1, 1), 0xFFFF, True),
        ((0xFFFF, 1, 1), 0, True),
    ]:
        data = b"".join(msg(m, b"abc", attempts=n) for m, n in zip(mids, counts, strict=True))
        got = F.message_rows(data, 30, 1000, limit)
        assert (got is not None) is taken, (counts, limit)


def test_made_messages_keep_the_decoders_errors() -> None:
    core = _made_core()
    core.make_message = lambda *args: args
    good = msg(MID, b"x")
    start = core.decoder.offset
    with pytest.raises(NSQProtocolError, match="unknown frame type") as err:
        core.receive_data(good + struct.pack(">II", 8, 7) + b"\0" * 4, 0.0)
    assert err.value.offset == start + len(good) + 4
    assert core.received == [(MID, b"x", 5, 1, None, None)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["fin", "fin_checked", "req", "touch", "rdy", "heartbeat", "take"]),
            st.integers(0, 7),
        ),
        max_size=60,
    ),
    st.booleans(),
)
def test_queued_fins_keep_the_order_of_one_command_at_a_time(
    ops: list[tuple[str, int]], close: bool
) -> None:
    """FINs are queued as ids and formatted at the next write or the next other
    command: the bytes are those of each command written as it was made, and
    pending_bytes counts them exactly."""
    core = subscribed()
    core.send_rdy(8)
    core.data_to_send()
    mids = [b"%016d" % i for i in range(8)]
    core.receive_data(b"".join(msg(m) for m in mids), 1.0)
    expected = b""
    sent = b""
    for op, n in ops:
        mid = mids[n]
        if op == "fin":
            if core.fin_if_in_flight(mid):
                expected += b"FIN %b\n" % mid
        elif op == "fin_checked" and mid in core.in_flight:
            core.fin(mid)
            expected += b"FIN %b\n" % mid
        elif op == "req" and mid in core.in_flight:
            core.req(mid, n)
            expected += b"REQ %b %d\n" % (mid, n)
        elif op == "touch" and mid in core.in_flight:
            core.touch(mid)
            expected += b"TOUCH %b\n" % mid
        elif op == "rdy":
            core.send_rdy(n)
            expected += b"RDY %d\n" % n
        elif op == "heartbeat":
            core.receive_data(frame(0, b"_heartbeat_"), 1.0)
            expected += b"NOP\n"
        elif op == "take":
            assert core.pending_bytes == len(expected) - len(sent)
            assert core.has_data_to_send == (core.pending_bytes > 0)
            sent += core.data_to_send()
            assert sent == expected
    if close:
        core.cls()
        expected += b"CLS\n"
    assert core.pending_bytes == len(expected) - len(sent)
    assert core.has_data_to_send == (len(expected) > len(sent))
    assert sent + core.data_to_send() == expected
    assert core.data_to_send() == b""
    assert not core.has_data_to_send
