"""The Spark JetStream source keeps server credentials out of its errors (no Spark needed)."""

from __future__ import annotations

import logging
import socket

import pytest

from aioclients import ConnectError
from aioclients.spark._direct_io import DirectGetConnection
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._jetstream import ReadConfig, WriteConfig
from aioclients.spark._protocol._options import OptionReader

PASSWORD = "S3cretPassw0rd"
TOKEN = "s3cr3tT0k3nXYZ"


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize(
    "url",
    ["nats://alice:{}@127.0.0.1:{}", "nats://{}@127.0.0.1:{}", "tls://alice:{}@127.0.0.1:{}"],
)
async def test_direct_get_connection_errors_hide_the_secret(
    caplog: pytest.LogCaptureFixture, url: str
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = TOKEN if url.count(":") == 2 else PASSWORD
    with pytest.raises(ConnectError) as info:
        await DirectGetConnection.open([url.format(secret, _refused_port())], timeout=1)
    assert "127.0.0.1" in str(info.value)
    assert secret not in str(info.value)
    for record in caplog.records:
        assert secret not in record.getMessage()


def test_configs_do_not_print_their_server_urls() -> None:
    servers = (f"nats://alice:{PASSWORD}@127.0.0.1:4222",)
    read = ReadConfig(servers=servers, stream="S", subject=None, batch_size=10, timeout=1.0)
    write = WriteConfig(
        servers=servers, subject=None, timeout=1.0, max_pending=10, data_is_text=False
    )
    assert PASSWORD not in repr(read)
    assert PASSWORD not in repr(write)


def test_a_bad_servers_option_is_not_echoed_with_its_secret() -> None:
    with pytest.raises(DataSourceOptionError) as info:
        OptionReader({"servers": f"http://alice:{PASSWORD}@host:4222"}, "jetstream").servers()
    assert PASSWORD not in str(info.value)
    assert "alice" in str(info.value)
