"""The OAuth client side of a connection, as the MCP authorization spec has it: the MCP
server's protected-resource metadata names its authorization server, whose metadata
names the endpoints; a pre-registered client or dynamic registration; the authorization
code flow with PKCE; refresh. An `[oauth_providers.NAME]` that worker tools use names its
authorization server itself (its issuer, or its endpoints); the flow is the same.

The `mcp` SDK's models, discovery order and PKCE are used as they are. Its
`OAuthClientProvider` is not: it runs the whole flow inside one process (a redirect
handler, then a callback it awaits), where here the flow starts at the API's connect
link, ends at its callback, possibly weeks into a run, and the worker that uses the grant
is another process. Needs the `mcp` extra, for every OAuth server, an MCP server's or not.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import httpx

from tarry.config.tables import OAuthProvider
from tarry.connections.store import Grant, PendingConnect

if TYPE_CHECKING:
    from mcp.shared.auth import OAuthMetadata

__all__ = [
    "ConnectFailed",
    "Endpoints",
    "authorization_url",
    "discover",
    "exchange",
    "provider_endpoints",
    "refresh",
]

_TIMEOUT = httpx.Timeout(15)


class ConnectFailed(Exception):
    """An authorization server or MCP server answered the flow with something unusable."""


@dataclass(frozen=True)
class Endpoints:
    """What discovery found: where to send a person, and where to trade codes."""

    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None
    resource: str | None
    """The resource the grant is for (RFC 8707): the MCP server's; a provider's if its
    config names one."""
    scopes: list[str]
    """The scopes to ask for when the config names none, as the SDK picks them (the
    resource's `scopes_supported`, else the authorization server's)."""


async def discover(server_url: str) -> Endpoints:
    """The authorization server of the MCP server at `server_url`: its protected-resource
    metadata (RFC 9728), then the authorization server's metadata (RFC 8414, or OpenID
    discovery), in the order the SDK tries them."""
    from mcp.client.auth.utils import (
        build_protected_resource_metadata_discovery_urls,
        get_client_metadata_scopes,
    )
    from mcp.shared.auth import ProtectedResourceMetadata

    async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
        resource = None
        for url in build_protected_resource_metadata_discovery_urls(None, server_url):
            answer = await http.get(url)
            if answer.status_code == 200:
                resource = ProtectedResourceMetadata.model_validate_json(answer.content)
                break
        issuer = str(resource.authorization_servers[0]) if resource is not None else None
        metadata = await _metadata(http, issuer, server_url)
    return _endpoints(
        metadata,
        resource=str(resource.resource) if resource is not None else server_url,
        scopes=(get_client_metadata_scopes(None, resource, metadata) or "").split(),
    )


async def provider_endpoints(provider: OAuthProvider) -> Endpoints:
    """The endpoints of an `[oauth_providers.NAME]`: its config's, or those its issuer's
    metadata (RFC 8414, or OpenID discovery) names."""
    if provider.issuer is None:
        assert provider.authorization_endpoint is not None  # the table checks both are set
        assert provider.token_endpoint is not None
        return Endpoints(
            authorization_endpoint=provider.authorization_endpoint,
            token_endpoint=provider.token_endpoint,
            registration_endpoint=None,
            resource=provider.resource,
            scopes=[],
        )
    from mcp.client.auth.utils import get_client_metadata_scopes

    async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
        metadata = await _metadata(http, provider.issuer, provider.issuer)
    scopes = get_client_metadata_scopes(None, None, metadata) or ""
    return _endpoints(metadata, resource=provider.resource, scopes=scopes.split())


async def _metadata(http: httpx.AsyncClient, issuer: str | None, server_url: str) -> OAuthMetadata:
    """The authorization server's metadata, at the URLs the SDK tries in its order."""
    from mcp.client.auth.utils import build_oauth_authorization_server_metadata_discovery_urls
    from mcp.shared.auth import OAuthMetadata

    for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, server_url):
        answer = await http.get(url)
        if answer.status_code == 200:
            return OAuthMetadata.model_validate_json(answer.content)
    raise ConnectFailed(f"no authorization server metadata found for {issuer or server_url}")


