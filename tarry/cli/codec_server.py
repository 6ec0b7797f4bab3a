"""`tarry-codec-server`: lets the Temporal Web UI and CLI show encrypted payloads in
plain text to whoever can reach it, so it listens on 127.0.0.1 by default.

It speaks Temporal's codec server protocol: `POST .../encode` and `POST .../decode`
take and return `Payloads` as protobuf JSON. Point the UI at it (Settings, "Codec
Server", `http://127.0.0.1:8081`) or the CLI (`temporal workflow show
--codec-endpoint http://127.0.0.1:8081`). The key comes from `TARRY_ENCRYPTION_KEY`,
like every other Tarry process.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import NoReturn

from aiohttp import hdrs, web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from tarry.temporal.codec import EncryptionCodec
from tarry.temporal.entrypoint import run_main, settings_or_exit

DEFAULT_ORIGIN = "http://127.0.0.1:8233"
"""The Web UI of `temporal server start-dev` (and so of `tarry dev`) on its default port."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""aiohttp's 1 MiB default is below one 2 MB payload (Temporal's default limit) in base64."""

Transform = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


def codec_app(codec: EncryptionCodec, origin: str = DEFAULT_ORIGIN) -> web.Application:
    """The codec server as an aiohttp app; CORS lets pages from `origin` call it."""

    def cors(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        # Only the UI's origin may read answers: another page in the same browser
        # must not use this server to decrypt what it fetched elsewhere.
        if request.headers.get(hdrs.ORIGIN) == origin:
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = "POST, OPTIONS"
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = "Content-Type, X-Namespace"
            response.headers[hdrs.VARY] = "Origin"
        return response

    async def handle(request: web.Request) -> web.StreamResponse:
        # The protocol says: look only at the path's last part, so the endpoint can be
        # mounted at any depth (`/default/decode`, `/{namespace}/decode`).
        action = request.path.rstrip("/").rpartition("/")[2]
        transforms: dict[str, Transform] = {"encode": codec.encode, "decode": codec.decode}
        if action not in transforms:
            raise web.HTTPNotFound(text="codec server: use /encode or /decode\n")
        if request.method == hdrs.METH_OPTIONS:
            return cors(request, web.Response())
        if request.method != hdrs.METH_POST:
            raise web.HTTPMethodNotAllowed(request.method, [hdrs.METH_POST])
        try:
            payloads = json_format.Parse(await request.read(), Payloads())
            answer = Payloads(payloads=await transforms[action](payloads.payloads))
        except (json_format.ParseError, ValueError) as e:
            return cors(request, web.Response(status=400, text=f"{e}\n"))
        return cors(
            request,
            web.Response(text=json_format.MessageToJson(answer), content_type="application/json"),
        )

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_route("*", "/{path:.*}", handle)
    return app


async def serve(codec: EncryptionCodec, origin: str, host: str, port: int) -> int:
    """Serves until SIGINT or SIGTERM; the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(codec_app(codec, origin))
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as e:  # most often: the port is taken
            print(f"error: cannot listen on {host}:{port}: {e.strerror}", file=sys.stderr)
            return 1
        url = f"http://{host}:{runner.addresses[0][1]}"
        print(f"codec server listening on {url} for the Web UI at {origin}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


def main() -> NoReturn:
    """`tarry-codec-server [--host H] [--port P] [--origin URL]`."""
    parser = argparse.ArgumentParser(
        description="Decrypt and encrypt Tarry's payloads for the Temporal Web UI and CLI."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--origin", default=DEFAULT_ORIGIN, help="the Web UI's origin, allowed by CORS"
    )
    args = parser.parse_args()
    key = settings_or_exit().tarry_encryption_key
    if key is None:
        sys.exit("error: TARRY_ENCRYPTION_KEY is not set; the codec server needs the runs' key")
    try:
        codec = EncryptionCodec(key.get_secret_value())
    except ValueError as e:
        sys.exit(f"error: {e}")
    run_main(lambda: serve(codec, args.origin, args.host, args.port))


if __name__ == "__main__":
    main()
