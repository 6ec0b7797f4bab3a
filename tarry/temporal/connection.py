"""How every Tarry process connects to Temporal: the way the `temporal` CLI does.

Where and how come from the SDK's environment configuration (`temporalio.envconfig`),
which reads what the `temporal` CLI reads: a TOML file of profiles (`TEMPORAL_CONFIG_FILE`,
else `~/.config/temporalio/temporal.toml`), the profile `TEMPORAL_PROFILE` names (else
`default`), and the `TEMPORAL_*` variables over it: address, namespace, API key, TLS
on or off, its server name, the server's CA, the client certificate and key (each a path
or the PEM data), gRPC metadata.

Tarry's settings come last and win: `TarrySettings.temporal_address` and
`temporal_namespace` when they are set (by `TEMPORAL_ADDRESS` and `TEMPORAL_NAMESPACE`,
as always, or in code); unset, the profile's; neither, 127.0.0.1:7233 and `default`.

All of it is checked when the connection is resolved (`temporal_connection`), before
anything connects or starts: a profile that does not exist, a config file that cannot
be read, a certificate or key that is missing or not PEM is a `ConfigError` of one line
that names the setting and the file. A TLS handshake the server (or its proxy) refuses is
a `ConnectError` that does the same (`TLS_REFUSED_EXIT`). The API key is a `SecretStr`:
no repr, log or error of Tarry's shows it, and it reaches only the SDK, which sends it
as `authorization: Bearer ...` on every call; it never enters a run, so never a history.
"""

from __future__ import annotations

import atexit
import gc
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pydantic import SecretStr
from temporalio.envconfig import ClientConfig, ClientConfigProfile, ClientConfigTLS, DataSource
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from tarry.config.settings import ConfigError, TarrySettings
from tarry.temporal.codec import data_converter

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "DEFAULT_ADDRESS",
    "TLS_REFUSED_EXIT",
    "ConnectError",
    "TemporalConnection",
    "connect_temporal",
    "temporal_connection",
]

# sdk-python #300: the SDK's service client and its services refer to each other (a
# reference cycle), so the Rust connection under a client is freed only by the cycle
# collector. Left to interpreter finalisation, freeing it can abort the process (exit
# 134 or 139, `PyGILState_Release`) after all its work is done: 5 of 20 runs of a plain
# `asyncio.run(main())` script did. Collecting at exit, while the interpreter is still
# whole, frees it safely, so a script that uses this client needs nothing special.
atexit.register(gc.collect)


DEFAULT_ADDRESS = "127.0.0.1:7233"
"""Where Temporal is when nothing says otherwise: `tarry dev`'s server."""
_DEFAULT_NAMESPACE = "default"

TLS_REFUSED_EXIT = 2
"""The exit code of a process whose TLS handshake was refused: a setting to fix, as a
bad configuration is (`tarry.temporal.entrypoint.CONFIG_ERROR_EXIT`)."""

UNREACHABLE_EXIT = 1
"""The exit code of a process that found no Temporal server to talk to."""


