"""Who a request is, for the HTTP API and `tarry mcp --http` alike: a bearer token of
`TARRY_API_TOKENS` or the config file's `[api.users]`, a JWT of the company's identity
provider (`[api.oidc]`, `tarry.api.oidc`), or the user a sign-in gateway (`[api]
trusted_proxy`) names in a header, believed from the gateway's address only.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers

from tarry.api.oidc import OidcVerifier
from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode
from tarry.core.errors import TarryError
from tarry.core.identities import OIDC_PREFIX, SIGNED_IN_RESERVED, Caller, name_problem

__all__ = ["SignIn", "bearer_of"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class SignIn:
    """Tells who a request is, from a trusted gateway's header or its bearer token."""

    settings: TarrySettings
    required: bool
    """`TarrySettings.api_authenticates`: False, every request is the local user (the
    API then listens on loopback alone), as the CLI's are."""
    tokens: Sequence[tuple[Caller, bytes]]
    """The users' static tokens, as bytes for `secrets.compare_digest`."""
    oidc: OidcVerifier | None
    proxies: tuple[Network, ...]
    """`[api] trusted_proxy`: the gateways whose forwarded user is believed."""

    @classmethod
    def of(cls, settings: TarrySettings) -> SignIn:
        tokens = [
            (caller, token.get_secret_value().encode()) for caller, token in settings.api_users()
        ]
        api = settings.api_table()
        oidc = None if api.oidc is None else OidcVerifier(api.oidc)
        return cls(settings, settings.api_authenticates(), tokens, oidc, tuple(api.trusted_proxy))

    async def caller(self, token: str | None, client: str | None, headers: Headers) -> Caller:
        """Who sends a request with bearer `token` (None: none) from the address `client`
        with `headers`; the local user when the API asks no one. A request of the gateway
        that names its user is that user, whatever token it carries too (oauth2-proxy
        passes the ID token on); any other is its token's. `TarryError` (401
        `UNAUTHORIZED`, `USER_HEADER_REPEATED` or a `TOKEN_*` code) when it cannot tell;
        403 `USER_NAME_REFUSED` for a name no person may have (`name_problem`)."""
        if not self.required:
            # Loopback only (`tarry.api.server`): the person at this machine, as the CLI
            # and `tarry mcp` record them.
            return self.settings.local_caller()
        api = self.settings.api_table()
        gateway = self._is_gateway(client)
        user = self._forwarded_user(headers) if gateway else ""
        if user:
            self._check_name(
                user,
                f"the sign-in gateway's {api.forwarded_user_header}",
                "rename the user at the gateway",
            )
            listed = headers.get(api.forwarded_groups_header, "").split(",")
            return self._with_groups(user, [group.strip() for group in listed])
        if token is not None:
            return await self._of_token(token)
        if gateway:
            raise TarryError(
                ErrorCode.UNAUTHORIZED,
                f"the sign-in gateway sent no {api.forwarded_user_header} header",
            )
        raise TarryError(
            ErrorCode.UNAUTHORIZED,
            f"this API needs a token, {self.token_sources()}: Authorization: Bearer TOKEN",
        )

    def token_sources(self, alternative: str = "or") -> str:
        """Where a person finds a token for this API, in their words: the places of the
        static tokens (`[api.users]`, `TARRY_API_TOKENS`), `alternative` the identity
        provider's JWTs."""
        known = f"one of {self.settings.api_token_sources()}" if self.tokens else ""
        if self.oidc is not None:
            jwt = f"a JWT of {self.oidc.table.issuer}"
            return f"{known} {alternative} {jwt}" if known else jwt
        return known

    async def _of_token(self, token: str) -> Caller:
        given = token.encode()
        # Every token is compared, each in constant time, so the answer's timing tells
        # nothing about how much of a guess was right, nor which token it was near.
        matches = [secrets.compare_digest(given, known) for _, known in self.tokens]
        if any(matches):
            return self.tokens[matches.index(True)][0]
        if self.oidc is not None and token.count(".") == 2:  # a JWT: header.payload.signature
            claim, groups = await self.oidc.claims_of(token)
            name = self.oidc.mapped_name(claim)
            if name is None:  # the configuration's names were checked as it was loaded
                self._check_name(
                    claim,
                    f"the token's {self.oidc.table.user_claim!r} claim",
                    "map the user to a name in [api.oidc.users], or rename them at the provider",
                )
                name = f"{OIDC_PREFIX}{claim}"
            return self._with_groups(name, groups)
        raise TarryError(ErrorCode.UNAUTHORIZED, f"the token is not {self.token_sources('nor')}")

    def _forwarded_user(self, headers: Headers) -> str:
        """The user the gateway's `forwarded_user_header` names ("" for none); refused
        (401 `USER_HEADER_REPEATED`) when it is sent twice, as a gateway that adds its
        own beside the client's would: neither could be believed."""
        header = self.settings.api_table().forwarded_user_header
        given = headers.getlist(header)
        if len(given) > 1:
            raise TarryError(
                ErrorCode.USER_HEADER_REPEATED,
                f"the sign-in gateway sent {header} {len(given)} times; have it replace the"
                " header its clients send with its own",
            )
        return given[0].strip() if given else ""

    def _check_name(self, user: str, source: str, remedy: str) -> None:
        """Refuses (403 `USER_NAME_REFUSED`) a user the identity provider or the gateway
        names by a name no person may have, as the configuration's users are refused."""
        groups = self.settings.api_table().groups
        if problem := name_problem(user, groups, SIGNED_IN_RESERVED):
            raise TarryError(
                ErrorCode.USER_NAME_REFUSED,
                f"{source}: {problem}; {remedy}",
            )

    def _with_groups(self, user: str, groups: Sequence[str]) -> Caller:
        """`user` in the groups their sign-in names and those `[api.groups]` puts them in."""
        return self.settings.caller(user, groups)

    def _is_gateway(self, client: str | None) -> bool:
        """Whether the connection comes from `[api] trusted_proxy` (its own address, never
        one a header claims: `tarry.api.server` serves without uvicorn's proxy headers)."""
        if client is None or not self.proxies:
            return False
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.proxies)


def bearer_of(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None for none or another scheme."""
    scheme, _, token = (authorization or "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None