def _endpoints(metadata: OAuthMetadata, resource: str | None, scopes: list[str]) -> Endpoints:
    registration = metadata.registration_endpoint
    return Endpoints(
        authorization_endpoint=str(metadata.authorization_endpoint),
        token_endpoint=str(metadata.token_endpoint),
        registration_endpoint=str(registration) if registration else None,
        resource=resource,
        scopes=scopes,
    )


async def register(endpoints: Endpoints, redirect_uri: str) -> tuple[str, str | None]:
    """A client registered dynamically (RFC 7591): its id and secret."""
    from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

    if endpoints.registration_endpoint is None:
        raise ConnectFailed(
            "the authorization server offers no dynamic registration: configure the"
            " server's `client_id` (and `client_secret`)"
        )
    metadata = OAuthClientMetadata(
        redirect_uris=[redirect_uri],
        client_name="Tarry",
        grant_types=["authorization_code", "refresh_token"],
    )
    async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
        answer = await http.post(
            endpoints.registration_endpoint,
            json=metadata.model_dump(mode="json", by_alias=True, exclude_none=True),
        )
    if answer.status_code not in (200, 201):
        raise ConnectFailed(f"client registration refused ({answer.status_code})")
    client = OAuthClientInformationFull.model_validate_json(answer.content)
    assert client.client_id is not None
    return client.client_id, client.client_secret


def authorization_url(
    endpoints: Endpoints, client_id: str, redirect_uri: str, scopes: list[str]
) -> tuple[str, str, str]:
    """Where to send the person (authorization code with PKCE, S256): the URL, its
    `state` and the PKCE verifier the code is traded with."""
    from mcp.client.auth.oauth2 import PKCEParameters

    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.code_challenge,
        "code_challenge_method": "S256",
    }
    if endpoints.resource is not None:
        query["resource"] = endpoints.resource  # RFC 8707
    if scopes := scopes or endpoints.scopes:
        query["scope"] = " ".join(scopes)
    return f"{endpoints.authorization_endpoint}?{urlencode(query)}", state, pkce.code_verifier


async def exchange(pending: PendingConnect, code: str) -> Grant:
    """The grant the authorization code buys, with the flow's PKCE verifier."""
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": pending.redirect_uri,
        "code_verifier": pending.verifier,
    }
    return await _token(pending.token_endpoint, pending.client_id, pending.client_secret, data)


async def refresh(grant: Grant) -> Grant | None:
    """A new grant for an expired one, by its refresh token; None when the server refuses
    (revoked, expired) or there is no refresh token: the person connects again."""
    if grant.refresh_token is None:
        return None
    data = {"grant_type": "refresh_token", "refresh_token": grant.refresh_token}
    try:
        new = await _token(grant.token_endpoint, grant.client_id, grant.client_secret, data)
    except ConnectFailed:
        return None
    if new.refresh_token is None:  # RFC 6749 §6: the server may keep the old one
        new = Grant(**{**new.__dict__, "refresh_token": grant.refresh_token})
    return new


async def _token(
    endpoint: str, client_id: str, client_secret: str | None, data: dict[str, str]
) -> Grant:
    from mcp.shared.auth import OAuthToken

    form = data if client_secret else {**data, "client_id": client_id}
    async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
        if client_secret:
            answer = await http.post(endpoint, data=form, auth=(client_id, client_secret))
        else:
            answer = await http.post(endpoint, data=form)
    if answer.status_code != 200:
        # The body may echo what was sent: only the status goes into the message.
        raise ConnectFailed(f"the token endpoint refused ({answer.status_code})")
    token = OAuthToken.model_validate_json(answer.content)
    return Grant(
        access_token=token.access_token,
        refresh_token=token.refresh_token,
        expires_at=None if token.expires_in is None else time.time() + token.expires_in,
        scope=token.scope,
        token_endpoint=endpoint,
        client_id=client_id,
        client_secret=client_secret,
    )
