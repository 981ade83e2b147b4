"""TLS for the HTTP/2 gRPC connections: PEM files read and checked, the stream context.

Owns the rule "a TLS argument is checked when it is given, and the error names the
option to fix" for the files a client passes (``tls_root_certificates``,
``tls_client_cert``, ``tls_client_key``), and the context of our own HTTP/2
connections (ALPN ``h2``, which gRPC servers require).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from aioclients._errors import InvalidArgumentError

__all__ = ("check_roots", "load_client_pair", "read_pem", "stream_ssl_context")


def read_pem(what: str, path: str | Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"{what}: cannot read {str(path)!r}: {exc.strerror}") from None


def check_roots(path: str | Path, roots: bytes) -> str:
    """The CA certificates of ``tls_root_certificates`` as text, checked to load."""
    problem = ""
    try:
        text = roots.decode("ascii")
        if "-----BEGIN CERTIFICATE-----" not in text:
            problem = "it holds no '-----BEGIN CERTIFICATE-----' block"
        else:
            ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=text)
            return text
    except UnicodeDecodeError:
        problem = "it is not text (a DER or other binary file?)"
    except (ssl.SSLError, ValueError) as exc:
        problem = f"its certificates do not load ({exc})"
    raise InvalidArgumentError(
        f"tls_root_certificates: {str(path)!r} is not a file of PEM CA certificates: {problem}; "
        "give the path of the CA certificate(s) in PEM form (convert DER with "
        "'openssl x509 -inform der -in ca.der -out ca.pem')"
    )


def _refuse_password() -> bytes:
    raise InvalidArgumentError(
        "tls_client_key is encrypted with a passphrase; give an unencrypted PEM key "
        "(or pass tls=grpc.ssl_channel_credentials(...))"
    )


def load_client_pair(ctx: ssl.SSLContext, cert: str | Path, key: str | Path) -> None:
    """Load ``tls_client_cert``/``tls_client_key`` into ``ctx``; errors name both options."""
    try:
        ctx.load_cert_chain(str(cert), str(key), password=_refuse_password)
    except InvalidArgumentError:
        raise
    except OSError as exc:
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or str(exc)
            hint = (
                "the key does not belong to the certificate"
                if "MISMATCH" in str(reason).upper()
                else "one of them is not PEM, or they are swapped"
            )
            raise InvalidArgumentError(
                f"tls_client_cert {str(cert)!r} / tls_client_key {str(key)!r}: cannot load the "
                f"client certificate and its key ({reason}: {hint}); give the PEM certificate "
                "chain as tls_client_cert and its unencrypted PEM private key as tls_client_key"
            ) from None
        raise InvalidArgumentError(
            f"tls_client_cert {str(cert)!r} / tls_client_key {str(key)!r}: cannot read them: "
            f"{exc.strerror or exc}; give the paths of PEM files"
        ) from None


def stream_ssl_context(
    tls: object,
    *,
    root_certificates: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
) -> ssl.SSLContext | None:
    """The TLS context of our own HTTP/2 streams (None: plaintext).

    Built anew, never the caller's context changed: it trusts the CA
    certificates of ``tls`` (an ``SSLContext``) or ``root_certificates``, or the
    system's when there are none (as gRPC uses its bundled roots), presents
    ``client_cert``/``client_key`` when given, and offers ALPN ``h2``, which
    gRPC servers require. Call it after :func:`channel_credentials` has
    validated the arguments; ``grpc.ChannelCredentials`` cannot be turned into a
    context (the caller keeps those streams on ``grpc.aio``).
    """
    roots = read_pem("tls_root_certificates", root_certificates)
    if tls is None and roots is None and client_cert is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if roots is not None and root_certificates is not None:
        cadata = check_roots(root_certificates, roots)
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=cadata)
    elif isinstance(tls, ssl.SSLContext):
        ders = tls.get_ca_certs(binary_form=True)
        if ders:
            pems = "".join(ssl.DER_cert_to_PEM_cert(der) for der in ders)
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=pems)
    if client_cert is not None and client_key is not None:
        load_client_pair(ctx, client_cert, client_key)
    ctx.set_alpn_protocols(["h2"])
    return ctx
