"""The grant a call of a tool declared with `@tool(oauth=...)` carries, as the tool sees
it (`ToolContext.grant`): whose it is, and an `httpx.Auth` that sends its access token.

Its own module, apart from `tarry.core.tools`, so that declaring tools loads no HTTP
client: only the worker that runs an `oauth` tool makes one.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import httpx

__all__ = ["ToolGrant"]


class ToolGrant(httpx.Auth):
    """A person's live grant to an OAuth provider, for one tool call, on the worker only.

    Give it as `auth` to any httpx request or client (`httpx.get(url, auth=ctx.grant)`),
    or take `client()`: each request carries `Authorization: Bearer ...`. An answer 401
    marks the grant `refused`: the API no longer takes it (revoked), and once the tool
    returns the worker forgets it and the run waits for the person to connect again.
    Neither its `repr` nor anything the worker records of the call holds the token."""

    def __init__(self, provider: str, person: str, access_token: str) -> None:
        self.provider = provider
        self.person = person
        """Whose grant it is: the run's owner, or the person who approved the call."""
        self._access_token = access_token
        self.refused = False
        """An API answered a request with it 401."""

    @property
    def access_token(self) -> str:
        """The token itself, for a client that is not httpx; keep it out of results."""
        return self._access_token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        request.headers["Authorization"] = f"Bearer {self._access_token}"
        response = yield request
        if response.status_code == httpx.codes.UNAUTHORIZED:
            self.refused = True

    def client(self, **options: Any) -> httpx.AsyncClient:
        """An async client whose every request carries the grant (`options`: httpx's)."""
        return httpx.AsyncClient(auth=self, **options)

    def __repr__(self) -> str:
        return f"ToolGrant(provider={self.provider!r}, person={self.person!r})"
