"""Which browser pages may reach the HTTP API: a guard on `Host` and `Origin`, and the
headers that keep the inbox out of other sites' frames.

Tokens decide who may drive runs; without them the API trusts whoever reaches its
loopback port, and every page the browser on this machine opens reaches it. Three ways,
each closed here, with tokens or without:

- DNS rebinding: a page on `evil.example`, whose name then resolves to 127.0.0.1, is the
  same origin as the API under that name, so it may read and post anything. Its requests
  carry `Host: evil.example`; the API answers only the names it is reached by legitimately
  (421 `MISDIRECTED_REQUEST` otherwise).
- Cross-site requests: a page on another origin may post a form or `text/plain` without
  asking (no CORS preflight). Its `Origin` is not the API's own: refused (403 `FORBIDDEN`)
  for every method that changes something. `Origin: null` (a sandboxed frame on any
  site, a file, a redirect across sites) is never the API's own; the API's own pages
  send their real origin, as their referrer policy (`same-origin`) lets the browser.
  A route that changes something takes a JSON body only (`JSON_ONLY`, 415 otherwise),
  which no such form can send.
- Clickjacking: another site frames a run's page and has the user click Approve. Every
  response forbids framing (`frame-ancestors 'none'`, `X-Frame-Options: DENY`).
"""

from __future__ import annotations

import hashlib
import re
from base64 import b64encode
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tarry.api.errors import error_response
from tarry.temporal.servers import is_loopback

__all__ = [
    "ANY_HOST",
    "BODY_REQUIRED",
    "CONTENT_SECURITY_POLICY",
    "JSON_ONLY",
    "AccessGuard",
    "AllowedHosts",
    "SecurityHeaders",
    "page_policy",
]

ANY_HOST = "*"
"""In TARRY_API_ALLOWED_HOSTS: any `Host` (the API's own checks of it are off)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The inbox's and the API's policy: nothing but this server's own files, no inline
script (a model's HTML that slipped through the sanitiser would not run), no framing."""


async def _json_body(request: Request) -> None:
    """Refuses a state-changing request whose body is not declared JSON (415), so that
    a page's auto-submitted form (`text/plain`, urlencoded, multipart), which a browser
    sends cross-site without asking, changes nothing."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise HTTPException(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            "this route takes a JSON body: send Content-Type: application/json"
            " (and `{}` when there is nothing to say)",
        )


JSON_ONLY = [Depends(_json_body)]
"""The dependencies of a route that changes something."""
BODY_REQUIRED: dict[str, object] = {"requestBody": {"required": True}}
"""For a route whose body has no required field: the document still asks for one, since
without a JSON body (`{}` will do) the route answers 415."""

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing, so a foreign `Origin` may send them: CORS still keeps
their answers from the page."""

_UNGUARDED_PATHS = frozenset({"/healthz"})
"""Says only whether Temporal answers, and orchestrators probe it by the pod's address."""

_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not `no-referrer`: under it a browser sends `Origin: null` with a form the page
    # posts to its own API (the action link's confirm button), which the guard must
    # refuse, as it comes from a sandboxed frame on any site too. `same-origin` sends
    # this API's addresses (a link's token among them) to no other site either.
    "Referrer-Policy": "same-origin",
}


