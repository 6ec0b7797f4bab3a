"""`/v1/oauth`: the connect link of a run that waits for a person's account
(`waiting_for: auth`) and the authorization server's callback.

`connect/{run}/{server}` (signed in): the person the run waits for, and no one else, is
sent to the server's authorization page, with a `state` and a PKCE verifier kept in the
connections store, bound to them and the run, good for `CONNECT_TTL` seconds. `callback`
is its own guard, as an action link is: the state is taken once (a replayed callback
finds none), its code is traded for the grant, stored sealed, and the run is told.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel

from tarry.api.auth import CallerOf
from tarry.api.errors import AUTH, error_answers, status_of
from tarry.api.models import RunId
from tarry.api.parts import AppParts, PartsOf
from tarry.client.rights import check_run
from tarry.config.tables import OAuthClient
from tarry.connections import oauth
from tarry.connections.oauth import Endpoints
from tarry.connections.store import Connection, ConnectionStore, PendingConnect
from tarry.contracts import WORKFLOW_TYPE, Door, ErrorCode, Need
from tarry.core.errors import TarryError
from tarry.core.identities import Caller

__all__ = [
    "CALLBACK_PATH",
    "CONNECT_TTL",
    "callback_router",
    "connect_router",
    "connections_router",
]

CONNECT_TTL = 600.0
"""Seconds a connect flow may take, from the link to the callback."""
CALLBACK_PATH = "/v1/oauth/callback"
Server = Annotated[str, Path(min_length=1, max_length=200)]


def _store(parts: AppParts) -> ConnectionStore:
    if parts.connections is None:
        raise TarryError(
            ErrorCode.CONNECTIONS_UNAVAILABLE,
            "this deployment keeps no connections: set TARRY_CONNECTIONS_KEY for the API"
            " and its workers alike",
        )
    return parts.connections


def _refused(message: str) -> TarryError:
    return TarryError(ErrorCode.CONNECT_REFUSED, message)


def connect_router() -> APIRouter:
    router = APIRouter(prefix="/v1/oauth", tags=["connections"])
    refusals = (*AUTH, HTTPStatus.FORBIDDEN, HTTPStatus.NOT_FOUND, HTTPStatus.UNPROCESSABLE_ENTITY)

    @router.get(
        "/connect/{run_id}/{server}",
        responses=error_answers(*refusals),
        response_class=RedirectResponse,
        status_code=HTTPStatus.FOUND,
    )
    async def connect(
        run_id: RunId, server: Server, request: Request, caller: CallerOf, parts: PartsOf
    ) -> RedirectResponse:
        """Sends the person the run waits for to `server`'s authorization page; 403
        `CONNECT_REFUSED` for anyone else, or a run that waits for no such grant."""
        url = await _begin(parts, request, caller, run_id, server)
        return RedirectResponse(url, status_code=HTTPStatus.FOUND)

    @router.post("/connect/{run_id}/{server}", responses=error_answers(*refusals))
    async def begin_connect(
        run_id: RunId, server: Server, request: Request, caller: CallerOf, parts: PartsOf
    ) -> ConnectStarted:
        """The link's flow, for a page that signs its requests (the inbox): the
        authorization page's URL, for the page to go to."""
        return ConnectStarted(url=await _begin(parts, request, caller, run_id, server))

    return router


class ConnectStarted(BaseModel):
    url: str
    """The authorization server's page to send the person to."""


async def _begin(
    parts: AppParts, request: Request, caller: Caller, run_id: str, server: str
) -> str:
    """Starts `caller`'s connect to `server` for run `run_id`: the authorization URL.
    `RUN_NOT_FOUND` for a run they may not read, as at every other run route: a grant is
    the waiting person's alone, but whether a run exists is no one else's to learn."""
    await check_run(parts.tarry, parts.policy, caller, run_id, Need.READ, workflow=WORKFLOW_TYPE)
    state = await parts.tarry.get(run_id).state()
    if not any(need.server == server and need.person == caller.user for need in state.auth_needed):
        raise _refused(f"run {run_id} waits for no grant of yours to {server!r}")
    # Where people reach the API: its public URL, else the address this request came to.
    base = parts.settings.tarry_public_url or str(request.base_url)
    redirect_uri = base.rstrip("/") + CALLBACK_PATH
    try:
        config, endpoints = await _oauth_server(parts, server)
        client_id, secret = config.client_id, config.client_secret
        if client_id is None:
            client_id, secret = await oauth.register(endpoints, redirect_uri)
    except (oauth.ConnectFailed, OSError) as e:
        raise _refused(f"the authorization server of {server!r} cannot be used: {e}") from e
    url, flow, verifier = oauth.authorization_url(endpoints, client_id, redirect_uri, config.scopes)
    pending = PendingConnect(
        person=caller.user,
        server=server,
        run_id=run_id,
        verifier=verifier,
        redirect_uri=redirect_uri,
        token_endpoint=endpoints.token_endpoint,
        client_id=client_id,
        client_secret=secret,
    )
    await _store(parts).begin(flow, pending, CONNECT_TTL)
    return url


