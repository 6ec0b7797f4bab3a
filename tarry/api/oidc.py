"""Bearer JWTs of the company's identity provider (`[api.oidc]`), checked with PyJWT.

A token is believed only when it is signed, with an algorithm of the allow-list, by a key
the provider publishes (its JWKS, fetched over HTTP and cached; a `kid` the cache lacks
fetches it again, so a rotated key works without a restart), for this API (`aud`), by
this provider (`iss`), and is valid now (`exp`, `nbf`, give or take `leeway`). Each way
a token fails has its own code, so a person (or their client) knows what to fix: an
expired token needs a new one, a token for another audience another client id.

The algorithm is checked against the allow-list before any key is looked at: `none` and
`HS256` (which, verified "with the key", would take the public key as its shared secret)
never reach a signature check.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jwt
from jwt import PyJWK, PyJWKClient

from tarry.config.tables import OidcTable
from tarry.contracts import ErrorCode
from tarry.core.errors import TarryError

__all__ = ["DISCOVERY_PATH", "OidcVerifier", "TokenClaims"]

DISCOVERY_PATH = "/.well-known/openid-configuration"
"""Where an issuer publishes its discovery document, whose `jwks_uri` names its keys."""

VERIFY_THREADS = 4
"""Threads that check JWTs, the API's own: a provider that hangs holds these alone, never
the threads the rest of the process shares (`asyncio.to_thread`'s: the payload store's)."""

TokenClaims = tuple[str, tuple[str, ...]]
"""The user a token's `user_claim` names (as the provider names them: `mapped_name` gives
Tarry's name) and the groups it lists."""

_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC"}
"""The kind of key (its JWK `kty`) each family of `OIDC_ALGORITHMS` verifies with."""

_FAILURES: tuple[tuple[type[jwt.InvalidTokenError], ErrorCode, str], ...] = (
    # Subclasses before the classes they extend.
    (jwt.ExpiredSignatureError, ErrorCode.TOKEN_EXPIRED, "the token has expired; sign in again"),
    (
        jwt.ImmatureSignatureError,
        ErrorCode.TOKEN_NOT_YET_VALID,
        "the token is not valid yet (nbf or iat is in the future); check the clocks",
    ),
    (jwt.InvalidAudienceError, ErrorCode.TOKEN_WRONG_AUDIENCE, "the token is for another audience"),
    (jwt.InvalidIssuerError, ErrorCode.TOKEN_WRONG_ISSUER, "the token is from another issuer"),
    (jwt.InvalidSignatureError, ErrorCode.TOKEN_INVALID, "the token's signature does not verify"),
    (jwt.MissingRequiredClaimError, ErrorCode.TOKEN_INVALID, "the token lacks a claim"),
    (jwt.InvalidTokenError, ErrorCode.TOKEN_INVALID, "the token is not a valid JWT"),
)


