"""Options and offsets of the ``liftbridge`` data source (pure: no pyspark, no I/O).

Offsets follow Spark's Kafka source, per partition:

- ``startingOffsets``: ``earliest``, ``latest``, or JSON ``{"0": 5, "1": -2}`` (also
  ``{"<stream>": {"0": 5}}`` as Kafka writes it) giving the *first* offset to
  read per partition; ``-2`` means earliest, ``-1`` latest. Partitions left out
  of the JSON start at the earliest offset. Without the option a batch read
  starts at the earliest offsets, a streaming query at the latest (as Kafka's).
- ``endingOffsets`` (batch): ``latest`` or JSON giving the *last* offset to read
  (inclusive, as Liftbridge's ``stop_offset``); ``-1`` means latest. Latest is
  the partition's high watermark when the query is planned (the newest
  committed offset; nothing past it can be read yet).
- Checkpointed stream offsets are ``{"stream": <name>, "offsets": {"<p>": next}}``
  where ``next`` is the first offset not yet covered; a micro-batch reads
  ``[start[p], end[p] - 1]`` of every partition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from aioclients.spark._errors import DataSourceOptionError

__all__ = (
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "cap_offsets",
    "checkpoint_offsets",
    "parse_brokers",
    "parse_offsets",
    "parse_partitions",
    "resolve_end",
    "resolve_start",
    "to_checkpoint",
)

EARLIEST = -2
LATEST = -1
_WORDS = {"earliest": EARLIEST, "latest": LATEST}

#: A whole-stream position (EARLIEST or LATEST) or per-partition offsets.
OffsetSpec = int | dict[int, int]


def parse_brokers(raw: str | None) -> list[str]:
    """``brokers``: a comma list of ``host:port``."""
    example = '.option("brokers", "127.0.0.1:9292,127.0.0.1:9293")'
    if raw is None or not raw.strip():
        raise DataSourceOptionError(
            "the liftbridge data source needs the option 'brokers' (comma-separated "
            f"host:port of Liftbridge brokers); add {example}"
        )
    brokers = [b.strip() for b in raw.split(",") if b.strip()]
    for broker in brokers:
        host, sep, port = broker.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DataSourceOptionError(
                f"option 'brokers': {broker!r} is not host:port; use {example}"
            )
    return brokers


def parse_partitions(raw: str | None, available: Iterable[int], stream: str) -> list[int]:
    """``partitions``: a comma list of partition ids (default: every partition)."""
    existing = sorted(available)
    if raw is None or not raw.strip():
        return existing
    chosen: list[int] = []
    for part in raw.split(","):
        text = part.strip()
        if not text:
            continue
        if not text.isdigit():
            raise DataSourceOptionError(
                f"option 'partitions': {text!r} is not a partition number; "
                'use a comma list such as .option("partitions", "0,1") or leave it out for all'
            )
        number = int(text)
        if number not in existing:
            raise DataSourceOptionError(
                f"option 'partitions': stream {stream!r} has no partition {number} "
                f"(it has {existing}); pick from those or leave the option out"
            )
        if number not in chosen:
            chosen.append(number)
    if not chosen:
        raise DataSourceOptionError(
            "option 'partitions' names no partition; leave it out to read all of them"
        )
    return sorted(chosen)


def parse_offsets(
    name: str, raw: str | None, *, default: int, words: tuple[str, ...], stream: str
) -> OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: a word of ``words`` or per-partition JSON."""
    allowed = {_WORDS[w] for w in words}
    example = f'.option("{name}", \'{{"0": 5, "1": -2}}\')'
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if text.lower() in words:
        return _WORDS[text.lower()]
    choices = " or ".join(repr(w) for w in words)
    try:
        parsed = json.loads(text)
    except ValueError:
        raise DataSourceOptionError(
            f"option {name!r} must be {choices} or JSON offsets per partition, got {raw!r}; "
            f"e.g. {example}"
        ) from None
    if isinstance(parsed, dict) and list(parsed) == [stream] and isinstance(parsed[stream], dict):
        parsed = parsed[stream]  # Kafka's {"topic": {"0": 5}}
    if not isinstance(parsed, dict) or not parsed:
        raise DataSourceOptionError(
            f"option {name!r}: JSON offsets must be an object of partition to offset, "
            f"got {raw!r}; e.g. {example}"
        )
    offsets: dict[int, int] = {}
    for key, value in parsed.items():
        if not isinstance(key, str) or not key.isdigit():
            raise DataSourceOptionError(
                f"option {name!r}: {key!r} is not a partition number; e.g. {example}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < min(allowed | {0}):
            special = ", ".join(f"{v} for {w}" for w, v in _WORDS.items() if v in allowed)
            raise DataSourceOptionError(
                f"option {name!r}: partition {key} has offset {value!r}; offsets are "
                f"integers >= 0 ({special}); e.g. {example}"
            )
        offsets[int(key)] = value
    return offsets


def _check_partitions(name: str, spec: OffsetSpec, partitions: list[int], stream: str) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(partitions))
        if unknown:
            raise DataSourceOptionError(
                f"option {name!r} names partition(s) {unknown} that stream {stream!r} "
                f"does not have or that are not read (partitions {partitions}); "
                "drop them from the JSON"
            )


