"""The HTTP API as an ASGI app: `create_app(tarry, settings)`.

Routes: `/v1/runs...` (`tarry.api.runs`), `/v1/schedules...` (`tarry.api.schedules`),
`/v1/agui` (`tarry.api.agui`), `/a2a` (`tarry.api.a2a`: A2A, with its agent cards, where
the `a2a` extra is installed),
`/v1/wait-kinds` (`tarry.api.waits`), `/v1/me`
(`tarry.api.me`), `/v1/actions/{token}`
(`tarry.api.actions`), `/healthz`, `/openapi.json` and `/docs`; the web inbox
(`tarry/api/inbox/`: static HTML, CSS and JavaScript, no build step) at `/`. Every route
but `/healthz`, the docs and the inbox's files needs a bearer token when there are any
(`TARRY_API_TOKENS`, the config's `[api] tokens` and `[api.users]`; the inbox's page
sends one with its own requests), but the action links of notifications, whose token is
in their path. Every route answers only the hosts and pages `tarry.api.access` lets through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from functools import cache
from http import HTTPStatus
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from temporalio.service import RPCError

from tarry.api import runs
from tarry.api.access import AccessGuard, AllowedHosts, SecurityHeaders, page_policy
from tarry.api.actions import actions_router
from tarry.api.agui import agui_router
from tarry.api.audit import audit_router
from tarry.api.auth import bearer_guard
from tarry.api.datasets import datasets_router
from tarry.api.errors import BodyLimit, install_error_handlers
from tarry.api.evals import evals_router
from tarry.api.ledger import limits_router
from tarry.api.me import me_router
from tarry.api.memories import memories_router
from tarry.api.models import Health
from tarry.api.oauth import callback_router, connect_router, connections_router
from tarry.api.parts import AppParts, TarryOf
from tarry.api.schedules import schedules_router
from tarry.api.search import search_router
from tarry.api.timeline import timeline_router
from tarry.api.usage import usage_router
from tarry.api.waits import waits_router
from tarry.client import Tarry
from tarry.config.settings import TarrySettings

__all__ = ["HEALTH_TIMEOUT", "INBOX_DIR", "create_app"]

INBOX_DIR = Path(__file__).parent / "inbox"
"""The web inbox's files, served at `/`."""

A2A_INSTALLED = find_spec("a2a") is not None
"""Whether the `a2a` extra is installed (`pip install 'tarry[a2a]'`): without it the API
serves no `/a2a` and takes no remote agent's pushes (a lead then polls its remote task)."""

HEALTH_TIMEOUT = timedelta(seconds=2)
"""How long `/healthz` waits for Temporal before it says it cannot reach it."""


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await app.state.parts.feeds.aclose()
    await app.state.parts.search.aclose()
    if (connections := app.state.parts.connections) is not None:
        connections.close()


def create_app(
    tarry: Tarry, settings: TarrySettings, inbox_dir: Path | None = INBOX_DIR
) -> FastAPI:
    """The API over `tarry`'s client, guarded by `settings`' tokens and CORS origins;
    `inbox_dir`, a directory of static files (the web inbox; None: none), is served at `/`.
    What the routes work with is on `app.state` (`tarry.api.parts`), never in a closure."""
    app = _routed_app()
    app.openapi = _api_document  # type: ignore[method-assign]  # FastAPI's way to set one
    AppParts.of(tarry, settings).install(app)
    install_error_handlers(app)
    if A2A_INSTALLED:
        from tarry.api.a2a import a2a_routes

        app.router.routes.extend(a2a_routes())  # the protocol's own: not in the OpenAPI document
    if inbox_dir is not None:
        # What no route takes, so that every route wins over a file of the same path and
        # a wrong method on a route's path is its 405 (with `Allow`), not the files' own.
        app.router.default = StaticFiles(directory=inbox_dir, html=True)
    if settings.tarry_api_cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.tarry_api_cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        )
    app.add_middleware(BodyLimit)
    app.add_middleware(
        AccessGuard,
        allowed_hosts=AllowedHosts.parse(settings.tarry_api_allowed_hosts),
        cors_origins=settings.tarry_api_cors_origins,
    )
    app.add_middleware(SecurityHeaders)  # outermost: its headers go on every refusal too
    return app


