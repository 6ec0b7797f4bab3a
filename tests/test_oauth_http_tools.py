"""Tools a worker declares that call an HTTP API as the person who asked (issue 60):
`@tool(oauth="directory")` takes a person's grant to `[oauth_providers.directory]`, with
the same wait, connect link, callback, refresh and revocation as an MCP server with
`auth = "oauth"` (tests/test_oauth.py). Real parts: the OpenID provider of
tests/oauth_parts.py, and an HTTP API (aiohttp, on a free port) that takes a bearer
token only when that provider says whose it is, and answers with that identity."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from tarry import OAuth, Tool, ToolContext, tool
from tarry.config.settings import ConfigError, ConfigFile, TarrySettings
from tarry.connections.store import Grant
from tarry.contracts import Phase
from tarry.core.grants import ToolGrant
from tarry.testing.scripted_model import call, say
from tests.deadline import TIMEOUT
from tests.local_http import serving_app
from tests.oauth_parts import (
    PROVIDER_LOGGERS,
    Parts,
    Setup,
    approved_and_connected_by_bob,
    connect,
    stack,
    waiting_for_auth,
)
from tests.oauth_parts import otlp as otlp  # the fixtures
from tests.oauth_parts import parts as parts
from tests.oauth_parts import provider as provider
from tests.oauth_parts import traced as traced
from tests.test_mcp_tools import activity_summaries, tool_messages
from tests.test_notifications import receiver as receiver  # the fixture
from workers.plugin import TarryPlugin

PROVIDER = "directory"


@pytest.fixture
async def directory(parts: Parts) -> AsyncIterator[str]:
    """The HTTP API: `GET /me` answers whose the bearer token is, as the provider's
    `userinfo` says; 401 for a token it refuses (none, expired, revoked)."""

    async def me(request: web.Request) -> web.Response:
        bearer = request.headers.get("Authorization", "")
        async with httpx.AsyncClient() as http:
            said = await http.get(
                f"{parts.provider.url}/userinfo", headers={"Authorization": bearer}
            )
        if said.status_code != 200:
            return web.json_response({"error": "invalid_token"}, status=401)
        return web.json_response({"sub": said.json()["sub"]})

    app = web.Application()
    app.router.add_get("/me", me)
    async with serving_app(app) as url:
        yield url


def directory_tools(api: str) -> list[Tool]:
    """`whoami` calls the API with the run owner's grant, `whoami_approved` with the
    grant of the person who approved the call."""

    async def ask(ctx: ToolContext) -> str:
        assert ctx.grant is not None
        async with ctx.grant.client() as http:
            answer = await http.get(f"{api}/me")
        answer.raise_for_status()
        return f"acting as {answer.json()['sub']}"

    @tool(oauth=PROVIDER)
    async def whoami(ctx: ToolContext) -> str:
        """Says whose account the directory sees."""
        return await ask(ctx)

    @tool(oauth=OAuth(PROVIDER, token="approver"))
    async def whoami_approved(ctx: ToolContext) -> str:
        """Says whose account the directory sees, as whoever approved the call."""
        return await ask(ctx)

    return [whoami, whoami_approved]


@pytest.fixture
def provider_table(parts: Parts, request: pytest.FixtureRequest) -> str:
    """How `[oauth_providers.directory]` names its authorization server: by its
    `issuer` (the default: its endpoints are discovered), or by its `endpoints`."""
    url = parts.provider.url
    if getattr(request, "param", "issuer") == "issuer":
        return f'issuer = "{url}"\n'
    return (
        f'authorization_endpoint = "{url}/oauth2/authorize"\n'
        f'token_endpoint = "{url}/oauth2/token"\n'
    )


@pytest.fixture
async def setup(parts: Parts, directory: str, provider_table: str) -> AsyncIterator[Setup]:
    config = (
        f"[oauth_providers.{PROVIDER}]\n{provider_table}"
        'client_id = "tarry"\nclient_secret = "tarry-secret"\nscopes = ["openid"]\n'
    )
    async with stack(parts, config, lambda _: {"tools": directory_tools(directory)}) as s:
        yield s


@pytest.mark.parametrize("provider_table", ["issuer", "endpoints"], indirect=True)
async def test_a_tool_needing_alice_s_grant_waits_for_auth_then_calls_the_api_as_alice(
    setup: Setup,
) -> None:
    setup.agent.model.add(call("whoami", {}), say("done"))
    run_id = await setup.api.start("who am I in the directory?")

    state = await waiting_for_auth(setup.api, run_id)
    assert [(n["server"], n["person"]) for n in state["auth_needed"]] == [(PROVIDER, "alice")]
    await connect(setup, run_id, PROVIDER)

    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    (message,) = tool_messages(await run.transcript())
    assert '"acting as alice"' in message.content  # the API saw alice
    assert message.acting_for == "alice"
    summaries = [s for kind, s in await activity_summaries(setup.agent, run) if kind == "whoami"]
    assert len(summaries) == 2  # the call that found no grant, and the one that ran
    assert all("(as alice)" in summary for summary in summaries)
    assert (await run.state()).auth_needed == []


async def test_with_approver_the_tool_calls_the_api_with_the_approving_person_s_grant(
    setup: Setup,
) -> None:
    setup.agent.model.add(call("whoami_approved", {}), say("done"))
    run = await approved_and_connected_by_bob(setup, "whoami_approved", PROVIDER)
    (message,) = tool_messages(await run.transcript())
    assert '"acting as bob"' in message.content
    assert message.acting_for == "bob"
    trail = await setup.agent.tarry.audit(run=run.id)
    acts = [(r.act, r.by) for r in trail.records]
    assert ("decision", "bob") in acts
    assert ("connect", "bob") in acts


async def test_an_expired_grant_is_refreshed_before_the_tool_calls_the_api(setup: Setup) -> None:
    setup.agent.model.add(call("whoami", {}), say("done"))
    run_id = await setup.api.start("who am I in the directory?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id, PROVIDER)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    grant = await setup.store.grant("alice", PROVIDER)
    assert grant is not None
    # Parked long enough for the access token to expire (its expiry moved into the past).
    await setup.store.save("alice", PROVIDER, Grant(**{**grant.__dict__, "expires_at": 1.0}))

    setup.agent.model.add(call("whoami", {}), say("still done"))
    await run.send("and now?")

    assert '"acting as alice"' in tool_messages(await run.transcript())[-1].content
    fresh = await setup.store.grant("alice", PROVIDER)
    assert fresh is not None
    assert fresh.access_token != grant.access_token


async def test_a_grant_revoked_at_the_provider_puts_the_run_back_to_waiting_for_auth(
    setup: Setup,
) -> None:
    setup.agent.model.add(call("whoami", {}), say("done"))
    run_id = await setup.api.start("who am I in the directory?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id, PROVIDER)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await setup.provider.revoke("alice")

    setup.agent.model.add(call("whoami", {}), say("again"))
    await run.reply("and now?")

    state = await waiting_for_auth(setup.api, run_id)
    assert state["auth_needed"][0]["person"] == "alice"
    assert await setup.store.grant("alice", PROVIDER) is None  # the API refused it: forgotten
    await connect(setup, run_id, PROVIDER)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert '"acting as alice"' in tool_messages(await run.transcript())[-1].content


async def test_a_grant_revoked_in_tarry_makes_the_next_call_wait_for_auth(setup: Setup) -> None:
    setup.agent.model.add(call("whoami", {}), say("done"))
    run_id = await setup.api.start("who am I in the directory?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id, PROVIDER)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    revoked = await setup.api.http.delete(f"/v1/connections/{PROVIDER}")

    assert revoked.status_code == 204
    setup.agent.model.add(call("whoami", {}), say("again"))
    await run.reply("and now?")
    state = await waiting_for_auth(setup.api, run_id)
    assert state["auth_needed"][0]["person"] == "alice"


@pytest.mark.parametrize("traced", [True])
async def test_the_token_appears_nowhere_in_history_logs_traces_notifications_or_api_answers(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the worker's, the API's and the clients' own
    setup.agent.model.add(call("whoami", {}), say("done"))
    run_id = await setup.api.start("who am I in the directory?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id, PROVIDER)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    grant = await setup.store.grant("alice", PROVIDER)
    assert grant is not None
    assert grant.refresh_token is not None

    history = await setup.agent.tarry.client.get_workflow_handle(run_id).fetch_history()
    answers = [
        (await setup.api.http.get(path)).text
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/transcript", "/v1/connections")
    ]
    await setup.agent.stop_worker()  # its spans are sent as it stops
    exported = b"".join(setup.otlp.bodies)
    assert b"tarry.tool.acting_for" in exported
    ours = [r for r in caplog.records if not r.name.startswith(PROVIDER_LOGGERS)]
    for secret in (grant.access_token, grant.refresh_token):
        assert secret not in history.to_json()
        assert all(secret not in answer for answer in answers)
        assert all(secret.encode() not in told.body for told in setup.receiver.tries)
        assert secret.encode() not in exported
        assert not [r.name for r in ours if secret in r.getMessage()]


async def test_a_worker_refuses_a_tool_whose_provider_its_config_lacks(tmp_path: Path) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text("")

    with pytest.raises(ConfigError, match=r"\[oauth_providers\.directory\]"):
        TarryPlugin(TarrySettings(tarry_config=config), tools=directory_tools("http://127.0.0.1:9"))


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('client_id = "tarry"\n', "either `issuer`"),
        ('authorization_endpoint = "http://as/a"\ntoken_endpoint = "http://as/t"\n', "client_id"),
    ],
    ids=["no-endpoints", "endpoints-without-a-client"],
)
def test_an_oauth_provider_needs_its_endpoints_and_a_client_to_use_them(
    tmp_path: Path, table: str, problem: str
) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(f"[oauth_providers.{PROVIDER}]\n{table}")

    with pytest.raises(ConfigError, match=problem):
        ConfigFile.read(config)


def test_an_mcp_server_and_an_oauth_provider_may_not_share_a_name(tmp_path: Path) -> None:
    config = tmp_path / "tarry.toml"
    config.write_text(
        f'[mcp_servers.{PROVIDER}]\nurl = "http://mcp/mcp"\nauth = "oauth"\n'
        f'[oauth_providers.{PROVIDER}]\nissuer = "http://as"\n'
    )

    with pytest.raises(ConfigError, match="grants are kept by name"):
        ConfigFile.read(config)


def test_a_tool_s_context_shows_no_token() -> None:
    grant = ToolGrant(PROVIDER, "alice", "access-0123456789")
    context = ToolContext("run", "call", Path("run"), grant=grant)

    assert "access-0123456789" not in repr(context)
    assert "alice" in repr(context)
