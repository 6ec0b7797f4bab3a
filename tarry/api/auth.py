"""Who may drive runs over HTTP: bearer tokens (`TARRY_API_TOKENS`).

A person with the API can start runs, answer them and approve what an agent does, so
with no token configured the server listens only on loopback (`tarry.api.server`), and
answers only this machine's names, never another site's page (`tarry.api.access`)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from tarry.client import TarryError
from tarry.contracts import ErrorCode

__all__ = ["bearer_guard"]

Guard = Callable[[HTTPAuthorizationCredentials | None], Awaitable[None]]

_bearer = HTTPBearer(auto_error=False, description="A token of TARRY_API_TOKENS.")


def bearer_guard(tokens: Sequence[SecretStr]) -> Guard:
    """A dependency that lets a request through when it carries one of `tokens` (every
    request, when there are none) and refuses it with 401 `UNAUTHORIZED` otherwise."""
    accepted = [token.get_secret_value().encode() for token in tokens]

    async def guard(
        credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
    ) -> None:
        if not accepted:
            return
        if credentials is None:
            raise TarryError(
                ErrorCode.UNAUTHORIZED, "this API needs a token: Authorization: Bearer TOKEN"
            )
        given = credentials.credentials.encode()
        # Every token is compared, each in constant time, so the answer's timing tells
        # nothing about how much of a guess was right, nor which token it was near.
        if not any([secrets.compare_digest(given, token) for token in accepted]):
            raise TarryError(ErrorCode.UNAUTHORIZED, "the token is not one of TARRY_API_TOKENS")

    return guard
