"""The HTTP API for tests: served by uvicorn in the test's process on a free loopback
port, over the client of a test's agent, and spoken to over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.fernet import Fernet
from httpx_sse import aconnect_sse
from pydantic import SecretStr

from tarry.api import ApiServer, create_app
from tarry.api.models import RunView
from tarry.client import RunHandle
from tarry.config.settings import TarrySettings
from tarry.config.tables import ServerLimits
from tests.conftest import FAST_TIMEOUTS, Agent
from tests.deadline import TIMEOUT, deadline

TLS = httpx.create_ssl_context()
"""The TLS settings of the tests' API clients, built once: httpx builds them for every client
it makes (25 ms of CPU), though the API here is plain HTTP on loopback."""

TOKEN = "tarry-test-token-5be1"

KEPT_ALIVE = httpx.Limits(keepalive_expiry=ServerLimits().idle_timeout / 2)
"""How long the tests' clients keep an idle connection: half as long as the API keeps it.
Both default to 5 s, so a request sent on a connection idle for about 5 s raced the server
closing it and failed with `httpx.ReadError` (seen in CI after a test's long MCP session)."""


def api_client(url: str, token: str | None = None, timeout: float = TIMEOUT) -> httpx.AsyncClient:
    """An HTTP client of the API at `url`, sending `token` (none: no `Authorization`)."""
    return httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {token}"} if token else {},
        timeout=httpx.Timeout(timeout, connect=deadline(5)),
        limits=KEPT_ALIVE,
        verify=TLS,
    )


@dataclass
class Api:
    http: httpx.AsyncClient
    agent: Agent
    url: str

    def run(self, run_id: str) -> RunHandle:
        """The run `run_id`, which the agent's replay check then covers too."""
        run = self.agent.tarry.get(run_id)
        if all(r.id != run_id for r in self.agent.runs):
            self.agent.runs.append(run)
        return run

    async def start(self, prompt: str = "", **input: Any) -> str:
        """Starts a run over HTTP, with the short timeouts of every test run."""
        input.setdefault("timeouts", json.loads(FAST_TIMEOUTS.model_dump_json()))
        response = await self.http.post("/v1/runs", json={"prompt": prompt, **input})
        assert response.status_code == 201, response.text
        run_id: str = response.json()["id"]
        self.run(run_id)
        return run_id

    async def state(self, run_id: str) -> RunView:
        response = await self.http.get(f"/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        return RunView.model_validate(response.json())

    async def events(self, path: str, **headers: str) -> AsyncIterator[tuple[str, Any, str]]:
        """(event, data as JSON, id) of each server-sent event at `path`."""
        async with aconnect_sse(self.http, "GET", path, headers=headers) as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                yield sse.event, json.loads(sse.data), sse.id


@dataclass(frozen=True)
class Access:
    """Whom a served API lets in (its `settings`), and whose token goes with every
    request a test sends (`token`; none: no `Authorization` header)."""

    settings: TarrySettings
    token: str | None = None

    @classmethod
    def of(
        cls,
        *tokens: str,
        cors_origins: tuple[str, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
    ) -> Access:
        """The API with `tokens` as TARRY_API_TOKENS (none: anyone on loopback), the
        test's requests sending the first."""
        settings = TarrySettings.model_construct(
            tarry_api_tokens=[SecretStr(t) for t in tokens],
            tarry_api_cors_origins=list(cors_origins),
            tarry_api_allowed_hosts=list(allowed_hosts),
        )
        return cls(settings, tokens[0] if tokens else None)


@asynccontextmanager
async def serving(
    agent: Agent,
    *tokens: str,
    cors_origins: tuple[str, ...] = (),
    allowed_hosts: tuple[str, ...] = (),
) -> AsyncIterator[Api]:
    """The API over `agent`, with `Access.of` these."""
    access = Access.of(*tokens, cors_origins=cors_origins, allowed_hosts=allowed_hosts)
    async with served(agent, access) as api:
        yield api


@asynccontextmanager
async def served(agent: Agent, access: Access) -> AsyncIterator[Api]:
    """The API over `agent`'s client, with `access`, on a free loopback port."""
    # On the machine of the worker's workspaces, with a search index, as under `tarry dev`.
    index = str(agent.workspace_root.parent / "search.db")
    update: dict[str, Any] = {
        "tarry_workspace_root": agent.workspace_root,
        "tarry_search_index": index,
    }
    if access.settings.tarry_connections_key is None:  # and a connections store
        update["tarry_connections_db"] = agent.workspace_root.parent / "connections.db"
        update["tarry_connections_key"] = SecretStr(Fernet.generate_key().decode())
    settings = access.settings.model_copy(update=update)
    async with (
        ApiServer(create_app(agent.tarry, settings), "127.0.0.1", 0) as server,
        api_client(server.url, access.token) as http,
    ):
        yield Api(http, agent, server.url)
