"""Memories in the inbox, in real headless Chromium: the owner edits the text of a memory
the agent asks to keep, and the edited text is what is stored (issue 59, acceptance 2);
the Memories page lists a person's memories, edits and deletes them; the New run form
gives a run its memory settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Phase, RunInput, WaitingFor
from tarry.contracts.memories import MemoryAccess
from tarry.testing.scripted_model import call, say
from tests.browser import chromium, needs_chromium
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_inbox import as_person, fill, first, open_run, texts, title_is, until
from tests.test_memory_doors import kept
from tests.test_memory_tools import OWNER_ASKED, memories
from tests.test_owners import ALICE, ERIN, people_api, with_people

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def index(tmp_path: Path) -> Path:
    return tmp_path / "search.db"


@pytest.fixture
async def api(
    agent_factory: Callable[..., Awaitable[Agent]],
    index: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Api]:
    """The API with `CONFIG`'s people over an agent whose worker keeps memories."""
    agent = await agent_factory(worker_settings={"tarry_search_index": str(index)})
    with_people(tmp_path, monkeypatch)
    monkeypatch.setenv("TARRY_SEARCH_INDEX", str(index))
    async with people_api(agent) as api:
        yield api


async def test_the_owner_edits_a_memory_in_the_inbox_and_the_edit_is_what_is_kept(
    api: Api, browser: WebDriver, index: Path
) -> None:
    api.agent.model.add(
        call("remember", {"text": "Priya owns the blg", "tags": ["people"]}, id="m1"),
        say("Noted."),
    )
    run_id = await api.start("remember the owner", memory_access="read-write", **OWNER_ASKED)
    state = await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert state.waiting_for is WaitingFor.APPROVAL
    await as_person(browser, api, ALICE)
    await open_run(browser, api, run_id)

    card = await until(lambda: first(browser, "#approvals .approval"), "the memory to approve")
    summary = card.find_element(By.CSS_SELECTOR, ".approval-edit summary")
    assert summary.text == "Edit the memory"
    await asyncio.to_thread(summary.click)
    text = card.find_element(By.CSS_SELECTOR, "textarea.approval-arguments")
    assert text.get_attribute("value") == "Priya owns the blg"
    await asyncio.to_thread(text.clear)
    await asyncio.to_thread(text.send_keys, "Priya owns the blog")
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)
    await until(lambda: "Noted." in texts(browser, ".message.assistant .body"), "the answer")

    [memory] = await memories(index)
    assert (memory.text, memory.tags) == ("Priya owns the blog", ["people"])
    assert memory.provenance.approved_by == "alice"
    [message] = [m for m in await api.run(run_id).transcript() if m.tool_call_id == "m1"]
    assert message.decision is not None
    assert message.decision.arguments == {"text": "Priya owns the blog", "tags": ["people"]}


async def open_memories(browser: WebDriver, api: Api) -> None:
    await as_person(browser, api, ALICE)
    await asyncio.to_thread(browser.get, api.url + "/#/memories")


async def test_the_memories_page_lists_a_persons_memories_with_their_provenance(
    api: Api, browser: WebDriver, index: Path
) -> None:
    await kept(index, "alice's", "alice")
    await kept(index, "bob's", "bob", text="Bob's secret")

    await open_memories(browser, api)

    card = await until(lambda: first(browser, "#memory-list .memory"), "alice's memory")
    assert card.get_attribute("data-memory-id") == "alice's"
    assert card.find_element(By.CSS_SELECTOR, ".memory-provenance").text == (
        "alice · from run run-1, turn 2, approved by alice"
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#memory-list .memory")) == 1
    assert "Bob's secret" not in browser.page_source


async def test_a_memory_edited_on_the_memories_page_is_stored_so(
    api: Api, browser: WebDriver, index: Path
) -> None:
    await kept(index, "m1", "alice")
    await open_memories(browser, api)

    card = await until(lambda: first(browser, "#memory-list .memory"), "the memory")
    text = card.find_element(By.CSS_SELECTOR, "textarea.memory-text")
    await asyncio.to_thread(text.clear)
    await asyncio.to_thread(text.send_keys, "Sam owns the blog")
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.memory-save").click)

    await until(
        lambda: "edited by alice" in browser.find_element(By.ID, "memory-list").text,
        "the edited memory",
    )
    [memory] = await memories(index)
    assert (memory.text, memory.edited_by) == ("Sam owns the blog", "alice")


async def test_a_memory_deleted_on_the_memories_page_is_gone(
    api: Api, browser: WebDriver, index: Path
) -> None:
    await kept(index, "m1", "alice")
    await open_memories(browser, api)

    card = await until(lambda: first(browser, "#memory-list .memory"), "the memory")
    await asyncio.to_thread(browser.execute_script, "window.confirm = () => true")
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.memory-delete").click)

    await until(lambda: browser.find_element(By.ID, "memory-empty").is_displayed(), "no memory")
    [memory] = await memories(index)
    assert memory.deleted_by == "alice"


async def test_a_person_starts_a_run_with_memory_from_the_new_run_form(
    api: Api, browser: WebDriver, index: Path
) -> None:
    api.agent.model.add(call("remember", {"text": "Priya owns the blog"}, id="m1"), say("Noted."))
    await as_person(browser, api, ERIN)  # an admin, whose group is admins
    await asyncio.to_thread(browser.get, api.url + "/#/new")
    await asyncio.to_thread(
        fill,
        browser,
        {
            "#start-prompt": "Remember the owner.",
            "#start-memory": "read-write",
            "#start-memory-scope": "group:admins",
        },
    )
    await asyncio.to_thread(browser.find_element(By.ID, "start-button").click)
    url = await until(lambda: "#/runs/" in browser.current_url and browser.current_url, "the run")
    run_id = url.partition("#/runs/")[2]
    await api.run(run_id).wait_for({Phase.WAITING_USER}, TIMEOUT)
    workflow = api.agent.tarry.client.get_workflow_handle(run_id)
    input = await workflow.query("run_input", result_type=RunInput)
    await until(lambda: title_is(browser, run_id), "the run's page")

    assert (input.memory_access, input.memory_scope) == (MemoryAccess.READ_WRITE, "group:admins")
    [memory] = await memories(index)
    assert (memory.text, memory.scope) == ("Priya owns the blog", "group:admins")


async def test_the_new_run_form_refuses_another_persons_memory_scope_and_starts_nothing(
    api: Api, browser: WebDriver
) -> None:
    await as_person(browser, api, ALICE)
    await asyncio.to_thread(browser.get, api.url + "/#/new")
    await asyncio.to_thread(
        fill,
        browser,
        {
            "#start-prompt": "What do you know?",
            "#start-memory": "read",
            "#start-memory-scope": "bob",
        },
    )
    await asyncio.to_thread(browser.find_element(By.ID, "start-button").click)

    error = await until(lambda: browser.find_element(By.ID, "start-error").text, "the error")
    assert error.startswith("NOT_ALLOWED: memory_scope 'bob' is not yours")
    assert browser.current_url.endswith("#/new")
    assert api.agent.model.requests == []