class ConnectError(RuntimeError):
    """Connecting failed; the message is one line that says what to do, and `exit_code`
    what a process ends with. A RuntimeError, as the SDK's own connect failure is, so
    code that tells a down server by that goes on doing so."""

    def __init__(self, message: str, exit_code: int = UNREACHABLE_EXIT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class _Source:
    """One PEM input of TLS: where it was set (a variable, or the file's key) and what it is."""

    setting: str
    """`TEMPORAL_TLS_CLIENT_CERT_PATH`, or `FILE: [profile.P.tls] client_cert_path`."""
    path: Path | None
    """The file it names; None for data given inline."""


@dataclass(frozen=True)
class TemporalConnection:
    """Where and how a process connects, resolved and checked (`temporal_connection`)."""

    address: str
    namespace: str
    api_key: SecretStr | None = None
    tls: TLSConfig | None = None
    """None: plaintext."""
    rpc_metadata: Mapping[str, str] = field(default_factory=dict)
    profile: str = "default"
    config_file: Path | None = None
    """The profiles' file, when one was read."""
    client_subject: str | None = None
    """The client certificate's subject (mTLS), e.g. `CN=worker,O=acme`."""
    server_ca: _Source | None = None
    client_cert: _Source | None = None

    def tls_summary(self) -> str:
        """`off`, or `on` with who the client is to the server; never the API key itself."""
        if self.tls is None:
            return "off"
        who = []
        if self.client_subject is not None:
            who.append(f"client certificate {self.client_subject}")
        if self.api_key is not None:
            who.append("API key")
        ca = "system CAs"
        if self.server_ca is not None:
            ca = f"the server's CA from {self.server_ca.path or self.server_ca.setting}"
        return f"on ({', '.join(who) or 'no client identity'}; {ca})"

    async def connect(self, settings: TarrySettings, runtime: Runtime | None = None) -> Client:
        """A client of this server with the data converter of `settings`; a server that
        refuses or cannot be reached is a `ConnectError`. The SDK's client is imported
        here, on the way to connecting, so that resolving and checking a connection (every
        command's settings) does not load it."""
        from temporalio.client import Client

        converter = data_converter(settings)  # its own errors: EncryptionKeyError
        try:
            return await Client.connect(
                self.address,
                namespace=self.namespace,
                api_key=self.api_key.get_secret_value() if self.api_key else None,
                tls=self.tls or False,
                rpc_metadata=self.rpc_metadata,
                data_converter=converter,
                runtime=runtime,
            )
        # The SDK reports an address it cannot parse as a ValueError ("invalid target URL").
        except ValueError as e:
            raise ConnectError(
                f"TEMPORAL_ADDRESS={self.address!r} is not an address ({e}); give host:port, "
                "e.g. 127.0.0.1:7233",
                TLS_REFUSED_EXIT,
            ) from None
        # ... and a failed connection as a bare RuntimeError, its reason Rust debug output.
        except RuntimeError as e:
            raise self._failure(str(e)) from None

    def _failure(self, reason: str) -> ConnectError:
        """What a failed connection means: a TLS handshake refused (by which side, and
        the setting to look at), TLS spoken to a plaintext server or the reverse, or no
        server at all."""
        if self.tls is not None and (tls := _tls_reason(reason)):
            meaning, blame = tls
            if blame == "ca":
                look = (
                    f"check {_where(self.server_ca)}"
                    if self.server_ca
                    else "set TEMPORAL_TLS_SERVER_CA_CERT_PATH to the server's CA"
                )
            elif blame == "client":
                look = (
                    f"check {_where(self.client_cert)}"
                    if self.client_cert
                    else "set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH"
                )
            else:
                look = "set TEMPORAL_TLS=false if it serves plaintext"
            return ConnectError(
                f"TLS with Temporal at {self.address} refused: {meaning}; {look}",
                TLS_REFUSED_EXIT,
            )
        if self.tls is None and re.search(_CLOSED, reason, re.IGNORECASE):
            return ConnectError(
                f"Temporal at {self.address} closed the connection; if it serves TLS, set "
                "TEMPORAL_TLS=true (and TEMPORAL_TLS_SERVER_CA_CERT_PATH for its CA)",
                TLS_REFUSED_EXIT,
            )
        if not _PORT.search(self.address):
            return ConnectError(
                f"cannot reach Temporal at {self.address}: the address has no port; give"
                f" host:port, e.g. TEMPORAL_ADDRESS={self.address}:7233 (Temporal's gRPC port)"
            )
        return ConnectError(
            f"cannot reach Temporal at {self.address}; start it with `tarry dev` or set "
            "TEMPORAL_ADDRESS"
        )


def _where(source: _Source | None) -> str:
    if source is None:
        return ""
    return f"{source.setting} ({source.path})" if source.path else source.setting


_TLS_REASONS = (
    # rustls' and hyper's words (the SDK's TLS), what each means, and whose setting it is.
    (r"UnknownIssuer|BadSignature|invalid peer certificate",
     "the server's certificate is not signed by the CA this process trusts", "ca"),
    (r"UnsupportedCertVersion", "the server's certificate is X.509 v1, which TLS refuses "
     "(the server needs a v3 one)", "ca"),
    (r"NotValidForName", "the server's certificate is not for this name (set "
     "TEMPORAL_TLS_SERVER_NAME to the name it is for)", "ca"),
    # A server that refuses the client's certificate (or wants one) under TLS 1.3 says so
    # after the client's side of the handshake is done, or just hangs up: a reset, a
    # broken pipe or an early end, depending on when the client next writes or reads.
    (r"CertificateRequired|BadCertificate|UnknownCA|AccessDenied|without sending TLS "
     r"close_notify|broken pipe|connection ?reset|UnexpectedEof|connection closed",
     "the server wants a client certificate of a CA it trusts and closed the connection",
     "client"),
    (r"InvalidContentType|CorruptMessage", "the server does not speak TLS", "plaintext"),
)  # fmt: skip
_PORT = re.compile(r":\d+/?$")
"""An address that ends in its port (`host:7233`, `[::1]:7233`, `http://host:7233/`)."""
_CLOSED = r"broken pipe|connection reset|UnexpectedEof"
"""A plaintext client's words for a TLS server that hung up on it."""


def _tls_reason(reason: str) -> tuple[str, str] | None:
    """What a TLS failure means, and whose setting it is (`ca`, `client`, `plaintext`)."""
    for pattern, meaning, blame in _TLS_REASONS:
        if re.search(pattern, reason, re.IGNORECASE):
            return meaning, blame
    return None


def temporal_connection(settings: TarrySettings) -> TemporalConnection:
    """The connection `settings` and the environment's Temporal configuration describe,
    its certificates read and checked; a `ConfigError` of one line naming the setting
    and the file when something is wrong with them."""
    config_file = _config_file()
    if explicit := os.environ.get("TEMPORAL_CONFIG_FILE"):
        _readable("TEMPORAL_CONFIG_FILE", Path(explicit))
    profile_name = os.environ.get("TEMPORAL_PROFILE") or "default"
    try:
        profile = ClientConfigProfile.load()
    except Exception as e:  # the SDK's envconfig ConfigError, from its Rust core
        raise ConfigError(_profile_problem(str(e), profile_name, config_file)) from None
    where = _Where(profile_name, config_file if config_file.is_file() else None)
    tls, subject, server_ca, client_cert = _tls(profile, where)
    fields = settings.model_fields_set
    return TemporalConnection(
        address=(
            settings.temporal_address
            if "temporal_address" in fields
            else profile.address or DEFAULT_ADDRESS
        ),
        namespace=(
            settings.temporal_namespace
            if "temporal_namespace" in fields
            else profile.namespace or _DEFAULT_NAMESPACE
        ),
        api_key=SecretStr(profile.api_key) if profile.api_key else None,
        tls=tls,
        rpc_metadata=dict(profile.grpc_meta),
        profile=profile_name,
        config_file=where.file,
        client_subject=subject,
        server_ca=server_ca,
        client_cert=client_cert,
    )


async def connect_temporal(
    settings: TarrySettings | None = None, *, runtime: Runtime | None = None
) -> Client:
    """A Temporal client with the data converter every Tarry process uses: pydantic,
    encrypting payloads when `TARRY_ENCRYPTION_KEY` is set, and large payloads kept
    outside history (see `tarry.temporal.codec`), connected as `temporal_connection` says.
    `runtime`: the SDK runtime for the client, such as a worker's that forwards core's
    logs and serves metrics; the default one otherwise. Raises `ConfigError` for a setting
    that cannot be used, `ConnectError` for a server that refuses or is not there."""
    settings = settings or TarrySettings()
    return await temporal_connection(settings).connect(settings, runtime)


def _config_file() -> Path:
    """The profiles' file the SDK reads: `TEMPORAL_CONFIG_FILE`, else the platform's
    configuration directory's `temporalio/temporal.toml` (Rust's `dirs::config_dir`)."""
    if explicit := os.environ.get("TEMPORAL_CONFIG_FILE"):
        return Path(explicit)
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif sys.platform == "win32":
        base = Path(os.environ.get("APPDATA", Path.home()))
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "temporalio" / "temporal.toml"


def _readable(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{setting}: cannot read {path}: {e.strerror or e}") from None


def _profile_problem(message: str, profile: str, file: Path) -> str:
    """One line for the SDK's refusal of the config: a profile not in the file, or the
    file's own problem (its TOML error spans several lines: the first and the last say it)."""
    if message.startswith("Profile "):
        if not file.is_file():
            return f"TEMPORAL_PROFILE={profile!r}: there is no profile file ({file})"
        known = sorted(ClientConfig.load().profiles)
        return (
            f"TEMPORAL_PROFILE={profile!r}: {file} has no [profile.{profile}]; "
            f"its profiles are {', '.join(known) or 'none'}"
        )
    lines = [line.strip(" |^") for line in message.splitlines()]
    lines = [line for line in lines if line and not line[0].isdigit()]
    text = "; ".join(dict.fromkeys(lines)).removeprefix("Configuration loading error: ")
    return f"{file}: {text}"


@dataclass(frozen=True)
class _Where:
    profile: str
    file: Path | None

    def source(self, variable: str, key: str, source: DataSource) -> _Source:
        """Where a TLS input was set: its variable when set (the environment wins over
        the file), else the file's key; with the file it names, if any."""
        path = source if isinstance(source, Path) else None
        kind = "PATH" if path else "DATA"
        if f"{variable}_{kind}" in os.environ or self.file is None:
            return _Source(f"{variable}_{kind}", path)
        return _Source(f"{self.file}: [profile.{self.profile}.tls] {key}_{kind.lower()}", path)


def _tls(
    profile: ClientConfigProfile, where: _Where
) -> tuple[TLSConfig | None, str | None, _Source | None, _Source | None]:
    """The profile's TLS, its PEM inputs read and checked; with the client certificate's
    subject and where the CA and client certificate were set. An API key alone turns TLS
    on, as the SDK does: Temporal Cloud takes keys over TLS only."""
    spec = profile.tls
    if spec is None and profile.api_key is None:
        return None, None, None, None
    spec = spec or ClientConfigTLS()
    if spec.disabled:
        return None, None, None, None
    ca = cert = key = None
    ca_source = cert_source = None
    if spec.server_root_ca_cert is not None:
        ca_source = where.source(
            "TEMPORAL_TLS_SERVER_CA_CERT", "server_ca_cert", spec.server_root_ca_cert
        )
        ca = _pem(ca_source, spec.server_root_ca_cert, "certificate")
    if spec.client_cert is not None:
        cert_source = where.source("TEMPORAL_TLS_CLIENT_CERT", "client_cert", spec.client_cert)
        cert = _pem(cert_source, spec.client_cert, "certificate")
    if spec.client_private_key is not None:
        key_source = where.source("TEMPORAL_TLS_CLIENT_KEY", "client_key", spec.client_private_key)
        key = _pem(key_source, spec.client_private_key, "private key")
        if cert is None:
            raise ConfigError(
                f"{key_source.setting} gives a client key but no client certificate is set "
                "(TEMPORAL_TLS_CLIENT_CERT_PATH)"
            )
    if cert is not None and key is None:
        assert cert_source is not None
        raise ConfigError(
            f"{cert_source.setting} gives a client certificate but no client key is set "
            "(TEMPORAL_TLS_CLIENT_KEY_PATH)"
        )
    subject = None
    if cert is not None:
        assert cert_source is not None
        client = x509.load_pem_x509_certificate(cert)
        _refuse_v1(cert_source, client)
        subject = client.subject.rfc4514_string()
    tls = TLSConfig(
        server_root_ca_cert=ca,
        domain=spec.server_name,
        client_cert=cert,
        client_private_key=key,
    )
    return tls, subject, ca_source, cert_source


def _refuse_v1(source: _Source, certificate: x509.Certificate) -> None:
    """A client certificate of X.509 v1, which a plain `openssl x509 -req` makes, is
    refused by TLS with words that read as an unreachable server: said here, at once."""
    if certificate.version is x509.Version.v1:
        what = str(source.path) if source.path else "its data"
        raise ConfigError(
            f"{source.setting}: {what} is an X.509 v1 certificate, which TLS refuses as a"
            " client certificate; issue it as v3 (openssl x509 -req ... -extfile FILE, the"
            " file holding `extendedKeyUsage = clientAuth`)"
        )


def _pem(source: _Source, data: DataSource, kind: str) -> bytes:
    """The PEM bytes of a TLS input, read now so that a missing file or one that holds
    no `kind` stops the process before it connects."""
    if isinstance(data, Path):
        content = _readable(source.setting, data)
    else:
        content = data.encode() if isinstance(data, str) else data
    what = str(source.path) if source.path else "its data"
    try:
        if kind == "certificate":
            x509.load_pem_x509_certificates(content)
        else:
            load_pem_private_key(content, password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise ConfigError(
            f"{source.setting}: {what} is an encrypted private key; give it unencrypted"
        ) from None
    except ValueError:
        raise ConfigError(f"{source.setting}: {what} holds no PEM {kind}") from None
    return content
