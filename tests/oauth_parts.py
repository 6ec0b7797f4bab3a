"""The real parts the OAuth tests share (tests/test_oauth.py: MCP servers,
tests/test_oauth_http_tools.py: a worker's own tools calling an HTTP API): an OpenID
provider from PyPI (`oidc-provider-mock`, Authlib's server underneath, as
`tarry.testing.oauth_servers` runs it) on a free port, a
local OTLP receiver, and a stack of alice and bob on the HTTP API with a worker and the
connections store both share; and the steps a person takes: connect, consent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from cryptography.fernet import Fernet

from tarry.client import RunHandle
from tarry.config.settings import TarrySettings, load_settings
from tarry.connections.store import ConnectionStore
from tarry.contracts import Phase, WaitingFor
from tarry.testing import oauth_servers
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Access, Api, served
from tests.local_http import serving_app
from tests.test_http_api_people import ALICE, BOB, CAROL, as_
from tests.test_notifications import Receiver, entry

KEY = Fernet.generate_key().decode()
PROVIDER_LOGGERS = ("authlib", "werkzeug", "oidc_provider_mock")
"""The authorization server runs in the test's process, and its own logs tell its tokens."""


@dataclass
class Provider:
    """The authorization server (`tarry.testing.oauth_servers`, which the offline tour
    runs too), and a way through its consent page without a browser."""

    url: str

    async def consent(self, http: httpx.AsyncClient, authorize_url: str, sub: str) -> str:
        return await oauth_servers.consent(http, authorize_url, sub)

    async def service_token(self) -> str:
        """An access token of the service account the worker lists tools with."""
        return await oauth_servers.service_token(self.url)

    async def revoke(self, sub: str) -> None:
        async with httpx.AsyncClient() as http:
            await http.post(f"{self.url}/users/{sub}/revoke-tokens")


@pytest.fixture
def provider() -> Iterator[Provider]:
    with oauth_servers.authorization_server() as url:
        yield Provider(url)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@dataclass
class Setup:
    otlp: OtlpReceiver
    agent: Agent
    api: Api
    provider: Provider
    store: ConnectionStore
    receiver: Receiver
    """Told of every `waiting_for_auth` stop point (`[[notify]]`)."""


@dataclass
class OtlpReceiver:
    """A local OTLP/HTTP receiver: the bodies of the trace exports it was sent."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)

    async def take(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        return web.Response()


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.take)
    async with serving_app(app) as url:
        receiver.url = f"{url}/v1/traces"
        yield receiver


@pytest.fixture
def traced() -> bool:
    """Whether the worker traces runs, with their content, to the `otlp` receiver."""
    return False


@dataclass
class Parts:
    """The fixtures a stack is made of."""

    agent_factory: Any
    provider: Provider
    receiver: Receiver
    otlp: OtlpReceiver
    traced: bool
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch


@pytest.fixture
def parts(
    agent_factory: Any,
    provider: Provider,
    receiver: Receiver,
    otlp: OtlpReceiver,
    traced: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Parts:
    return Parts(agent_factory, provider, receiver, otlp, traced, tmp_path, monkeypatch)


@asynccontextmanager
async def stack(
    parts: Parts, config: str, agent: Callable[[TarrySettings], Mapping[str, Any]]
) -> AsyncIterator[Setup]:
    """alice and bob on the API (carol its admin), with the worker's `config` (TOML tables) and a
    `[[notify]]` receiver of `waiting_for_auth`, and a worker made with what `agent`
    gives for the settings (its MCP servers, its tools); the connections store both share."""
    path = parts.tmp_path / "tarry.toml"
    path.write_text(
        f'[api]\nvisibility = "team"\nadmins = ["carol"]\n'
        f'[api.users]\nalice = "{ALICE}"\nbob = "{BOB}"\ncarol = "{CAROL}"\n'
        + config
        + entry(parts.receiver.url, ["waiting_for_auth"])
    )
    db = parts.tmp_path / "connections.db"
    parts.monkeypatch.setenv("TARRY_CONFIG", str(path))
    parts.monkeypatch.setenv("TARRY_CONNECTIONS_KEY", KEY)
    parts.monkeypatch.setenv("TARRY_CONNECTIONS_DB", str(db))
    settings = load_settings()
    tracing: dict[str, Any] = {}
    if parts.traced:
        parts.monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", parts.otlp.url)
        tracing = {"tarry_tracing": True, "tarry_trace_content": True}
    worker = await parts.agent_factory(
        worker_settings={"tarry_connections_key": KEY, "tarry_connections_db": db, **tracing},
        **agent(settings),
    )
    store = ConnectionStore(db, KEY)
    async with served(worker, Access(settings, ALICE)) as api:
        yield Setup(parts.otlp, worker, api, parts.provider, store, parts.receiver)
    store.close()


async def waiting_for_auth(api: Api, run_id: str) -> dict[str, Any]:
    async with asyncio.timeout(deadline(TIMEOUT)):
        while True:
            state: dict[str, Any] = (await api.http.get(f"/v1/runs/{run_id}")).json()
            if state.get("waiting_for") == WaitingFor.AUTH:
                return state
            await asyncio.sleep(0.1)


async def connect(
    setup: Setup, run_id: str, server: str, person: str = "alice", token: str = ALICE
) -> str:
    """`person` (alice) opens her connect link to `server` and consents: the callback URL
    the provider sent her browser to (already followed)."""
    link = await setup.api.http.get(f"/v1/oauth/connect/{run_id}/{server}", headers=as_(token))
    assert link.status_code == 302, link.text
    async with httpx.AsyncClient() as browser:
        callback = await setup.provider.consent(browser, link.headers["location"], person)
        finished = await browser.get(callback)
    assert finished.status_code == 200, finished.text
    return callback


async def pending_call(api: Api, run_id: str) -> str:
    async with asyncio.timeout(deadline(TIMEOUT)):
        while True:
            state = (await api.http.get(f"/v1/runs/{run_id}")).json()
            if state.get("pending_approvals"):
                call_id: str = state["pending_approvals"][0]["call_id"]
                return call_id
            await asyncio.sleep(0.1)


async def approved_and_connected_by_bob(setup: Setup, tool: str, server: str) -> RunHandle:
    """Alice's run whose call of `tool` only bob may approve, once bob approved it, was
    asked for his own grant to `server` (an approved call acts as its approver) and gave
    it: the run, at its next stop."""
    run_id = await setup.api.start(
        "who approved?", require_approval=[tool], approvers={"*": ["bob"]}
    )
    call_id = await pending_call(setup.api, run_id)
    decided = await setup.api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"call_id": call_id, "approved": True},
        headers=as_(BOB),
    )  # fmt: skip
    assert decided.status_code == 200, decided.text
    state = await waiting_for_auth(setup.api, run_id)
    assert [need["person"] for need in state["auth_needed"]] == ["bob"]
    await connect(setup, run_id, server, "bob", BOB)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    return run
