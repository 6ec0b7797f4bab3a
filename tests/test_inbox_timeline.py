"""The run's timeline on its inbox page, as a person sees it in real headless Chromium: a
row per model call, tool call, wait for a person and sub-agent, with its duration, tokens
and cost, and the current wait growing while the page is open."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Phase, WaitingFor
from tests.browser import needs_chromium
from tests.deadline import TIMEOUT
from tests.http_api import serving
from tests.test_inbox import browser as browser  # the fixture: one Chromium for the module
from tests.test_inbox import open_run, pending_call_card, texts, until
from tests.test_timeline import KINDS, PROMPT, facts_agent

pytestmark = needs_chromium
_UNITS = {"ms": 0.001, "s": 1.0}


def seconds_of(took: str) -> float:
    """The seconds a duration of the page (`85ms`, `4.2s`, `3m05s`, `2h07m`) says."""
    found = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:([\d.]+)(ms|s))?…?", took)
    assert found is not None, took
    hours, minutes, amount, unit = found.groups()
    seconds = float(amount or 0) * _UNITS.get(unit or "s", 1.0)
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + seconds


def timeline_rows(browser: WebDriver) -> list[dict[str, str]]:
    """The timeline's rows as the page shows them, read at once (they are redrawn)."""
    rows: list[dict[str, str]] = browser.execute_script(
        "return [...document.querySelectorAll('#timeline-rows li')].map((li) => ({"
        " classes: li.className,"
        " took: li.querySelector('.span-took').innerText,"
        " kind: li.querySelector('.span-kind').innerText,"
        " name: li.querySelector('.span-name').innerText,"
        " link: li.querySelector('.span-name a')?.getAttribute('href') || '',"
        " numbers: li.querySelector('.span-numbers').innerText,"
        " width: li.querySelector('.span-bar').style.width }))"
    )
    return rows


async def test_the_run_page_timeline_shows_each_span_and_the_open_wait_grows(
    agent_factory: Any, browser: WebDriver
) -> None:
    agent = await facts_agent(agent_factory)
    async with serving(agent) as api:
        run_id = await api.start(PROMPT, require_approval=["write_file"], agents=["researcher"])
        run = api.run(run_id)
        assert (
            await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
        ).waiting_for is WaitingFor.APPROVAL
        await open_run(browser, api, run_id)
        card = await pending_call_card(browser)
        await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)
        answer = "Written, and checked."
        await until(lambda: answer in texts(browser, ".message.assistant .body"), "the answer")
        [tool_message] = [m for m in await run.transcript() if m.tool_call_id == "w1"]
        assert tool_message.decision is not None
        decider = tool_message.decision.user

        summary = browser.find_element(By.CSS_SELECTOR, "#timeline summary")
        await asyncio.to_thread(summary.click)
        rows = await until(
            lambda: (found := timeline_rows(browser)) and len(found) == len(KINDS) and found,
            "the timeline's rows, up to the wait for a reply",
        )

        assert [row["kind"] for row in rows] == [kind.value for kind in KINDS]
        model_calls = [row for row in rows if row["kind"] == "model"]
        assert all(re.fullmatch(r"\d+ tokens · \$\d\.\d{4}", r["numbers"]) for r in model_calls)
        assert rows[1]["name"] == f"approval · by {decider}"
        assert rows[2]["name"].startswith("write_file")
        assert rows[4]["link"] == f"#/runs/{run_id}%3Aresearcher-1"
        assert "open" in rows[-1]["classes"]
        assert rows[-1]["took"].endswith("…")
        assert "open" not in rows[1]["classes"]
        # The wait for a reply grows on the page, between and across the API's reads.
        first = seconds_of(rows[-1]["took"])
        await until(
            lambda: seconds_of(timeline_rows(browser)[-1]["took"]) > first + 1,
            "the open wait growing",
        )
        assert seconds_of(timeline_rows(browser)[1]["took"]) == seconds_of(rows[1]["took"])
        assert "open" in browser.find_element(By.ID, "timeline-summary").text
