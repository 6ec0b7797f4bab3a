"""Who may drive runs over HTTP, and who they are: bearer tokens (`TARRY_API_TOKENS`,
the config file's `[api.users]`), each naming a person (`tarry.identities`).

A person with the API can start runs, answer them and approve what an agent does, so
with no token configured the server listens only on loopback (`tarry.api.server`), and
answers only this machine's names, never another site's page (`tarry.api.access`)."""

from __future__ import annotations

import secrets
from dataclasses import replace

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tarry.api.parts import parts_of
from tarry.contracts import Door, ErrorCode
from tarry.errors import TarryError
from tarry.identities import Caller

__all__ = ["DOOR_HEADER", "bearer_guard", "caller_of"]

_bearer = HTTPBearer(
    auto_error=False, description="A token of TARRY_API_TOKENS or the config's [api.users]."
)


async def bearer_guard(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
) -> None:
    """A dependency that lets a request through when it carries one of the app's users'
    tokens (`AppParts.tokens`), as that user (every request, as `AppParts.anonymous`,
    when there are none), and refuses it with 401 `UNAUTHORIZED` otherwise, naming where
    the tokens come from (`TarrySettings.api_token_sources`). The caller is
    `caller_of(request)`."""
    parts = parts_of(request)
    if not parts.tokens:
        request.state.caller = parts.anonymous
        return
    if credentials is None:
        raise TarryError(
            ErrorCode.UNAUTHORIZED, "this API needs a token: Authorization: Bearer TOKEN"
        )
    given = credentials.credentials.encode()
    # Every token is compared, each in constant time, so the answer's timing tells
    # nothing about how much of a guess was right, nor which token it was near.
    matches = [secrets.compare_digest(given, token) for _, token in parts.tokens]
    if not any(matches):
        sources = parts.settings.api_token_sources()
        raise TarryError(ErrorCode.UNAUTHORIZED, f"the token is not one of {sources}")
    request.state.caller = parts.tokens[matches.index(True)][0]


DOOR_HEADER = "X-Tarry-Door"
"""Sent `inbox` by the inbox's pages: the audit trail records their acts as the inbox's,
not the API's (the person is the token's either way)."""


def caller_of(request: Request) -> Caller:
    """The person behind a request the guard let through, at the API's door (the
    inbox's, for its pages)."""
    caller: Caller = request.state.caller
    inbox = request.headers.get(DOOR_HEADER, "").strip().lower() == Door.INBOX
    return replace(caller, door=Door.INBOX if inbox else Door.API)
