"""A consumer handle (ADR-37 "Consumers"): info, delete, unpin.

Message consumption (``next``, ``fetch``, ``consume``) builds on this class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aioclients.jetstream._models import ConsumerInfo

if TYPE_CHECKING:
    from aioclients.jetstream._context import JetStream

__all__ = ("Consumer",)


class Consumer:
    """A JetStream consumer. Obtain one from ``JetStream`` or ``Stream``."""

    def __init__(self, js: JetStream, stream_name: str, name: str, info: ConsumerInfo) -> None:
        self._js = js
        self.stream_name = stream_name
        self.name = name
        self.cached_info = info

    def __repr__(self) -> str:
        return f"<Consumer {self.stream_name}/{self.name}>"

    async def info(self) -> ConsumerInfo:
        """Fetch fresh info (also stored in ``cached_info``).

        Raises:
            ConsumerNotFoundError: the consumer is gone.
        """
        self.cached_info = await self._js.consumer_info(self.stream_name, self.name)
        return self.cached_info

    async def delete(self) -> None:
        """Delete this consumer (raises ``ConsumerNotFoundError`` if gone already)."""
        await self._js.delete_consumer(self.stream_name, self.name)

    async def unpin(self, group: str) -> None:
        """ADR-42: release the client pinned to ``group``."""
        await self._js.unpin_consumer(self.stream_name, self.name, group)
