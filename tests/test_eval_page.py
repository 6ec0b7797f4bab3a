"""An eval's report page in the inbox (`eval.html#ID`), as a person sees it in real
headless Chromium: the per-tool bars, the disagreement with both proposals and the
person's decision, and the way there from the inbox's list."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import EvalReport
from tests.browser import chromium, needs_chromium
from tests.cli import Cli
from tests.conftest import Agent
from tests.eval_dataset import DISAGREED, agree_on_three, write_dataset
from tests.http_api import Api
from tests.screenshots import shoot
from tests.test_inbox import until

pytestmark = needs_chromium
SCREENSHOT_TO = "EVAL_SCREENSHOT"
"""Where to write the page's picture besides the test's own directory: `EVAL_SCREENSHOT=
docs/eval-report.png` takes the guide's picture again."""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium(width=1100, height=1050) as driver:
        yield driver


def _text(browser: WebDriver, css: str) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, css)]


async def test_the_report_page_shows_bars_per_tool_and_the_disagreement_from_the_inbox(
    agent: Agent, cli: Cli, api: Api, browser: WebDriver, tmp_path: Path
) -> None:
    picture = os.environ.get(SCREENSHOT_TO)
    agree_on_three(agent.model)
    dataset = write_dataset(tmp_path / "support-decisions.jsonl")
    out = await cli.ok("eval", str(dataset), "--model", "default", "--json")
    eval_id = EvalReport.model_validate_json(out).eval_id

    # The inbox lists the eval, and its row opens the report.
    await asyncio.to_thread(browser.get, api.url + "/")
    link = await until(
        lambda: [
            a
            for a in browser.find_elements(By.CSS_SELECTOR, "#run-list a")
            if (a.get_attribute("href") or "").endswith(f"eval.html#{eval_id}")
        ],
        "the inbox never listed the eval",
    )
    await asyncio.to_thread(link[0].click)
    await until(lambda: "Agreement 0.75" in _text(browser, "#eval-overall")[0], "no agreement")

    bars = {
        e.get_attribute("data-tool") or "": e
        for e in browser.find_elements(By.CSS_SELECTOR, "#eval-bars li")
    }
    assert sorted(bars) == ["list_files", "read_file", "write_file"]
    write = bars["write_file"]
    assert "0.50 [" in write.text
    assert "1/2" in write.text
    fill = write.find_element(By.CSS_SELECTOR, ".eval-fill")
    track = write.find_element(By.CSS_SELECTOR, ".eval-track")
    assert abs(fill.size["width"] - track.size["width"] / 2) <= 2  # half the bar, drawn
    [miss] = browser.find_elements(By.CSS_SELECTOR, "#eval-misses li")
    assert miss.get_attribute("data-point") == DISAGREED
    assert _text(browser, ".eval-decision") == ['edited by bo to {"path":"b.md","content":"final"}']
    assert _text(browser, ".eval-original") == ['write_file {"path": "b.md", "content": "draft"}']
    assert _text(browser, ".eval-candidate") == ['write_file {"path": "b.md", "content": "draft"}']

    shot = Path(picture) if picture else tmp_path / "eval-report.png"
    await asyncio.to_thread(shoot, browser, f"{api.url}/eval.html#{eval_id}", DISAGREED, shot)
    assert shot.read_bytes()[:4] == b"\x89PNG"
