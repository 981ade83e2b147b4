"""CRC-32C (Castagnoli), the checksum of Liftbridge envelopes.

Pure Python, table driven (reflected polynomial 0x82F63B78, initial value and
final XOR 0xFFFFFFFF, as in RFC 3720). Envelope checksums are only computed by
the NATS-side helpers (``new_message(crc=True)``, ``unmarshal_*``), never on
the gRPC paths, so a byte-at-a-time table is fast enough and needs no compiled
dependency.
"""

from __future__ import annotations

__all__ = ("crc32c",)

_POLY = 0x82F63B78


def _make_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C of ``data``; pass a previous result as ``crc`` to continue it."""
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
