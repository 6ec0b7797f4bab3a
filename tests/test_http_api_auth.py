"""Who may use the HTTP API: a bearer token of TARRY_API_TOKENS (or the config's) on
every route but `/healthz` and the docs, and no API beyond loopback without tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tarry.api import ApiServer, create_app
from tarry.api.models import Health
from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode
from tests.cli import TARRY, agent_env
from tests.conftest import Agent
from tests.deadline import deadline
from tests.faults import LOCAL_USER
from tests.http_api import TOKEN, Access, Api, serving


@pytest.fixture
def api_access() -> Access:
    """The `api` fixture's: two tokens, the test's requests sending the first."""
    return Access.of(TOKEN, "another-token-of-the-api")


def routes() -> list[tuple[str, str]]:
    """(method, path) of every route the API has, with `run-x` for a run id: those its
    OpenAPI document describes, and the document and its docs page themselves."""
    app = create_app(None, TarrySettings.model_construct())  # type: ignore[arg-type]
    described = [
        (method.upper(), path.replace("{run_id}", "run-x"))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    ]
    return [*described, ("GET", "/openapi.json"), ("GET", "/docs")]


async def test_without_a_token_every_route_but_healthz_and_the_docs_is_401(api: Api) -> None:
    answers = {
        (method, path): await api.http.request(method, path, headers={"Authorization": ""}, json={})
        for method, path in routes()
    }

    # The probe answers without a token: whether Temporal answered it in time (200, or
    # 503 from a server too busy to answer within `HEALTH_TIMEOUT`), never 401.
    health = answers.pop(("GET", "/healthz"))
    assert health.status_code != 401
    Health.model_validate(health.json())  # the probe's own answer, not the guard's error
    # The API's description holds no data: a browser opening /docs sends no token.
    docs, schema = answers.pop(("GET", "/docs")), answers.pop(("GET", "/openapi.json"))
    assert (docs.status_code, schema.status_code) == (200, 200)
    assert "/v1/runs" in schema.json()["paths"]
    # An action link's token is its own guard: a token that is none decides nothing.
    for method in ("GET", "POST"):
        link = answers.pop((method, "/v1/actions/{token}"))
        assert link.status_code == 403, method
        assert ErrorCode.ACTION_LINK_INVALID in link.text
    # A connect's callback is the authorization server's redirect of a browser: its
    # single-use state is its own guard, and a state that is none connects nothing.
    answers.pop(("GET", "/v1/oauth/callback"))
    callback = await api.http.get(
        "/v1/oauth/callback", params={"state": "none"}, headers={"Authorization": ""}
    )
    assert callback.status_code == 403
    assert ErrorCode.CONNECT_REFUSED in callback.text
    # A remote A2A agent's push carries its call's token, which is its guard: without it,
    # the run is not told.
    push = answers.pop(("POST", "/v1/a2a/push/run-x/{call}"))
    assert push.status_code == 403
    assert ErrorCode.A2A_PUSH_REFUSED in push.text
    assert len(answers) >= 11
    for route, response in answers.items():
        assert response.status_code == 401, route
        assert response.json()["error"]["code"] == ErrorCode.UNAUTHORIZED, route
        assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_without_a_token_a_body_that_is_no_json_is_401_not_422(api: Api) -> None:
    """The token is checked before the body is read: a caller without one learns nothing
    of what the schema wants."""
    answers = {
        (method, path): await api.http.request(
            method,
            path,
            headers={"Authorization": "", "Content-Type": "application/json"},
            content=b"{bad",
        )
        for method, path in routes()
        if method == "POST" and not path.startswith(("/v1/actions/", "/v1/a2a/push/"))
    }

    assert len(answers) >= 8
    for route, response in answers.items():
        assert response.status_code == 401, route
        assert response.json()["error"]["code"] == ErrorCode.UNAUTHORIZED, route


async def test_a_wrong_token_is_401(api: Api) -> None:
    response = await api.http.get("/v1/runs", headers={"Authorization": "Bearer guessed"})

    assert response.status_code == 401
    assert response.json()["error"] == {
        "code": ErrorCode.UNAUTHORIZED,
        "message": "the token is not one of TARRY_API_TOKENS",
    }


@asynccontextmanager
async def users_api(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an API whose tokens are the config file's `[api.users]` (alice's)."""
    config = tmp_path / "tarry.toml"
    config.write_text('[api.users]\nalice = "alice-token-0123456789"\n')
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    async with (
        ApiServer(create_app(agent.tarry, TarrySettings()), "127.0.0.1", 0) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        yield http


async def test_a_wrong_token_s_401_names_the_config_s_users_when_the_tokens_are_theirs(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with users_api(agent, tmp_path, monkeypatch) as http:
        response = await http.get("/v1/runs", headers={"Authorization": "Bearer guessed"})

    assert response.status_code == 401
    assert response.json()["error"]["message"] == (
        "the token is not one of the config file's [api.users]"
    )


async def test_any_configured_token_is_let_through(api: Api) -> None:
    first = await api.http.get("/v1/runs")
    second = await api.http.get(
        "/v1/runs", headers={"Authorization": "Bearer another-token-of-the-api"}
    )

    assert (first.status_code, second.status_code) == (200, 200)


async def test_tokens_come_from_the_environment_and_the_config_file(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text('[api]\ntokens = ["from-the-config-file"]\n')
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_API_TOKENS", "from-the-environment")
    settings = TarrySettings()

    async with (
        ApiServer(create_app(agent.tarry, settings), "127.0.0.1", 0) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        answers = [
            (await http.get("/v1/runs", headers={"Authorization": f"Bearer {t}"})).status_code
            for t in ("from-the-config-file", "from-the-environment", "neither")
        ]

    assert answers == [200, 200, 401]


async def test_cors_is_off_unless_origins_are_configured(agent: Agent) -> None:
    preflight = {
        "Origin": "http://inbox.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    async with serving(agent) as closed:
        refused = await closed.http.options("/v1/runs", headers=preflight)
    async with serving(agent, cors_origins=("http://inbox.example",)) as open_:
        allowed = await open_.http.options("/v1/runs", headers=preflight)

    assert "access-control-allow-origin" not in refused.headers
    assert allowed.headers["access-control-allow-origin"] == "http://inbox.example"


async def test_with_no_tokens_a_non_loopback_host_is_refused(agent: Agent) -> None:
    serve = await asyncio.create_subprocess_exec(
        str(TARRY), "serve", "--host", "0.0.0.0", "--port", "0",
        env=agent_env(agent),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(deadline(60)):
        out, err = await serve.communicate()

    assert serve.returncode == 1
    assert out == b""
    assert err.decode().startswith("error: refusing to serve the API on 0.0.0.0")
    assert "TARRY_API_TOKENS" in err.decode()
    assert err.decode().count("\n") == 1


async def test_a_request_without_a_token_is_told_the_config_s_users_hold_them(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with users_api(agent, tmp_path, monkeypatch) as http:
        response = await http.get("/v1/me")

    assert response.status_code == 401
    assert response.json()["error"]["message"] == (
        "this API needs a token, one of the config file's [api.users]: Authorization: Bearer TOKEN"
    )


async def test_me_answers_the_user_a_token_names(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(
        '[api.users]\nalice = "alice-token-0123456789"\n[api.groups]\nops = ["alice"]\n'
    )
    monkeypatch.setenv("TARRY_CONFIG", str(config))

    async with (
        ApiServer(create_app(agent.tarry, TarrySettings()), "127.0.0.1", 0) as server,
        httpx.AsyncClient(base_url=server.url) as http,
    ):
        response = await http.get(
            "/v1/me", headers={"Authorization": "Bearer alice-token-0123456789"}
        )

    assert response.status_code == 200
    assert response.json() == {"user": "alice", "groups": ["ops"], "admin": False}


async def test_without_tokens_every_request_is_the_local_user(agent: Agent) -> None:
    async with serving(agent) as api:
        response = await api.http.get("/v1/me")

    assert response.json() == {"user": LOCAL_USER, "groups": [], "admin": True}  # the one person
