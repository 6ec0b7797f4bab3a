"""The HTTP API's guard: every route but `/healthz`, the docs, the inbox's files and the
action links lets a request through only as the user its `SignIn` names
(`tarry.api.signin`): a bearer token, a JWT of the identity provider, or a trusted
sign-in gateway's forwarded user.

A person with the API can start runs, answer them and approve what an agent does, so
with none of these configured the server listens only on loopback (`tarry.api.server`),
and answers only this machine's names, never another site's page (`tarry.api.access`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import compile_path

from tarry.api.parts import TarryOf, parts_of
from tarry.client import Tarry
from tarry.contracts import Door
from tarry.core.errors import TarryError
from tarry.core.identities import Caller

__all__ = [
    "DOOR_HEADER",
    "ActingOf",
    "CallerOf",
    "bearer_guard",
    "caller_of",
    "refusal_before_the_body",
    "signed_in",
]

_bearer = HTTPBearer(
    auto_error=False,
    description="A token of TARRY_API_TOKENS or the config's [api.users], or a JWT of the"
    " identity provider of [api.oidc].",
)


async def bearer_guard(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008
) -> None:
    """A dependency that lets a request through as the user its `SignIn` names (`caller_of`),
    and refuses it with 401 when there is none."""
    token = None if credentials is None else credentials.credentials
    client = None if request.client is None else request.client.host
    request.state.caller = await parts_of(request).sign_in.caller(token, client, request.headers)


async def signed_in(request: Request) -> None:
    """`bearer_guard` for a route FastAPI does not guard: a protocol's own endpoint
    (`tarry.api.a2a`), or a request whose body FastAPI could not read."""
    await bearer_guard(request, await _bearer(request))


DOOR_HEADER = "X-Tarry-Door"
"""Sent `inbox` by the inbox's pages: the audit trail records their acts as the inbox's,
not the API's (the person is the token's either way)."""


def caller_of(request: Request) -> Caller:
    """The person behind a request the guard let through, at the API's door (the
    inbox's, for its pages)."""
    caller: Caller = request.state.caller
    inbox = request.headers.get(DOOR_HEADER, "").strip().lower() == Door.INBOX
    return replace(caller, door=Door.INBOX if inbox else Door.API)


CallerOf = Annotated[Caller, Depends(caller_of)]
"""Who sends the request (its token's user): what it does, the run records as theirs."""


def _acting(tarry: TarryOf, caller: CallerOf) -> Tarry:
    return tarry.acting_as(caller)


ActingOf = Annotated[Tarry, Depends(_acting)]
"""The app's client acting as the request's caller (`CallerOf`): the one way a route
binds who asks. What its handles do, the runs record as the caller's; `.caller` is who."""


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
        await signed_in(request)
    except TarryError as e:
        return e
    return None
