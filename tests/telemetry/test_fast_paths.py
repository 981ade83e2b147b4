"""The shortcuts of the per-message paths give what the full work would have given:
the message id and position read from the ack subject agree with the metadata parse,
and a header block is passed by without extraction only when the propagator could
have found nothing in it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from opentelemetry import propagate
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aioclients._errors import AioClientsError
from aioclients.jetstream import Msg
from aioclients.jetstream._protocol._metadata import parse_ack_subject
from aioclients.telemetry._common import block_may_carry_context, creation_link, extract
from aioclients.telemetry._jetstream import _ack_position, _message_id

# -- message id and position from the ack subject ---------------------------------------

_number = st.one_of(
    st.integers(min_value=0, max_value=2**64).map(str),
    st.sampled_from(["", "007", "0", "-1", "1e3", "٣", "+5", " 5", "12a"]),
)
_name = st.one_of(st.sampled_from(["", "ORDERS", "c1", "_"]), st.text("abcXYZ_-09", max_size=6))


@st.composite
def _ack_subjects(draw: st.DrawFn) -> str:
    head = draw(st.sampled_from(["$JS.ACK", "$JS.ACK", "$JS.NAK", "JS.ACK", "$JS"]))
    tokens = [draw(_name), draw(_name)] + [draw(_number) for _ in range(5)]
    layout = draw(st.sampled_from(["v1", "v2", "v2+", "short", "ten"]))
    if layout == "v2":
        tokens = [draw(_name), draw(_name), *tokens]
    elif layout == "v2+":
        tokens = [draw(_name), draw(_name), *tokens, draw(_name)]
    elif layout == "short":
        tokens = tokens[: draw(st.integers(min_value=0, max_value=6))]
    elif layout == "ten":
        tokens = [draw(_name), *tokens]
    return ".".join([head, *tokens])


def _msg(reply: str | bytes) -> Msg:
    return Msg(None, "subject", reply, b"", None)  # type: ignore[arg-type]


_IRREGULAR = [
    "$JS.ACK.S.C.1.007.1.1.1",  # a sequence int() reads as 7
    "$JS.ACK.S.C.1.\u0663.1.1.1",  # a digit, not ASCII: int() reads it
    "$JS.ACK.S..1.2.3.4.5",  # no consumer name
    "$JS.ACK.S.C.1.2.3.4.5.6",  # ten tokens
    "$JS.ACK...S.C.1.2.3.4.5",  # a domain and hash left empty
    "$JS.ACK.S.C.1.2.3.4.-5",
]


def _examples(test: Any) -> Any:
    for reply in _IRREGULAR:
        test = example(reply)(test)
    return settings(max_examples=500)(test)


@_examples
@given(_ack_subjects())
def test_the_message_id_is_the_parsed_stream_sequence(reply: str) -> None:
    try:
        expected: str | None = str(parse_ack_subject(reply).sequence.stream)
    except AioClientsError:
        expected = None
    assert _message_id(_msg(reply)) == expected
    # a reply as the bytes on the wire reads alike
    assert _message_id(_msg(reply.encode())) == expected


@_examples
@given(_ack_subjects())
def test_the_position_is_the_parsed_stream_and_consumer(reply: str) -> None:
    try:
        metadata = parse_ack_subject(reply)
    except AioClientsError:
        expected = None
    else:
        expected = (metadata.stream, metadata.consumer)
    assert _ack_position(_msg(reply)) == expected
    assert _ack_position(_msg(reply.encode())) == expected


_raw_name = st.binary(min_size=0, max_size=6).filter(lambda name: b"." not in name)


@settings(max_examples=300)
@given(_raw_name, _raw_name, st.sampled_from([b"42", b"042", b"x"]))
@example(b"S\xe2\x82", b"\xff", b"42")
def test_a_reply_of_bytes_that_are_not_utf8_reads_as_its_decoded_text(
    stream: bytes, consumer: bytes, seq: bytes
) -> None:
    """What ``Msg.reply`` reads (the bytes decoded, invalid ones replaced) is what
    the span reads from the bytes themselves."""
    raw = b"$JS.ACK.%s.%s.1.%s.7.1764160000000000000.0" % (stream, consumer, seq)
    text = raw.decode("utf-8", "replace")
    assert _message_id(_msg(raw)) == _message_id(_msg(text))
    assert _ack_position(_msg(raw)) == _ack_position(_msg(text))


def test_the_id_of_a_message_whose_metadata_was_read_is_that_of_the_metadata() -> None:
    msg = _msg("$JS.ACK.S.C.1.42.7.1764160000000000000.0")
    assert msg.metadata.sequence.stream == 42
    assert _message_id(msg) == "42"
    assert _ack_position(msg) == ("S", "C")
    with_domain = "$JS.ACK.hub.ACCHASH.S.C.1.43.7.1764160000000000000.0.rnd"
    assert _message_id(_msg(with_domain)) == "43"
    assert _ack_position(_msg(with_domain)) == ("S", "C")


# -- header blocks that may carry a context ---------------------------------------------

_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class OwnHeaderPropagator(TextMapPropagator):
    """A propagator of another format: the context in ``x-own-trace``; it declares
    no field, as a propagator may."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        values = getter.get(carrier, "x-own-trace")
        if not values:
            return context if context is not None else Context()
        return TraceContextTextMapPropagator().extract({"traceparent": values[0]}, context=context)

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        pass

    @property
    def fields(self) -> set[str]:
        return set()


