"""Replies that arrive while the agent works (`on_reply_while_running`) and replies that
start their run (`?start=true`), over real HTTP against a real dev server and worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tarry.client import Tarry
from tarry.contracts import (
    INTERRUPTED_NOTE,
    ChatMessage,
    ErrorCode,
    Phase,
    ReplyPolicy,
    RunInput,
    UserInput,
)
from tarry.contracts.events import EventKind
from tarry.core.tools import tool
from tarry.testing.scripted_model import call, say
from tests.cli import Cli
from tests.conftest import FAST_TIMEOUTS, Agent, tool_result
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Api, serving
from tests.test_mcp_server import mcp_client
from tests.test_streaming import LONG, events_until

WAITING = {Phase.WAITING_USER}
SLOW = {"chunk_chars": 5, "chunk_delay": 0.1}
"""`LONG` written over about 6 s: a reply sent after its first words finds the agent working."""
FAST = json.loads(FAST_TIMEOUTS.model_dump_json())


def error_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def working(api: Api, policy: ReplyPolicy) -> str:
    """A run under `policy` whose model is in the middle of a long streamed answer."""
    api.agent.model.add(say(LONG, **SLOW), say("Noted."))
    run_id = await api.start("talk to me", on_reply_while_running=policy)
    await events_until(api.run(run_id), EventKind.TEXT)
    return run_id


async def user_texts(api: Api, run_id: str) -> list[str]:
    transcript = await api.run(run_id).transcript()
    return [m.content or "" for m in transcript if m.role == "user"]


# --- interrupt ----------------------------------------------------------------------


async def interrupted(api: Api, reply: str = "shorter, please") -> list[ChatMessage]:
    """The transcript of a run whose long streamed answer `reply` interrupted, once the
    run waits again."""
    run_id = await working(api, ReplyPolicy.INTERRUPT)
    response = await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": reply})
    assert response.status_code == 202, response.text
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    return await api.run(run_id).transcript()


async def test_a_reply_under_interrupt_cancels_the_model_call_and_keeps_its_words_marked(
    api: Api,
) -> None:
    transcript = await interrupted(api)

    assert api.agent.model.requests[0].cancelled
    kept = transcript[1]
    assert (kept.role, kept.interrupted) == ("assistant", True)
    assert kept.content
    assert LONG.startswith(kept.content)
    assert kept.content != LONG
    assert [(m.role, m.content) for m in transcript[2:]] == [
        ("user", "shorter, please"),
        ("assistant", "Noted."),
    ]


async def test_the_model_is_asked_again_at_once_with_the_interrupting_reply(api: Api) -> None:
    transcript = await interrupted(api)

    assert len(api.agent.model.requests) == 2
    *_, cut, reply = api.agent.model.requests[1].body["messages"]
    assert cut == {"role": "assistant", "content": f"{transcript[1].content} {INTERRUPTED_NOTE}"}
    assert reply == {"role": "user", "content": "shorter, please"}


async def test_a_running_tool_call_ends_before_an_interrupting_reply_is_read(
    agent_factory: Any,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow_count() -> int:
        """Counts, slowly."""
        started.set()
        await release.wait()
        return 3

    agent: Agent = await agent_factory(tools=[slow_count])
    agent.model.add(call("slow_count"), say("Counted."))
    async with serving(agent) as api:
        run_id = await api.start("count", on_reply_while_running=ReplyPolicy.INTERRUPT)
        await asyncio.wait_for(started.wait(), deadline(30))
        await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": "and then?"})
        release.set()
        await api.run(run_id).wait_for(WAITING, TIMEOUT)
        transcript = await api.run(run_id).transcript()

    assert [m.role for m in transcript] == ["user", "assistant", "tool", "user", "assistant"]
    assert tool_result(transcript[2]) == {"ok": True, "data": 3}
    assert not any(m.interrupted for m in transcript)
    assert len(agent.model.requests) == 2


# --- reject -------------------------------------------------------------------------


@pytest.mark.parametrize("wait", [False, True])
async def test_a_reply_while_the_agent_works_is_409_run_busy_under_reject(
    api: Api, wait: bool
) -> None:
    run_id = await working(api, ReplyPolicy.REJECT)

    response = await api.http.post(
        f"/v1/runs/{run_id}/messages", params={"wait": wait}, json={"text": "hurry up"}
    )

    assert error_of(response) == (409, ErrorCode.RUN_BUSY)
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    assert await user_texts(api, run_id) == ["talk to me"]


async def test_a_reply_to_a_waiting_run_is_taken_under_reject(api: Api) -> None:
    run_id = await working(api, ReplyPolicy.REJECT)
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    response = await api.http.post(
        f"/v1/runs/{run_id}/messages", params={"wait": True}, json={"text": "thanks"}
    )

    assert response.status_code == 200, response.text
    assert await user_texts(api, run_id) == ["talk to me", "thanks"]


async def test_the_reply_policy_changed_by_the_api_refuses_the_next_reply(api: Api) -> None:
    run_id = await working(api, ReplyPolicy.QUEUE)

    changed = await api.http.post(
        f"/v1/runs/{run_id}/reply-policy", json={"on_reply_while_running": "reject"}
    )
    response = await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": "hurry up"})

    assert changed.status_code == 200, changed.text
    assert changed.json()["on_reply_while_running"] == ReplyPolicy.REJECT
    assert error_of(response) == (409, ErrorCode.RUN_BUSY)


async def test_a_raw_signal_while_the_agent_works_is_queued_under_reject(api: Api) -> None:
    # The Temporal UI's door: a signal cannot be refused, so it waits its turn.
    run_id = await working(api, ReplyPolicy.REJECT)
    handle = api.agent.tarry.client.get_workflow_handle(run_id)

    await handle.signal("user_input", UserInput(text="from the operator"))

    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    assert await user_texts(api, run_id) == ["talk to me", "from the operator"]
    assert api.agent.model.requests[-1].body["messages"][-1]["content"] == "from the operator"


async def test_a_retried_reply_the_run_took_is_not_refused_under_reject(api: Api) -> None:
    api.agent.model.add(say("Hello."), say(LONG, **SLOW), say("Noted."))
    run_id = await api.start("hi", on_reply_while_running=ReplyPolicy.REJECT)
    waiting = await api.run(run_id).wait_for(WAITING, TIMEOUT)

    async def post() -> httpx.Response:
        key = {"Idempotency-Key": "m-1"}
        return await api.http.post(
            f"/v1/runs/{run_id}/messages", json={"text": "tell me more"}, headers=key
        )

    taken = await post()
    await events_until(api.run(run_id), EventKind.TEXT, from_offset=waiting.events)
    retried = await post()

    assert (taken.status_code, retried.status_code) == (202, 202)
    await api.run(run_id).wait_for(WAITING, TIMEOUT)
    assert await user_texts(api, run_id) == ["hi", "tell me more"]


@pytest.mark.parametrize("command", ["reply", "send"])
async def test_the_command_line_says_in_one_line_that_the_agent_is_working(
    agent: Agent, command: str
) -> None:
    agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.2))  # about 12 s of writing
    cli = Cli.of(agent)
    run = await cli.start("talk to me", "--on-reply-while-running", "reject")
    await events_until(run, EventKind.TEXT)

    result = await cli(command, run.id, "hurry up")

    result.assert_one_error_line(
        "error: RUN_BUSY: the agent is working; try again when it waits,"
        " or start the run with --on-reply-while-running queue"
    )


async def test_tarry_reply_policy_makes_the_next_reply_while_the_agent_works_refused(
    agent: Agent,
) -> None:
    agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.2))  # about 12 s of writing
    cli = Cli.of(agent)
    run = await cli.start("talk to me")  # queue, by default
    await events_until(run, EventKind.TEXT)

    changed = await cli.ok("reply-policy", run.id, "reject")
    result = await cli("reply", run.id, "hurry up")

    assert changed == f"a reply to run {run.id} while it works now: reject\n"
    assert "RUN_BUSY" in result.err


async def test_an_mcp_reply_while_the_agent_works_is_a_run_busy_tool_error(
    agent: Agent, payload_store: Path
) -> None:
    agent.model.add(say(LONG, chunk_chars=5, chunk_delay=0.2))  # about 12 s of writing
    run = await agent.start("talk to me", on_reply_while_running=ReplyPolicy.REJECT)
    await events_until(run, EventKind.TEXT)

    async with mcp_client(agent, payload_store) as client:
        result = await client.call_tool("reply", {"run_id": run.id, "text": "hurry up"})

    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["code"] == ErrorCode.RUN_BUSY


async def test_a_reply_to_a_run_no_worker_serves_waits_as_a_signal(agent: Agent) -> None:
    # Nothing works on such a run, so nothing is busy: the reply waits for a worker.
    unserved = Tarry(agent.tarry.client, "nobody-polls-this-queue")
    run = await unserved.start(RunInput(on_reply_while_running=ReplyPolicy.REJECT))
    try:
        await run.reply("are you there?")

        assert "WORKFLOW_EXECUTION_SIGNALED" in await agent.event_types(run)
    finally:
        await agent.tarry.client.get_workflow_handle(run.id).terminate()


# --- get-or-create ------------------------------------------------------------------


async def test_two_first_messages_at_once_start_one_run_that_takes_both_once(api: Api) -> None:
    api.agent.model.add(say("One."), say("Two."))
    path = "/v1/runs/thread-42/messages"
    body = {"input": {"timeouts": FAST}}

    first, second = await asyncio.gather(
        api.http.post(path, params={"start": True, "wait": True}, json={"text": "a", **body}),
        api.http.post(path, params={"start": True, "wait": True}, json={"text": "b", **body}),
    )

    assert (first.status_code, second.status_code) == (200, 200), (first.text, second.text)
    run = api.run("thread-42")
    assert sorted(await user_texts(api, "thread-42")) == ["a", "b"]
    assert await api.agent.updates(run) == ["send", "send"]
    assert len(await api.agent.histories(run)) == 1


async def test_a_first_message_starts_the_run_with_the_input_given(api: Api) -> None:
    api.agent.model.add(say("Hello, Ada."))

    response = await api.http.post(
        "/v1/runs/thread-7/messages",
        params={"start": True, "wait": True},
        json={"text": "I am Ada", "input": {"system": "Be brief.", "timeouts": FAST}},
    )

    assert response.status_code == 200, response.text
    api.run("thread-7")  # for the replay check
    sent = api.agent.model.requests[0].body["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("system", "Be brief."),
        ("user", "I am Ada"),
    ]


async def test_a_first_message_to_the_id_of_an_ended_run_is_409_run_ended(api: Api) -> None:
    api.agent.model.add(say("Bye."))
    run_id = await api.start("hi")
    await api.run(run_id).stop()
    await api.run(run_id).result()

    response = await api.http.post(
        f"/v1/runs/{run_id}/messages", params={"start": True}, json={"text": "hello again"}
    )

    assert error_of(response) == (409, ErrorCode.RUN_ENDED)


async def test_an_input_without_start_is_422(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(
        f"/v1/runs/{run_id}/messages", json={"text": "hi", "input": {"prompt": "x"}}
    )

    assert error_of(response) == (422, ErrorCode.INPUT_INVALID)


async def test_the_client_sends_a_first_message_with_start(agent: Agent) -> None:
    agent.model.add(say("Hi, Bo."))

    state = await agent.tarry.send("chat-9", "I am Bo", start=RunInput(timeouts=FAST_TIMEOUTS))

    agent.runs.append(agent.tarry.get("chat-9"))
    assert (state.phase, state.last_assistant_text) == (Phase.WAITING_USER, "Hi, Bo.")