def _routed_app() -> FastAPI:
    """An app with the API's routes, and nothing to serve them with yet."""
    app = FastAPI(
        title="Tarry",
        summary="Durable, human-in-the-loop LLM agent runs on Temporal.",
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    # The routes themselves, not `include_router(_api())`: an include is a context of its
    # own, which FastAPI fills on an app's first request by working out every route's
    # dependencies again (a quarter of a second of CPU an app). The included routers
    # inside `_api()` fill theirs once per process, so every app shares them. No app sets
    # `dependency_overrides`, which this way would not reach the routes.
    app.router.routes.extend(_api().routes)
    return app


@cache
def _api() -> APIRouter:
    """Every route of the API, built once per process and included by every app: building
    them makes a pydantic adapter per parameter, a fifth of a second in all, and apps can
    share them since their endpoints take what they work with from `app.state`."""
    api = APIRouter()
    guarded = [Depends(bearer_guard)]
    for router in (
        runs.router,
        schedules_router(),
        agui_router(),
        audit_router(),
        datasets_router(),
        timeline_router(),
        evals_router(),
        waits_router(),
        me_router(),
        limits_router(),
        search_router(),
        memories_router(),
        usage_router(),
        connect_router(),
        connections_router(),
    ):
        api.include_router(router, dependencies=guarded)
    api.include_router(_docs_router())  # the API's description: no data, the same everywhere
    api.include_router(actions_router())  # the link's token is its own guard
    api.include_router(callback_router())  # the flow's state is its own guard
    if A2A_INSTALLED:
        from tarry.api.a2a_push import a2a_push_router

        api.include_router(a2a_push_router())  # the call's push token is its own guard
    api.add_api_route(
        "/healthz",
        _healthz,
        name="healthz",
        methods=["GET"],
        tags=["health"],
        responses={HTTPStatus.SERVICE_UNAVAILABLE: {"model": Health}},
    )
    return api


@cache
def _api_document() -> dict[str, Any]:
    """The OpenAPI document, the same for every app (they serve the same routes), built
    once per process: half a second of CPU, and the first 422 or 405 of an app reads it.
    Shared, so read-only."""
    document: dict[str, Any] = _routed_app().openapi()
    return document


async def _healthz(response: Response, tarry: TarryOf) -> Health:
    """200 when Temporal answers, 503 when it does not. Needs no token."""
    try:
        reachable = await tarry.client.service_client.check_health(timeout=HEALTH_TIMEOUT)
    except (RPCError, RuntimeError):  # the SDK's failed (re)connect is a RuntimeError
        reachable = False
    if not reachable:
        response.status_code = HTTPStatus.SERVICE_UNAVAILABLE
    return Health(temporal="reachable" if reachable else "unreachable")


def _docs_router() -> APIRouter:
    """`/openapi.json` and `/docs`, as FastAPI serves them, without a token: they hold no
    data (the schema is the same for every deployment, and public with the code), and a
    browser opening `/docs` sends none; its "Authorize" button takes one for the calls
    tried from the page."""
    router = APIRouter(include_in_schema=False)

    @router.get("/openapi.json")
    async def openapi(request: Request) -> dict[str, Any]:
        document: dict[str, Any] = request.app.openapi()
        return document

    @router.get("/docs")
    async def docs() -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url="/openapi.json", title="Tarry API")
        # Swagger UI comes from a CDN and starts with an inline script: a policy of its own.
        page.headers["Content-Security-Policy"] = page_policy(bytes(page.body).decode())
        return page

    return router
