"""The web inbox as a person uses it: real headless Chromium (Debian's `chromium` and
`chromium-driver`, which `scripts/test` installs) driven by selenium, against the HTTP API
over a real dev server, worker and scripted model (issue 17)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from tarry.contracts import Phase
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.http_api import Api, serving

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs Debian's chromium and chromium-driver (scripts/test installs them as root)",
)
WAITING = {Phase.WAITING_USER}
PATIENCE = 30.0


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # The flags keep Chromium from reaching for Google's hosts, which this machine cannot.
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--no-first-run",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


@pytest.fixture
async def api(agent: Agent) -> AsyncIterator[Api]:
    async with serving(agent) as served:
        yield served


async def until(check: Callable[[], Any], what: str) -> Any:
    """Polls the page (selenium's calls block, so each runs in a thread) until `check`
    gives something truthy."""
    async with asyncio.timeout(PATIENCE):
        while True:
            found = await asyncio.to_thread(check)
            if found:
                return found
            await asyncio.sleep(0.05)
    raise AssertionError(what)  # pragma: no cover - the timeout raises first


def texts(browser: WebDriver, selector: str) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, selector)]


def first(browser: WebDriver, selector: str) -> WebElement | None:
    return next(iter(browser.find_elements(By.CSS_SELECTOR, selector)), None)


async def open_run(browser: WebDriver, api: Api, run_id: str) -> None:
    """Opens the inbox and the waiting run from its list, as a person would."""
    await asyncio.to_thread(browser.get, api.url + "/")
    link: WebElement = await until(
        lambda: next(
            (
                a
                for a in browser.find_elements(By.CSS_SELECTOR, "#waiting-list a")
                if run_id in a.text
            ),
            None,
        ),
        f"{run_id} in the list of waiting runs",
    )
    await asyncio.to_thread(link.click)
    await until(lambda: browser.find_element(By.ID, "run-title").text == run_id, "the run's page")


async def test_a_person_answers_a_waiting_run_and_sees_the_answer_stream_in(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    answer = "Bob it is. " + " ".join(f"word{i}" for i in range(60))
    agent.model.add(say("What shall I call the cat?"), say(answer, chunk_delay=0.05))
    run_id = await api.start("name the cat")
    await api.run(run_id).wait_for(WAITING)

    await open_run(browser, api, run_id)
    box = browser.find_element(By.ID, "reply-text")
    await asyncio.to_thread(box.send_keys, "Bob, please", Keys.ENTER)

    # The words appear while the model still writes them ...
    partial = await until(
        lambda: next(iter(texts(browser, ".message.live .body")), ""), "the answer's first words"
    )
    assert answer.startswith(partial.strip()[:5])
    assert len(partial) < len(answer)
    # ... and then the whole answer, as the transcript keeps it.
    await until(lambda: answer in texts(browser, ".message.assistant:not(.live) .body"), "answer")
    assert texts(browser, ".message.user .body") == ["name the cat", "Bob, please"]
    transcript = [m.content for m in await api.run(run_id).transcript()]
    assert transcript == ["name the cat", "What shall I call the cat?", "Bob, please", answer]


async def test_a_person_approves_a_gated_call_in_the_inbox(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "hi"}), say("Written."))
    run_id = await api.start("write a.md", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING)

    await open_run(browser, api, run_id)
    card: WebElement = await until(
        lambda: first(browser, "#approvals .approval"), "the pending call's card"
    )
    assert "write_file" in card.text
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)

    await until(lambda: "Written." in texts(browser, ".message.assistant .body"), "the answer")
    assert (agent.workspace_root / run_id / "a.md").read_text() == "hi"
    assert browser.find_elements(By.CSS_SELECTOR, "#approvals .approval") == []


async def test_html_in_a_model_answer_is_shown_as_text_and_never_runs(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    attack = (
        "Look: <img src=x onerror=\"document.title='pwned-img'\"> and "
        "<script>document.title='pwned-script'</script> **bold** done"
    )
    agent.model.add(say(attack))
    run_id = await api.start("show me something")
    await api.run(run_id).wait_for(WAITING)

    await open_run(browser, api, run_id)
    body: WebElement = await until(lambda: first(browser, ".assistant .body"), "the answer")

    assert "<script>document.title='pwned-script'</script>" in body.text
    assert "<img src=x" in body.text
    assert body.find_elements(By.TAG_NAME, "img") == []
    assert body.find_elements(By.TAG_NAME, "script") == []
    assert body.find_element(By.TAG_NAME, "strong").text == "bold"  # markdown still renders
    assert "pwned" not in browser.title
