"""NATS JetStream on asyncio (ADR-37 simplified API, ADR-31 Direct Get, ADR-42).

```python
async with await connect("nats://127.0.0.1:4222") as js:
    stream = await js.create_stream("ORDERS", subjects=["orders.>"])
    ack = await js.publish("orders.new", b"{...}", msg_id="order-1")
    msg = await stream.direct_get(last_by_subj="orders.new")
```
"""

import importlib
from typing import TYPE_CHECKING

from aioclients._errors import name_public_module as _name_public_module
from aioclients.jetstream._errors import (
    APITimeoutError,
    BatchAbortedError,
    BatchTimeoutError,
    BucketNotFoundError,
    BucketSealedError,
    ConsumerDeletedError,
    ConsumerExistsError,
    ConsumerNotFoundError,
    DigestMismatchError,
    DirectGetUnavailableError,
    JetStreamClosedError,
    JetStreamConnectError,
    JetStreamError,
    JetStreamNotEnabledError,
    KeyDeletedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyWrongRevisionError,
    LinkIsABucketError,
    MaxPayloadError,
    MessageAlreadyAckedError,
    MessageNotFoundError,
    NoHeartbeatError,
    NoMessagesError,
    NoStreamResponseError,
    ObjectDeletedError,
    ObjectExistsError,
    ObjectIncompleteError,
    ObjectNotFoundError,
    ServerTooOldError,
    StreamNameInUseError,
    StreamNotFoundError,
    TooManySubjectsError,
    WrongExpectedStreamError,
    WrongLastMsgIdError,
    WrongLastSequenceError,
)
from aioclients.jetstream._models import (
    AccountInfo,
    ConsumerInfo,
    ConsumerPause,
    JsonObject,
    PubAck,
    SequenceInfo,
    StoredMessage,
    StreamInfo,
    StreamState,
)
from aioclients.jetstream._protocol._batch import BatchAck
from aioclients.jetstream._protocol._kv import KeyValueEntry
from aioclients.jetstream._protocol._metadata import MsgMetadata, SequencePair
from aioclients.jetstream._protocol._objstore import ObjectInfo, ObjectLink
from aioclients.jetstream._protocol._ordered import ConsumerReset
from aioclients.jetstream._protocol._pull import (
    Disconnected,
    HeartbeatMissed,
    Pinned,
    Reconnected,
    StatusWarning,
    Unpinned,
)

if TYPE_CHECKING:
    from aioclients.jetstream._consume import (
        ConsumeEvent,
        ConsumeStatistics,
        FetchResult,
        MessageStream,
    )
    from aioclients.jetstream._consumer import Consumer
    from aioclients.jetstream._context import JetStream, connect
    from aioclients.jetstream._kv import KeyLister, KeyValue, KeyValueStatus, KeyWatcher
    from aioclients.jetstream._message import Msg
    from aioclients.jetstream._objstore import (
        ObjectLister,
        ObjectReader,
        ObjectStore,
        ObjectStoreStatus,
        ObjectWatcher,
    )
    from aioclients.jetstream._ordered import (
        OrderedConsumeEvent,
        OrderedConsumer,
        OrderedFetch,
        OrderedMessageStream,
    )
    from aioclients.jetstream._push import PushConsumer, PushMessageStream
    from aioclients.jetstream._stream import DirectGetBatch, Stream

