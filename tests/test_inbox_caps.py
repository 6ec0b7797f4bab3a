"""An admin raises a person's daily cap from the inbox's usage page (issue 58, item 2),
in real headless Chromium: the person's run waiting at the cap (`SPEND_CAP_REACHED`)
goes on to its answer. The person themself sees no such form; their capped run, in the
inbox, points to the usage page rather than to a bigger budget of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.api import ApiServer, create_app
from tarry.client import RunHandle
from tarry.config.settings import load_settings
from tarry.contracts import ErrorCode, WaitingFor
from tarry.testing.scripted_model import say
from tests.browser import chromium, needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api, api_client
from tests.test_inbox import as_person, first, until
from tests.test_ledger import WAITING, person, used
from tests.waiting import until_waiting_for

pytestmark = needs_chromium

ALICE = "alice-token-0123456789"
ERIN = "erin-token-0123456789a"
CONFIG = """
[api]
admins = ["erin"]

[api.users]
{alice} = "{alice_token}"
erin = "{erin_token}"

[limits.default]
max_tokens_per_day = 1000
"""
"""Erin is the admin; alice's run names no `max_tokens`, so its call may take 4,096
tokens, past her 1,000 a day: it waits at her cap before calling."""

ME_ANSWERED = """
return performance.getEntriesByType("resource")
  .some((entry) => new URL(entry.name).pathname === "/v1/me" && entry.responseEnd > 0);
"""
"""Whether the page has had `GET /v1/me`'s answer, which shows or hides the form."""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium(width=1000, height=900) as driver:
        yield driver


async def open_usage_page(browser: WebDriver, api: Api, token: str) -> None:
    """The usage page as `token`'s user, once it has asked who that is."""
    await as_person(browser, api, token)
    await asyncio.to_thread(browser.get, api.url + "/usage.html")
    await until(lambda: browser.execute_script(ME_ANSWERED), "the page never asked /v1/me")
    await until(lambda: browser.find_element(By.ID, "usage-total").text, "no total")


@dataclass
class Capped:
    """Alice's run, started through the API and waiting at her daily cap."""

    api: Api
    alice: str
    run: RunHandle


@pytest.fixture
async def capped(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Capped]:
    alice = person("alice")
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG.format(alice=alice, alice_token=ALICE, erin_token=ERIN))
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    agent.model.add(say("hello", usage=used(300, 50)))
    async with (
        ApiServer(create_app(agent.tarry, load_settings()), "127.0.0.1", 0) as server,
        api_client(server.url, ALICE) as http,
    ):
        api = Api(http, agent, server.url)
        run = api.run((await http.post("/v1/runs", json={"prompt": "hi"})).json()["id"])
        state = await run.wait_for(WAITING, TIMEOUT)
        assert state.warning is ErrorCode.SPEND_CAP_REACHED
        yield Capped(api, alice, run)


async def test_an_admin_raises_a_person_s_cap_on_the_usage_page_and_their_capped_run_answers(
    capped: Capped, browser: WebDriver
) -> None:
    alice = capped.alice
    await open_usage_page(browser, capped.api, ALICE)
    alice_sees_a_form = browser.find_element(By.ID, "cap-form").is_displayed()

    await open_usage_page(browser, capped.api, ERIN)
    form = await until(
        lambda: browser.find_element(By.ID, "cap-form").is_displayed(), "no form for erin"
    )
    await asyncio.to_thread(browser.find_element(By.ID, "cap-user").send_keys, alice)
    await asyncio.to_thread(browser.find_element(By.ID, "cap-tokens").send_keys, "5000")
    button = browser.find_element(By.ID, "cap-button")
    label = button.text
    await asyncio.to_thread(button.click)
    await until(
        lambda: "go on" in browser.find_element(By.ID, "cap-result").text,
        "the page never said the cap was raised",
    )
    said = browser.find_element(By.ID, "cap-result").text
    answered = await until_waiting_for(capped.run, WaitingFor.INPUT)

    assert not alice_sees_a_form
    assert form
    assert label == f"Raise {alice}'s cap for today"
    assert said.startswith(f"{alice}'s cap for ")
    assert "is now 5000 tokens" in said
    assert answered.last_assistant_text == "hello"


async def test_a_capped_run_in_the_inbox_points_to_the_usage_page_not_to_its_own_budget(
    capped: Capped, browser: WebDriver
) -> None:
    await as_person(browser, capped.api, ALICE)
    await asyncio.to_thread(browser.get, f"{capped.api.url}/#/runs/{capped.run.id}")
    note = await until(
        lambda: first(browser, "#cap-note:not([hidden])"), "no note on the capped run"
    )
    link = note.find_element(By.TAG_NAME, "a").get_attribute("href") or ""

    assert link.endswith("/usage.html")
    assert not browser.find_element(By.ID, "budget-form").is_displayed()