class OidcVerifier:
    """Checks bearer JWTs against one `[api.oidc]` table. `verify` blocks (the keys come
    over HTTP when the cache lacks them): call it from a thread (`claims_of` does)."""

    def __init__(self, table: OidcTable) -> None:
        self.table = table
        self._keys: PyJWKClient | None = None
        self._lock = threading.Lock()
        self._discovery_failed: tuple[float, TarryError] | None = None
        """When discovery last failed (`time.monotonic()`), and how."""
        self._threads = ThreadPoolExecutor(VERIFY_THREADS, thread_name_prefix="tarry-oidc")

    async def claims_of(self, token: str) -> TokenClaims:
        """`verify` on the verifier's own threads, so a fetch of the keys never stalls
        the event loop, nor, when the provider hangs, anything but other JWTs' checks."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, self.verify, token)

    def verify(self, token: str) -> TokenClaims:
        """The user and groups of a valid `token`; `TarryError` with a `TOKEN_*` code
        otherwise, or `IDENTITY_PROVIDER_UNAVAILABLE` when the keys cannot be fetched."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise TarryError(ErrorCode.TOKEN_INVALID, "the token is not a valid JWT") from None
        algorithm = header.get("alg")
        if algorithm not in self.table.algorithms:
            raise TarryError(
                ErrorCode.TOKEN_ALGORITHM_REFUSED,
                f"the token is signed with {algorithm!r}; this API accepts"
                f" {', '.join(self.table.algorithms)} ([api.oidc] algorithms)",
            )
        key = self._key(header.get("kid"))
        if key.key_type != _KEY_TYPES[algorithm[:2]]:
            # PyJWT would take the key for a PEM text and fail with a TypeError (a 500).
            raise TarryError(
                ErrorCode.TOKEN_INVALID,
                f"the token's algorithm {algorithm} does not fit its key {header['kid']!r}"
                f" (an {key.key_type} key)",
            )
        try:
            # The key itself, not its JWK: the token's algorithm (of the allow-list) checks
            # it, where a JWK without `alg` would be taken for RS256 whatever the token says.
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                audience=self.table.audience,
                issuer=self.table.issuer,
                leeway=self.table.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.InvalidTokenError as e:
            raise _refusal(e) from None
        except jwt.InvalidKeyError:
            raise TarryError(
                ErrorCode.TOKEN_INVALID, f"the token's algorithm {algorithm} does not fit its key"
            ) from None
        return self._identity(claims)

    def mapped_name(self, claim: str) -> str | None:
        """The name `[api.oidc.users]` gives the user whose `user_claim` is `claim`; None
        for one it does not map, who is `oidc:CLAIM` (`tarry.core.identities.OIDC_PREFIX`):
        namespaced, the provider's users never pass for a static token's user, the
        local `cli:NAME`, or a group."""
        return next((name for name, mapped in self.table.users.items() if mapped == claim), None)

    def _key(self, kid: object) -> PyJWK:
        if not isinstance(kid, str) or not kid:
            raise TarryError(ErrorCode.TOKEN_UNKNOWN_KEY, "the token names no key (kid)")
        try:
            return self._client().get_signing_key(kid)
        except jwt.PyJWKClientConnectionError as e:
            raise _unavailable(f"keys could not be fetched: {e}") from None
        except jwt.PyJWKClientError:
            raise TarryError(
                ErrorCode.TOKEN_UNKNOWN_KEY,
                f"the token's key {kid!r} is not one the identity provider publishes",
            ) from None
        except jwt.PyJWTError as e:  # a key set with no usable key, a key it cannot read
            raise _unavailable(f"keys could not be read: {e}") from None

    def _client(self) -> PyJWKClient:
        """The provider's keys, cached; made at the first token, so that a provider down
        while the API starts delays nothing but sign-ins. The lock makes one discovery
        at a time: the JWTs that arrive meanwhile wait for its answer (at most
        `fetch_timeout`), on the verifier's threads, where static tokens never wait."""
        with self._lock:
            if self._keys is None:
                url = self.table.jwks_url or self._jwks_url_unless_failing()
                self._keys = PyJWKClient(
                    url,
                    timeout=self.table.fetch_timeout,
                    cooldown_duration=self.table.jwks_cooldown,
                )
            return self._keys

    def _jwks_url_unless_failing(self) -> str:
        """`_discovered_jwks_url`, but for `discovery_cooldown` seconds after it failed the
        same failure again, without asking: a provider that is down or hangs is not asked
        again by every JWT, each waiting `fetch_timeout` behind the one before."""
        now = time.monotonic()
        if self._discovery_failed is not None:
            failed_at, failure = self._discovery_failed
            if now < failed_at + self.table.discovery_cooldown:
                raise TarryError(failure.code, failure.message)
        try:
            url = self._discovered_jwks_url()
        except TarryError as e:
            self._discovery_failed = (time.monotonic(), e)
            raise
        self._discovery_failed = None
        return url

    def _discovered_jwks_url(self) -> str:
        where = self.table.issuer.rstrip("/") + DISCOVERY_PATH
        try:
            response = httpx.get(where, timeout=self.table.fetch_timeout)
            response.raise_for_status()
            document = response.json()
        except (httpx.HTTPError, ValueError) as e:
            raise _unavailable(f"its discovery document {where} could not be read: {e}") from None
        if not isinstance(document, Mapping) or document.get("issuer") != self.table.issuer:
            # OpenID Connect Discovery 1.0, 4.3: a document for another issuer is not this one's.
            raise _unavailable(f"{where} names another issuer than {self.table.issuer}")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise _unavailable(f"{where} names no jwks_uri")
        return jwks_uri

    def _identity(self, claims: Mapping[str, Any]) -> TokenClaims:
        user = claims.get(self.table.user_claim)
        if not isinstance(user, str) or not user.strip():
            raise TarryError(
                ErrorCode.TOKEN_INVALID,
                f"the token's {self.table.user_claim!r} claim names no user"
                " ([api.oidc] user_claim)",
            )
        listed = claims.get(self.table.groups_claim) if self.table.groups_claim else None
        if isinstance(listed, str):
            listed = [listed]
        groups = tuple(g for g in listed if isinstance(g, str)) if isinstance(listed, list) else ()
        return user, groups


def _refusal(error: jwt.InvalidTokenError) -> TarryError:
    code, message = next((c, m) for kind, c, m in _FAILURES if isinstance(error, kind))
    return TarryError(code, f"{message} ({error})")


def _unavailable(what: str) -> TarryError:
    return TarryError(
        ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE,
        f"cannot check the token: the identity provider's {what}",
    )
