"""asyncio-native Liftbridge client (in progress; see API.md "Liftbridge")."""

__all__ = ()