async def _oauth_server(parts: AppParts, server: str) -> tuple[OAuthClient, Endpoints]:
    """The client config of `server` and its endpoints: an MCP server with `auth =
    "oauth"` (found from its protected-resource metadata) or an `[oauth_providers.NAME]`
    (its issuer's, or its own); `CONNECT_REFUSED` for neither."""
    mcp = parts.settings.mcp_servers().get(server)
    if mcp is not None and mcp.url is not None and mcp.auth == "oauth":
        return mcp, await oauth.discover(mcp.url)
    if (provider := parts.settings.oauth_providers().get(server)) is not None:
        return provider, await oauth.provider_endpoints(provider)
    raise _refused(
        f'no MCP server {server!r} with `auth = "oauth"` and no [oauth_providers.{server}]'
        " is configured here"
    )


class ConnectionView(BaseModel):
    """A person's grant to a server, as people see it: never a token."""

    person: str
    server: str
    scopes: list[str]
    """What the authorization server granted; empty when it did not say."""
    connected_at: datetime
    refreshed_at: datetime | None
    """When the worker last refreshed the grant; None: not since the person connected."""

    @classmethod
    def of(cls, connection: Connection) -> ConnectionView:
        return cls(
            person=connection.person,
            server=connection.server,
            scopes=(connection.scope or "").split(),
            connected_at=datetime.fromtimestamp(connection.connected_at, UTC),
            refreshed_at=(
                None
                if connection.refreshed_at is None
                else datetime.fromtimestamp(connection.refreshed_at, UTC)
            ),
        )


class Connections(BaseModel):
    connections: list[ConnectionView]


def connections_router() -> APIRouter:
    router = APIRouter(prefix="/v1/connections", tags=["connections"])
    refusals = (*AUTH, HTTPStatus.FORBIDDEN, HTTPStatus.UNPROCESSABLE_ENTITY)

    @router.get("", responses=error_answers(*refusals))
    async def list_connections(
        caller: CallerOf,
        parts: PartsOf,
        person: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    ) -> Connections:
        """The caller's connections; an admin's: `person`'s, or everyone's."""
        who = _whose(caller, parts, person, everyone=True)
        found = await _store(parts).connections(who)
        return Connections(connections=[ConnectionView.of(c) for c in found])

    @router.delete(
        "/{server}",
        responses=error_answers(*refusals, HTTPStatus.NOT_FOUND),
        status_code=HTTPStatus.NO_CONTENT,
    )
    async def revoke_connection(
        server: Server,
        caller: CallerOf,
        parts: PartsOf,
        person: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    ) -> None:
        """Forgets the caller's grant to `server` (an admin: `person`'s): no call uses it
        again, not even one already scheduled. 404 `CONNECTION_NOT_FOUND` for none."""
        who = _whose(caller, parts, person, everyone=False)
        assert who is not None
        if not await _store(parts).revoke(who, server):
            raise TarryError(
                ErrorCode.CONNECTION_NOT_FOUND, f"{who} has no connection to {server!r}"
            )

    return router


def _whose(caller: Caller, parts: AppParts, person: str | None, *, everyone: bool) -> str | None:
    """Whose connections a request is about: the caller's own, or (an admin only) those
    of `person`, or everyone's (None) where `everyone` allows it."""
    admin = parts.policy.is_admin(caller)
    if person is not None and person != caller.user and not admin:
        raise TarryError(
            ErrorCode.NOT_ALLOWED, "only an admin may see or revoke another's connections"
        )
    if person is None and not (admin and everyone):
        return caller.user
    return person


def callback_router() -> APIRouter:
    router = APIRouter(prefix="/v1/oauth", tags=["connections"])
    page = {"content": {"text/html": {}}, "description": "a page naming the error code"}

    @router.get(
        "/callback",
        responses={HTTPStatus.FORBIDDEN: page, HTTPStatus.SERVICE_UNAVAILABLE: page},
        response_class=HTMLResponse,
    )
    async def callback(
        parts: PartsOf,
        state: Annotated[str, Query(min_length=1, max_length=200)],
        code: Annotated[str | None, Query(max_length=4096)] = None,
        error: Annotated[str | None, Query(max_length=200)] = None,
    ) -> HTMLResponse:
        """Finishes a connect: the flow of `state`, once, its code traded for the grant;
        the run that waited is told. A page, as the browser the authorization server sent
        here shows it: 403 `CONNECT_REFUSED` for a state unknown, used or expired, or a
        refusal at the authorization server."""
        try:
            said = await _finish(parts, state, code, error)
        except TarryError as e:
            said = f"<code>{html.escape(e.code)}</code>: {html.escape(e.message)}"
            return HTMLResponse(_PAGE.format(said), status_code=status_of(e.code))
        return HTMLResponse(_PAGE.format(html.escape(said)))

    return router


_PAGE = "<!doctype html><meta charset=utf-8><title>Tarry: connect</title><p>{}</p>"


async def _finish(parts: AppParts, state: str, code: str | None, error: str | None) -> str:
    store = _store(parts)
    pending = await store.take(state)
    if pending is None:
        raise _refused("this connect link is unknown, used already or expired: open a new one")
    if error is not None or code is None:
        raise _refused(f"the authorization server did not grant access ({error})")
    try:
        grant = await oauth.exchange(pending, code)
    except (oauth.ConnectFailed, OSError) as e:
        raise _refused(f"the grant could not be made: {e}") from e
    await store.save(pending.person, pending.server, grant)
    # The person the flow was bound to connects, through the link's door.
    run = parts.tarry.get(pending.run_id, Caller(user=pending.person, door=Door.LINK))
    await run.connected(pending.server, pending.person)
    return f"Connected {pending.server} for {pending.person}: run {pending.run_id} goes on."
