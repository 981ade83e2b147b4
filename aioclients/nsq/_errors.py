"""NSQ errors, beneath the families of :mod:`aioclients._errors`.

nsqd reports errors as frames of type 1 whose text is ``"<CODE> <description>"``
(for example ``E_BAD_TOPIC PUB topic name "a b" is not valid``); :class:`NSQError`
keeps the code in ``.code``. Only ``E_FIN_FAILED``, ``E_REQ_FAILED`` and
``E_TOUCH_FAILED`` leave the connection open; nsqd closes it after any other.
"""

from __future__ import annotations

from aioclients._errors import (
    ClientClosedError,
    ConnectError,
    InvalidArgumentError,
    LocalProtocolError,
    RemoteProtocolError,
    ServerError,
)

__all__ = (
    "NON_FATAL_ERROR_CODES",
    "MessageRespondedError",
    "NSQClosedError",
    "NSQConnectError",
    "NSQError",
    "NSQInvalidNameError",
    "NSQProtocolError",
    "identify_refused",
    "parse_error_frame",
)

# The only errors after which nsqd keeps the connection open (client library guide,
# "A Brief Interlude on Errors"): they are timing races on a message id.
NON_FATAL_ERROR_CODES = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})


class NSQError(ServerError):
    """nsqd (or nsqd's HTTP API) answered with an error.

    Attributes:
        code: nsqd's error code, e.g. ``"E_BAD_TOPIC"`` (TCP) or ``"INVALID_TOPIC"`` (HTTP).
        description: the rest of the server's text.
        fatal: whether nsqd closes the connection after this error.
        settings_refused: nsqd refused the client's IDENTIFY (a setting such as
            ``heartbeat_interval`` or ``msg_timeout`` outside this nsqd's range); retrying
            cannot help, so a Reader ends its iteration with it.
    """

    code: str
    settings_refused: bool = False

    def __init__(self, code: str, description: str = "", *, hint: str | None = None) -> None:
        text = f"{code} {description}".strip()
        if hint:
            text = f"{text} - {hint}"
        super().__init__(text, code=code)
        self.code = code
        self.description = description
        self.fatal = code not in NON_FATAL_ERROR_CODES


class NSQInvalidNameError(NSQError, InvalidArgumentError):
    """A topic or channel name nsqd refuses, caught before anything is sent.

    Both an :class:`~aioclients.InvalidArgumentError` (the call's argument is wrong)
    and an :class:`NSQError` whose ``code`` is the one nsqd answers such a name with
    (``"E_BAD_TOPIC"``, ``"E_BAD_CHANNEL"``), so code written for either catches it.
    """


class NSQProtocolError(RemoteProtocolError):
    """nsqd (or something pretending to be nsqd) sent bytes that break the NSQ protocol.

    ``offset`` is the position in the connection's (decompressed) byte stream.
    """


class NSQConnectError(ConnectError):
    """An nsqd or nsqlookupd could not be reached, or the connection was lost."""


class NSQClosedError(ClientClosedError):
    """The Reader or Producer was closed; open a new one."""


class MessageRespondedError(LocalProtocolError):
    """finish(), requeue() or touch() on a message that was already finished or requeued."""


def parse_error_frame(data: bytes) -> NSQError:
    """Turn the payload of an error frame into an :class:`NSQError`."""
    text = data.decode("utf-8", "replace")
    code, _, description = text.partition(" ")
    hint = None
    if description.endswith("(TLS required)"):
        # nsqd --tls-required: every command but IDENTIFY before the TLS upgrade
        # (nsqd/protocol_v2.go enforceTLSPolicy)
        hint = "nsqd accepts only TLS clients: pass tls=True or an ssl.SSLContext"
    return NSQError(code or "E_UNKNOWN", description, hint=hint)


# nsqd's IDENTIFY refusals (nsqd/protocol_v2.go IDENTIFY and client_v2.go) and what to
# change: the limits are nsqd's defaults, an operator may have moved the maximums.
_IDENTIFY_HINTS = (
    (
        "IDENTIFY heartbeat interval",
        "nsqd accepts heartbeat_interval from 1 s up to its --max-heartbeat-interval "
        "(60 s by default); pass heartbeat_interval=None for nsqd's default",
    ),
    (
        "IDENTIFY msg timeout",
        "nsqd accepts msg_timeout from 1 s up to its --max-msg-timeout (15 min by default)",
    ),
    (
        "IDENTIFY output buffer size",
        "nsqd accepts output_buffer_size from 64 bytes up to its --max-output-buffer-size "
        "(64 KiB by default)",
    ),
    (
        "IDENTIFY output buffer timeout",
        "nsqd accepts output_buffer_timeout from its --min-output-buffer-timeout (25 ms by "
        "default) up to its --max-output-buffer-timeout (30 s by default)",
    ),
    (
        "IDENTIFY sample rate",
        "sample_rate must be 0 to 99",
    ),
)


def identify_refused(error: NSQError) -> NSQError:
    """``error`` (nsqd's answer to IDENTIFY) with ``settings_refused`` set and a hint
    naming the setting to change: a configuration error, not worth a retry."""
    hint = "nsqd refused this client's IDENTIFY settings; change the setting it names"
    for prefix, text in _IDENTIFY_HINTS:
        if error.description.startswith(prefix):
            hint = text
            break
    refused = NSQError(error.code, error.description, hint=hint)
    refused.settings_refused = True
    return refused
