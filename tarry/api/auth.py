"""Who may drive runs over HTTP, and who they are: bearer tokens (`TARRY_API_TOKENS`,
the config file's `[api.users]`), each naming a person (`tarry.identities`).

A person with the API can start runs, answer them and approve what an agent does, so
with no token configured the server listens only on loopback (`tarry.api.server`), and
answers only this machine's names, never another site's page (`tarry.api.access`)."""

from __future__ import annotations

import secrets

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import compile_path

from tarry.api.parts import parts_of
from tarry.contracts import ErrorCode
from tarry.errors import TarryError
from tarry.identities import Caller

__all__ = ["bearer_guard", "caller_of", "refusal_before_the_body"]

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


def caller_of(request: Request) -> Caller:
    """The person behind a request the guard let through."""
    caller: Caller = request.state.caller
    return caller


async def refusal_before_the_body(request: Request) -> TarryError | None:
    """The 401 of a request that fails `bearer_guard` on a route that has it, for a
    request whose body FastAPI could not read: it reads the body before the guard runs,
    and a caller without a token must learn that first, not what the schema wants. A
    route has the guard when its OpenAPI operation asks for a bearer token."""
    path, method = request.url.path, request.method.lower()
    guarded = any(
        "security" in operations.get(method, {})
        for template, operations in request.app.openapi()["paths"].items()
        if compile_path(template)[0].match(path)
    )
    if not guarded:
        return None
    try:
        await bearer_guard(request, await _bearer(request))
    except TarryError as e:
        return e
    return None
