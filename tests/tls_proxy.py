"""A real TLS endpoint in front of the test's dev server: a TLS-terminating TCP proxy on
loopback that forwards the decrypted bytes to the server's plaintext gRPC port (gRPC is
HTTP/2 over TCP, so piping bytes carries it), as a load balancer or Temporal Cloud's
front door would. Its certificates come from `trustme`, made per test.

It can require a client certificate (mTLS) and keeps what clients sent it, decrypted,
so a test can read the HTTP/2 headers the SDK sent (`request_headers`)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import hpack
import trustme

__all__ = ["Pki", "TlsProxy", "request_headers", "tls_proxy"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADERS, _CONTINUATION = 0x1, 0x9
_PADDED, _PRIORITY = 0x8, 0x20


@dataclass
class Pki:
    """A CA, the proxy's certificate from it, and a client certificate from it, written
    to `directory` as the PEM files a Temporal profile names."""

    directory: Path
    ca: trustme.CA = field(default_factory=trustme.CA)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.client = self.ca.issue_cert(
            "tarry-worker.example", common_name="tarry-worker", organization_name="Tarry Tests"
        )
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.ca.private_key_pem.write_to_path(str(self.ca_key_file))
        self.client.cert_chain_pems[0].write_to_path(str(self.client_cert_file))
        self.client.private_key_pem.write_to_path(str(self.client_key_file))

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key_file(self) -> Path:
        """The CA's key: to issue other client certificates with, as `openssl` does."""
        return self.directory / "ca.key"

    @property
    def client_cert_file(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key_file(self) -> Path:
        return self.directory / "client.key"


@dataclass
class TlsProxy:
    """The proxy while it listens: its `address`, and each connection's decrypted bytes
    from the client."""

    address: str
    received: list[bytearray] = field(default_factory=list)


@asynccontextmanager
async def tls_proxy(
    upstream: str, pki: Pki, *, client_cert: bool = True
) -> AsyncIterator[TlsProxy]:
    """Listens on a free loopback port with `pki`'s server certificate, requiring a client
    certificate of its CA when `client_cert`, and pipes each connection to `upstream`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    pki.server.configure_cert(context)
    context.set_alpn_protocols(["h2"])  # gRPC clients insist on HTTP/2 by ALPN
    if client_cert:
        pki.ca.configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
    host, port = upstream.rsplit(":", 1)
    tasks: set[asyncio.Task[None]] = set()

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: bytearray | None
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if seen is not None:
                    seen += data
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        seen = bytearray()
        proxy.received.append(seen)
        try:
            server_in, server_out = await asyncio.open_connection(host, int(port))
        except OSError:
            client_out.close()
            return
        await asyncio.gather(pipe(client_in, server_out, seen), pipe(server_in, client_out, None))

    def track(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(serve(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(track, "127.0.0.1", 0, ssl=context)
    proxy = TlsProxy(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        yield proxy
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def request_headers(stream: bytes) -> list[list[tuple[str, str]]]:
    """The header lists of an HTTP/2 client's requests in `stream` (a connection's bytes
    from the client), decoded as the server would: frames, then HPACK."""
    if not stream.startswith(_PREFACE):
        return []
    decoder, blocks, block, at = hpack.Decoder(), [], b"", len(_PREFACE)
    while at + 9 <= len(stream):
        length = int.from_bytes(stream[at : at + 3], "big")
        kind, flags = stream[at + 3], stream[at + 4]
        payload = stream[at + 9 : at + 9 + length]
        at += 9 + length
        if kind == _HEADERS:
            pad = payload[0] if flags & _PADDED else 0
            payload = payload[1 if flags & _PADDED else 0 :]
            payload = payload[5:] if flags & _PRIORITY else payload
            block = payload[: len(payload) - pad]
        elif kind == _CONTINUATION:
            block += payload
        else:
            continue
        if flags & 0x4:  # END_HEADERS
            blocks.append([(str(k), str(v)) for k, v in decoder.decode(block)])
    return blocks
