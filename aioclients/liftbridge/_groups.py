"""Consumer-group and cursor calls over the broker layer (arguments already checked).

Used by ``Client`` (its public methods check the arguments, then call these)
and by ``GroupConsumer``. Owns where each call goes: group membership calls to
any broker (:meth:`Brokers.rpc`), assignment fetches to the group's
coordinator (:meth:`Brokers.coordinator_rpc`, no retry: the consumer decides),
cursors to the leader of their ``__cursors`` partition (:meth:`Brokers.leader_rpc`).
Retries are the broker layer's (``_brokers``).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from typing import Any

from aioclients.liftbridge._brokers import Brokers
from aioclients.liftbridge._errors import (
    LiftbridgeError,
    LiftbridgeServerError,
    NoSuchPartitionError,
    NoSuchStreamError,
)
from aioclients.liftbridge._pb import api_pb2 as pb

__all__ = (
    "CURSORS_STREAM",
    "ConsumerGroupJoin",
    "fetch_assignments",
    "fetch_cursor",
    "group_metadata",
    "join_group",
    "leave_group",
    "report_coordinator",
    "set_cursor",
)

log = logging.getLogger("aioclients.liftbridge.client")

CURSORS_STREAM = "__cursors"
# join_group: how long to repeat "consumer group already exists" (two members
# created the group at once; the loser joins the winner's group).
_JOIN_RETRY_TIME = 5.0
_NO_STREAM = ": stream does not exist"
# The least deadline of a SetCursor (seconds): see set_cursor.
SET_CURSOR_TIMEOUT = 25.0


class ConsumerGroupJoin:
    """What ``join_consumer_group`` returns: the coordinator and the group's epoch.

    Attributes:
        coordinator: broker id that hands out the assignments.
        epoch: the group epoch.
        consumer_timeout: seconds without a fetch before the member is evicted.
        coordinator_timeout: seconds after which to report an unresponsive coordinator.
    """

    __slots__ = ("consumer_timeout", "coordinator", "coordinator_timeout", "epoch")

    def __init__(
        self, coordinator: str, epoch: int, consumer_timeout: float, coordinator_timeout: float
    ) -> None:
        self.coordinator = coordinator
        self.epoch = epoch
        self.consumer_timeout = consumer_timeout
        self.coordinator_timeout = coordinator_timeout

    def __repr__(self) -> str:
        return (
            f"ConsumerGroupJoin(coordinator={self.coordinator!r}, epoch={self.epoch}, "
            f"consumer_timeout={self.consumer_timeout}, "
            f"coordinator_timeout={self.coordinator_timeout})"
        )


# -- cursors ----------------------------------------------------------------------------


async def _cursor_rpc(
    brokers: Brokers, method: str, request: Any, what: str, timeout: float | None = None
) -> Any:
    key = f"{request.cursorId},{request.stream},{request.partition}".encode()
    md = await brokers.metadata_with(CURSORS_STREAM)
    info = md.get_stream(CURSORS_STREAM)
    if info is None or not info.partitions:
        # No cursors stream in the metadata: any broker forwards the call.
        return await brokers.rpc(
            method,
            request,
            what=what,
            not_found=NoSuchPartitionError,
            on_stream_channel=True,
            timeout=timeout,
        )
    cursor_partition = zlib.crc32(key) % len(info.partitions)
    return await brokers.leader_rpc(
        CURSORS_STREAM,
        cursor_partition,
        method,
        request,
        what=what,
        on_stream_channel=True,
        timeout=timeout,
    )


async def set_cursor(
    brokers: Brokers, cursor_id: str, stream: str, partition: int, offset: int
) -> None:
    req = pb.SetCursorRequest(cursorId=cursor_id, stream=stream, partition=partition, offset=offset)
    # The broker stores a cursor as a message of the __cursors stream, acked by
    # every replica (AckPolicy ALL; server/cursors.go SetCursor). That stream
    # pauses after a minute without one (cursors.stream.auto.pause.time), and the
    # first message after it resumes waits for the followers' idle fetch, up to
    # clustering.replica.max.idle.wait (10 s): measured 9.1-9.4 s on Liftbridge
    # v1.9.0, on the edge of the default rpc_timeout. connect() gives 25 s unless
    # the caller chose rpc_timeout or cursor_timeout.
    timeout = brokers.cursor_timeout
    if timeout is None:
        timeout = max(brokers.rpc_timeout, SET_CURSOR_TIMEOUT)
    await _cursor_rpc(brokers, "SetCursor", req, f"set_cursor {cursor_id!r}", timeout)


async def fetch_cursor(brokers: Brokers, cursor_id: str, stream: str, partition: int) -> int:
    req = pb.FetchCursorRequest(cursorId=cursor_id, stream=stream, partition=partition)
    resp = await _cursor_rpc(brokers, "FetchCursor", req, f"fetch_cursor {cursor_id!r}")
    return int(resp.offset)


# -- consumer groups --------------------------------------------------------------------


async def join_group(
    brokers: Brokers, group_id: str, consumer_id: str, streams: Sequence[str]
) -> ConsumerGroupJoin:
    req = pb.JoinConsumerGroupRequest(groupId=group_id, consumerId=consumer_id, streams=streams)
    what = f"join_consumer_group {group_id!r}"

    async def lost_race(exc: LiftbridgeError) -> bool:
        # Two members creating a new group at once: the loser is told
        # "consumer group already exists" (FAILED_PRECONDITION); a new
        # attempt joins the group the winner created.
        if not (
            isinstance(exc, LiftbridgeServerError)
            and exc.code == "FAILED_PRECONDITION"
            and "already exists" in str(exc)
        ):
            return False
        log.info("%s: the group was created concurrently; joining it", what)
        return True

    try:
        resp = await brokers.rpc_repeated(
            "JoinConsumerGroup", req, what=what, transient=lost_race, within=_JOIN_RETRY_TIME
        )
    except LiftbridgeServerError as exc:
        # Liftbridge v1.9 refuses a join naming a missing stream with
        # FAILED_PRECONDITION "stream does not exist"; it is a NoSuchStreamError.
        if exc.code == "FAILED_PRECONDITION" and _NO_STREAM in str(exc):
            raise NoSuchStreamError(str(exc), code=exc.code) from None
        raise
    return ConsumerGroupJoin(
        resp.coordinator,
        int(resp.epoch),
        resp.consumerTimeout / 1e9,
        resp.coordinatorTimeout / 1e9,
    )


async def group_metadata(brokers: Brokers, group_id: str) -> tuple[str, int] | None:
    """The group's coordinator and epoch from the metadata (None: unknown group)."""
    resp = await brokers.rpc(
        "FetchMetadata",
        pb.FetchMetadataRequest(groups=[group_id]),
        what=f"fetch_metadata for group {group_id!r}",
    )
    for group in resp.groupMetadata:
        if group.groupId == group_id and group.error == pb.ConsumerGroupMetadata.OK:
            return group.coordinator, int(group.epoch)
    return None


