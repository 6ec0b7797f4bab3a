"""The web inbox as a person uses it: real headless Chromium (Debian's `chromium` and
`chromium-driver`, which `scripts/test` installs) driven by selenium, against the HTTP API
over a real dev server, worker and scripted model."""

from __future__ import annotations

import asyncio
import functools
import html
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.command import Command
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select

from tarry.cli.tour import SCRIPT_FILE
from tarry.client import ScheduleHandle
from tarry.contracts import (
    AgentSpec,
    Budget,
    Mode,
    Phase,
    ReplyPolicy,
    RunInput,
    RunState,
    WaitingFor,
)
from tarry.contracts.waits import KINDS
from tarry.testing.scripted_model import Script, ScriptedModel, call, say
from tests.browser import chromium, needs_chromium, static_site
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.faults import LOCAL_USER
from tests.http_api import TOKEN, Api, serving
from tests.test_api_access import signals
from tests.test_api_model_failure import SOON
from tests.test_cli_approvals import decision_of, until_state
from tests.test_http_api import listed
from tests.test_http_api_people import as_
from tests.test_model_failure import failing_agent
from tests.test_notifications import Linked
from tests.test_notifications import linked as linked  # the fixture, and the one it needs:
from tests.test_notifications import receiver as receiver
from tests.test_owners import BOB, CAROL, alices_run, people_api, with_people
from tests.test_retrying import LONG_OUTAGE
from tests.test_sub_agents import PLANNER, plan_the_launch

pytestmark = needs_chromium
WAITING = {Phase.WAITING_USER}
PATIENCE = deadline(30)
T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


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


async def pending_call_card(browser: WebDriver) -> WebElement:
    """The card of the run's first pending call, once the page shows it."""
    card: WebElement = await until(
        lambda: first(browser, "#approvals .approval"), "the pending call's card"
    )
    return card


async def script(browser: WebDriver, js: str, *args: Any) -> Any:
    """What `js` returns on the page, run in a thread. The API serves the page from this
    test's event loop: a selenium call that blocks the loop while Chromium waits on the
    API (a page still loading when the script is sent) never returns."""
    return await asyncio.to_thread(browser.execute_script, js, *args)


def texts(browser: WebDriver, selector: str) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, selector)]


def list_texts(browser: WebDriver, selector: str) -> list[str]:
    """The texts of `selector` in the list of runs, read at once: the list is redrawn
    as the runs change, which would leave an element found a moment before stale."""
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(`#run-list ${arguments[0]}`)]"
        ".map((e) => e.innerText)",
        selector,
    )
    return found


def first(browser: WebDriver, selector: str) -> WebElement | None:
    return next(iter(browser.find_elements(By.CSS_SELECTOR, selector)), None)


def click_row(browser: WebDriver, run_id: str) -> bool:
    """Clicks `run_id`'s row in the list of runs; False while it is not there (or the
    list was redrawn under the click: it is redrawn as the runs change)."""
    for item in browser.find_elements(By.CSS_SELECTOR, "#run-list li"):
        try:
            # By its id, not its text: a sub-agent's row holds its lead's id too.
            if item.get_attribute("data-run-id") == run_id:
                item.find_element(By.TAG_NAME, "a").click()
                return True
        except StaleElementReferenceException:
            return False
    return False


async def open_run(browser: WebDriver, api: Api, run_id: str) -> None:
    """Opens the inbox and the run from its list, as a person would."""
    await asyncio.to_thread(browser.get, api.url + "/")
    await until(lambda: click_row(browser, run_id), f"{run_id} in the list of runs")
    await until(lambda: browser.find_element(By.ID, "run-title").text == run_id, "the run's page")