def resolve_start(
    spec: OffsetSpec,
    high_watermarks: Mapping[int, int],
    *,
    stream: str,
    earliest: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """The first offset to read per partition; ``high_watermarks`` gives the partitions.

    ``earliest`` (the oldest offset each partition still keeps) is where ``earliest``
    starts; 0 when not given.
    """
    partitions = sorted(high_watermarks)
    _check_partitions("startingOffsets", spec, partitions, stream)
    out: dict[int, int] = {}
    for p in partitions:
        value = spec.get(p, EARLIEST) if isinstance(spec, dict) else spec
        if value == EARLIEST:
            out[p] = 0 if earliest is None else earliest.get(p, 0)
        elif value == LATEST:
            out[p] = high_watermarks[p] + 1
        else:
            out[p] = value
    return out


def resolve_end(
    spec: OffsetSpec, high_watermarks: Mapping[int, int], *, stream: str
) -> dict[int, int]:
    """The last offset to read (inclusive) per partition."""
    partitions = sorted(high_watermarks)
    _check_partitions("endingOffsets", spec, partitions, stream)
    out: dict[int, int] = {}
    for p in partitions:
        value = spec.get(p, LATEST) if isinstance(spec, dict) else spec
        out[p] = high_watermarks[p] if value == LATEST else value
    return out


def cap_offsets(start: Mapping[int, int], end: Mapping[int, int], limit: int) -> dict[int, int]:
    """Move each ``end`` (exclusive) back so that at most ``limit`` offsets are covered.

    The budget is shared out evenly between the partitions that have something
    to read (a partition that needs less gives its share to the others), so a
    busy partition cannot starve a quiet one. At least one offset is covered
    whenever anything is available.
    """
    pending = {p: max(0, end[p] - start[p]) for p in end}
    take = dict.fromkeys(end, 0)
    budget = limit
    while budget > 0:
        active = [p for p in sorted(pending) if pending[p] > take[p]]
        if not active:
            break
        share = max(1, budget // len(active))
        for p in active:
            step = min(share, pending[p] - take[p], budget)
            take[p] += step
            budget -= step
            if budget == 0:
                break
    return {p: start[p] + take[p] for p in end}


def to_checkpoint(
    stream: str, offsets: Mapping[int, int], created: int | None = None
) -> dict[str, Any]:
    """The JSON-able stream offset Spark stores in the checkpoint.

    ``created`` (the stream's creation timestamp, ns) tells a stream deleted and
    recreated under a query (offsets starting again at 0) from the same stream.
    """
    out: dict[str, Any] = {
        "stream": stream,
        "offsets": {str(p): offsets[p] for p in sorted(offsets)},
    }
    if created:
        out["created"] = created
    return out


def checkpoint_offsets(offset: Mapping[str, Any], stream: str) -> dict[int, int]:
    """Per-partition next offsets of a checkpointed offset (checked against ``stream``)."""
    raw = offset.get("offsets")
    if offset.get("stream") != stream or not isinstance(raw, dict):
        raise DataSourceOptionError(
            f"the checkpoint's offset {dict(offset)} is not of liftbridge stream {stream!r}; "
            "use a new checkpointLocation for a different stream"
        )
    out: dict[int, int] = {}
    for key, value in raw.items():
        if not str(key).isdigit() or isinstance(value, bool) or not isinstance(value, int):
            raise DataSourceOptionError(
                f"the checkpoint's offset {dict(offset)} is malformed; use a new checkpointLocation"
            )
        out[int(key)] = value
    return out