async def fetch_assignments(
    brokers: Brokers, group_id: str, consumer_id: str, epoch: int, coordinator: str
) -> tuple[int, dict[str, list[int]]]:
    """``(epoch, {stream: [partition, ...]})`` from the group's coordinator."""
    req = pb.FetchConsumerGroupAssignmentsRequest(
        groupId=group_id, consumerId=consumer_id, epoch=epoch
    )
    resp = await brokers.coordinator_rpc(
        coordinator,
        "FetchConsumerGroupAssignments",
        req,
        f"fetch_consumer_group_assignments {group_id!r}",
    )
    return int(resp.epoch), {a.stream: list(a.partitions) for a in resp.assignments}


async def report_coordinator(
    brokers: Brokers, group_id: str, consumer_id: str, coordinator: str, epoch: int
) -> None:
    req = pb.ReportConsumerGroupCoordinatorRequest(
        groupId=group_id, consumerId=consumer_id, coordinator=coordinator, epoch=epoch
    )
    await brokers.rpc(
        "ReportConsumerGroupCoordinator",
        req,
        what=f"report_consumer_group_coordinator {group_id!r}",
    )


async def leave_group(brokers: Brokers, group_id: str, consumer_id: str) -> None:
    req = pb.LeaveConsumerGroupRequest(groupId=group_id, consumerId=consumer_id)
    await brokers.rpc("LeaveConsumerGroup", req, what=f"leave_consumer_group {group_id!r}")
