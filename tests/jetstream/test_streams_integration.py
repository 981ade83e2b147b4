"""Stream management and stored-message access against a real nats-server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from support import WaitFor

from aioclients import AioClientsError, InvalidArgumentError
from aioclients.jetstream import (
    AccountInfo,
    JetStream,
    JetStreamError,
    MessageNotFoundError,
    Stream,
    StreamInfo,
    StreamNameInUseError,
    StreamNotFoundError,
)

pytestmark = pytest.mark.timeout(60)


async def _fill(js: JetStream, subject: str, count: int, prefix: bytes = b"m") -> list[int]:
    seqs = []
    for i in range(count):
        ack = await js.publish(subject, prefix + str(i).encode())
        seqs.append(ack.seq)
    return seqs


# -- create ----------------------------------------------------------------------------------


async def test_create_stream_with_subjects(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(
        unique_name, subjects=[f"{unique_name}.a", f"{unique_name}.b.>"]
    )

    assert isinstance(stream, Stream)
    assert stream.name == unique_name
    info = stream.cached_info
    assert isinstance(info, StreamInfo)
    assert info.name == unique_name
    assert info.config.subjects == [f"{unique_name}.a", f"{unique_name}.b.>"]
    assert info.state.messages == 0
    assert info.created is not None
    assert info.created.tzinfo is not None

    ack = await js.publish(f"{unique_name}.b.x.y", b"hello")
    assert ack.stream == unique_name
    assert ack.seq == 1


async def test_create_stream_default_subjects_is_the_name(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name)

    assert stream.cached_info.config.subjects == [unique_name]
    ack = await js.publish(unique_name, b"x")
    assert (ack.stream, ack.seq) == (unique_name, 1)
    assert (await stream.info()).state.messages == 1


async def test_create_stream_durations_are_seconds(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(
        unique_name,
        subjects=[f"{unique_name}.>"],
        max_age=60,
        duplicate_window=timedelta(seconds=1.5),
    )

    cfg = stream.cached_info.config
    assert cfg.max_age == 60.0
    assert isinstance(cfg.max_age, float)
    assert cfg.duplicate_window == 1.5
    # Nanoseconds on the wire, as the server reports them.
    raw_cfg = stream.cached_info.raw["config"]
    assert raw_cfg["max_age"] == 60_000_000_000
    assert raw_cfg["duplicate_window"] == 1_500_000_000
    # And what a fresh lookup reports.
    fresh = await js.stream(unique_name)
    assert fresh.cached_info.config.max_age == 60.0


async def test_nested_config_durations(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(
        unique_name,
        subjects=[f"{unique_name}.>"],
        consumer_limits={"inactive_threshold": 30, "max_ack_pending": 10},
    )

    limits = stream.cached_info.config.consumer_limits
    assert limits.inactive_threshold == 30.0
    assert limits.max_ack_pending == 10
    assert stream.cached_info.raw["config"]["consumer_limits"] == {
        "inactive_threshold": 30_000_000_000,
        "max_ack_pending": 10,
    }


async def test_create_stream_subjects_must_be_a_list(js: JetStream, unique_name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        await js.create_stream(unique_name, subjects=f"{unique_name}.>")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await js.create_stream(unique_name, subjects=[f"{unique_name}.>.x"])
    with pytest.raises(InvalidArgumentError):
        await js.create_stream(unique_name, max_age=-1)
    with pytest.raises(StreamNotFoundError):
        await js.stream(unique_name)  # nothing reached the server


async def test_create_same_config_twice_is_idempotent(js: JetStream, unique_name: str) -> None:
    config = {"subjects": [f"{unique_name}.>"], "max_msgs": 100, "max_age": 3600}
    first = await js.create_stream(unique_name, **config)
    await js.publish(f"{unique_name}.x", b"kept")

    second = await js.create_stream(unique_name, **config)

    assert second.name == first.name
    assert second.cached_info.created == first.cached_info.created
    assert second.cached_info.config.max_msgs == 100
    # The existing stream was returned, not recreated: its message is still there.
    assert second.cached_info.state.messages == 1
    names = [n async for n in js.stream_names(subject=f"{unique_name}.>")]
    assert names == [unique_name]


async def test_create_with_different_config_raises_name_in_use(
    js: JetStream, unique_name: str
) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], max_msgs=100)

    with pytest.raises(StreamNameInUseError) as excinfo:
        await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], max_msgs=5)

    assert isinstance(excinfo.value, JetStreamError)
    assert excinfo.value.err_code == 10058
    # The original config is untouched.
    assert (await js.stream(unique_name)).cached_info.config.max_msgs == 100


async def test_create_stream_invalid_name_is_rejected_client_side(js: JetStream) -> None:
    for bad in ("", "a.b", "a b", "a*", "a>"):
        with pytest.raises(InvalidArgumentError):
            await js.create_stream(bad)


# -- update / lookup / delete ------------------------------------------------------------------


async def test_update_stream_merges_config(js: JetStream, unique_name: str) -> None:
    await js.create_stream(
        unique_name, subjects=[f"{unique_name}.>"], max_age=600, description="orders"
    )

    updated = await js.update_stream(unique_name, max_msgs=3)

    cfg = updated.cached_info.config
    assert cfg.max_msgs == 3
    # Keys not given are kept, not reset to defaults.
    assert cfg.subjects == [f"{unique_name}.>"]
    assert cfg.max_age == 600.0
    assert cfg.description == "orders"
    # The new limit is in force on the server.
    await _fill(js, f"{unique_name}.x", 5)
    state = (await updated.info()).state
    assert state.messages == 3
    assert state.first_seq == 3

    # Durations given to update are seconds too.
    longer = await js.update_stream(unique_name, max_age=1200)
    assert longer.cached_info.config.max_age == 1200.0
    assert longer.cached_info.raw["config"]["max_age"] == 1_200_000_000_000
    assert longer.cached_info.config.max_msgs == 3


async def test_update_missing_stream_raises_not_found(js: JetStream, unique_name: str) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.update_stream(unique_name, max_msgs=3)


async def test_stream_lookup(js: JetStream, unique_name: str) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"], description="lookup")

    stream = await js.stream(unique_name)

    assert stream.name == unique_name
    assert stream.cached_info.config.description == "lookup"


async def test_stream_lookup_missing_raises_not_found(js: JetStream, unique_name: str) -> None:
    with pytest.raises(StreamNotFoundError) as excinfo:
        await js.stream(unique_name)
    assert excinfo.value.code == 404
    assert excinfo.value.err_code == 10059
    assert isinstance(excinfo.value, AioClientsError)


async def test_delete_stream(js: JetStream, unique_name: str) -> None:
    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])

    await js.delete_stream(unique_name)

    with pytest.raises(StreamNotFoundError):
        await js.stream(unique_name)
    assert [n async for n in js.stream_names(subject=f"{unique_name}.>")] == []


async def test_delete_unknown_stream_raises_not_found(js: JetStream, unique_name: str) -> None:
    with pytest.raises(StreamNotFoundError):
        await js.delete_stream(unique_name)


async def test_list_streams_and_stream_names(js: JetStream, unique_name: str) -> None:
    names = [f"{unique_name}_{suffix}" for suffix in ("A", "B", "C")]
    for name, suffix in zip(names, ("a", "b", "c"), strict=True):
        await js.create_stream(name, subjects=[f"{unique_name}.{suffix}.>"])

    all_names = [n async for n in js.stream_names()]
    assert set(names) <= set(all_names)
    assert len(all_names) == len(set(all_names))  # paging yields no duplicates

    infos = [i async for i in js.list_streams(subject=f"{unique_name}.>")]
    assert sorted(i.name for i in infos) == names
    assert all(isinstance(i, StreamInfo) for i in infos)

    only_b = [n async for n in js.stream_names(subject=f"{unique_name}.b.x")]
    assert only_b == [names[1]]
    only_c = [i.config.name async for i in js.list_streams(subject=f"{unique_name}.c.>")]
    assert only_c == [names[2]]
    none = [n async for n in js.stream_names(subject=f"{unique_name}.zzz")]
    assert none == []


async def test_list_streams_pages_past_the_server_limit(js: JetStream, unique_name: str) -> None:
    # The server answers STREAM.LIST in pages of 256 (STREAM.NAMES in pages of 1024).
    names = [f"{unique_name}_{i:03d}" for i in range(300)]
    for i, name in enumerate(names):
        await js.create_stream(name, subjects=[f"{unique_name}.{i}"], storage="memory")

    infos = [i async for i in js.list_streams(subject=f"{unique_name}.>")]
    listed = [n async for n in js.stream_names(subject=f"{unique_name}.>")]

    assert sorted(i.name for i in infos) == names
    assert sorted(listed) == names


async def test_info_reports_state(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    before = stream.cached_info
    await _fill(js, f"{unique_name}.a", 2)
    await _fill(js, f"{unique_name}.b", 1)

    info = await stream.info()

    assert stream.cached_info is info
    assert before.state.messages == 0
    assert info.state.messages == 3
    assert info.state.first_seq == 1
    assert info.state.last_seq == 3
    assert info.state.num_subjects == 2
    assert info.state.bytes > 0
    assert info.state.first_ts is not None
    assert info.state.first_ts.tzinfo is not None
    assert info.state.last_ts is not None
    assert info.state.last_ts >= info.state.first_ts

    detailed = await stream.info(subjects_filter=f"{unique_name}.>")
    assert detailed.state.subjects == {f"{unique_name}.a": 2, f"{unique_name}.b": 1}


# -- purge ---------------------------------------------------------------------------------


async def test_purge_by_subject(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 3)
    await _fill(js, f"{unique_name}.b", 2)

    purged = await stream.purge(subject=f"{unique_name}.a")

    assert purged == 3
    info = await stream.info(subjects_filter=f"{unique_name}.>")
    assert info.state.messages == 2
    assert info.state.subjects == {f"{unique_name}.b": 2}
    with pytest.raises(MessageNotFoundError):
        await stream.get_msg(last_by_subj=f"{unique_name}.a")


async def test_purge_up_to_seq(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 5)

    purged = await stream.purge(seq=3)

    assert purged == 2  # sequences 1 and 2; 3 is the new first
    state = (await stream.info()).state
    assert (state.messages, state.first_seq, state.last_seq) == (3, 3, 5)


async def test_purge_keep(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 5)

    purged = await stream.purge(keep=2)

    assert purged == 3
    state = (await stream.info()).state
    assert (state.messages, state.first_seq, state.last_seq) == (2, 4, 5)


async def test_purge_everything(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 4)

    assert await stream.purge() == 4
    state = (await stream.info()).state
    assert state.messages == 0
    assert state.first_seq == 5  # sequences are not reused


async def test_purge_seq_and_keep_is_invalid(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 3)

    with pytest.raises(InvalidArgumentError):
        await stream.purge(seq=2, keep=1)

    assert (await stream.info()).state.messages == 3  # nothing was purged


# -- stored messages -------------------------------------------------------------------------


async def test_get_msg_by_seq_last_and_next(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    a, b = f"{unique_name}.a", f"{unique_name}.b"
    await js.publish(a, b"a1")  # 1
    await js.publish(b, b"b1")  # 2
    await js.publish(a, b"a2")  # 3
    await js.publish(b, b"b2")  # 4

    by_seq = await stream.get_msg(2)
    assert (by_seq.seq, by_seq.subject, by_seq.data) == (2, b, b"b1")
    assert by_seq.headers is None
    assert by_seq.time.tzinfo is not None
    assert abs(by_seq.time - datetime.now(timezone.utc)) < timedelta(minutes=5)

    last = await stream.get_msg(last_by_subj=a)
    assert (last.seq, last.data) == (3, b"a2")

    first_b = await stream.get_msg(next_by_subj=b)
    assert (first_b.seq, first_b.data) == (2, b"b1")

    next_b_from_3 = await stream.get_msg(3, next_by_subj=b)
    assert (next_b_from_3.seq, next_b_from_3.data) == (4, b"b2")

    wildcard = await stream.get_msg(3, next_by_subj=f"{unique_name}.*")
    assert wildcard.seq == 3


async def test_get_msg_missing_raises_message_not_found(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await js.publish(f"{unique_name}.a", b"x")

    with pytest.raises(MessageNotFoundError) as excinfo:
        await stream.get_msg(99)
    assert excinfo.value.code == 404
    with pytest.raises(MessageNotFoundError):
        await stream.get_msg(last_by_subj=f"{unique_name}.nothing")
    with pytest.raises(MessageNotFoundError):
        await stream.get_msg(2, next_by_subj=f"{unique_name}.a")


async def test_get_msg_arguments_are_validated(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    with pytest.raises(InvalidArgumentError):
        await stream.get_msg()
    with pytest.raises(InvalidArgumentError):
        await stream.get_msg(0)
    with pytest.raises(InvalidArgumentError):
        await stream.get_msg(1, last_by_subj=f"{unique_name}.a")


@pytest.mark.parametrize("erase", [False, True])
async def test_delete_msg(js: JetStream, unique_name: str, erase: bool) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 3)

    await stream.delete_msg(2, erase=erase)

    with pytest.raises(MessageNotFoundError):
        await stream.get_msg(2)
    assert (await stream.get_msg(1)).data == b"m0"
    assert (await stream.get_msg(3)).data == b"m2"
    state = (await stream.info(deleted_details=True)).state
    assert state.messages == 2
    assert state.num_deleted == 1
    assert state.deleted == [2]


async def test_delete_msg_twice_fails(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await _fill(js, f"{unique_name}.a", 2)
    await stream.delete_msg(1)

    with pytest.raises(JetStreamError):
        await stream.delete_msg(1)
    assert (await stream.info()).state.messages == 1


async def test_headers_round_trip_through_get_msg(js: JetStream, unique_name: str) -> None:
    stream = await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    headers: dict[str, str | list[str]] = {"X": ["1", "2"], "Trace-Id": "abc-123", "Empty": ""}

    ack = await js.publish(f"{unique_name}.h", b"body", headers=headers)

    msg = await stream.get_msg(ack.seq)
    assert msg.data == b"body"
    assert msg.headers == {"X": ["1", "2"], "Trace-Id": "abc-123", "Empty": ""}


async def test_account_info(js: JetStream, unique_name: str, wait_for: WaitFor) -> None:
    before = await js.account_info()
    assert isinstance(before, AccountInfo)
    assert before.limits is not None
    assert before.api.total >= 1

    await js.create_stream(unique_name, subjects=[f"{unique_name}.>"])
    await js.publish(f"{unique_name}.big", b"x" * 4096)
    # A single server counts the message at once; a cluster sums its servers' usage,
    # which each of them reports a moment later.
    after = await js.account_info()

    async def counted() -> bool:
        nonlocal after
        after = await js.account_info()
        return after.storage >= before.storage + 4096

    await wait_for(counted, what="the account's storage to count the message")

    assert after.streams >= before.streams + 1
    assert after.api.total > before.api.total