async def test_a_person_answers_a_waiting_run_and_sees_the_answer_stream_in(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    answer = "Bob it is. " + " ".join(f"word{i}" for i in range(60))
    agent.model.add(say("What shall I call the cat?"), say(answer, chunk_delay=0.05))
    run_id = await api.start("name the cat")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

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


async def test_a_waiting_run_a_schedule_started_names_its_schedule(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say("Here is the weekly report. Shall I send it?"))
    schedule = await agent.tarry.create_schedule(
        f"report-{uuid.uuid4().hex[:6]}", "Draft the weekly report", cron="0 0 1 1 *"
    )
    await schedule.trigger()
    run_id = await until_async(lambda: _first_run(schedule), "the scheduled run")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await asyncio.to_thread(browser.get, api.url + "/")

    line = await until(
        lambda: next((t for t in list_texts(browser, "a") if run_id in t), None),
        f"{run_id} in the list of runs",
    )
    await schedule.delete()
    await api.run(run_id).stop()
    assert f"from schedule {schedule.name}" in line


async def test_a_waiting_sub_agent_names_the_run_it_works_for(
    agent_factory: Any, browser: WebDriver
) -> None:
    planner = AgentSpec(description="Plans with the person.", tools=[], mode=Mode.CHAT)
    agent = await agent_factory(agents={"planner": planner})
    agent.model.add(
        call("agent__planner", {"task": "Plan the launch."}, id="a1"),
        say("Which day should we launch?"),
    )
    async with serving(agent) as api:
        lead = await api.start("Plan our launch.", agents=["planner"])
        child = f"{lead}:planner-1"
        api.run(child)

        await asyncio.to_thread(browser.get, api.url + "/")
        # Read in one script: the list is redrawn as the lead's and the child's states
        # change, and an element found before a redraw is gone by the time it is read.
        read = "return [...document.querySelectorAll('#run-list a')].map(a => a.innerText)"
        # The list shows every run: the child's row once it waits for a reply.
        line = await until(
            lambda: next(
                (t for t in browser.execute_script(read) if child in t and "reply" in t), None
            ),
            f"{child} in the list, waiting for a reply",
        )
        await api.run(lead).stop()

    assert f"agent of {lead}" in line


async def test_a_sub_agents_gated_call_is_decided_in_the_inbox_with_its_lead_shown(
    agent_factory: Any, browser: WebDriver
) -> None:
    writer = AgentSpec(
        description="Writes files.", tools=["write_file"], require_approval=["write_file"]
    )
    agent = await agent_factory(agents={"writer": writer})
    agent.model.add(
        call("agent__writer", {"task": "Write the plan."}, id="a1"),
        call("write_file", {"path": "plan.md", "content": "ship it"}, id="w1"),
        say("Written."),
        say("The writer wrote the plan."),
    )
    async with serving(agent) as api:
        lead = await api.start("Get the plan written.", agents=["writer"])
        child = f"{lead}:writer-1"
        api.run(child)

        await open_run(browser, api, child)
        read = "return [...document.querySelectorAll('#run-list a')].map(a => a.innerText)"
        row = next(t for t in browser.execute_script(read) if child in t)
        card = await pending_call_card(browser)
        call_text = card.text
        await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)

        async def answered() -> RunState | None:
            state = await api.run(lead).state()
            return state if state.waiting_for is WaitingFor.INPUT else None

        state = await until_async(answered, "the lead's answer")

    assert f"agent of {lead}" in row
    assert "write_file" in call_text
    assert (agent.workspace_root / lead / "plan.md").read_text() == "ship it"
    assert state.last_assistant_text == "The writer wrote the plan."


def click(browser: WebDriver, selector: str) -> bool:
    """Clicks the first element `selector` finds; False while there is none (or it was
    redrawn under the click)."""
    try:
        found = first(browser, selector)
        if found is not None:
            found.click()
        return found is not None
    except StaleElementReferenceException:
        return False


def title_is(browser: WebDriver, run_id: str) -> bool:
    return bool(browser.find_element(By.ID, "run-title").text == run_id)


async def test_a_lead_s_page_links_the_sub_agent_it_waits_on_whose_page_links_back(
    agent_factory: Any, browser: WebDriver
) -> None:
    agent = await agent_factory(agents={"planner": PLANNER})
    plan_the_launch(agent, "Plan our launch.")
    async with serving(agent) as api:
        lead = await api.start("Plan our launch.", agents=["planner"])
        child = f"{lead}:planner-1"
        api.run(child)
        await until_async(lambda: _waiting_on(api, lead), "the lead waiting on its sub-agent")

        await open_run(browser, api, lead)
        waits = await until(lambda: first(browser, "#run-tree .waiting-on"), "the wait's line")
        waits_text = waits.text
        await until(lambda: click(browser, "#run-tree .waiting-on a"), "the link to the child")
        await until(lambda: title_is(browser, child), "the sub-agent's page")
        await until(
            lambda: "Which day should we launch?" in texts(browser, ".message.assistant .body"),
            "the sub-agent's question",
        )
        lead_line = browser.find_element(By.CSS_SELECTOR, "#run-tree .lead").text
        await until(lambda: click(browser, "#run-tree .lead a"), "the link back to the lead")
        await until(lambda: title_is(browser, lead), "the lead's page again")
        children = await until(lambda: first(browser, "#run-tree .children"), "its sub-agents")
        children_text = children.text
        await api.run(lead).stop()

    assert waits_text == f"Waiting for its sub-agent {child}: answer it there."
    assert lead_line == f"Sub-agent of {lead}"
    assert children_text == f"Sub-agents: {child}"


async def _waiting_on(api: Api, run_id: str) -> str | None:
    return (await api.run(run_id).state()).waiting_on


def _run_url(browser: WebDriver) -> str | None:
    url: str = browser.current_url
    return url if "#/runs/" in url else None


def fill(browser: WebDriver, values: dict[str, str]) -> None:
    """Types each value into the field `selector` finds (a select: chooses the option)."""
    for selector, value in values.items():
        field = browser.find_element(By.CSS_SELECTOR, selector)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)


