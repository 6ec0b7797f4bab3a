"""Tools that act as the person who asked (issue 60): an MCP server with `auth = "oauth"`
gets each call with a person's own grant. Real parts: an OpenID provider from PyPI
(`oidc-provider-mock`, Authlib's server underneath) on a free port, and an MCP server
over streamable HTTP that requires bearer tokens and checks each one at that provider,
saying whose account a call acts as (both `tarry.testing.oauth_servers`, which the
offline tour runs too)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.client import RunHandle
from tarry.connections.store import ConnectionStore, Grant
from tarry.contracts import ErrorCode, Phase
from tarry.testing.scripted_model import call, say
from tests import oauth_parts
from tests.browser import needs_chromium
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Api
from tests.oauth_parts import (
    KEY,
    PROVIDER_LOGGERS,
    Parts,
    Provider,
    Setup,
    approved_and_connected_by_bob,
    free_port,
    stack,
    waiting_for_auth,
)
from tests.oauth_parts import otlp as otlp  # the fixtures
from tests.oauth_parts import parts as parts
from tests.oauth_parts import provider as provider
from tests.oauth_parts import traced as traced
from tests.test_http_api_people import ALICE, BOB, CAROL, as_
from tests.test_inbox import as_person, first, open_run, script, until
from tests.test_inbox import browser as browser  # the fixture
from tests.test_mcp_tools import activity_summaries, tool_messages
from tests.test_notifications import receiver as receiver  # the fixture


@pytest.fixture
async def secure(provider: Provider) -> AsyncIterator[str]:
    """The MCP server that requires the provider's tokens: its URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tarry.testing.oauth_servers",
        "--port", str(port), "--issuer", provider.url,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    async with asyncio.timeout(deadline(30)):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.close()
            break
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    await process.wait()


@pytest.fixture
def token_mode() -> str:
    """Whose grant the `secure` server's calls take (`[mcp_servers.secure] token`)."""
    return "owner"


@pytest.fixture
async def setup(parts: Parts, secure: str, token_mode: str) -> AsyncIterator[Setup]:
    """A worker whose `secure` server takes the grant of `token_mode` (the run's
    owner's), listing its tools as a service account."""
    service = await parts.provider.service_token()
    config = (
        f'[mcp_servers.secure]\nurl = "{secure}"\nauth = "oauth"\ntoken = "{token_mode}"\n'
        f'headers = {{ Authorization = "Bearer {service}" }}\n'
    )
    async with stack(parts, config, lambda settings: {"mcp_servers": settings.mcp_servers()}) as s:
        yield s


async def connect(setup: Setup, run_id: str, person: str = "alice", token: str = ALICE) -> str:
    return await oauth_parts.connect(setup, run_id, "secure", person, token)


def whoami_run(agent: Agent) -> None:
    agent.model.add(call("secure__whoami", {}), say("done"))


async def alice_connected(setup: Setup) -> tuple[RunHandle, Grant]:
    """A run whose call waited for alice's grant, once she connected and it answered: the
    run, and the grant she gave."""
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    grant = await setup.store.grant("alice", "secure")
    assert grant is not None
    return run, grant


