"""Pins on a run's inbox page, as a person uses them in real headless Chromium: each
message with text has a pin button, which pins it through the API and says so; a
second click unpins it."""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Act, Door, Phase
from tarry.testing.scripted_model import say
from tests.browser import needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_inbox import browser as browser  # the fixture: one Chromium for the module
from tests.test_inbox import open_run, texts, until

pytestmark = needs_chromium
WAITING = {Phase.WAITING_USER}


def click_pin(browser: WebDriver, index: int) -> bool:
    """Clicks the pin button of message `index`, once it is offered."""
    buttons = browser.find_elements(By.CSS_SELECTOR, f'button.pin[data-index="{index}"]')
    if not buttons or not buttons[0].is_displayed():
        return False
    buttons[0].click()
    return True


async def test_a_person_pins_a_message_in_the_inbox_and_unpins_it(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say("Noted: the launch is on Friday."))
    run_id = await api.start("Remember: the launch is on Friday.")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await open_run(browser, api, run_id)

    await until(lambda: click_pin(browser, 0), "the first message's pin button")
    await until(lambda: texts(browser, "button.pin.pinned") == ["📌 Pinned"], "it says pinned")
    pinned = (await api.state(run_id)).pinned
    await until(lambda: click_pin(browser, 0), "the pin button again")
    await until(lambda: texts(browser, "button.pin.pinned") == [], "it says unpinned")

    assert pinned == [0]
    assert (await api.state(run_id)).pinned == []
    trail = await agent.tarry.audit(run=run_id)
    doors = [(r.act, r.door) for r in trail.records if r.act in (Act.PIN, Act.UNPIN)]
    assert doors == [(Act.PIN, Door.INBOX), (Act.UNPIN, Door.INBOX)]
