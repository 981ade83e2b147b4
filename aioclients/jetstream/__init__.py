"""NATS JetStream on asyncio (ADR-37 simplified API, ADR-31 Direct Get, ADR-42).

```python
async with await connect("nats://127.0.0.1:4222") as js:
    stream = await js.create_stream("ORDERS", subjects=["orders.>"])
    ack = await js.publish("orders.new", b"{...}", msg_id="order-1")
    msg = await stream.direct_get(last_by_subj="orders.new")
```
"""

from aioclients._errors import name_public_module as _name_public_module
from aioclients.jetstream._consume import (
    ConsumeEvent,
    ConsumeStatistics,
    FetchResult,
    MessageStream,
)
from aioclients.jetstream._consumer import Consumer
from aioclients.jetstream._context import JetStream, connect
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
from aioclients.jetstream._kv import KeyLister, KeyValue, KeyValueStatus, KeyWatcher
from aioclients.jetstream._message import Msg
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
from aioclients.jetstream._push import PushConsumer, PushMessageStream
from aioclients.jetstream._stream import DirectGetBatch, Stream

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


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles.
_name_public_module(__name__, globals())