async def test_a_call_needing_alice_s_grant_waits_for_auth_then_runs_as_alice(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")

    state = await waiting_for_auth(setup.api, run_id)
    assert state["auth_needed"] == [
        {"server": "secure", "person": "alice", "call_id": state["auth_needed"][0]["call_id"]}
    ]
    await connect(setup, run_id)

    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    (message,) = tool_messages(await run.transcript())
    assert '"acting as alice"' in message.content
    assert message.acting_for == "alice"
    assert (await run.state()).auth_needed == []


@pytest.mark.parametrize("token_mode", ["approver"])
async def test_with_approver_the_call_runs_with_the_approving_person_s_grant(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run = await approved_and_connected_by_bob(setup, "secure__whoami", "secure")
    (message,) = tool_messages(await run.transcript())
    assert '"acting as bob"' in message.content
    summaries = [s for kind, s in await activity_summaries(setup.agent, run) if kind == "mcp_tool"]
    assert len(summaries) == 2  # the call that found no grant, and the one that ran
    assert all("(as bob)" in summary for summary in summaries)
    trail = await setup.agent.tarry.audit(run=run.id)
    acts = [(r.act, r.by) for r in trail.records]
    assert ("decision", "bob") in acts
    assert ("connect", "bob") in acts


async def test_a_worker_restarted_between_consent_and_call_runs_the_call_once(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    link = await setup.api.http.get(f"/v1/oauth/connect/{run_id}/secure")
    await setup.agent.stop_worker()

    async with httpx.AsyncClient() as browser:  # consented while no worker runs
        callback = await setup.provider.consent(browser, link.headers["location"], "alice")
        assert (await browser.get(callback)).status_code == 200
    await setup.agent.add_worker()

    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    (message,) = tool_messages(await run.transcript())
    assert '"acting as alice"' in message.content
    history = await setup.agent.tarry.client.get_workflow_handle(run_id).fetch_history()
    scheduled = [
        e for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "mcp_tool"
    ]  # fmt: skip
    assert len(scheduled) == 2  # the call that found no grant, and the one that ran


@needs_chromium
async def test_alice_connects_from_the_inbox_consents_in_chromium_and_the_call_runs_as_her(
    setup: Setup, browser: WebDriver
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    await asyncio.to_thread(browser.get, setup.api.url + "/")
    await script(browser, "localStorage.setItem('tarry-token', arguments[0])", ALICE)
    await open_run(browser, setup.api, run_id)

    button = await until(lambda: first(browser, "#run-connect .connect-button"), "Connect")
    assert button.text == "Connect secure"
    await asyncio.to_thread(button.click)
    sub = await until(lambda: first(browser, "input[name=sub]"), "the consent page")
    await asyncio.to_thread(sub.send_keys, "alice", Keys.ENTER)
    await until(lambda: "Connected secure for alice" in browser.page_source, "the callback")

    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    (message,) = tool_messages(await run.transcript())
    assert '"acting as alice"' in message.content  # the MCP server saw alice


async def test_bob_opening_alice_s_connect_link_is_refused(setup: Setup) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)

    answer = await setup.api.http.get(f"/v1/oauth/connect/{run_id}/secure", headers=as_(BOB))

    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == ErrorCode.CONNECT_REFUSED


async def test_a_replayed_callback_is_refused(setup: Setup) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    callback = await connect(setup, run_id)

    async with httpx.AsyncClient() as browser:
        again = await browser.get(callback)

    assert again.status_code == 403
    assert ErrorCode.CONNECT_REFUSED in again.text


async def test_an_expired_grant_is_refreshed_before_the_call(setup: Setup) -> None:
    run, grant = await alice_connected(setup)
    # Parked long enough for the access token to expire (its expiry moved into the past).
    await setup.store.save("alice", "secure", Grant(**{**grant.__dict__, "expires_at": 1.0}))

    setup.agent.model.add(call("secure__whoami", {}), say("still done"))
    await run.send("and now?")

    messages = tool_messages(await run.transcript())
    assert '"acting as alice"' in messages[-1].content
    fresh = await setup.store.grant("alice", "secure")
    assert fresh is not None
    assert fresh.access_token != grant.access_token


async def test_a_grant_revoked_at_the_provider_puts_the_run_back_to_waiting_for_auth(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await setup.provider.revoke("alice")

    setup.agent.model.add(call("secure__whoami", {}), say("again"))
    await run.reply("and now?")

    state = await waiting_for_auth(setup.api, run_id)
    assert state["auth_needed"][0]["person"] == "alice"
    assert await setup.store.grant("alice", "secure") is None


async def test_the_token_appears_nowhere_in_history_logs_notifications_or_api_answers(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the worker's, the API's and the clients' own
    run, grant = await alice_connected(setup)
    assert grant.refresh_token is not None

    history = await setup.agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    answers = [
        (await setup.api.http.get(path)).text
        for path in (f"/v1/runs/{run.id}", f"/v1/runs/{run.id}/transcript")
    ]
    # The authorization server's own logs (it runs in the test's process) tell its tokens.
    ours = [r for r in caplog.records if not r.name.startswith(PROVIDER_LOGGERS)]
    for secret in (grant.access_token, grant.refresh_token):
        assert secret not in history.to_json()
        assert all(secret not in answer for answer in answers)
        assert all(secret.encode() not in told.body for told in setup.receiver.tries)
        assert not [r.name for r in ours if secret in r.getMessage()]


async def test_alice_lists_and_revokes_her_connection_and_the_next_call_waits_for_auth(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id)
    run = setup.agent.tarry.get(run_id)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    listed = (await setup.api.http.get("/v1/connections")).json()["connections"]
    by_bob = await setup.api.http.delete("/v1/connections/secure?person=alice", headers=as_(BOB))
    revoked = await setup.api.http.delete("/v1/connections/secure")

    assert [(c["person"], c["server"]) for c in listed] == [("alice", "secure")]
    assert by_bob.status_code == 403
    assert revoked.status_code == 204
    setup.agent.model.add(call("secure__whoami", {}), say("again"))
    await run.reply("and now?")
    state = await waiting_for_auth(setup.api, run_id)
    assert state["auth_needed"][0]["person"] == "alice"


@pytest.mark.parametrize("traced", [True])
async def test_the_trace_names_whose_grant_a_call_took_and_holds_no_token(setup: Setup) -> None:
    _, grant = await alice_connected(setup)

    await setup.agent.stop_worker()  # its spans are sent as it stops

    exported = b"".join(setup.otlp.bodies)
    assert b"tarry.tool.acting_for" in exported
    assert b"acting as alice" in exported  # the content is traced, the result with it
    assert grant.access_token.encode() not in exported
    assert (grant.refresh_token or "-").encode() not in exported


async def test_the_notification_of_a_wait_for_auth_carries_the_person_s_connect_link(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)

    await setup.receiver.until_taken()

    told = setup.receiver.delivered[0].json
    assert told["event"] == "waiting_for_auth"
    assert told["summary"] == "Waits for alice to connect secure."
    [need] = told["auth_needed"]
    assert need["connect"].endswith(f"/v1/oauth/connect/{run_id}/secure")


async def test_a_connection_is_listed_with_its_scopes_and_times_and_never_a_token(
    setup: Setup,
) -> None:
    whoami_run(setup.agent)
    run_id = await setup.api.start("who am I there?")
    await waiting_for_auth(setup.api, run_id)
    await connect(setup, run_id)
    grant = await setup.store.grant("alice", "secure")
    assert grant is not None
    assert grant.scope

    answer = await setup.api.http.get("/v1/connections")

    [listed] = answer.json()["connections"]
    assert (listed["person"], listed["server"]) == ("alice", "secure")
    assert listed["scopes"] == grant.scope.split()
    assert listed["connected_at"]
    assert listed["refreshed_at"] is None
    assert grant.access_token not in answer.text


async def test_an_admin_lists_everyone_s_connections_and_revokes_alice_s(setup: Setup) -> None:
    await saved(setup.store, "alice")
    await saved(setup.store, "bob")

    listed = await setup.api.http.get("/v1/connections", headers=as_(CAROL))
    revoked = await setup.api.http.delete(
        "/v1/connections/secure", params={"person": "alice"}, headers=as_(CAROL)
    )

    people = [c["person"] for c in listed.json()["connections"]]
    assert people == ["alice", "bob"]
    assert revoked.status_code == 204
    assert await setup.store.grant("alice", "secure") is None
    assert await setup.store.grant("bob", "secure") is not None


async def saved(store: ConnectionStore, person: str, scope: str = "openid") -> Grant:
    """A grant of `person`'s to `secure`, stored as a connect stores it."""
    grant = Grant(
        access_token=f"{person}-access-0123456789", token_endpoint="http://as/token",
        client_id="tarry", scope=scope,
    )  # fmt: skip
    await store.save(person, "secure", grant)
    return grant


async def test_a_refreshed_grant_keeps_when_it_was_connected_and_says_when_it_was_refreshed(
    tmp_path: Path,
) -> None:
    store = ConnectionStore(tmp_path / "c.db", KEY)
    old = await saved(store, "alice")
    [connected] = await store.connections("alice")
    new = Grant(**{**old.__dict__, "access_token": "alice-access-2", "scope": None})

    assert await store.refreshed("alice", "secure", old, new)

    [refreshed] = await store.connections("alice")
    store.close()
    assert refreshed.connected_at == connected.connected_at
    assert connected.refreshed_at is None
    assert refreshed.refreshed_at is not None
    assert refreshed.refreshed_at >= connected.connected_at
    assert refreshed.scope == "openid"  # a refresh that names no scope keeps the granted ones


async def open_connections(browser: WebDriver, api: Api, token: str) -> None:
    await as_person(browser, api, token)
    await asyncio.to_thread(browser.get, api.url + "/#/connections")


def connection_rows(browser: WebDriver) -> list[tuple[str, str]]:
    """(person, server) of each row of the Connections page."""
    found: list[list[str]] = browser.execute_script(
        "return [...document.querySelectorAll('#connection-list .connection')]"
        ".map((row) => [row.dataset.person, row.dataset.server])"
    )
    return [(person, server) for person, server in found]


async def revoke_in_the_page(browser: WebDriver, person: str) -> None:
    """Clicks Revoke on `person`'s row and agrees to the question."""
    await asyncio.to_thread(browser.execute_script, "window.confirm = () => true")
    row = await until(
        lambda: first(browser, f"#connection-list .connection[data-person='{person}']"),
        f"{person}'s connection",
    )
    await asyncio.to_thread(row.find_element(By.CSS_SELECTOR, "button.connection-revoke").click)


@needs_chromium
async def test_alice_revokes_her_connection_on_the_connections_page_and_the_next_call_waits(
    setup: Setup, browser: WebDriver
) -> None:
    run, grant = await alice_connected(setup)
    await open_connections(browser, setup.api, ALICE)

    row = await until(lambda: first(browser, "#connection-list .connection"), "her connection")
    assert row.find_element(By.CSS_SELECTOR, ".connection-server").text == "secure"
    assert row.find_element(By.CSS_SELECTOR, ".connection-scopes").text == grant.scope
    assert row.find_element(By.CSS_SELECTOR, ".connection-refreshed").text == "never"
    assert grant.access_token not in browser.page_source
    await revoke_in_the_page(browser, "alice")

    await until(lambda: browser.find_element(By.ID, "connection-empty").is_displayed(), "none")
    assert await setup.store.grant("alice", "secure") is None
    setup.agent.model.add(call("secure__whoami", {}), say("again"))
    await run.reply("and now?")
    state = await waiting_for_auth(setup.api, run.id)
    assert [need["person"] for need in state["auth_needed"]] == ["alice"]


@needs_chromium
async def test_an_admin_sees_everyone_s_connections_on_the_page_and_revokes_bob_s(
    setup: Setup, browser: WebDriver
) -> None:
    await saved(setup.store, "alice")
    await saved(setup.store, "bob")
    await open_connections(browser, setup.api, CAROL)

    await until(lambda: len(connection_rows(browser)) == 2, "alice's and bob's connections")
    await revoke_in_the_page(browser, "bob")

    await until(lambda: connection_rows(browser) == [("alice", "secure")], "bob's gone")
    assert await setup.store.grant("bob", "secure") is None
    assert await setup.store.grant("alice", "secure") is not None


@needs_chromium
async def test_alice_sees_only_her_own_connections_on_the_page(
    setup: Setup, browser: WebDriver
) -> None:
    await saved(setup.store, "alice")
    await saved(setup.store, "bob")

    await open_connections(browser, setup.api, ALICE)

    await until(lambda: connection_rows(browser), "her connection")
    assert connection_rows(browser) == [("alice", "secure")]


async def test_tarry_connections_lists_and_revokes_a_person_s_grant(
    cli: Cli, tmp_path: Path
) -> None:
    db = tmp_path / "connections.db"
    cli.env |= {"TARRY_CONNECTIONS_KEY": KEY, "TARRY_CONNECTIONS_DB": str(db)}
    store = ConnectionStore(db, KEY)
    grant = Grant(access_token="a-0123456789", token_endpoint="http://as/t", client_id="c")
    await store.save("alice", "secure", grant)

    listed = await cli.ok("connections", "list")
    revoked = await cli.ok("connections", "revoke", "secure", "--person", "alice")

    assert "alice" in listed
    assert "secure" in listed
    assert "a-0123456789" not in listed
    assert "Revoked alice's connection to secure." in revoked
    assert await store.grant("alice", "secure") is None
    store.close()


async def test_tarry_connections_revoke_without_a_person_revokes_your_own(
    cli: Cli, tmp_path: Path
) -> None:
    db = tmp_path / "connections.db"
    cli.env |= {"TARRY_CONNECTIONS_KEY": KEY, "TARRY_CONNECTIONS_DB": str(db), "TARRY_USER": "bob"}
    store = ConnectionStore(db, KEY)
    await saved(store, "alice")
    await saved(store, "bob")

    revoked = await cli.ok("connections", "revoke", "secure")

    assert "Revoked bob's connection to secure." in revoked
    assert await store.grant("bob", "secure") is None
    assert await store.grant("alice", "secure") is not None
    store.close()


async def test_the_store_seals_every_token_it_writes(tmp_path: Path) -> None:
    store = ConnectionStore(tmp_path / "c.db", KEY)
    grant = Grant(
        access_token="access-0123456789", refresh_token="refresh-0123456789",
        token_endpoint="http://as/token", client_id="tarry",
    )  # fmt: skip
    await store.save("alice", "secure", grant)
    store.close()

    raw = b"".join([p.read_bytes() for p in tmp_path.glob("c.db*")])  # noqa: ASYNC240
    assert b"access-0123456789" not in raw
    assert b"refresh-0123456789" not in raw
    assert "access-0123456789" not in repr(grant)