def _host_and_port(authority: str, default_port: int) -> tuple[str, int] | None:
    """`name:port` (or `[v6]:port`) split, the name lower-case; None if it is no authority."""
    try:
        parts = urlsplit(f"//{authority}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name or parts.username is not None or parts.path:
        return None
    return name, default_port if port is None else port


@dataclass(frozen=True)
class AllowedHosts:
    """TARRY_API_ALLOWED_HOSTS: the names the API answers to besides this machine's."""

    any_host: bool = False
    """`*`: any `Host` (the check is off)."""
    exact: frozenset[tuple[str, int]] = frozenset()
    """`name:port` entries."""
    any_port: frozenset[str] = frozenset()
    """`name` entries: the name on every port."""

    @classmethod
    def parse(cls, entries: Sequence[str]) -> AllowedHosts:
        """Raises ValueError, naming the entry, for one that is no `name[:port]` or `*`."""
        exact: set[tuple[str, int]] = set()
        any_port: set[str] = set()
        for entry in entries:
            if entry == ANY_HOST:
                continue
            parsed = _host_and_port(entry, 0)
            if parsed is None:
                raise ValueError(
                    f"TARRY_API_ALLOWED_HOSTS: {entry!r} is not a host; give NAME or"
                    " NAME:PORT as browsers send it in Host (no scheme, no path), or * for any"
                )
            if parsed[1] == 0:
                any_port.add(parsed[0])
            else:
                exact.add(parsed)
        return cls(ANY_HOST in entries, frozenset(exact), frozenset(any_port))

    def __contains__(self, host: tuple[str, int]) -> bool:
        return host in self.exact or host[0] in self.any_port


class AccessGuard:
    """Answers a request only when its `Host` names this machine (a loopback name or
    address, or the address the server listens on) or is one of `allowed_hosts`, and
    refuses a state-changing one whose `Origin` is neither the API's own (its `Host`),
    one of `allowed_hosts` (not merely `*`), nor one of `cors_origins`."""

    def __init__(
        self, app: ASGIApp, allowed_hosts: AllowedHosts, cors_origins: Sequence[str]
    ) -> None:
        self.app = app
        self.allowed = allowed_hosts
        self.cors_origins = frozenset(o.rstrip("/").lower() for o in cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in _UNGUARDED_PATHS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        default_port = 443 if scope["scheme"] == "https" else 80
        host = _host_and_port(headers.get("host", ""), default_port)
        if not self.allowed.any_host and (host is None or not self._is_ours(host, scope)):
            await error_response(
                HTTPStatus.MISDIRECTED_REQUEST,
                HTTPStatus.MISDIRECTED_REQUEST.name,
                f"this API does not answer to Host {headers.get('host', '')!r}; it answers to"
                " localhost and this machine's loopback addresses: behind a proxy or under"
                " another name, set TARRY_API_ALLOWED_HOSTS=NAME[,NAME...]",
            )(scope, receive, send)
            return
        origin = headers.get("origin")
        if (
            scope["method"] not in _SAFE_METHODS
            and origin is not None
            and not self._is_own_origin(origin, host)
        ):
            await error_response(
                HTTPStatus.FORBIDDEN,
                HTTPStatus.FORBIDDEN.name,
                f"refused a request from the page {origin!r}: it is not this API's own; to"
                " let it call the API, set TARRY_API_CORS_ORIGINS",
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _is_ours(self, host: tuple[str, int], scope: Scope) -> bool:
        name, port = host
        if host in self.allowed:
            return True
        listening = scope.get("server")
        # An address (never a name) cannot be rebound to another machine.
        return is_loopback(name) or (
            listening is not None and (name, port) == (listening[0], listening[1])
        )

    def _is_own_origin(self, origin: str, host: tuple[str, int] | None) -> bool:
        # `null` names no page, even listed (the settings refuse it; a test's do not).
        if origin != "null" and origin.rstrip("/").lower() in self.cors_origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):
            return False  # `null`: a sandboxed frame, a file, a redirect across sites
        page = _host_and_port(parts.netloc, 443 if parts.scheme == "https" else 80)
        # Behind a proxy the page's port (443) is not the one the API sees in `Host`.
        return page is not None and (page == host or page in self.allowed)


class SecurityHeaders:
    """Adds `CONTENT_SECURITY_POLICY` (unless a route set its own), `X-Frame-Options:
    DENY`, `X-Content-Type-Options: nosniff` and `Referrer-Policy: same-origin` to every
    response, errors included. A `<meta>` policy cannot forbid framing; a header can."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
                for name, value in _HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def page_policy(html: str) -> str:
    """A policy for a page that is not ours (Swagger UI at `/docs`): what it loads from
    the hosts it names (a CDN) and exactly its own inline scripts (by hash), no other
    script; no framing, like every other page."""
    scripts = " ".join(sorted(set(re.findall(r'<script src="(https://[^/"]+)', html))))
    hosts = " ".join(sorted(set(re.findall(r'(?:src|href)="(https://[^/"]+)', html))))
    hashes = " ".join(
        f"'sha256-{b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
        for script in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    )
    # Swagger UI styles its elements inline, which a policy cannot allow by hash.
    return (
        f"default-src 'none'; script-src {scripts} {hashes}; style-src {hosts} 'unsafe-inline';"
        f" img-src 'self' data: {hosts}; connect-src 'self'; base-uri 'none';"
        " form-action 'self'; frame-ancestors 'none'"
    )
