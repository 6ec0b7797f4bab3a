"""What a person deciding in the web inbox sees of a gated call, in real headless
Chromium: the run's recorded preview (a diff, text blocks), not escaped JSON, marked stale
once the file has changed since the call was gated."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Phase
from tarry.testing.scripted_model import call
from tests.browser import needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.gated_writes import OVERWRITE, TOUR_NOTES, notes_of, seeded, writing
from tests.http_api import Api
from tests.test_inbox import browser as browser  # the fixture
from tests.test_inbox import open_run, pending_call_card, until
from tests.test_previews import send_mail

pytestmark = needs_chromium
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "guides" / "approval-diff.png"
"""The approvals guide's picture of the overwrite's diff, which
`test_the_inbox_shows_an_overwrite_of_the_notes_as_a_diff_that_removes_them` takes, and
writes there with `--record-screenshots`."""


async def gated_in_the_inbox(agent: Agent, api: Api, browser: WebDriver, content: str) -> str:
    """A run of the API's, waiting for a decision on writing `content` over the tour's
    notes, open in the inbox at its pending call's card."""
    run_id = seeded(agent)
    agent.model.add(writing(content))
    await api.start(
        "add renewing the domain to the meeting notes", id=run_id, require_approval=["write_file"]
    )
    await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
    await open_run(browser, api, run_id)
    return run_id


def lines(browser: WebDriver, selector: str) -> list[str]:
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)", selector
    )
    return found


async def test_the_inbox_shows_an_overwrite_of_the_notes_as_a_diff_that_removes_them(
    agent: Agent, api: Api, browser: WebDriver, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await gated_in_the_inbox(agent, api, browser, OVERWRITE)

    card = await pending_call_card(browser)
    await until(lambda: lines(browser, ".approval .diff-removed"), "the diff's removed lines")

    assert "notes.md: 6 lines removed, 1 added" in card.text
    assert lines(browser, ".approval .diff-removed") == [
        "-Attendees: Ana, Priya, Sam",
        "-",
        "-- Sam updates the pricing page before the launch.",
        "-- Ana drafts the customer email by Thursday.",
        "-- Someone needs to write the Q3 launch blog post.",
        "-- Next meeting: Monday 10:00.",
    ]
    assert lines(browser, ".approval .diff-added") == ["+- Sam renews the domain."]
    assert "\\n" not in card.text
    recording = request.config.getoption("--record-screenshots")
    picture = SCREENSHOT if recording else tmp_path / SCREENSHOT.name
    assert await asyncio.to_thread(card.screenshot, str(picture))


async def test_the_inbox_marks_a_preview_stale_once_the_file_changed_and_keeps_its_diff(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    run_id = await gated_in_the_inbox(agent, api, browser, OVERWRITE)
    await pending_call_card(browser)
    shown = await until(lambda: lines(browser, ".approval .preview-block span"), "the diff")

    notes_of(agent, run_id).write_text(TOUR_NOTES + "- Priya books the venue.\n")
    await open_run(browser, api, run_id)

    stale = await until(lambda: lines(browser, ".approval .preview-stale"), "the stale mark")
    assert stale == [
        "Stale: the file has changed since this preview was made; it shows the call as it was"
        " gated."
    ]
    assert lines(browser, ".approval .preview-block span") == shown


async def test_the_inbox_shows_a_long_argument_as_a_text_block_not_escaped_json(
    agent_factory: Any, browser: WebDriver, api_access: Any
) -> None:
    from tests.http_api import served

    agent = await agent_factory(tools=[send_mail])
    body = "Hello Ana,\n\nthe domain is renewed until 2028."
    agent.model.add(call("send_mail", {"to": "ana@example.com", "body": body}, id="m1"))
    async with served(agent, api_access) as api:
        run_id = await api.start("tell Ana")
        await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
        await open_run(browser, api, run_id)
        await pending_call_card(browser)

        block = await until(lambda: lines(browser, ".approval .preview-text span"), "the body")

    assert block == ["Hello Ana,", "", "the domain is renewed until 2028."]
    assert lines(browser, ".approval .preview-value code") == ['"ana@example.com"']


async def test_the_transcript_shows_a_calls_new_file_as_text_not_escaped_json(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    await gated_in_the_inbox(agent, api, browser, OVERWRITE)

    shown = await until(lambda: lines(browser, "#transcript .call .preview-text span"), "the call")

    assert shown == OVERWRITE.splitlines()
    assert lines(browser, "#transcript .call .preview-value code") == ['"notes.md"']