async def test_a_person_starts_a_run_with_a_budget_an_agent_approvers_a_rule_and_a_reply_policy(
    agent_factory: Any, browser: WebDriver
) -> None:
    agent = await agent_factory(agents={"planner": PLANNER})
    agent.model.add_conversation("Plan our launch.", say("Shall I ask the planner?"))
    await asyncio.to_thread(console, browser)  # what earlier pages logged
    async with serving(agent) as api:
        await asyncio.to_thread(browser.get, api.url + "/#/new")
        await asyncio.to_thread(
            fill,
            browser,
            {
                "#start-prompt": "Plan our launch.",
                "#start-agents": "planner",
                "#start-budget-tokens": "5000",
                "#start-budget-cost": "2.5",
                "#start-approvers .approver-tool": "write_file",
                "#start-approvers .approver-who": "ops, alice",
                "#start-rules .rule-tool": "write_file",
                "#start-rules .rule-pointer": "/path",
                "#start-rules .rule-pattern": "notes/*.md",
                "#start-rules .rule-decision": "approve",
                "#start-reply-policy": "interrupt",
            },
        )
        await asyncio.to_thread(browser.find_element(By.ID, "start-button").click)
        url = await until(
            lambda: "#/runs/" in browser.current_url and browser.current_url, "the run"
        )
        run_id = unquote(url.partition("#/runs/")[2])
        state = await api.run(run_id).wait_for(WAITING, TIMEOUT)
        workflow = agent.tarry.client.get_workflow_handle(run_id)
        input = await workflow.query("run_input", result_type=RunInput)
        await until(lambda: title_is(browser, run_id), "the run's page")
        logged = await asyncio.to_thread(console, browser)

    # The added rows come from <template>s, wired in inbox.js: nothing inline to refuse.
    assert not [message for message in logged if "Content Security Policy" in message]
    assert input.agents == ["planner"]
    assert input.budget == state.budget == Budget(max_total_tokens=5000, max_cost_usd=2.5)
    assert input.approvers == {"write_file": ["ops", "alice"]}
    assert [r.model_dump(mode="json", exclude_none=True) for r in input.approval_rules] == [
        {"tool": "write_file", "when": {"/path": "notes/*.md"}, "decision": "approve"}
    ]
    assert state.on_reply_while_running is ReplyPolicy.INTERRUPT
    assert state.last_assistant_text == "Shall I ask the planner?"


