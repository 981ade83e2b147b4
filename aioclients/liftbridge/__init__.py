"""Liftbridge on asyncio (gRPC ``grpc.aio``, liftbridge-api v1.9).

```python
async with await connect(["127.0.0.1:9292"]) as client:
    await client.create_stream("orders", "orders-stream", partitions=3)
    ack = await client.publish(
        "orders-stream", b"{...}", key=b"id-1", partitioner="key"
    )
    earliest = StartPosition.EARLIEST
    async with client.subscribe("orders-stream", start_at=earliest) as sub:
        async for msg in sub:
            ...
```
"""

from aioclients._errors import name_public_module as _name_public_module
from aioclients.liftbridge._client import Client, ConsumerGroupJoin, connect
from aioclients.liftbridge._consumer import GroupConsumer
from aioclients.liftbridge._errors import (
    EnvelopeError,
    IncorrectOffsetError,
    LiftbridgeClosedError,
    LiftbridgeConnectError,
    LiftbridgeError,
    LiftbridgeServerError,
    LiftbridgeTimeoutError,
    NoSuchConsumerGroupError,
    NoSuchPartitionError,
    NoSuchStreamError,
    PartitionPausedError,
    ReadonlyPartitionError,
    SegmentDeletedError,
    StreamDeletedError,
    StreamExistsError,
    SubscriptionLostError,
)
from aioclients.liftbridge._protocol._envelope import new_message, unmarshal_ack, unmarshal_message
from aioclients.liftbridge._protocol._metadata import (
    BrokerInfo,
    Metadata,
    PartitionInfo,
    StreamInfo,
)
from aioclients.liftbridge._protocol._partition import (
    PartitionByKey,
    PartitionByRoundRobin,
    Partitioner,
)
from aioclients.liftbridge._protocol._types import (
    Ack,
    AckPolicy,
    Message,
    StartPosition,
    StopPosition,
)
from aioclients.liftbridge._subscription import Subscription

__all__ = (
    "Ack",
    "AckPolicy",
    "BrokerInfo",
    "Client",
    "ConsumerGroupJoin",
    "EnvelopeError",
    "GroupConsumer",
    "IncorrectOffsetError",
    "LiftbridgeClosedError",
    "LiftbridgeConnectError",
    "LiftbridgeError",
    "LiftbridgeServerError",
    "LiftbridgeTimeoutError",
    "Message",
    "Metadata",
    "NoSuchConsumerGroupError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "PartitionByKey",
    "PartitionByRoundRobin",
    "PartitionInfo",
    "Partitioner",
    "PartitionPausedError",
    "ReadonlyPartitionError",
    "StartPosition",
    "StopPosition",
    "SegmentDeletedError",
    "StreamDeletedError",
    "StreamExistsError",
    "StreamInfo",
    "Subscription",
    "SubscriptionLostError",
    "connect",
    "new_message",
    "unmarshal_ack",
    "unmarshal_message",
)


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles.
_name_public_module(__name__, globals())
