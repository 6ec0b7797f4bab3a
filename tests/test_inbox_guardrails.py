"""The inbox marks what a guardrail changed, and shows a text a guardrail holds for a
decision: real headless Chromium, as in `tests/test_inbox.py`, against the HTTP API over
a real dev server and worker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from temporalio.client import Client

from tarry.contracts import Phase, WaitingFor
from tarry.testing.scripted_model import say
from tests.browser import chromium, needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_cli_approvals import until_state
from tests.test_guardrail_asks import SECRETS
from tests.test_guardrails import sent_to_model
from tests.test_inbox import first, open_run, page_text, texts, until
from tests.test_notifications import Receiver, linking
from tests.test_notifications import receiver as receiver  # a fixture, which tests name

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


async def test_an_approver_edits_a_held_reply_in_the_inbox_and_the_model_gets_the_edit(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    me = (await api.http.get("/v1/me")).json()["user"]
    rail = {**SECRETS, "approvers": [me]}
    agent.model.add(say("Noted."))
    run_id = await api.start("the secret is 42", guardrails=[rail])
    await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
    await open_run(browser, api, run_id)

    card = await until(lambda: first(browser, "#approvals .guardrail-ask"), "the held text")
    assert card.find_element(By.CSS_SELECTOR, ".approval-title").text == (
        "guardrail 'ask-secrets' holds a person's message: secrets need a person's eye"
    )
    assert texts(browser, ".guardrail-ask .guardrail-match") == ["secret"]
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, ".approval-edit summary").click)
    text = card.find_element(By.CSS_SELECTOR, "textarea.approval-arguments")
    await asyncio.to_thread(text.clear)
    await asyncio.to_thread(text.send_keys, "the number is withheld")
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)

    await until(lambda: agent.model.requests, "the model's request")
    sent = json.dumps(agent.model.requests[0].body["messages"])
    assert ("the number is withheld" in sent, "42" in sent) == (True, False)
    await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
    await open_run(browser, api, run_id)  # the transcript as it stands now, read afresh
    await until(lambda: first(browser, ".message.user .guardrail"), "the reply's mark")
    assert texts(browser, ".message.user .guardrail") == [
        f"⛨ guardrail 'ask-secrets' asked: edited by {me} (deny): secrets need a person's eye"
    ]


async def test_an_action_link_allows_a_held_reply_where_it_is_clicked(
    agent_factory: Any, temporal: Client, tmp_path: Path, receiver: Receiver, browser: WebDriver
) -> None:
    async with linking(agent_factory, temporal, tmp_path, receiver) as (agent, _):
        agent.model.add(say("Noted."))
        rail = {**SECRETS, "approvers": ["alice"]}
        run = await agent.start("the secret is 42", guardrails=[rail])
        await receiver.until_taken(1)
        [pending] = receiver.delivered[0].json["pending_approvals"]

        await asyncio.to_thread(browser.get, pending["links"]["approve"])
        confirm = await until(lambda: first(browser, "main.action form button"), "the button")
        assert confirm.text == "Allow"
        await asyncio.to_thread(confirm.click)
        shown = await until(
            lambda: (text := page_text(browser)) and "Allowed" in text and text, "the answer"
        )
        await until_state(run, lambda s: s.waiting_for is WaitingFor.INPUT)

    assert "Allowed text guardrail-1 as alice" in shown, shown
    assert "the secret is 42" in sent_to_model(agent)