# The client's classes load on first use (PEP 562): most of their modules import
# nats-py, and aiohttp through it, about 0.3 s. Code that needs only the errors, the
# models or the pure protocol modules (Spark's Python workers reading or writing through
# their own lean connection) does not pay for them. A name added here is also imported
# under TYPE_CHECKING above (mypy checks __all__; tests/test_structure.py resolves it).
_LAZY: dict[str, str] = {
    "ConsumeEvent": "aioclients.jetstream._consume",
    "ConsumeStatistics": "aioclients.jetstream._consume",
    "FetchResult": "aioclients.jetstream._consume",
    "MessageStream": "aioclients.jetstream._consume",
    "Consumer": "aioclients.jetstream._consumer",
    "JetStream": "aioclients.jetstream._context",
    "connect": "aioclients.jetstream._context",
    "KeyLister": "aioclients.jetstream._kv",
    "KeyValue": "aioclients.jetstream._kv",
    "KeyValueStatus": "aioclients.jetstream._kv",
    "KeyWatcher": "aioclients.jetstream._kv",
    "Msg": "aioclients.jetstream._message",
    "ObjectLister": "aioclients.jetstream._objstore",
    "ObjectReader": "aioclients.jetstream._objstore",
    "ObjectStore": "aioclients.jetstream._objstore",
    "ObjectStoreStatus": "aioclients.jetstream._objstore",
    "ObjectWatcher": "aioclients.jetstream._objstore",
    "OrderedConsumeEvent": "aioclients.jetstream._ordered",
    "OrderedConsumer": "aioclients.jetstream._ordered",
    "OrderedFetch": "aioclients.jetstream._ordered",
    "OrderedMessageStream": "aioclients.jetstream._ordered",
    "PushConsumer": "aioclients.jetstream._push",
    "PushMessageStream": "aioclients.jetstream._push",
    "DirectGetBatch": "aioclients.jetstream._stream",
    "Stream": "aioclients.jetstream._stream",
}

__all__ = (
    "APITimeoutError",
    "AccountInfo",
    "BatchAbortedError",
    "BatchAck",
    "BatchTimeoutError",
    "BucketNotFoundError",
    "BucketSealedError",
    "ConsumeEvent",
    "ConsumeStatistics",
    "Consumer",
    "ConsumerDeletedError",
    "ConsumerExistsError",
    "ConsumerInfo",
    "ConsumerNotFoundError",
    "ConsumerPause",
    "ConsumerReset",
    "DigestMismatchError",
    "DirectGetBatch",
    "DirectGetUnavailableError",
    "Disconnected",
    "FetchResult",
    "HeartbeatMissed",
    "JetStream",
    "JetStreamClosedError",
    "JetStreamConnectError",
    "JetStreamError",
    "JetStreamNotEnabledError",
    "JsonObject",
    "KeyDeletedError",
    "KeyExistsError",
    "KeyLister",
    "KeyNotFoundError",
    "KeyValue",
    "KeyValueEntry",
    "KeyValueStatus",
    "KeyWatcher",
    "KeyWrongRevisionError",
    "LinkIsABucketError",
    "MaxPayloadError",
    "MessageAlreadyAckedError",
    "MessageNotFoundError",
    "MessageStream",
    "Msg",
    "MsgMetadata",
    "NoHeartbeatError",
    "NoMessagesError",
    "NoStreamResponseError",
    "ObjectDeletedError",
    "ObjectExistsError",
    "ObjectIncompleteError",
    "ObjectInfo",
    "ObjectLink",
    "ObjectLister",
    "ObjectNotFoundError",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreStatus",
    "ObjectWatcher",
    "OrderedConsumeEvent",
    "OrderedConsumer",
    "OrderedFetch",
    "OrderedMessageStream",
    "Pinned",
    "PubAck",
    "PushConsumer",
    "PushMessageStream",
    "Reconnected",
    "SequenceInfo",
    "SequencePair",
    "ServerTooOldError",
    "StatusWarning",
    "StoredMessage",
    "Stream",
    "StreamInfo",
    "StreamNameInUseError",
    "StreamNotFoundError",
    "StreamState",
    "TooManySubjectsError",
    "Unpinned",
    "WrongExpectedStreamError",
    "WrongLastMsgIdError",
    "WrongLastSequenceError",
    "connect",
)


if not TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles. (They are all imported above, none of them lazily.)
_name_public_module(__name__, {**globals(), "__all__": tuple(n for n in __all__ if n not in _LAZY)})
