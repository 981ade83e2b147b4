"""The Liftbridge client's streams keep their user agent and logger on the moved transport."""

from __future__ import annotations

import aioclients._grpc_h2
from aioclients.liftbridge._io._grpc import ChannelFactory, Http2Channel
from aioclients.liftbridge._io._h2 import Http2Channel as OldPathChannel


def test_stream_channels_are_liftbridge_configured_http2_channels() -> None:
    channel = ChannelFactory(None, http2_streams=True).open_stream("broker:9292")
    assert isinstance(channel, aioclients._grpc_h2.Http2Channel)
    assert channel.user_agent == "aioclients-liftbridge"
    assert channel.log.name == "aioclients.liftbridge.h2"
    assert OldPathChannel is Http2Channel
