"""Client pieces that need no broker: TLS credentials, error mapping, the public names."""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc
import pytest
import trustme

import aioclients
import aioclients.liftbridge as lb
from aioclients import InvalidArgumentError
from aioclients.liftbridge._io._grpc import (
    channel_credentials,
    is_connection_failure,
    map_rpc_error,
)

API_NAMES = [
    "connect",
    "Client",
    "Message",
    "Ack",
    "Metadata",
    "BrokerInfo",
    "StreamInfo",
    "PartitionInfo",
    "StartPosition",
    "StopPosition",
    "AckPolicy",
    "new_message",
    "unmarshal_message",
    "unmarshal_ack",
    "Partitioner",
    "PartitionByKey",
    "PartitionByRoundRobin",
    "LiftbridgeError",
    "StreamExistsError",
    "NoSuchStreamError",
    "NoSuchPartitionError",
    "ReadonlyPartitionError",
    "EnvelopeError",
]


@pytest.mark.parametrize("name", API_NAMES)
def test_contract_names_are_exported(name: str) -> None:
    assert name in lb.__all__
    assert hasattr(lb, name)


def test_all_is_a_tuple_of_existing_unique_names() -> None:
    assert isinstance(lb.__all__, tuple)
    assert len(set(lb.__all__)) == len(lb.__all__)
    for name in lb.__all__:
        assert hasattr(lb, name), name


def test_error_families() -> None:
    for name in lb.__all__:
        obj = getattr(lb, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, lb.LiftbridgeError), name
            assert issubclass(obj, aioclients.AioClientsError), name
    assert issubclass(lb.LiftbridgeTimeoutError, TimeoutError)
    assert issubclass(lb.LiftbridgeClosedError, aioclients.ClientClosedError)
    assert issubclass(lb.EnvelopeError, aioclients.RemoteProtocolError)
    assert issubclass(lb.StreamExistsError, aioclients.ServerError)


class _FakeRpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.ALREADY_EXISTS, "stream exists", lb.StreamExistsError),
        (grpc.StatusCode.NOT_FOUND, "no such stream: x", lb.NoSuchStreamError),
        (grpc.StatusCode.NOT_FOUND, "no such partition: 4", lb.NoSuchPartitionError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "", lb.LiftbridgeTimeoutError),
        (grpc.StatusCode.UNAVAILABLE, "connection refused", lb.LiftbridgeConnectError),
        (grpc.StatusCode.INTERNAL, "Internal error from Core", lb.LiftbridgeConnectError),
        (grpc.StatusCode.FAILED_PRECONDITION, "readonly partition: 0", lb.ReadonlyPartitionError),
        (grpc.StatusCode.UNKNOWN, "incorrect expected offset", lb.IncorrectOffsetError),
        (grpc.StatusCode.INTERNAL, "boom", lb.LiftbridgeServerError),
    ],
)
def test_rpc_errors_map_to_the_families(
    code: grpc.StatusCode, details: str, expected: type[Exception]
) -> None:
    err = map_rpc_error(_FakeRpcError(code, details), what="op")
    assert type(err) is expected
    assert str(err).startswith("op")


def test_cancelled_after_close_is_a_closed_error() -> None:
    err = map_rpc_error(_FakeRpcError(grpc.StatusCode.CANCELLED, ""), what="op", closed=True)
    assert isinstance(err, lb.LiftbridgeClosedError)
    assert is_connection_failure(_FakeRpcError(grpc.StatusCode.UNAVAILABLE, ""))
    assert not is_connection_failure(_FakeRpcError(grpc.StatusCode.INTERNAL, "boom"))


def test_tls_from_an_ssl_context_and_from_paths(tmp_path: Path) -> None:
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(ctx)
    assert isinstance(channel_credentials(ctx), grpc.ChannelCredentials)
    creds = grpc.ssl_channel_credentials()
    assert channel_credentials(creds) is creds
    assert channel_credentials(None) is None
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    assert isinstance(channel_credentials(None, root_certificates=pem), grpc.ChannelCredentials)
    cert = ca.issue_cert("client.example")
    chain, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.private_key_pem.write_to_path(str(key))
    cert.cert_chain_pems[0].write_to_path(str(chain))
    assert isinstance(
        channel_credentials(ctx, client_cert=chain, client_key=key), grpc.ChannelCredentials
    )


