"""The inbox marks what a guardrail changed: real headless Chromium, as in
`tests/test_inbox.py`, against the HTTP API over a real dev server and worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Phase
from tarry.testing.scripted_model import say
from tests.browser import chromium, needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_inbox import first, open_run, texts, until

pytestmark = needs_chromium
CARD, EMAIL = "4111 1111 1111 1111", "jane.doe@example.com"
PII = {"name": "no-pii", "on": "input", "check": "pii", "verdict": "redact", "reason": "PII"}


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


async def test_the_inbox_shows_a_redacted_reply_as_redacted_and_marked_with_its_guardrail(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say("Noted."))
    run_id = await api.start(f"card {CARD}, mail {EMAIL}", guardrails=[PII])
    await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)

    await open_run(browser, api, run_id)

    mark = await until(lambda: first(browser, ".message.user .guardrail"), "the guardrail's mark")
    assert mark.text == "⛨ guardrail 'no-pii' redacted (card, email): PII"
    [reply] = texts(browser, ".message.user .body")
    assert reply == "card <CARD_1>, mail <EMAIL_1>"
    assert EMAIL not in browser.page_source