@pytest.fixture
def own_propagator() -> Iterator[None]:
    saved = propagate.get_global_textmap()
    propagate.set_global_textmap(OwnHeaderPropagator())
    try:
        yield
    finally:
        propagate.set_global_textmap(saved)


def _block(*lines: str) -> bytes:
    return ("NATS/1.0\r\n" + "".join(f"{line}\r\n" for line in lines) + "\r\n").encode()


def test_a_block_with_no_header_the_propagator_reads_is_passed_by() -> None:
    # the default propagator: W3C trace context and baggage
    assert not block_may_carry_context(_block("Nats-Msg-Id: 1", "X-Mine: 2"))
    assert block_may_carry_context(_block(f"traceparent: {_TRACEPARENT}"))
    assert block_may_carry_context(_block(f"Traceparent: {_TRACEPARENT}"))  # as Go writes it
    assert block_may_carry_context(_block("BAGGAGE: k=v"))


def test_with_a_propagator_it_cannot_vouch_for_every_block_is_extracted(
    own_propagator: None,
) -> None:
    block = _block(f"x-own-trace: {_TRACEPARENT}")
    assert block_may_carry_context(block)
    assert block_may_carry_context(_block("X-Mine: 2"))
    headers: Mapping[str, Any] = {"x-own-trace": _TRACEPARENT}
    link = creation_link(headers)
    assert link is not None
    assert f"{link[0].context.trace_id:032x}" == _TRACEPARENT.split("-")[1]
    assert extract(headers) != Context()


def test_a_composite_is_trusted_only_when_every_part_is() -> None:
    saved = propagate.get_global_textmap()
    try:
        propagate.set_global_textmap(
            CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
        )
        assert not block_may_carry_context(_block("X-Mine: 2"))
        propagate.set_global_textmap(
            CompositePropagator([TraceContextTextMapPropagator(), OwnHeaderPropagator()])
        )
        assert block_may_carry_context(_block("X-Mine: 2"))
        assert creation_link({"x-own-trace": _TRACEPARENT}) is not None
    finally:
        propagate.set_global_textmap(saved)


def test_header_names_are_matched_without_regard_to_case() -> None:
    for name in ("traceparent", "Traceparent", "TRACEPARENT"):
        link = creation_link({name: _TRACEPARENT, "X-Mine": "1"})
        assert link is not None, name
    assert creation_link({"X-Mine": "1"}) is None
    assert extract({"X-Mine": "1"}) == Context()
