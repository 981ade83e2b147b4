"""asyncio client for NSQ: a consuming :class:`Reader` and TCP/HTTP producers.

```python
async with Reader("events", "archive", lookupd_http_addresses=["127.0.0.1:4161"],
                  max_in_flight=50) as reader:
    async for msg in reader:
        await handle(msg.body)
        await msg.finish()
```
"""

from aioclients._errors import name_public_module as _name_public_module
from aioclients.nsq._errors import (
    MessageRespondedError,
    NSQClosedError,
    NSQConnectError,
    NSQError,
    NSQInvalidNameError,
    NSQProtocolError,
)
from aioclients.nsq._message import Message
from aioclients.nsq._producer import HTTPProducer, Producer
from aioclients.nsq._reader import ConnectionStatistics, Reader, ReaderStatistics

__all__ = (
    "ConnectionStatistics",
    "HTTPProducer",
    "Message",
    "MessageRespondedError",
    "NSQClosedError",
    "NSQConnectError",
    "NSQError",
    "NSQInvalidNameError",
    "NSQProtocolError",
    "Producer",
    "Reader",
    "ReaderStatistics",
)


# Errors carry the name users import them by (aioclients.<package>.XError), in tracebacks
# and in pickles.
_name_public_module(__name__, globals())
