"""The inbox's search box, in real headless Chromium: a person finds a message by its
words and jumps to it in its run; another user finds nothing of a run they may not read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Phase
from tarry.testing.scripted_model import say
from tests.browser import chromium, needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.search_stores import until_found
from tests.test_inbox import as_person, first, script, until
from tests.test_owners import ALICE, BOB, people_api, with_people

pytestmark = needs_chromium

WORD = "zanzibar"


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture
async def api(
    agent_factory: Callable[..., Awaitable[Agent]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Api]:
    """The API with `CONFIG`'s people over an agent whose worker indexes its messages."""
    index = str(tmp_path / "search.db")
    agent = await agent_factory(worker_settings={"tarry_search_index": index})
    with_people(tmp_path, monkeypatch)
    monkeypatch.setenv("TARRY_SEARCH_INDEX", index)
    async with people_api(agent) as api:
        yield api


async def alices_long_run(api: Api, index: Path) -> str:
    """Alice's run of four answers, the second of which says `WORD`."""
    answers = ["First answer.", f"The trip to {WORD} is booked.", "Third.", "Fourth."]
    api.agent.model.add(*map(say, answers))
    run_id = await api.start("plan the trip")
    run = api.agent.tarry.get(run_id)
    for reply in ("and then?", "more", "last"):
        await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
        await run.reply(reply)
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await until_found(index, "fourth")
    return run_id


async def search_for(browser: WebDriver, text: str) -> None:
    box = browser.find_element(By.ID, "search-text")
    await asyncio.to_thread(box.send_keys, text, Keys.ENTER)


async def test_a_person_finds_a_message_and_jumps_to_it_in_its_run(
    browser: WebDriver, api: Api, tmp_path: Path
) -> None:
    run_id = await alices_long_run(api, tmp_path / "search.db")
    await as_person(browser, api, ALICE)

    await search_for(browser, WORD)
    hit = await until(lambda: first(browser, "#search-hits .hit a"), "a hit")
    assert hit.find_element(By.TAG_NAME, "b").text == WORD
    await asyncio.to_thread(hit.click)

    found = await until(lambda: first(browser, "#transcript .found"), "the found message")
    assert browser.find_element(By.ID, "run-title").text == run_id
    assert found.get_attribute("data-index") == "3"
    assert f"The trip to {WORD} is booked." in found.text
    assert await script(
        browser,
        "const r = arguments[0].getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= window.innerHeight;",
        found,
    )


async def test_another_user_finds_nothing_of_a_run_they_may_not_read(
    browser: WebDriver, api: Api, tmp_path: Path
) -> None:
    await alices_long_run(api, tmp_path / "search.db")
    await as_person(browser, api, BOB)

    await search_for(browser, WORD)

    await until(lambda: browser.find_element(By.ID, "search-empty").is_displayed(), "no hit")
    assert browser.find_elements(By.CSS_SELECTOR, "#search-hits .hit") == []
