"""The Spark ``jetstream`` format's TLS options (``tlsCaFile``, ``tlsCertFile``,
``tlsKeyFile``) against a nats-server that requires TLS with client certificates
signed by a private CA (no SparkSession needed)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import trustme

from aioclients import ConnectError, jetstream
from aioclients.spark._direct_io import DirectGetConnection, TlsFiles, read_sequence_range
from aioclients.spark._errors import DataSourceOptionError
from aioclients.spark._jetstream import (
    READ_OPTIONS,
    ReadConfig,
    SequenceRange,
    WriteConfig,
    _publish,
    _read_config,
    _write_config,
    read_partition,
)
from aioclients.spark._protocol._options import OptionReader
from aioclients.spark._stream_read import stream_bounds
from aioclients.testing import NatsServer

pytestmark = pytest.mark.timeout(60)


class Pki:
    def __init__(self, root: Path) -> None:
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("spark-reader@example.com")
        self.ca = str(root / "ca.pem")
        self.server_cert = str(root / "server.pem")
        self.server_key = str(root / "server-key.pem")
        self.client_cert = str(root / "client.pem")
        self.client_key = str(root / "client-key.pem")
        ca.cert_pem.write_to_path(self.ca)
        server.private_key_pem.write_to_path(self.server_key)
        client.private_key_pem.write_to_path(self.client_key)
        for cert, path in ((server, self.server_cert), (client, self.client_cert)):
            for i, pem in enumerate(cert.cert_chain_pems):
                pem.write_to_path(path, append=i > 0)

    @property
    def files(self) -> TlsFiles:
        return TlsFiles(self.ca, self.client_cert, self.client_key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[NatsServer]:
    """A nats-server that requires TLS and a client certificate from the private CA."""
    if os.environ.get("AIOCLIENTS_TEST_NATS_URL"):
        pytest.skip("starts a nats-server with TLS; AIOCLIENTS_TEST_NATS_URL is set")
    config = (
        f'tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}", '
        f'ca_file: "{pki.ca}", verify: true, timeout: 5 }}'
    )
    with NatsServer(config=config) as server:
        yield server


@pytest.fixture(scope="module")
def stream(tls_server: NatsServer, pki: Pki) -> str:
    async def fill() -> None:
        js = await jetstream.connect(tls_server.url, tls=pki.files.context())
        async with js:
            await js.create_stream("TLS", subjects=["tls.>"], allow_direct=True)
            for i in range(10):
                await js.publish(f"tls.{i % 2}", b"m%d" % i)

    asyncio.run(fill())
    return "TLS"


def _config(server: NatsServer, tls: TlsFiles) -> ReadConfig:
    return ReadConfig(
        servers=(server.url,), stream="TLS", subject=None, batch_size=4, timeout=5.0, tls=tls
    )


async def test_the_direct_get_reader_uses_the_private_ca_and_client_certificate(
    tls_server: NatsServer, pki: Pki, stream: str
) -> None:
    conn = await DirectGetConnection.open([tls_server.url], timeout=5, tls=pki.files)
    try:
        seqs = [
            seq
            async for columns in read_sequence_range(
                conn, stream, first=1, last=10, subject=None, batch_size=4
            )
            for seq in map(int, columns.sequences)
        ]
    finally:
        await conn.close()
    assert seqs == list(range(1, 11))


def test_read_partition_and_planning_connect_with_the_tls_options(
    tls_server: NatsServer, pki: Pki, stream: str
) -> None:
    config = _config(tls_server, pki.files)
    bounds = asyncio.run(stream_bounds(config))
    assert (bounds.first, bounds.last) == (1, 10)
    rows = sum(b.num_rows for b in read_partition(SequenceRange(config, 3, 7)))
    assert rows == 5


async def test_the_writer_connects_with_the_tls_options(
    tls_server: NatsServer, pki: Pki, stream: str
) -> None:
    config = WriteConfig(
        servers=(tls_server.url,),
        subject="tls.w",
        timeout=5.0,
        max_pending=10,
        data_is_text=False,
        tls=pki.files,
    )
    batch = pa.record_batch({"data": pa.array([b"a", b"b"], pa.binary())})
    result = await _publish(config, iter([batch]))
    assert result.stored == 2


@pytest.mark.parametrize(
    "which", ["no client certificate", "system CAs only"], ids=["no-cert", "no-ca"]
)
async def test_a_refused_handshake_is_a_connect_error(
    tls_server: NatsServer, pki: Pki, which: str
) -> None:
    files = (
        TlsFiles(ca_file=pki.ca)
        if which == "no client certificate"
        else TlsFiles(cert_file=pki.client_cert, key_file=pki.client_key)
    )
    with pytest.raises(ConnectError):
        await DirectGetConnection.open([tls_server.url], timeout=5, tls=files)


# -- the options ---------------------------------------------------------------------------


def _options(**extra: str) -> dict[str, str]:
    return {"servers": "nats://127.0.0.1:4222", "stream": "S", **extra}


def test_the_options_are_known_and_reach_the_config(pki: Pki) -> None:
    assert {"tlsCaFile", "tlsCertFile", "tlsKeyFile"} <= READ_OPTIONS
    opts = _options(tlsCaFile=pki.ca, tlsCertFile=pki.client_cert, tlsKeyFile=pki.client_key)
    assert _read_config(OptionReader(opts, "jetstream")).tls == pki.files


@pytest.mark.parametrize("option", ["tlsCaFile", "tlsCertFile"])
@pytest.mark.parametrize("problem", ["missing", "not PEM"])
def test_an_unusable_file_names_its_option(
    tmp_path: Path, pki: Pki, option: str, problem: str
) -> None:
    bad = tmp_path / "bad.pem"
    if problem == "not PEM":
        bad.write_bytes(b"\x00\x01 this is not a certificate\n")
    opts = _options(**{option: str(bad)})
    if option == "tlsCertFile":
        opts["tlsKeyFile"] = pki.client_key
    with pytest.raises(DataSourceOptionError, match=option):
        _read_config(OptionReader(opts, "jetstream"))


def test_a_key_that_does_not_match_the_certificate_names_the_options(
    tmp_path: Path, pki: Pki
) -> None:
    opts = _options(tlsCertFile=pki.client_cert, tlsKeyFile=pki.server_key)
    with pytest.raises(DataSourceOptionError, match="tlsKeyFile"):
        _read_config(OptionReader(opts, "jetstream"))


def test_a_key_without_a_certificate_is_an_option_error(pki: Pki) -> None:
    with pytest.raises(DataSourceOptionError, match="tlsCertFile"):
        _read_config(OptionReader(_options(tlsKeyFile=pki.client_key), "jetstream"))


def test_the_writer_checks_the_tls_options_too(tmp_path: Path) -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("data", BinaryType())])
    options = {"servers": "nats://127.0.0.1:4222", "subject": "x", "tlsCaFile": "/nonexistent"}
    with pytest.raises(DataSourceOptionError, match="tlsCaFile"):
        _write_config(options, schema)