async def test_the_new_run_form_shows_the_api_s_coded_error_and_starts_nothing(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    await asyncio.to_thread(browser.get, api.url + "/#/new")
    await asyncio.to_thread(
        fill,
        browser,
        {
            "#start-prompt": "Tidy the notes.",
            "#start-rules .rule-tool": "delete_file",
            "#start-rules .rule-decision": "reject",  # with no reason for the model
        },
    )
    await asyncio.to_thread(browser.find_element(By.ID, "start-button").click)

    error = await until(lambda: browser.find_element(By.ID, "start-error").text, "the error")
    assert error.startswith("INPUT_INVALID: body.approval_rules.0: ")
    assert "a rule that rejects needs a reason" in error
    assert browser.current_url.endswith("#/new")
    assert agent.model.requests == []


async def _first_run(schedule: ScheduleHandle) -> str | None:
    return next(iter((await schedule.describe()).running), None)


async def until_async(check: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Polls `check()` until it gives something other than None."""
    async with asyncio.timeout(PATIENCE):
        while (found := await check()) is None:
            await asyncio.sleep(0.05)
    return found


async def test_a_person_approves_a_gated_call_in_the_inbox(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "hi"}), say("Written."))
    run_id = await api.start("write a.md", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, api, run_id)
    card = await pending_call_card(browser)
    assert "write_file" in card.text
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)

    await until(lambda: "Written." in texts(browser, ".message.assistant .body"), "the answer")
    assert (agent.workspace_root / run_id / "a.md").read_text() == "hi"
    assert browser.find_elements(By.CSS_SELECTOR, "#approvals .approval") == []


async def test_a_write_rejected_in_the_inbox_leaves_the_tour_s_agent_saying_it_wrote_nothing(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    tour = Script.from_json(SCRIPT_FILE.read_text()).conversations[0]
    agent.model.add_conversation(tour.prompt, *tour.steps)
    run_id = await api.start(tour.prompt, require_approval=["write_file"])
    run = api.run(run_id)
    await run.wait_for(WAITING, TIMEOUT)  # its question: who takes the blog post
    await run.reply("Priya takes the blog post.")
    await until_state(run, lambda state: bool(state.pending_approvals))

    await open_run(browser, api, run_id)
    card = await pending_call_card(browser)
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.reject").click)

    said = "I did not write actions.md"
    await until(
        lambda: any(said in t for t in texts(browser, ".message.assistant .body")),
        "the agent saying it wrote nothing",
    )
    assert not (agent.workspace_root / run_id / "actions.md").exists()


async def test_a_run_opened_from_far_down_a_long_list_shows_its_call_to_approve(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "hi"}), say("Written."))
    run_id = await api.start("write a.md", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    # Newer runs list above it, so its row is far below the window's bottom (runs
    # without a prompt, which wait for one and ask the model nothing).
    for _ in range(25):
        await api.start()

    await open_run(browser, api, run_id)
    card = await pending_call_card(browser)
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve").click)

    await until(lambda: "Written." in texts(browser, ".message.assistant .body"), "the answer")
    assert (agent.workspace_root / run_id / "a.md").read_text() == "hi"


async def test_approve_and_remember_in_the_inbox_decides_the_like_call_after_it(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    write = functools.partial(call, "write_file", {"path": "a.md", "content": "hi"})
    agent.model.add(write(id="w1"), write(id="w2"), say("Twice."))
    run_id = await api.start("write a.md twice", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, api, run_id)
    card = await pending_call_card(browser)
    await asyncio.to_thread(card.find_element(By.CSS_SELECTOR, "button.approve-remember").click)

    await until(lambda: "Twice." in texts(browser, ".message.assistant .body"), "the answer")
    decisions = [m.decision for m in await api.run(run_id).transcript() if m.decision]
    assert [(d.remember, d.user) for d in decisions] == [("run", LOCAL_USER), (None, "remembered")]


async def test_a_call_only_others_may_decide_shows_who_and_offers_no_decision(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "hi"}), say("Written."))
    run_id = await api.start(
        "write a.md", require_approval=["write_file"], approvers={"*": ["bob"]}
    )
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, api, run_id)
    card = await pending_call_card(browser)

    assert "Only bob may decide this call." in card.text
    assert card.find_elements(By.CSS_SELECTOR, "button") == []


async def test_the_transcript_says_who_sent_each_message(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say("Hello."))
    run_id = await api.start("hi")  # over an API without tokens: the local user
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, api, run_id)

    who = await until(lambda: first(browser, ".message.user .who"), "the reply")
    assert who.get_attribute("textContent") == LOCAL_USER  # as written, shown in capitals


async def test_html_in_a_model_answer_is_shown_as_text_and_never_runs(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    attack = (
        "Look: <img src=x onerror=\"document.title='pwned-img'\"> and "
        "<script>document.title='pwned-script'</script> **bold** done"
    )
    agent.model.add(say(attack))
    run_id = await api.start("show me something")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, api, run_id)
    body: WebElement = await until(lambda: first(browser, ".assistant .body"), "the answer")

    assert "<script>document.title='pwned-script'</script>" in body.text
    assert "<img src=x" in body.text
    assert body.find_elements(By.TAG_NAME, "img") == []
    assert body.find_elements(By.TAG_NAME, "script") == []
    assert body.find_element(By.TAG_NAME, "strong").text == "bold"  # markdown still renders
    assert "pwned" not in browser.title


# --- Every run, followed live -----------------------------------------------------


def badge(browser: WebDriver) -> str:
    return browser.find_element(By.ID, "run-phase").text


def list_tag(browser: WebDriver, run_id: str) -> str | None:
    """The tag of `run_id`'s row in the list of runs; None while it is not listed."""
    tags = list_texts(browser, f'li[data-run-id="{run_id}"] .tag')
    return tags[0] if tags else None


async def test_after_approve_the_run_shows_running_until_its_next_stop(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    # The model holds its next answer: the run works for seconds after the decision.
    agent.model.add(
        call("write_file", {"path": "a.md", "content": "hi"}), say("Written.", delay=deadline(5))
    )
    run_id = await api.start("write a.md", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await open_run(browser, api, run_id)
    approve: WebElement = await until(
        lambda: first(browser, "#approvals button.approve"), "the Approve button"
    )
    assert badge(browser) == "waiting for approval"

    await asyncio.to_thread(approve.click)

    await until(
        lambda: badge(browser) == "running" and list_tag(browser, run_id) == "running",
        "the badge and the list saying running",
    )
    await until(lambda: badge(browser) == "waiting for input", "the badge at the next stop")


async def test_a_decision_says_who_made_it(agent: Agent, api: Api, browser: WebDriver) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "hi"}), say("Written."))
    run_id = await api.start("write a.md", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await open_run(browser, api, run_id)
    approve: WebElement = await until(
        lambda: first(browser, "#approvals button.approve"), "the Approve button"
    )

    await asyncio.to_thread(approve.click)

    decision: str = await until(
        lambda: next(iter(texts(browser, "#transcript .decision")), ""), "the decision"
    )
    assert decision.startswith(f"approved by {LOCAL_USER} at ")  # no tokens: the local user


LONG_ANSWER = "\n\n".join(f"Paragraph {i} of a long answer." for i in range(80))
"""An answer far taller than the browser's window."""

NEWEST_IN_VIEW = """
const items = document.querySelectorAll("#transcript > li");
if (!items.length) return false;
const bottom = items[items.length - 1].getBoundingClientRect().bottom;
return window.scrollY > 0 && bottom > 0 && bottom <= window.innerHeight;
"""
"""Whether the page is scrolled down to its newest message's end."""


async def test_opening_a_long_run_shows_its_newest_message(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say(LONG_ANSWER))
    run_id = await api.start("tell me everything")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, api, run_id)

    await until(lambda: browser.execute_script(NEWEST_IN_VIEW), "the newest message in view")


async def test_a_new_message_scrolls_into_view(agent: Agent, api: Api, browser: WebDriver) -> None:
    agent.model.add(say(LONG_ANSWER), say("And one more thing. " + LONG_ANSWER))
    run_id = await api.start("tell me everything")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await open_run(browser, api, run_id)
    await until(lambda: browser.execute_script(NEWEST_IN_VIEW), "the newest message in view")

    await api.run(run_id).reply("go on")

    newest = await until(
        lambda: next((t for t in texts(browser, ".message.assistant .body") if "one more" in t), 0),
        "the new answer",
    )
    assert newest
    await until(lambda: browser.execute_script(NEWEST_IN_VIEW), "the new answer in view")


SCROLL_TO_TOP = """
const done = arguments[0];
window.scrollTo(0, 0);
// Two frames later the page has handled the scroll, as it does a person's.
requestAnimationFrame(() => requestAnimationFrame(() => done(window.scrollY)));
"""


async def test_a_person_who_scrolled_up_to_read_stays_where_they_read(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say(LONG_ANSWER), say("And one more thing."))
    run_id = await api.start("tell me everything")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await open_run(browser, api, run_id)
    await until(lambda: browser.execute_script(NEWEST_IN_VIEW), "the newest message in view")
    assert await asyncio.to_thread(browser.execute_async_script, SCROLL_TO_TOP) == 0

    await api.run(run_id).reply("go on")

    await until(
        lambda: "And one more thing." in texts(browser, ".message.assistant .body"), "the answer"
    )
    assert browser.execute_script("return window.scrollY") == 0


async def test_a_person_raises_a_spent_budget_and_the_run_goes_on(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    agent.model.add(call("list_files", usage=usage), say("Three files."))
    run_id = await api.start("look around", budget={"max_total_tokens": 100})
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await open_run(browser, api, run_id)
    form: WebElement = await until(
        lambda: (f := first(browser, "#budget-form")) and f.is_displayed() and f, "the control"
    )
    assert "Spent 120 tokens of 100." in form.text
    tokens = browser.find_element(By.ID, "budget-tokens")
    assert tokens.get_attribute("value") == "200"  # twice the spent limit, to start from

    await asyncio.to_thread(tokens.send_keys, Keys.ENTER)

    await until(lambda: "Three files." in texts(browser, ".message.assistant .body"), "answer")
    state = await api.state(run_id)
    raised = (state.budget and state.budget.max_total_tokens, state.budget_raised_by)
    assert raised == (200, LOCAL_USER)
    await until(lambda: not form.is_displayed(), "the control gone")


async def choose(browser: WebDriver, select_id: str, value: str) -> None:
    """Picks `value` of the select `select_id`, from a thread: a page still loading holds
    selenium's calls until the API, served on this loop, has answered it."""
    selector = f'#{select_id} option[value="{value}"]'
    option = await asyncio.to_thread(browser.find_element, By.CSS_SELECTOR, selector)
    await asyncio.to_thread(option.click)


async def test_the_phase_filter_shows_ended_runs_too(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say("Done."))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    await api.run(run_id).stop()
    await api.run(run_id).wait_for({Phase.COMPLETED}, TIMEOUT)
    await asyncio.to_thread(browser.get, api.url + "/")

    await choose(browser, "filter-phase", "Completed")

    await until(lambda: list_tag(browser, run_id) == "completed", f"{run_id} in the list")
    assert set(list_texts(browser, ".tag")) == {"completed"}


def options(browser: WebDriver, select_id: str) -> list[tuple[str, str]]:
    found: list[list[str]] = browser.execute_script(
        "return [...document.querySelectorAll(`#${arguments[0]} option`)]"
        ".map((o) => [o.value, o.text])",
        select_id,
    )
    return [(value, text) for value, text in found]


async def test_the_waiting_filter_offers_every_kind_of_wait_the_api_registers(
    api: Api, browser: WebDriver
) -> None:
    await asyncio.to_thread(browser.get, api.url + "/")

    offered = await until(lambda: options(browser, "filter-waiting")[1:], "the kinds")

    assert offered == [(kind.kind, kind.waits_for) for kind in KINDS]


async def test_the_waiting_filter_lists_only_runs_waiting_for_that(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(say("Your turn."), call("write_file", {"path": "a.md", "content": "hi"}))
    reply = await api.start("hello")
    await api.run(reply).wait_for(WAITING, TIMEOUT)
    approval = await api.start("write a.md", require_approval=["*"])
    await api.run(approval).wait_for(WAITING, TIMEOUT)
    await asyncio.to_thread(browser.get, api.url + "/")
    await until(lambda: list_tag(browser, reply) == "reply", "the run waiting for a reply")

    await choose(browser, "filter-waiting", WaitingFor.APPROVAL)

    await until(
        lambda: list_tag(browser, reply) is None and list_tag(browser, approval) == "approval",
        "the run waiting for approval listed, the other not",
    )
    assert set(list_texts(browser, ".tag")) == {"approval"}


async def test_the_calls_i_may_decide_filter_lists_only_runs_i_may_approve(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(
        call("write_file", {"path": "a.md", "content": "hi"}),
        call("write_file", {"path": "b.md", "content": "hi"}),
    )
    # Without tokens the API's every caller is the local user, as the CLI's are.
    theirs = await api.start("write a.md", require_approval=["*"], approvers={"*": ["bob"]})
    await api.run(theirs).wait_for(WAITING, TIMEOUT)
    mine = await api.start("write b.md", require_approval=["*"], approvers={"*": [LOCAL_USER]})
    await api.run(mine).wait_for(WAITING, TIMEOUT)
    await asyncio.to_thread(browser.get, api.url + "/")
    await until(lambda: list_tag(browser, theirs) == "approval", "their run in the list")

    await asyncio.to_thread(browser.find_element(By.ID, "filter-mine").click)

    await until(
        lambda: list_tag(browser, theirs) is None and list_tag(browser, mine) == "approval",
        "my run listed, theirs not",
    )
    assert set(list_texts(browser, ".tag")) == {"approval"}


HOLD_RUN = """
const [held] = arguments;
const realFetch = window.fetch;
let release;
const gate = new Promise((resolve) => (release = resolve));
// What the page asks about run `held` (but its event stream) waits for `release`; each
// request counts as pending until the page has read its answer and acted on it.
window.held = { release, pending: 0 };
window.fetch = async (input, init) => {
  const path = String(input);
  if (path !== `/v1/runs/${held}` && !path.startsWith(`/v1/runs/${held}/transcript`)) {
    return realFetch(input, init);
  }
  window.held.pending++;
  await gate;
  const response = await realFetch(input, init);
  const json = response.json.bind(response);
  response.json = () => json().finally(() => setTimeout(() => window.held.pending--));
  return response;
};
"""
"""Makes the server's answers about one run late, as a slow server's are."""


async def test_a_late_answer_for_a_run_left_behind_is_not_shown_on_the_next_run_s_page(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "apples"}), say("Bananas?"))
    left = await api.start("write about apples", require_approval=["write_file"])
    await api.run(left).wait_for(WAITING, TIMEOUT)
    opened = await api.start("talk about bananas")
    await api.run(opened).wait_for(WAITING, TIMEOUT)
    await asyncio.to_thread(browser.get, api.url + "/")
    await script(browser, HOLD_RUN, left)
    await script(browser, "location.hash = arguments[0]", f"#/runs/{left}")
    await until(lambda: browser.execute_script("return window.held.pending") == 1, "the held ask")
    await script(browser, "location.hash = arguments[0]", f"#/runs/{opened}")
    await until(lambda: badge(browser) == "waiting for input", f"{opened}'s page")

    await script(browser, "window.held.release()")

    await until(lambda: browser.execute_script("return window.held.pending") == 0, "the answers")
    assert browser.find_element(By.ID, "run-title").text == opened
    assert badge(browser) == "waiting for input"
    assert texts(browser, "#transcript .body") == ["talk about bananas", "Bananas?"]
    assert browser.find_elements(By.CSS_SELECTOR, "#approvals .approval") == []
    assert browser.find_element(By.ID, "run-meta").text.startswith("turn 1 · ")


# --- A failing model ------------------------------------------------------------


async def test_while_the_model_fails_the_run_s_page_shows_the_retry(
    agent: Agent, api: Api, browser: WebDriver
) -> None:
    agent.model.add(*LONG_OUTAGE, say("back online"))
    run_id = await api.start("hello")

    await asyncio.to_thread(browser.get, f"{api.url}/#/runs/{run_id}")
    line: str = await until(
        lambda: next(iter(texts(browser, "#run-retrying")), ""), "the retry line"
    )

    assert line.startswith("↻ model unreachable, attempt ")
    assert " s (LLM_HTTP_ERROR: model 'default' answered HTTP 503" in line
    assert ", next in " in line
    await until(lambda: "back online" in texts(browser, ".message.assistant .body"), "answer")
    await until(lambda: not browser.find_element(By.ID, "run-retrying").is_displayed(), "no line")


@pytest.fixture
async def backup() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as model:
        yield model


@pytest.fixture
async def failing(agent_factory: Any, backup: ScriptedModel) -> AsyncIterator[Api]:
    """The API over an agent whose `default` model answers 500, with a working `backup`."""
    async with serving(await failing_agent(agent_factory, backup)) as served:
        yield served


async def test_a_person_switches_a_failing_run_s_model_and_retries_in_the_inbox(
    failing: Api, backup: ScriptedModel, browser: WebDriver
) -> None:
    backup.add(say("Hello from the backup."))
    run_id = await failing.start("hello", timeouts=SOON)
    await failing.run(run_id).wait_for(WAITING, TIMEOUT)

    await open_run(browser, failing, run_id)
    form: WebElement = await until(
        lambda: (f := first(browser, "#model-form")) and f.is_displayed() and f, "the controls"
    )
    assert "LLM_HTTP_ERROR: model 'default' answered HTTP 500" in form.text
    assert browser.find_element(By.ID, "run-phase").text == "waiting for model"
    profile = browser.find_element(By.ID, "model-profile")
    await asyncio.to_thread(profile.send_keys, "backup", Keys.ENTER)
    await until(lambda: "now asks model profile backup" in texts(browser, "#run-notice")[0], "ok")
    await asyncio.to_thread(browser.find_element(By.ID, "retry-button").click)

    await until(
        lambda: "Hello from the backup." in texts(browser, ".message.assistant .body"), "answer"
    )
    await until(lambda: not form.is_displayed(), "the controls gone")
    state = await failing.run(run_id).state()
    assert (state.model, state.waiting_for) == ("backup", WaitingFor.INPUT)


# --- Other sites' pages ----------------------------------------------------------


@pytest.fixture
def other_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(URL, directory) of a second web server on another loopback port: another origin,
    as an attacker's page is, serving the files the test writes into the directory."""
    with static_site(tmp_path) as url:
        yield url, tmp_path


async def test_another_site_framing_a_run_s_page_shows_nothing(
    agent: Agent, api: Api, browser: WebDriver, other_site: tuple[str, Path]
) -> None:
    agent.model.add(call("write_file", {"path": "a.md", "content": "hi"}), say("Written."))
    run_id = await api.start("write a.md", require_approval=["write_file"])
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    site, root = other_site
    (root / "frame.html").write_text(
        f'<iframe id="victim" src="{api.url}/#/runs/{run_id}" width="900" height="700"'
        " onload=\"document.title = 'loaded'\"></iframe>"
    )

    await asyncio.to_thread(browser.get, f"{site}/frame.html")
    await until(lambda: browser.title == "loaded", "the frame's load")
    await asyncio.to_thread(browser.switch_to.frame, browser.find_element(By.ID, "victim"))
    try:
        framed = browser.find_elements(By.CSS_SELECTOR, "#approvals, button")
    finally:
        browser.switch_to.default_content()

    assert framed == []
    await open_run(browser, api, run_id)  # the same page, opened as itself, shows the call
    await until(lambda: first(browser, "#approvals .approval button.approve"), "the call")
    assert (await api.state(run_id)).waiting_for == WaitingFor.APPROVAL


async def test_another_site_can_neither_read_the_runs_nor_pause_one(
    agent: Agent, api: Api, browser: WebDriver, other_site: tuple[str, Path]
) -> None:
    agent.model.add(say("Shall I go on?"))
    run_id = await api.start("hello")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    site, root = other_site
    (root / "steal.html").write_text(
        "<script>(async () => {"
        f'  const pause = "{api.url}/v1/runs/{run_id}/pause";'
        '  await fetch(pause, {method: "POST", mode: "no-cors", body: "x"});'
        f'  try {{ document.title = "read " + await (await fetch("{api.url}/v1/runs")).text(); }}'
        '  catch (e) { document.title = "refused " + e.name; }'
        "})();</script>"
    )

    await asyncio.to_thread(browser.get, f"{site}/steal.html")
    title: str = await until(lambda: browser.title, "the page's attempt")

    assert title == "refused TypeError"  # fetch's network error: CORS kept the answer
    assert run_id not in title
    assert await signals(agent, run_id) == []


async def test_a_page_under_a_rebound_name_gets_no_inbox(api: Api, browser: WebDriver) -> None:
    port = httpx.URL(api.url).port
    await asyncio.to_thread(browser.get, f"http://evil.example:{port}/")

    assert "MISDIRECTED_REQUEST" in browser.find_element(By.TAG_NAME, "body").text
    assert browser.find_elements(By.ID, "run-list") == []


# --- Action links ------------------------------------------------------------


def page_text(browser: WebDriver) -> str:
    """The shown page's text, read at once (a form's answer replaces the page under it)."""
    text: str = browser.execute_script("return document.body ? document.body.innerText : ''")
    return text


async def test_an_action_link_from_a_notification_approves_where_it_is_clicked(
    linked: Linked, browser: WebDriver
) -> None:
    await asyncio.to_thread(browser.get, linked.approve)
    confirm = await until(lambda: first(browser, "main.action form button"), "the confirm button")
    assert confirm.text == "Approve"

    await asyncio.to_thread(confirm.click)

    shown = await until(
        lambda: (text := page_text(browser)) and "Approve write_file" not in text and text,
        "the answer to the confirmation",
    )
    assert "Approved call w1 as alice" in shown, shown
    await until_state(linked.run, lambda s: s.waiting_for is WaitingFor.INPUT)
    decision = await decision_of(linked.run)
    assert (decision.approved, decision.user, decision.source) == (True, "alice", "link")
    assert [m.content for m in await linked.run.transcript()][-1] == "written"


_FORGED = '<form id="f" method="post" action="{link}" target="_top"></form>'
_SUBMIT = '<script>document.getElementById("f").submit()</script>'


@pytest.mark.parametrize(
    ("page", "origin"),
    [
        pytest.param(_FORGED + _SUBMIT, "{site}", id="its-own-origin"),
        # `Origin: null`, as the link's own page sent under `no-referrer`.
        pytest.param(
            '<meta name="referrer" content="no-referrer">' + _FORGED + _SUBMIT, "null", id="null"
        ),
        pytest.param(
            '<iframe sandbox="allow-forms allow-scripts allow-top-navigation" srcdoc="'
            + html.escape(_FORGED + _SUBMIT)
            + '"></iframe>',
            "null",
            id="sandboxed-frame",
        ),
    ],
)
async def test_a_page_of_another_origin_cannot_approve_through_an_action_link(
    linked: Linked, browser: WebDriver, other_site: tuple[str, Path], page: str, origin: str
) -> None:
    site, root = other_site
    (root / "approve.html").write_text(page.replace("{link}", linked.approve))

    await asyncio.to_thread(browser.get, f"{site}/approve.html")

    refused = await until(
        lambda: (text := page_text(browser)) and "FORBIDDEN" in text and text, "the post's answer"
    )
    assert f"refused a request from the page {origin.replace('{site}', site)!r}" in refused
    assert (await linked.run.state()).waiting_for is WaitingFor.APPROVAL


def console(browser: WebDriver) -> list[str]:
    """What the browser's console logged since the last call."""
    entries: list[dict[str, Any]] = browser.execute(Command.GET_LOG, {"type": "browser"})["value"]
    return [entry["message"] for entry in entries]


async def test_the_docs_page_s_own_policy_lets_its_inline_script_run(
    api: Api, browser: WebDriver
) -> None:
    await asyncio.to_thread(console, browser)  # what earlier pages logged

    await asyncio.to_thread(browser.get, api.url + "/docs")
    logged: list[str] = []

    def swagger_ui_missing() -> bool:
        # The console's entries reach the driver a moment after the page has loaded.
        logged.extend(console(browser))
        return any("SwaggerUIBundle is not defined" in message for message in logged)

    # The script ran: it found no Swagger UI only because its CDN is out of reach here.
    await until(swagger_ui_missing, "the inline script's error, logged")
    assert not [message for message in logged if "Content Security Policy" in message]


async def test_the_inbox_forgets_its_token_when_asked(agent: Agent, browser: WebDriver) -> None:
    async with serving(agent, TOKEN) as api:
        await asyncio.to_thread(browser.get, api.url + "/")
        dialog = await until(lambda: first(browser, "#token-dialog[open]"), "the token prompt")
        await asyncio.to_thread(
            browser.find_element(By.ID, "token-input").send_keys, TOKEN, Keys.ENTER
        )
        forget: WebElement = await until(
            lambda: first(browser, "#forget-token-button:not([hidden])"), "the Forget control"
        )
        assert not dialog.get_attribute("open")
        assert browser.execute_script("return localStorage.getItem('tarry-token')") == TOKEN

        await asyncio.to_thread(forget.click)

        await until(lambda: first(browser, "#token-dialog[open]"), "the prompt again")
        assert browser.execute_script("return localStorage.getItem('tarry-token')") is None
        assert not forget.is_displayed()


async def as_person(browser: WebDriver, api: Api, token: str) -> None:
    """Opens the inbox as `token`'s user, as the token prompt would leave it."""
    await asyncio.to_thread(browser.get, api.url + "/")
    await script(browser, "localStorage.setItem('tarry-token', arguments[0])", token)
    await asyncio.to_thread(browser.get, api.url + "/")


async def test_the_inbox_shows_no_one_else_s_runs_and_a_read_share_read_only(
    agent: Agent, browser: WebDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_people(tmp_path, monkeypatch)
    async with people_api(agent) as api:
        alices = await alices_run(api)
        agent.model.add(say("bob's answer"))
        bobs = (await api.http.post("/v1/runs", json={"prompt": "hi"}, headers=as_(BOB))).json()
        api.run(bobs["id"])
        await listed(api, "", {alices})

        await as_person(browser, api, BOB)
        await until(lambda: list_tag(browser, bobs["id"]), "bob's own run in his list")
        assert list_tag(browser, alices) is None
        await asyncio.to_thread(browser.get, f"{api.url}/#/runs/{alices}")
        await until(
            lambda: (
                "RUN_NOT_FOUND" in browser.find_element(By.ID, "run-notice").text
                or "no run" in browser.find_element(By.ID, "run-notice").text
            ),
            "not found",
        )
        assert texts(browser, ".message .body") == []

        await as_person(browser, api, CAROL)
        await until(lambda: click_row(browser, alices), "alice's shared run in carol's list")
        card = await pending_call_card(browser)
        await until(
            lambda: "not change it" in browser.find_element(By.ID, "run-notice").text,
            "the page saying it is read-only",
        )
        assert "write the plan" in texts(browser, ".message.user .body")
        assert card.find_elements(By.CSS_SELECTOR, "button") == []
        for control in ("reply-form", "pause-button", "stop-button"):
            assert not browser.find_element(By.ID, control).is_displayed(), control
    assert (await api.run(alices).state()).waiting_for == WaitingFor.APPROVAL


LIST_ANSWERED = """
return performance.getEntriesByType("resource")
  .some((entry) => new URL(entry.name).pathname === "/v1/wait-kinds" && entry.responseEnd > 0);
"""
"""Whether the list's first request (the kinds of wait, for its filter) has had its answer."""


async def test_the_inbox_asks_for_a_token_of_the_config_s_users_then_says_who_signed_in(
    agent: Agent, browser: WebDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_people(tmp_path, monkeypatch)
    async with people_api(agent) as api:
        await asyncio.to_thread(browser.get, api.url + "/")
        await script(browser, "localStorage.removeItem('tarry-token')")
        await asyncio.to_thread(browser.get, api.url + "/")
        await until(lambda: first(browser, "#token-dialog[open]"), "the token prompt")
        await until(lambda: browser.execute_script(LIST_ANSWERED), "the list's 401")
        await asyncio.sleep(0.2)  # what the page does with it
        why = browser.find_element(By.ID, "token-why").text
        health = browser.find_element(By.ID, "health").text

        await asyncio.to_thread(
            browser.find_element(By.ID, "token-input").send_keys, BOB, Keys.ENTER
        )
        signed_in = await until(
            lambda: browser.find_element(By.ID, "signed-in").text, "who is signed in"
        )
        await script(browser, "localStorage.removeItem('tarry-token')")

    assert "one of the config file's [api.users]" in why
    assert "TARRY_API_TOKENS" not in why
    assert health == ""  # no raw 401 beside the prompt
    assert signed_in == "Signed in as bob"
