"""Fixtures shared by the Key-Value tests: a bucket name per test, and a bucket."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from aioclients.jetstream import BucketNotFoundError, JetStream, KeyValue


@pytest.fixture
def bucket(unique_name: str) -> str:
    """A bucket name of this test's own (valid: no dots, at most 60 characters)."""
    return unique_name.replace(".", "_")[-60:]


@pytest.fixture
async def kv(js: JetStream, bucket: str) -> AsyncIterator[KeyValue]:
    """The bucket ``bucket`` with a history of 5, deleted after the test."""
    store = await js.create_key_value(bucket, history=5)
    try:
        yield store
    finally:
        with contextlib.suppress(BucketNotFoundError):
            await js.delete_key_value(bucket)
