"""Long runs with big messages: whatever its messages weigh, a run hands over a bounded
memory (its older messages in pages of the payload store), and no payload too large to
store ever freezes it: it waits with `PAYLOAD_TOO_LARGE`, readable and stoppable.

People paste documents into long conversations. A chat of 32 KiB turns once handed
its whole transcript over at every continue-as-new, because the server suggested the
hand-over in the middle of turns and pages were written only on a foreseen last turn,
until the hand-over's input was too large to store and every workflow task failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from tarry.client import RunHandle
from tarry.contracts import ErrorCode, Phase, TranscriptAnswer, TranscriptQuery, WaitingFor
from tarry.temporal.storage import FileStorageDriver
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import serving
from tests.test_cli_approvals import until_state
from tests.test_large_payloads import storing_client
from workflows.memory import WorkflowInput

WAITING = {Phase.WAITING_USER}
KiB = 1024
MiB = 1024 * KiB
PIECES = 8
"""The events a scripted answer streams in: this file is about what a run keeps, not
how an answer streams (tests/test_streaming.py), and the default's 2,000 events of a
32 KiB answer cost its 1,000-turn chat most of its worker's CPU in parsing them."""


def text(label: str, size: int) -> str:
    """`label`, padded to `size` characters: a pasted document."""
    return (label + " " + "lorem ipsum " * (size // 12))[:size]


async def chat(agent: Agent, run: RunHandle, replies: list[str], answers: list[str]) -> None:
    """Sends each reply through the client, once the run waits, and checks each answer."""
    agent.model.add(*(say(a, max_pieces=PIECES) for a in answers))
    for reply, answer in zip(replies, answers, strict=True):
        state = await run.send(reply)
        assert state.last_assistant_text == answer
        agent.model.requests.clear()  # each holds a request body: memory, for long chats


async def hand_over_inputs(client: Client, chain: list[WorkflowHistory]) -> list[WorkflowInput]:
    """The input each segment of a chain handed to the next, as stored (decoded through
    the payload store, where it was large enough to go there)."""
    inputs: list[WorkflowInput] = []
    for history in chain[:-1]:
        closing = history.events[-1].workflow_execution_continued_as_new_event_attributes
        [input] = await client.data_converter.decode(closing.input.payloads, [WorkflowInput])
        inputs.append(input)
    return inputs


def payload_bytes(client: Client, input: WorkflowInput) -> int:
    """The size of `input` as the payload the workflow hands Temporal, before storage."""
    [payload] = client.data_converter.payload_converter.to_payloads([input])
    return payload.ByteSize()


def task_failures(chain: list[WorkflowHistory]) -> list[str]:
    failed = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for history in chain
        for e in history.events
        if e.event_type == failed
    ]


async def transcript_answer(run: RunHandle, agent: Agent, start: int = 0) -> TranscriptAnswer:
    """The `transcript` query's own answer, with the page references a client reads."""
    handle = agent.tarry.client.get_workflow_handle(run.id)
    answered: TranscriptAnswer = await handle.query(
        "transcript", TranscriptQuery(start=start), result_type=TranscriptAnswer
    )
    return answered


@pytest.mark.timeout(deadline(1800))  # 1,000 turns of 64 KiB, one after the other
async def test_a_1000_turn_chat_of_32_kib_messages_hands_over_under_2_mib_and_reads_whole(
    agent: Agent, payload_store: Path
) -> None:
    turns = 1000
    replies = [text(f"user {n}", 32 * KiB) for n in range(turns)]
    answers = [text(f"answer {n}", 32 * KiB) for n in range(turns)]
    run = await agent.start()
    await chat(agent, run, replies, answers)

    chain = await agent.histories(run)
    client = agent.tarry.client
    sizes = [payload_bytes(client, i) for i in await hand_over_inputs(client, chain)]
    assert len(chain) > 1, "the run never handed over"
    assert task_failures(chain) == []
    assert max(sizes) <= 2 * MiB, sizes

    first, last = [replies[0], answers[0]], [replies[-1], answers[-1]]
    whole = [m.content for m in await run.transcript()]
    assert (len(whole), whole[:2], whole[-2:]) == (2 * turns, first, last)
    cli = Cli.of(agent, TARRY_STORAGE_DIR=str(payload_store))
    shown = json.loads(await cli.ok("show", run.id, "--json", "--from", str(2 * turns - 2)))
    assert [m["content"] for m in shown] == last
    async with serving(agent) as api:
        head = await api.http.get(f"/v1/runs/{run.id}/transcript", params={"limit": 2})
        tail = await api.http.get(f"/v1/runs/{run.id}/transcript", params={"start": 2 * turns - 2})
    assert [m["content"] for m in head.json()["messages"]] == first, head.text
    assert [m["content"] for m in tail.json()["messages"]] == last, tail.text


async def test_a_3_mb_message_is_paged_alone_and_never_handed_over(agent: Agent) -> None:
    big = text("the pasted book", 3 * MiB)
    run = await agent.start("hello", continue_as_new_after_turns=10)
    agent.model.add(say("hi"))
    await run.wait_for(WAITING, TIMEOUT)
    replies = [big, *(f"small {n}" for n in range(100))]
    await chat(agent, run, replies, [f"answer {n}" for n in range(101)])

    chain = await agent.histories(run)
    client = agent.tarry.client
    sizes = [payload_bytes(client, i) for i in await hand_over_inputs(client, chain)]
    assert len(chain) >= 10
    assert task_failures(chain) == []
    assert max(sizes) < 256 * KiB, sizes  # the big message rides along in none of them

    stored = (await transcript_answer(run, agent)).stored
    [page] = [p for p in stored if p.start <= 2 < p.end]  # hello, hi, then the big one
    assert (page.start, page.count) == (2, 1)
    transcript = await run.transcript()
    assert transcript[2].content == big
    assert [m.content for m in transcript[-2:]] == ["small 99", "answer 100"]


SMALL_STORE = 700 * KiB
"""Bytes: the most a small store takes as one payload."""


async def store_limited_agent(
    agent_factory: Any, temporal: Client, tmp_path: Path, context_budget: int
) -> Agent:
    """An agent whose worker and client share a store that takes `SMALL_STORE` at most."""
    driver = FileStorageDriver(tmp_path / "small-store", max_payload_bytes=SMALL_STORE)
    client = await storing_client(
        temporal, tarry_storage_dir=tmp_path / "small-store", storage_driver=driver
    )
    made: Agent = await agent_factory(client=client, context_budget=context_budget)
    return made


async def test_a_memory_too_large_to_hand_over_waits_with_payload_too_large(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> None:
    # The model's window (a budget of a million tokens) keeps every message in memory.
    agent = await store_limited_agent(agent_factory, temporal, tmp_path, 1_000_000)
    run = await agent.start(continue_as_new_after_turns=6)
    replies = [text(f"user {n}", 100 * KiB) for n in range(6)]
    await chat(agent, run, replies, [f"answer {n}" for n in range(6)])

    state = await until_state(
        run, lambda s: s.error is not None and s.error.code is ErrorCode.PAYLOAD_TOO_LARGE
    )
    assert (state.phase, state.waiting_for) == (Phase.WAITING_USER, WaitingFor.INPUT)
    assert state.error is not None
    assert "payload store" in state.error.message
    transcript = [m.content for m in await run.transcript()]
    assert transcript == [t for n in range(6) for t in (replies[n], f"answer {n}")]

    await run.stop(reason="too big")
    ended = await run.wait_for({Phase.COMPLETED}, TIMEOUT)
    assert ended.stop_reason == "too big"
    chain = await agent.histories(run)
    assert (len(chain), task_failures(chain)) == (1, [])


async def test_a_run_near_its_store_limit_pages_out_in_pages_under_it_and_hands_over(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> None:
    # A window of about one message; at the hand-over, the 19 messages before it are
    # more than the store takes as one payload.
    agent = await store_limited_agent(agent_factory, temporal, tmp_path, 15_000)
    run = await agent.start(continue_as_new_after_turns=10)
    replies = [text(f"user {n}", 50 * KiB) for n in range(12)]
    answers = [text(f"answer {n}", 50 * KiB) for n in range(12)]
    await chat(agent, run, replies, answers)

    chain = await agent.histories(run)
    assert (len(chain), task_failures(chain)) == (2, [])
    assert (await run.state()).error is None
    assert len((await transcript_answer(run, agent)).stored) >= 2
    transcript = [m.content for m in await run.transcript()]
    assert transcript == [t for n in range(12) for t in (replies[n], answers[n])]
