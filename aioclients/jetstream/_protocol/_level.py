"""What the server supports: its version and its JetStream API level (ADR-44).

ADR-44 numbers what a server's JetStream API can do: level 0 before nats-server
2.11, 1 for 2.11, 2 for 2.12, and so on as features are added (2.15.1 reports
5). A server tells its level in the answer to ``$JS.API.INFO`` (``api.level``;
servers before 2.11 leave it out) and its version in the connection's INFO.

An API request that needs a level carries ``Nats-Required-Api-Level``; a server
below it refuses the request with error 10185 ("JetStream minimum api level
required"). Plain publishes are not API requests, and the server ignores that
header on them: what they need is checked against the server's version before
anything is sent. Both checks end in the same words here, naming the feature.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = (
    "REQUIRED_LEVEL_HEADER",
    "Version",
    "api_level_of",
    "format_version",
    "parse_version",
    "shortfall",
)

#: The request header of ADR-44's "Required API level in API calls".
REQUIRED_LEVEL_HEADER = "Nats-Required-Api-Level"

Version = tuple[int, int, int]

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: object) -> Version | None:
    """``(major, minor, patch)`` of a server version such as ``"2.15.1"`` (a
    pre-release or build suffix is ignored); ``None`` when it is not one."""
    if not isinstance(text, str):
        return None
    m = _VERSION.match(text.strip())
    if m is None:
        return None
    return int(m[1]), int(m[2]), int(m[3])


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)


def api_level_of(info: Mapping[str, Any]) -> int:
    """The API level in a ``$JS.API.INFO`` answer (0 where the server reports none)."""
    api = info.get("api")
    level = api.get("level") if isinstance(api, Mapping) else None
    if isinstance(level, int) and not isinstance(level, bool) and level >= 0:
        return level
    return 0


def shortfall(
    feature: str,
    *,
    level: int | None = None,
    have_level: int | None = None,
    version: Version | None = None,
    have_version: Version | None = None,
) -> str | None:
    """Why the server cannot serve ``feature``, or ``None`` when it can.

    ``level`` / ``version`` are what the feature needs; ``have_level`` /
    ``have_version`` what the server has (``None``: not known, which counts as
    too old when something is needed, so that a request is never sent blind).
    """
    needs: list[str] = []
    if version is not None and (have_version is None or have_version < version):
        needs.append(f"nats-server {format_version(version)} or newer")
    if level is not None and (have_level is None or have_level < level):
        needs.append(f"JetStream API level {level} or higher")
    if not needs:
        return None
    has: list[str] = []
    if version is not None:
        has.append(
            f"nats-server {format_version(have_version)}"
            if have_version is not None
            else "a server of unknown version"
        )
    if level is not None:
        has.append(f"API level {have_level}" if have_level is not None else "no API level")
    return f"{feature} needs {' and '.join(needs)}; the server has {', '.join(has)}"
