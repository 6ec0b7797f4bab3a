"""`tarry mcp --http PORT`: the MCP server over streamable HTTP, signed in like the HTTP
API. Whoever reaches the port can start runs and decide their calls, so with bearer
tokens, an identity provider or a sign-in gateway configured (`TarrySettings.
api_authenticates`), each request needs the same sign-in as the API (`tarry.api.signin`):
refused with the API's 401 and code otherwise, and the runs record the user it names.
Without, it acts as `TARRY_USER` (or `cli:$USER`), as over stdio, on loopback only.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from tarry.api import ApiServer, ApiSetupError
from tarry.api.errors import error_response, status_of
from tarry.api.signin import SignIn, bearer_of
from tarry.cli.common import CliError
from tarry.cli.stopping import stop_signals, unless_stopped
from tarry.config.settings import TarrySettings
from tarry.core.errors import TarryError

__all__ = ["SignedIn", "serve_http"]

HOST = "127.0.0.1"


class SignedIn:
    """Lets a request through to `app` only as the user `sign_in` names, who is then
    `request.state.caller` for the MCP tools (`tarry.cli.mcp_server`)."""

    def __init__(self, app: ASGIApp, sign_in: SignIn) -> None:
        self.app, self.sign_in = app, sign_in

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        client = scope.get("client")
        try:
            caller = await self.sign_in.caller(
                bearer_of(headers.get("authorization")), client[0] if client else None, headers
            )
        except TarryError as e:
            await error_response(status_of(e.code), e.code, e.message)(scope, receive, send)
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


async def serve_http(server: MCPServer, settings: TarrySettings, port: int) -> None:
    """Serves `server` on http://127.0.0.1:PORT/mcp until a stop signal."""
    app: ASGIApp = server.streamable_http_app(host=HOST)
    if settings.api_authenticates():
        app = SignedIn(app, SignIn.of(settings))
    http = ApiServer(app, HOST, port, settings.api_table().limits)
    async with stop_signals() as stop:
        try:
            await http.start()
        except ApiSetupError as e:
            raise CliError(str(e)) from None
        print(f"MCP server on {http.url}/mcp; Ctrl-C to stop.", flush=True)
        try:
            await unless_stopped(stop, http.wait())
        finally:
            await http.stop()
