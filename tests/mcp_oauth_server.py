"""An MCP server that requires bearer tokens, for the OAuth tests: a resource server as
the MCP authorization spec has it, built with the `mcp` package's server auth. It
publishes its protected-resource metadata (naming the authorization server), answers 401
without a token, and checks each token by asking the authorization server (its
`userinfo` endpoint: a revoked or expired token is refused there).

    python tests/mcp_oauth_server.py --port N --issuer URL

`whoami` answers with the identity the token is, so a test proves whose grant a call
used.
"""

from __future__ import annotations

import argparse

import httpx
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


class AskTheIssuer(TokenVerifier):
    """A token is good when the authorization server still says whose it is."""

    def __init__(self, issuer: str) -> None:
        self._userinfo = f"{issuer}/userinfo"

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx.AsyncClient() as http:
            answer = await http.get(self._userinfo, headers={"Authorization": f"Bearer {token}"})
        if answer.status_code != 200:
            return None
        return AccessToken(token=token, client_id="tarry", scopes=[], subject=answer.json()["sub"])


def build(port: int, issuer: str) -> MCPServer:
    server: MCPServer = MCPServer(
        "tarry-oauth-test",
        token_verifier=AskTheIssuer(issuer),
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=f"http://127.0.0.1:{port}/mcp",
        ),
    )

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def whoami() -> str:
        """Says whose account the call acts as."""
        token = get_access_token()
        return f"acting as {token.subject if token else 'nobody'}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--issuer", required=True)
    args = parser.parse_args()
    build(args.port, args.issuer).run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
