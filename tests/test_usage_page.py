"""The inbox's usage page (`usage.html`), as a person sees it in real headless Chromium:
a bar chart in SVG per person, model and day, each bar as long as its cost, and the way
there from the inbox."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.client.usage import UsageBy
from tests.browser import chromium, needs_chromium
from tests.conftest import Agent
from tests.http_api import Api
from tests.screenshots import shoot
from tests.test_inbox import until
from tests.test_usage import ONE_CALL_USD, listed, run_as, usage_agent

pytestmark = needs_chromium
SCREENSHOT_TO = "USAGE_SCREENSHOT"
"""Where to write the page's picture besides the test's own directory: `USAGE_SCREENSHOT=
docs/usage.png` takes the cost guide's picture again (`scripts/screenshots` does)."""


@pytest.fixture
async def agent(agent_factory: Any) -> Agent:
    """The `api` fixture's agent, with prices, so that runs cost something."""
    return await usage_agent(agent_factory)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium(width=1000, height=900) as driver:
        yield driver


def bars(browser: WebDriver, chart: str) -> dict[str, float]:
    """The width of each bar of `chart` (`user`, `model`, `day`), by its row's key."""
    found = {}
    for row in browser.find_elements(By.CSS_SELECTOR, f"#usage-{chart} .usage-row"):
        bar = row.find_element(By.CSS_SELECTOR, ".usage-bar")
        found[row.get_attribute("data-key") or ""] = float(bar.get_attribute("width") or 0)
    return found


async def test_the_usage_page_charts_each_persons_model_s_and_day_s_cost_from_the_inbox(
    agent: Agent, api: Api, browser: WebDriver, tmp_path: Path
) -> None:
    picture = os.environ.get(SCREENSHOT_TO)
    for user in ("alice", "alice", "bob"):
        await run_as(agent, user)
    today = (await listed(agent, UsageBy.DAY, runs=3)).rows[0].key

    await asyncio.to_thread(browser.get, api.url + "/")
    link = await until(
        lambda: browser.find_elements(By.ID, "usage-link"), "the inbox has no usage link"
    )
    await asyncio.to_thread(link[0].click)
    await until(lambda: len(bars(browser, "user")) == 2, "the page never charted two people")

    people = bars(browser, "user")
    assert abs(people["alice"] - 2 * people["bob"]) <= 1  # twice the cost, twice as long
    assert list(bars(browser, "model")) == ["default"]
    assert list(bars(browser, "day")) == [today]
    total = browser.find_element(By.ID, "usage-total").text
    assert total.startswith(f"${3 * ONE_CALL_USD:.4f} in 3 runs")

    shot = Path(picture) if picture else tmp_path / "usage.png"
    await asyncio.to_thread(shoot, browser, f"{api.url}/usage.html", "Per day", shot)
    assert shot.read_bytes()[:4] == b"\x89PNG"
