"""Credentials never reach an error message or a log line: the shared redaction helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aioclients._core import redact_text, redact_url


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("nats://alice:S3cretPassw0rd@127.0.0.1:4222", "nats://alice:***@127.0.0.1:4222"),
        ("nats://s3cr3t-token@127.0.0.1:4222", "nats://***@127.0.0.1:4222"),
        ("nats://:only-a-password@h:1", "nats://***@h:1"),
        ("alice:pw@h:4222", "alice:***@h:4222"),
        ("tok@h:4222", "***@h:4222"),
        ("tls://h:4222", "tls://h:4222"),
        ("127.0.0.1:4150", "127.0.0.1:4150"),
        (
            "http://h:4161/lookup?topic=t&auth_secret=abc",
            "http://h:4161/lookup?topic=t&auth_secret=***",
        ),
        ("ws://u:p@x/y?token=zz#frag", "ws://u:***@x/y?token=***#frag"),
    ],
)
def test_redact_url(address: str, shown: str) -> None:
    assert redact_url(address) == shown


def test_redact_url_shows_only_the_type_of_a_non_string() -> None:
    assert redact_url(b"nats://a:b@h") == "<bytes>"


def test_redact_text_hides_every_url_in_a_message() -> None:
    message = "cannot connect to NATS at nats://alice:pw1@h1:4222, nats://tok@h2:4222: refused"
    assert redact_text(message) == (
        "cannot connect to NATS at nats://alice:***@h1:4222, nats://***@h2:4222: refused"
    )


def test_redact_text_leaves_plain_text_alone() -> None:
    text = "no server answered at 127.0.0.1:4222 within 5.0 s (mail me@example.org)"
    assert redact_text(text) == text


_secret = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=%",
    min_size=6,
    max_size=40,
).filter(lambda s: "'" not in s)


@given(user=st.from_regex(r"[a-z]{1,8}", fullmatch=True), secret=_secret)
def test_no_password_survives(user: str, secret: str) -> None:
    url = f"nats://{user}:{secret}@srv.example:4222"
    assert secret not in redact_url(url)
    assert secret not in redact_text(f"failed: {url}, retrying")
    assert secret not in redact_url(f"{user}:{secret}@srv:4222")


@given(secret=_secret.filter(lambda s: ":" not in s))
def test_no_token_survives(secret: str) -> None:
    assert secret not in redact_url(f"nats://{secret}@srv.example:4222")
