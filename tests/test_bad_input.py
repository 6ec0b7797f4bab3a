"""Bad input from people and scripts: each gets a clear error or a documented outcome,
and none fails a workflow task or loses the run."""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from tarry.client import RunHandle, Tarry, TarryError
from tarry.contracts import MAX_INPUT_BYTES, ErrorCode, Phase, UserInput
from tarry.testing.scripted_model import say
from tests.conftest import Agent, temporal_cli
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}
TEN_MB = 10 * 1024 * 1024


async def waiting_run(agent: Agent, *answers: str) -> RunHandle:
    agent.model.add(say("What now?"), *(say(a) for a in answers))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)
    return run


async def user_texts(run: RunHandle) -> list[str | None]:
    return [m.content for m in await run.transcript() if m.role == "user"]


async def test_a_client_without_tarrys_data_converter_is_refused_with_what_to_do(
    temporal: Client,
) -> None:
    # The session's server, through a client with the SDK's default converter, as a
    # script that calls `Client.connect(address)` has.
    plain = Client(temporal.service_client, namespace=temporal.namespace)

    with pytest.raises(TypeError) as refused:
        Tarry(plain)

    assert "Tarry.connect()" in str(refused.value)
    assert "data_converter=tarry.temporal.codec.data_converter(settings)" in str(refused.value)


async def test_an_empty_reply_signal_changes_nothing_but_a_warning(agent: Agent) -> None:
    run = await waiting_run(agent)
    handle = agent.tarry.client.get_workflow_handle(run.id)

    await handle.signal("user_input", UserInput(text="  "))

    state = await run.state()
    assert state.warning is ErrorCode.INPUT_EMPTY
    assert (state.phase, state.message_count) == (Phase.WAITING_USER, 2)
    assert "WORKFLOW_TASK_FAILED" not in await agent.event_types(run)


@pytest.mark.parametrize(
    ("text", "code"),
    [("", ErrorCode.INPUT_EMPTY), ("x" * TEN_MB, ErrorCode.INPUT_TOO_LARGE)],
    ids=["empty", "10 MB"],
)
async def test_the_client_refuses_a_reply_it_cannot_deliver(
    agent: Agent, text: str, code: ErrorCode
) -> None:
    run = await waiting_run(agent)

    with pytest.raises(TarryError) as error:
        await run.reply(text)

    assert error.value.code is code
    assert await user_texts(run) == ["hello"]


async def test_a_10_mb_signal_from_a_caller_without_payload_storage_is_refused_and_the_run_goes_on(
    agent: Agent,
) -> None:
    run = await waiting_run(agent, "Got it.")
    config = agent.tarry.client.config()
    config["data_converter"] = pydantic_data_converter
    handle = Client(**config).get_workflow_handle(run.id)

    with pytest.raises(RPCError):
        await handle.signal("user_input", UserInput(text="x" * TEN_MB))
    state = await run.send("a normal reply")

    assert state.last_assistant_text == "Got it."
    assert await user_texts(run) == ["hello", "a normal reply"]


async def test_a_10_mb_signal_through_the_payload_store_is_not_delivered(agent: Agent) -> None:
    run = await waiting_run(agent, "Got it.", "Got that too.")
    handle = agent.tarry.client.get_workflow_handle(run.id)

    await handle.signal("user_input", UserInput(text="x" * TEN_MB))
    state = await run.send("a normal reply")

    assert state.last_assistant_text == "Got it."
    assert await user_texts(run) == ["hello", "a normal reply"]


async def test_a_send_over_the_limit_around_the_client_is_rejected_before_history(
    agent: Agent,
) -> None:
    run = await waiting_run(agent)
    handle = agent.tarry.client.get_workflow_handle(run.id)

    with pytest.raises(WorkflowUpdateFailedError) as error:
        await handle.execute_update("send", UserInput(text="x" * (MAX_INPUT_BYTES + 1)))

    assert isinstance(error.value.cause, ApplicationError)
    assert error.value.cause.type == ErrorCode.INPUT_TOO_LARGE
    assert not any("UPDATE" in event for event in await agent.event_types(run))


async def test_control_characters_arrive_verbatim(agent: Agent) -> None:
    run = await waiting_run(agent, "Odd, but fine.")
    odd = "tab\there, bell\a, escape \x1b[31mred\x1b[0m, nul \x00, rtl \u202e, emoji 🦆"

    await run.send(odd)

    assert await user_texts(run) == ["hello", odd]
    assert agent.model.requests[1].body["messages"][-1]["content"] == odd


async def test_text_that_is_not_utf8_is_refused_by_the_client(agent: Agent) -> None:
    run = await waiting_run(agent)

    with pytest.raises(TarryError) as error:
        await run.reply("bytes read wrong: \udcff")

    assert error.value.code is ErrorCode.INPUT_INVALID
    assert "UTF-8" in error.value.message


async def test_a_signal_with_unpaired_surrogates_is_dropped_without_harm(agent: Agent) -> None:
    run = await waiting_run(agent, "Got it.")

    await temporal_cli(
        agent.tarry.client,
        "workflow", "signal", "--workflow-id", run.id, "--name", "user_input",
        "--input", json.dumps({"text": "\udcff"}),
    )  # fmt: skip
    state = await run.send("plain text")

    assert state.last_assistant_text == "Got it."
    assert await user_texts(run) == ["hello", "plain text"]
    assert "WORKFLOW_TASK_FAILED" not in await agent.event_types(run)


async def test_a_send_racing_a_stop_ends_the_run_and_delivers_at_most_once(
    agent: Agent,
) -> None:
    run = await waiting_run(agent, "Answered before the stop.")

    sent, _ = await asyncio.gather(run.send("last words"), run.stop(), return_exceptions=True)

    # Either the reply was accepted first (and the send returns the state it led to), or
    # the stop came first and the send is rejected because the run has ended.
    result = await run.result()
    assert result.phase in (Phase.COMPLETED, Phase.FAILED)
    if isinstance(sent, TarryError):
        assert sent.code is ErrorCode.RUN_ENDED
    else:
        assert not isinstance(sent, BaseException)
        assert sent.phase.ended or sent.phase is Phase.WAITING_USER
    assert (await user_texts(run)).count("last words") <= 1


async def test_a_burst_of_replies_arrives_once_each_in_order_per_sender(agent: Agent) -> None:
    senders, per_sender = 10, 10
    agent.model.add(say("Thinking about the first message…", delay=2.0))
    agent.model.add(*(say("Noted.") for _ in range(senders * per_sender)))
    run = await agent.start("hello")
    await agent.model.wait_for_requests(1, timeout=deadline(10))

    async def sender(k: int) -> None:
        for i in range(per_sender):
            await run.reply(f"s{k}-{i}", id=f"s{k}-{i}")
        await run.reply(f"s{k}-0", id=f"s{k}-0")  # a retry after a timeout: not doubled

    await asyncio.gather(*(sender(k) for k in range(senders)))

    async with asyncio.timeout(deadline(60)):
        while (state := await run.wait_for(WAITING, TIMEOUT)).pending_inputs:
            await asyncio.sleep(0.1)
    replies = [t for t in await user_texts(run) if t != "hello"]
    assert len(replies) == senders * per_sender
    assert len(set(replies)) == len(replies)
    for k in range(senders):
        assert [t for t in replies if t and t.startswith(f"s{k}-")] == [
            f"s{k}-{i}" for i in range(per_sender)
        ]
    assert state.phase is Phase.WAITING_USER
