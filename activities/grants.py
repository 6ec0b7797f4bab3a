"""Whose grant a call carries, for an MCP server with `auth = "oauth"` and for a tool
declared with `@tool(oauth=...)` alike: the person's stored grant (`tarry.connections`),
refreshed first when it has expired, so a run parked for weeks calls with a live token.
No grant, a refused refresh, or a token the server refuses: the call fails with
`AUTH_REQUIRED`, naming the server (or provider) and the person (never the token), and
the run waits for them to connect (`workflows.auth_waits`).

A refresh needs the `mcp` extra's OAuth models (`tarry.connections.oauth`).
"""

from __future__ import annotations

import logging

from temporalio.exceptions import ApplicationError

from tarry.connections import oauth
from tarry.connections.store import ConnectionStore
from tarry.contracts import ErrorCode, ToolInvocation

__all__ = ["Grants", "auth_required", "person_of"]

log = logging.getLogger("tarry.connections")


def auth_required(server: str, person: str | None, why: str) -> ApplicationError:
    """The failure the workflow turns into a wait for `person` to connect to `server` (an
    MCP server, or an OAuth provider)."""
    who = person or "nobody"
    return ApplicationError(
        f"{server!r} needs {who}'s grant: {why}; connect to go on",
        {"server": server, "person": person},
        type=ErrorCode.AUTH_REQUIRED,
        non_retryable=True,
    )


def person_of(token: str, invocation: ToolInvocation) -> str | None:
    """Whose grant the call carries: the person who approved the call (`token =
    "approver"`), or else the run's owner (a call no person decided on, too)."""
    decision = invocation.decision
    if token == "approver" and decision is not None and decision.user is not None:
        return decision.user
    return invocation.owner


class Grants:
    """The worker's side of the connections store: live access tokens for calls."""

    def __init__(self, store: ConnectionStore | None) -> None:
        self._store = store

    async def bearer(self, server: str, person: str | None) -> str:
        """`person`'s live access token for `server`, refreshed if it expired."""
        if self._store is None:
            raise ApplicationError(
                f"{server!r} uses OAuth but this worker keeps no connections:"
                " set TARRY_CONNECTIONS_KEY (and TARRY_CONNECTIONS_DB) as the API has them",
                type=ErrorCode.CONNECTIONS_UNAVAILABLE,
                non_retryable=True,
            )
        if person is None:
            raise auth_required(server, person, "the run names no owner whose grant it takes")
        grant = await self._store.grant(person, server)
        if grant is None:
            raise auth_required(server, person, f"{person} has not connected it")
        if grant.expired():
            fresh = await oauth.refresh(grant)
            if fresh is None:
                await self._store.revoke(person, server)
                raise auth_required(server, person, "the grant expired and could not be refreshed")
            if await self._store.refreshed(person, server, grant, fresh):
                log.info("refreshed %s's grant to %r", person, server)
            current = await self._store.grant(person, server)  # another's refresh, or a revoke
            if current is None:
                raise auth_required(server, person, f"{person} revoked it")
            grant = current
        return grant.access_token

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    async def refused(self, server: str, person: str) -> ApplicationError:
        """The server refused the person's token (revoked at its authorization server):
        the grant is forgotten, and the failure that makes the run wait is returned."""
        if self._store is not None:
            await self._store.revoke(person, server)
        return auth_required(server, person, "the server refused the grant (revoked?)")
