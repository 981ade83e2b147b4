"""What the server supports (ADR-44): versions, API levels and the words of a
shortfall. Pure: no server, no event loop."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients.jetstream import JetStreamError, ServerTooOldError, WrongLastSequenceError
from aioclients.jetstream._errors import api_error
from aioclients.jetstream._protocol._level import (
    REQUIRED_LEVEL_HEADER,
    api_level_of,
    format_version,
    parse_version,
    shortfall,
)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("2.15.1", (2, 15, 1)),
        ("v2.10.22", (2, 10, 22)),
        ("2.12.0-RC.3", (2, 12, 0)),
        ("2.11.4+build.7", (2, 11, 4)),
        (" 2.9.0 ", (2, 9, 0)),
    ],
)
def test_a_server_version_is_read(text: str, version: tuple[int, int, int]) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["", "2.15", "two.15.1", "0.0", None, 2.15])
def test_what_is_not_a_version_reads_as_none(text: object) -> None:
    assert parse_version(text) is None


@given(st.tuples(*[st.integers(0, 10_000)] * 3))
def test_a_formatted_version_reads_back(version: tuple[int, int, int]) -> None:
    assert parse_version(format_version(version)) == version


def test_the_api_level_comes_from_the_info_answer() -> None:
    assert api_level_of({"api": {"level": 5, "total": 3, "errors": 0}}) == 5
    # Servers before 2.11 report no level: level 0 (ADR-44).
    assert api_level_of({"api": {"total": 3, "errors": 0}}) == 0
    assert api_level_of({}) == 0
    # Nonsense is no level either.
    for bad in (-1, "5", True, None, 1.5):
        assert api_level_of({"api": {"level": bad}}) == 0
    assert api_level_of({"api": "5"}) == 0


def test_a_server_that_has_enough_falls_short_of_nothing() -> None:
    assert shortfall("x", level=2, have_level=2) is None
    assert (
        shortfall("x", level=2, have_level=5, version=(2, 12, 0), have_version=(2, 15, 1)) is None
    )
    assert shortfall("x") is None  # nothing needed


def test_a_shortfall_names_the_feature_what_it_needs_and_what_the_server_has() -> None:
    why = shortfall("per-message TTL", version=(2, 11, 0), have_version=(2, 10, 22))
    assert why == (
        "per-message TTL needs nats-server 2.11.0 or newer; the server has nats-server 2.10.22"
    )
    why = shortfall("batched publish", level=2, have_level=1)
    assert why == (
        "batched publish needs JetStream API level 2 or higher; the server has API level 1"
    )
    why = shortfall("counters", level=2, have_level=0, version=(2, 12, 0), have_version=(2, 10, 0))
    assert why is not None
    assert why.startswith("counters needs nats-server 2.12.0 or newer and JetStream API level 2")
    assert why.endswith("the server has nats-server 2.10.0, API level 0")


def test_an_unknown_server_counts_as_too_old() -> None:
    # Never send blind: a version or level that is not known does not satisfy a need.
    why = shortfall("schedules", version=(2, 12, 0), have_version=None)
    assert why == (
        "schedules needs nats-server 2.12.0 or newer; the server has a server of unknown version"
    )
    assert shortfall("schedules", level=1, have_level=None) is not None


@given(
    st.integers(0, 20),
    st.integers(0, 20),
    st.tuples(*[st.integers(0, 5)] * 3),
    st.tuples(*[st.integers(0, 5)] * 3),
)
def test_a_shortfall_is_found_exactly_when_the_server_has_less(
    need: int, have: int, version: tuple[int, int, int], have_version: tuple[int, int, int]
) -> None:
    why = shortfall("f", level=need, have_level=have, version=version, have_version=have_version)
    assert (why is None) == (have >= need and have_version >= version)


@pytest.mark.parametrize("err_code", [10071, 10164])
def test_both_wrong_last_sequence_codes_are_wrong_last_sequence_errors(err_code: int) -> None:
    # 10164: a replicated stream's refusal of an expectation that meets a write
    # still in flight, "wrong last sequence" without the number (nats.go: the same).
    err = api_error(400, err_code, "wrong last sequence")
    assert isinstance(err, WrongLastSequenceError)
    assert (err.code, err.err_code) == (400, err_code)


def test_the_api_level_error_of_the_server_is_server_too_old() -> None:
    # What a server answers a request whose Nats-Required-Api-Level it lacks.
    err = api_error(412, 10185, "JetStream minimum api level required")
    assert isinstance(err, ServerTooOldError)
    assert isinstance(err, JetStreamError)
    assert (err.code, err.err_code) == (412, 10185)
    assert REQUIRED_LEVEL_HEADER == "Nats-Required-Api-Level"
