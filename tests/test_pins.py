"""Pins: a pinned message stays in the model's window however long the run goes on,
across pages and hand-overs; pins are refused with a code when they cannot be kept
(a message the run lacks, a tool's result, pins that would fill the window), and every
pin and unpin is in the audit trail."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tarry.client import RunHandle, TarryError
from tarry.contracts import Act, ErrorCode, Phase
from tarry.testing.scripted_model import call, say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Api
from tests.test_big_messages import KiB, text
from tests.test_bounded_memory import SMALL_BUDGET, answer
from tests.test_http_api import error_of

WAITING = {Phase.WAITING_USER}
PINNED_TURN = 3
PINNED = 2 * (PINNED_TURN - 1)
"""The transcript index of the reply the model answered at turn 3 (`user 2`)."""


async def chat(agent: Agent, run: RunHandle, replies: range, size: int) -> list[Any]:
    """Sends `user N` for each N of `replies`, padded to `size` characters; the messages
    of the last request the model was sent."""
    for n in replies:
        agent.model.requests.clear()  # each holds a request body: memory, for long chats
        agent.model.add(say(f"answer {n}"))
        await run.send(text(f"user {n}", size))
    sent: list[Any] = agent.model.requests[-1].body["messages"]
    return sent


async def pinned_chat(agent: Agent, size: int, **input: Any) -> RunHandle:
    """A run that has answered 3 replies (`user 0` to `user 2`), `user 2` pinned."""
    agent.model.add(say("answer 0"))
    run = await agent.start(text("user 0", size), **input)
    await run.wait_for(WAITING, TIMEOUT)
    await chat(agent, run, range(1, PINNED_TURN), size)
    state = await run.pin(PINNED)
    assert state.pinned == [PINNED]
    return run


@pytest.mark.timeout(deadline(600))
@pytest.mark.parametrize("size", [16, 32 * KiB], ids=["small", "32KiB"])
async def test_a_message_pinned_at_turn_3_is_in_the_models_request_at_turn_300(
    agent_factory: Any, size: int
) -> None:
    # A window of a few messages: the pinned one leaves it at once, and goes into a page.
    budget = SMALL_BUDGET if size < KiB else 3 * size // 4
    agent: Agent = await agent_factory(context_budget=budget)
    run = await pinned_chat(agent, size, continue_as_new_after_turns=40)

    sent = await chat(agent, run, range(PINNED_TURN, 300), size)

    contents = [m["content"] for m in sent]
    assert (await run.state()).turn == 300
    assert contents[0] == text(f"user {PINNED_TURN - 1}", size)  # before the window, once
    assert contents.count(contents[0]) == 1
    assert contents[-1] == text("user 299", size)
    assert len(contents) < 10, "the window of the newest messages, not the whole run"
    stored = await answer(agent, run.id)
    assert stored.stored[0].end > PINNED, "the pinned message is in a page"
    assert len(await agent.histories(run)) > 5, "handed over"


async def test_a_pinned_message_still_in_the_window_is_sent_once_where_it_is(
    agent: Agent,
) -> None:
    run = await pinned_chat(agent, 16)

    sent = await chat(agent, run, range(3, 4), 16)

    contents = [m["content"] for m in sent]
    assert (len(contents), contents.index(text("user 2", 16))) == (7, PINNED)
    assert contents.count(text("user 2", 16)) == 1


async def test_an_unpinned_message_leaves_the_window_as_the_others_do(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    run = await pinned_chat(agent, 16)

    state = await run.unpin(PINNED)
    sent = await chat(agent, run, range(3, 12), 16)

    assert state.pinned == []
    assert text("user 2", 16) not in [m["content"] for m in sent]


async def test_a_message_already_in_a_page_is_pinned_as_the_store_keeps_it(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    agent.model.add(say("answer 0"))
    run = await agent.start("user 0", continue_as_new_after_turns=3)
    await run.wait_for(WAITING, TIMEOUT)
    await chat(agent, run, range(1, 10), 16)
    assert (await answer(agent, run.id)).stored[0].end > 1, "message 1 is in a page"

    await run.pin(1)
    sent = await chat(agent, run, range(10, 11), 16)

    assert sent[0]["content"] == "answer 0"


async def test_a_pin_of_a_message_the_run_does_not_have_is_refused(agent: Agent) -> None:
    run = await pinned_chat(agent, 16)

    with pytest.raises(TarryError) as raised:
        await run.pin(6)

    assert raised.value.code is ErrorCode.PIN_UNKNOWN_MESSAGE
    assert "it has 6" in raised.value.message
    assert (await run.state()).pinned == [PINNED]


async def test_an_unpin_of_a_message_not_pinned_is_refused(agent: Agent) -> None:
    run = await pinned_chat(agent, 16)

    with pytest.raises(TarryError) as raised:
        await run.unpin(0)

    assert raised.value.code is ErrorCode.PIN_UNKNOWN_MESSAGE


async def test_a_tools_result_is_not_pinned_alone(agent: Agent) -> None:
    agent.model.add(call("read_file", {"path": "notes.txt"}), say("read it"))
    run = await agent.start("read my notes")
    await run.wait_for(WAITING, TIMEOUT)

    with pytest.raises(TarryError) as raised:
        await run.pin(2)  # the tool's result

    assert raised.value.code is ErrorCode.PIN_INVALID
    assert (await run.pin(3)).pinned == [3]  # the answer that reads it


async def test_pins_that_alone_would_fill_the_context_budget_are_refused(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=1000)
    agent.model.add(say("short"))
    run = await agent.start(text("a pasted page", 3000))  # about 750 tokens
    await run.wait_for(WAITING, TIMEOUT)
    await chat(agent, run, range(1, 2), 1500)
    await run.pin(0)

    with pytest.raises(TarryError) as raised:
        await run.pin(2)

    assert raised.value.code is ErrorCode.PINS_OVER_BUDGET
    assert "1000 tokens" in raised.value.message
    assert (await run.state()).pinned == [0]


async def test_a_pin_and_an_unpin_are_in_the_audit_trail_under_who_did_them(
    agent: Agent,
) -> None:
    run = await pinned_chat(agent, 16)
    await run.unpin(PINNED)

    trail = await agent.tarry.audit(run=run.id)

    acts = [(r.act, r.what) for r in trail.records if r.act in (Act.PIN, Act.UNPIN)]
    assert acts == [
        (Act.PIN, f"pinned message {PINNED}"),
        (Act.UNPIN, f"unpinned message {PINNED}"),
    ]
    assert {r.by for r in trail.records if r.act is Act.PIN} == {agent.tarry.caller.user}


async def test_tarry_pin_and_unpin_say_which_messages_the_run_pins(agent: Agent) -> None:
    agent.model.add(say("hello"))
    cli = Cli.of(agent)
    run = await cli.start("remember this")
    await run.wait_for(WAITING, TIMEOUT)

    pinned = await cli.ok("pin", run.id, "0")
    status = await cli.ok("status", run.id)
    unpinned = await cli.ok("unpin", run.id, "0")
    refused = await cli("unpin", run.id, "0")

    assert pinned == f"run {run.id}'s pinned messages: 0\n"
    assert re.search(r"pinned +messages 0\n", status), status
    assert unpinned == f"run {run.id}'s pinned messages: none\n"
    assert "PIN_UNKNOWN_MESSAGE" in refused.err


async def test_the_api_pins_and_unpins_a_message_and_refuses_one_the_run_lacks(api: Api) -> None:
    api.agent.model.add(say("hello"))
    run_id = await api.start("remember this")
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    pinned = await api.http.post(f"/v1/runs/{run_id}/pins", json={"message": 1})
    unknown = await api.http.post(f"/v1/runs/{run_id}/pins", json={"message": 9})
    unpinned = await api.http.delete(f"/v1/runs/{run_id}/pins", params={"message": 1})

    assert (pinned.status_code, pinned.json()["pinned"]) == (200, [1]), pinned.text
    assert error_of(unknown) == (409, ErrorCode.PIN_UNKNOWN_MESSAGE)
    assert (unpinned.status_code, unpinned.json().get("pinned", [])) == (200, [])
