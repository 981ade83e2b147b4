"""asyncio client for NSQ."""

from aioclients.nsq._errors import NSQError, NSQProtocolError

__all__ = ("NSQError", "NSQProtocolError")