def test_tls_refuses_what_grpc_cannot_do() -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with pytest.raises(InvalidArgumentError, match="always verifies"):
        channel_credentials(ctx)
    with pytest.raises(InvalidArgumentError, match="tls must be"):
        channel_credentials("yes")
    with pytest.raises(InvalidArgumentError, match="go together"):
        channel_credentials(None, client_cert="x.pem")
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        channel_credentials(None, root_certificates="/nonexistent/ca.pem")


def test_message_is_read_only() -> None:
    msg = lb.Message(b"v", stream="s", offset=3, key=b"k", headers={"a": b"1"})
    assert (msg.stream, msg.offset, msg.key, msg.value, msg.headers) == (
        "s",
        3,
        b"k",
        b"v",
        {"a": b"1"},
    )
    with pytest.raises(AttributeError):
        msg.offset = 4  # type: ignore[misc]
    assert msg == lb.Message(b"v", stream="s", offset=3, key=b"k", headers={"a": b"1"})
    assert msg.reply_subject is None
    assert msg.ack_policy is lb.AckPolicy.LEADER


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    ca = trustme.CA()
    cert = ca.issue_cert("client.example")
    other = trustme.CA().issue_cert("other.example")
    files = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "cert.pem",
        "key": tmp_path / "key.pem",
        "other_key": tmp_path / "other-key.pem",
        "text": tmp_path / "notes.txt",
        "binary": tmp_path / "ca.der",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    other.private_key_pem.write_to_path(str(files["other_key"]))
    files["text"].write_text("this is not a certificate\n")
    files["binary"].write_bytes(bytes(range(256)))
    return files


@pytest.mark.parametrize("transport", ["http2", "grpc"])
@pytest.mark.parametrize("bad", ["text", "binary", "key"])
async def test_a_root_certificates_file_that_is_not_pem_certificates_is_named(
    tls_files: dict[str, Path], bad: str, transport: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        await lb.connect(
            "127.0.0.1:1",
            tls_root_certificates=str(tls_files[bad]),
            stream_transport=transport,
            max_rpc_attempts=1,
            rpc_timeout=2,
        )
    text = str(info.value)
    assert "tls_root_certificates" in text
    assert str(tls_files[bad]) in text
    assert "PEM" in text


@pytest.mark.parametrize("transport", ["http2", "grpc"])
@pytest.mark.parametrize(
    ("cert", "key"), [("text", "key"), ("cert", "text"), ("cert", "other_key"), ("key", "cert")]
)
async def test_a_bad_client_certificate_or_key_is_named(
    tls_files: dict[str, Path], cert: str, key: str, transport: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        await lb.connect(
            "127.0.0.1:1",
            tls_root_certificates=str(tls_files["ca"]),
            tls_client_cert=str(tls_files[cert]),
            tls_client_key=str(tls_files[key]),
            stream_transport=transport,
            max_rpc_attempts=1,
            rpc_timeout=2,
        )
    text = str(info.value)
    assert "tls_client_cert" in text
    assert "tls_client_key" in text
    assert "PEM" in text
    assert info.value.__cause__ is None or not isinstance(info.value.__cause__, ssl.SSLError)
    # the error names the files, never what is in a key
    for name in {key, cert} & {"key", "other_key"}:
        for line in tls_files[name].read_text().splitlines()[1:-1]:
            assert line not in text
            assert line not in repr(info.value)


async def test_an_encrypted_client_key_is_refused_without_a_prompt(
    tls_files: dict[str, Path], tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(tls_files["key"].read_bytes(), password=None)
    encrypted = tmp_path / "encrypted-key.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(InvalidArgumentError, match="tls_client_key is encrypted"):
        await lb.connect(
            "127.0.0.1:1",
            tls_client_cert=str(tls_files["cert"]),
            tls_client_key=str(encrypted),
            max_rpc_attempts=1,
        )
