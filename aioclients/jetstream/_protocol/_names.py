"""Name and subject validation, done client-side so that bad input fails fast
with a message that says what is allowed (the server's answer to a bad name is
often a timeout, as the name ends up inside an API subject)."""

from __future__ import annotations

import re

from aioclients._errors import InvalidArgumentError

__all__ = (
    "validate_consumer_name",
    "validate_filter_subject",
    "validate_group_name",
    "validate_publish_subject",
    "validate_stream_name",
)

# Stream and consumer names become a single token of an API subject, so they may
# not contain subject separators or wildcards, whitespace, or path separators
# (they also name directories in the server's store).
_BAD_NAME_CHARS = re.compile(r"[\s.*>/\\\x00-\x1f\x7f]")
_MAX_NAME_LENGTH = 255
# ADR-42: priority group names.
_GROUP_NAME = re.compile(r"[A-Za-z0-9\-_/=]{1,16}")


def _validate_name(kind: str, name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{kind} name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidArgumentError(f"{kind} name must not be empty")
    if len(name) > _MAX_NAME_LENGTH:
        raise InvalidArgumentError(
            f"{kind} name is {len(name)} characters long; the limit is {_MAX_NAME_LENGTH}"
        )
    bad = _BAD_NAME_CHARS.search(name)
    if bad:
        raise InvalidArgumentError(
            f"invalid {kind} name {name!r}: character {bad.group()!r} at position {bad.start()} "
            "is not allowed (no whitespace, '.', '*', '>', '/' or '\\')"
        )
    return name


def validate_stream_name(name: object) -> str:
    """Return ``name`` if it is a valid stream name, else raise InvalidArgumentError."""
    return _validate_name("stream", name)


def validate_consumer_name(name: object) -> str:
    """Return ``name`` if it is a valid consumer name, else raise InvalidArgumentError."""
    return _validate_name("consumer", name)


def _validate_subject(subject: object, *, wildcards: bool, what: str) -> str:
    if not isinstance(subject, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(subject).__name__}")
    if not subject:
        raise InvalidArgumentError(f"{what} must not be empty")
    if any(c.isspace() for c in subject):
        raise InvalidArgumentError(f"{what} {subject!r} must not contain whitespace")
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise InvalidArgumentError(
                f"{what} {subject!r} has an empty token (leading, trailing or double '.')"
            )
        if token in ("*", ">"):
            if not wildcards:
                raise InvalidArgumentError(
                    f"{what} {subject!r} contains the wildcard {token!r}; publish to a "
                    "concrete subject"
                )
            if token == ">" and i != len(tokens) - 1:
                raise InvalidArgumentError(f"{what} {subject!r}: '>' may only be the last token")
    return subject


# Publishing validates every subject; most programs publish to a few subjects over
# and over, so remember the last ones that passed (bounded).
_valid_publish_subjects: dict[str, None] = {}
_VALID_CACHE_SIZE = 1024


def validate_publish_subject(subject: object) -> str:
    """A subject a message can be published to: non-empty tokens, no wildcards."""
    if isinstance(subject, str) and subject in _valid_publish_subjects:
        return subject
    checked = _validate_subject(subject, wildcards=False, what="subject")
    if len(_valid_publish_subjects) >= _VALID_CACHE_SIZE:
        _valid_publish_subjects.pop(next(iter(_valid_publish_subjects)))
    _valid_publish_subjects[checked] = None
    return checked


def validate_filter_subject(subject: object) -> str:
    """A subject filter: non-empty tokens, ``*`` anywhere, ``>`` last."""
    return _validate_subject(subject, wildcards=True, what="subject filter")


def validate_group_name(group: object) -> str:
    """ADR-42 priority group: 1 to 16 of ``A-Z a-z 0-9 - _ / =``."""
    if not isinstance(group, str) or not _GROUP_NAME.fullmatch(group):
        raise InvalidArgumentError(
            f"invalid priority group name {group!r}: use 1 to 16 characters from "
            "A-Z a-z 0-9 - _ / = (ADR-42)"
        )
    return group
