"""The real parts of per-user OAuth on one machine: a local authorization server and an
MCP server that requires its tokens. The OAuth tests run on them (`tests/test_oauth.py`),
and so does the offline tour (`tarry dev --tour oauth`, docs/guides/acting-as-a-person.md).

The authorization server is `oidc-provider-mock` from PyPI: an OpenID provider built on
Authlib's server, with discovery, dynamic client registration, the authorization code
flow with PKCE, refresh tokens and revocation, and a consent page where a person signs
in under any name. Tarry's OAuth client talks to it as to any other; nothing here skips
the protocol.

The MCP server is a resource server as the MCP authorization spec has it, built with the
`mcp` package's server auth: it publishes its protected-resource metadata (naming the
authorization server), answers 401 without a token, and checks each token by asking the
authorization server (its `userinfo` endpoint: a revoked or expired token is refused
there). Its `whoami` tool says whose account a call acts as. Run alone:

    python -m tarry.testing.oauth_servers --port N --issuer URL

Needs the `mcp` extra, and `oidc-provider-mock` (the `cli` extra's, for `tarry dev`).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlparse

import httpx

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken
    from mcp.server.mcpserver import MCPServer

__all__ = ["authorization_server", "consent", "main", "mcp_server", "service_token"]


@contextmanager
def authorization_server(access_token_max_age: timedelta = timedelta(hours=1)) -> Iterator[str]:
    """The authorization server on 127.0.0.1 (its own helper binds `localhost`, which a
    browser may reach over IPv6 first), served by a thread of its own: its URL, the
    issuer. Access tokens live `access_token_max_age`."""
    import oidc_provider_mock
    import werkzeug.serving

    app = oidc_provider_mock.app(access_token_max_age=access_token_max_age)
    server = werkzeug.serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()


async def consent(http: httpx.AsyncClient, authorize_url: str, sub: str) -> str:
    """Signs in as `sub` at the consent page and agrees, as a person does in a browser:
    where the authorization server then sends the browser (the client's redirect URI,
    with a code)."""
    page = await http.get(authorize_url)
    if page.status_code != 200:
        raise RuntimeError(f"the consent page answered {page.status_code}: {page.text}")
    agreed = await http.post(authorize_url, data={"sub": sub})
    if agreed.status_code != 302:
        raise RuntimeError(f"the consent was refused ({agreed.status_code}): {agreed.text}")
    return agreed.headers["location"]


async def service_token(issuer: str, sub: str = "service") -> str:
    """An access token of the service account a worker lists an MCP server's tools with
    (`headers`), before any person has connected: `sub`'s, for a client the server
    registers as it first sees it."""
    redirect = "http://127.0.0.1/listing"
    query = f"response_type=code&client_id=lister&redirect_uri={redirect}&scope=openid"
    async with httpx.AsyncClient() as http:
        back = await consent(http, f"{issuer}/oauth2/authorize?{query}", sub)
        code = parse_qs(urlparse(back).query)["code"][0]
        answer = await http.post(
            f"{issuer}/oauth2/token",
            data={"grant_type": "authorization_code", "code": code, "redirect_uri": redirect},
            auth=("lister", "secret"),
        )
    answer.raise_for_status()
    token: str = answer.json()["access_token"]
    return token


def mcp_server(port: int, issuer: str) -> MCPServer:
    """The MCP server that requires `issuer`'s tokens, to be served on 127.0.0.1:`port`
    at `/mcp` (its protected-resource metadata names that URL)."""
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import TokenVerifier
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    class AskTheIssuer(TokenVerifier):
        """A token is good when the authorization server still says whose it is."""

        async def verify_token(self, token: str) -> AccessToken | None:
            from mcp.server.auth.provider import AccessToken

            async with httpx.AsyncClient() as http:
                answer = await http.get(
                    f"{issuer}/userinfo", headers={"Authorization": f"Bearer {token}"}
                )
            if answer.status_code != 200:
                return None
            subject = answer.json()["sub"]
            return AccessToken(token=token, client_id="tarry", scopes=[], subject=subject)

    server: MCPServer = MCPServer(
        "tarry-oauth-example",
        token_verifier=AskTheIssuer(),
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=f"http://127.0.0.1:{port}/mcp",
            # The provider's tokens name no resource: the issuer's word is the check.
            validate_token_resource=False,
        ),
        log_level="WARNING",  # in `tarry dev`'s process, its log is the stack's
    )

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def whoami() -> str:
        """Says whose account the call acts as."""
        token = get_access_token()
        return f"acting as {token.subject if token else 'nobody'}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description="The MCP server that requires OAuth tokens.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--issuer", required=True, help="The authorization server's URL.")
    args = parser.parse_args()
    mcp_server(args.port, args.issuer).run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
