"""A run's memory stays bounded at any length: at each continue-as-new the messages
before the model's window move into pages of the payload store, and every door (the
client, `tarry show`, the HTTP API) still shows the whole conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tarry.client import Tarry, TarryError
from tarry.contracts import ErrorCode, Phase, TranscriptAnswer, TranscriptQuery, WaitingFor
from tarry.temporal.pages import PageStore
from tarry.temporal.storage import FileStorageDriver
from tarry.testing.scripted_model import call, say
from tests import test_streaming
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.http_api import serving
from tests.test_approvals import WRITE, gated_run
from tests.test_http_api import error_of
from tests.test_runs_in_flight import handed_over
from workflows.memory import WorkflowInput
from workflows.memory_groups import REPLY_IDS_KEPT

WAITING = {Phase.WAITING_USER}
SMALL_BUDGET = 50
"""Tokens: a window of the last few short messages, so a short run already pages."""


async def chat(agent: Agent, turns: int, **input: Any) -> list[str]:
    """A chat of `turns` turns (`user n` answered by `answer n`), handing over every 3
    turns unless `input` says otherwise; returns the transcript it must have."""
    agent.model.add(*(say(f"answer {n}") for n in range(turns)))
    input.setdefault("continue_as_new_after_turns", 3)
    run = await agent.start("user 0", run_id=input.pop("run_id", None), **input)
    await run.wait_for(WAITING, TIMEOUT)
    for n in range(1, turns):
        await run.send(f"user {n}")
        agent.model.requests.clear()  # each holds a request body: memory, for long chats
    return [text for n in range(turns) for text in (f"user {n}", f"answer {n}")]


async def answer(agent: Agent, run_id: str, start: int = 0) -> TranscriptAnswer:
    """The `transcript` query's own answer, as the workflow gives it."""
    handle = agent.tarry.client.get_workflow_handle(run_id)
    query = TranscriptQuery(start=start)
    answered: TranscriptAnswer = await handle.query(
        "transcript", query, result_type=TranscriptAnswer
    )
    return answered


async def test_a_long_run_keeps_in_memory_only_the_window_its_model_is_sent(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    await chat(agent, 20, run_id="paged-run")

    stored = await answer(agent, "paged-run")
    kept = stored.stored[-1].end

    assert (stored.total, stored.messages) == (40, [])
    # Pages follow one another from the first message, none missing.
    assert [p.start for p in stored.stored] == [0, *(p.end for p in stored.stored[:-1])]
    # In memory: the latest window (5 short messages fit the budget) and the messages of
    # the 3 turns since the last page was written.
    assert 40 - kept <= 5 + 3 * 2
    in_memory = await answer(agent, "paged-run", start=kept)
    assert [m.content for m in in_memory.messages][-1] == "answer 19"
    assert in_memory.next_start is None


async def test_the_client_reads_a_paged_run_whole_from_the_store(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    expected = await chat(agent, 20, run_id="paged-client")
    run = agent.tarry.get("paged-client")

    assert [m.content for m in await run.transcript()] == expected
    assert [m.content for m in await run.transcript(start=7)] == expected[7:]
    page = await run.transcript_page(start=3, limit=5)
    assert ([m.content for m in page.messages], page.next_start) == (expected[3:8], 8)


async def test_a_paged_run_goes_on_with_the_model_seeing_its_newest_messages(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    await chat(agent, 10, run_id="paged-model")
    agent.model.add(say("still here"))
    run = agent.tarry.get("paged-model")

    state = await run.send("user 10")

    assert (state.last_assistant_text, state.turn, state.message_count) == ("still here", 11, 22)
    sent = [m["content"] for m in agent.model.requests[-1].body["messages"]]
    assert sent[-3:] == ["user 9", "answer 9", "user 10"]


async def test_a_run_handed_over_whole_by_the_previous_code_pages_out_on_this_code(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    agent.model.add(*(say(f"answer {n}") for n in range(6)))
    previous = WorkflowInput.model_validate(handed_over())  # its whole transcript in memory
    input = previous.model_copy(update={"continue_as_new_after_turns": 2})
    run = await agent.tarry.start(input)
    agent.runs.append(run)

    for n in range(6):
        await run.send(f"user {n}")

    paged = await answer(agent, run.id)
    assert [p.start for p in paged.stored][:1] == [0]  # paged from its first message on
    transcript = [m.content for m in await run.transcript()]
    assert (transcript[0], transcript[-2:]) == ("write hi", ["user 5", "answer 5"])
    assert len(transcript) == paged.total == 4 + 6 * 2


async def test_a_client_without_the_store_of_the_pages_says_payload_missing(
    agent_factory: Any, tmp_path: Path
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    await chat(agent, 10, run_id="paged-elsewhere")
    client = agent.tarry.client
    empty = PageStore(FileStorageDriver(tmp_path / "empty"), client.data_converter)
    run = Tarry(client, agent.tarry.task_queue, pages=empty).get("paged-elsewhere")

    with pytest.raises(TarryError) as raised:
        await run.transcript()

    assert raised.value.code is ErrorCode.PAYLOAD_MISSING
    assert "TARRY_STORAGE_DIR" in raised.value.message


async def test_a_run_with_a_window_as_big_as_its_conversation_pages_nothing(
    agent: Agent,
) -> None:
    await chat(agent, 8, run_id="unpaged")

    whole = await answer(agent, "unpaged")

    assert (whole.stored, whole.total, len(whole.messages)) == ([], 16, 16)


async def test_a_decision_on_a_call_whose_message_was_paged_out_is_already_decided(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    run = await gated_run(agent, say("Written."), continue_as_new_after_turns=2)
    await run.decide("w1")
    for n in range(6):
        agent.model.add(say(f"answer {n}"))
        await run.send(f"user {n}")
    agent.model.add(call("write_file", WRITE | {"path": "next.md"}, id="w2"))
    waiting = await run.send("write the next plan")
    stored = (await answer(agent, run.id)).stored

    with pytest.raises(TarryError) as refused:
        await run.decide("w1", approved=False)
    async with serving(agent) as api:
        again = await api.http.post(
            f"/v1/runs/{run.id}/approvals", json={"call_id": "w1", "approved": False}
        )

    assert [p.call_id for p in waiting.pending_approvals] == ["w2"]
    assert stored[-1].end > 2  # w1's tool message (the third) is in a page
    assert refused.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED
    assert error_of(again) == (409, ErrorCode.APPROVAL_ALREADY_DECIDED)
    state = await run.state()
    assert (state.waiting_for, [p.call_id for p in state.pending_approvals]) == (
        WaitingFor.APPROVAL,
        ["w2"],
    )


@pytest.mark.timeout(deadline(600))  # many hand-overs, each segment replayed at teardown
async def test_a_run_hands_over_the_ids_of_its_latest_replies_only_and_knows_their_retries(
    agent: Agent,
) -> None:
    ids = [f"id-{n}" for n in range(REPLY_IDS_KEPT + 5)]
    agent.model.add(*(say(f"answer {n}") for n in range(len(ids) + 1)))
    run = await agent.start("hello", continue_as_new_after_turns=1)
    await run.wait_for(WAITING, TIMEOUT)
    for n, id in enumerate(ids[:REPLY_IDS_KEPT]):
        await run.reply(f"reply {n}", id=id)
    for n, id in enumerate(ids[REPLY_IDS_KEPT:], start=REPLY_IDS_KEPT):
        await run.send(f"reply {n}", id=id)  # one turn each, and a hand-over after it
    oldest_kept = len(ids) - REPLY_IDS_KEPT

    await run.send(f"reply {oldest_kept}", id=ids[oldest_kept])  # a client's retry

    memories = await test_streaming.handed_over(agent, run)
    assert max(len(memory["seen_ids"]) for memory in memories) == REPLY_IDS_KEPT
    assert list(memories[-1]["seen_ids"]) == ids[oldest_kept:]
    replies = [m.content for m in await run.transcript() if m.role == "user"]
    assert replies == ["hello", *(f"reply {n}" for n in range(len(ids)))]


async def test_a_memory_handed_over_with_every_reply_id_keeps_only_the_latest_after_a_reply(
    agent: Agent,
) -> None:
    agent.model.add(say("Noted."))
    previous = handed_over()  # as the code before the window handed its memory over
    previous["memory"]["seen_ids"] = {f"old-{n}": n for n in range(1, 3 * REPLY_IDS_KEPT)}
    input = WorkflowInput.model_validate(previous | {"continue_as_new_after_turns": 1})
    run = await agent.tarry.start(input)
    agent.runs.append(run)

    await run.send("one more", id="new")
    await run.send("one more", id="new")  # a retry, which the next run of the chain answers

    [*_, handed] = await test_streaming.handed_over(agent, run)
    assert len(handed["seen_ids"]) == REPLY_IDS_KEPT
    assert list(handed["seen_ids"])[-2:] == [f"old-{3 * REPLY_IDS_KEPT - 1}", "new"]
    assert [m.content for m in await run.transcript()].count("one more") == 1


@pytest.mark.timeout(deadline(900))  # 2,000 turns, one after the other, on a machine of any speed
async def test_a_2000_turn_run_shows_its_first_and_last_messages_in_the_cli_and_the_api(
    agent_factory: Any, payload_store: Path
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    expected = await chat(agent, 2000, run_id="two-thousand", continue_as_new_after_turns=50)
    assert len((await answer(agent, "two-thousand")).stored) > 1  # paged, many times over

    # The command line reads the pages from the store its settings name, as a deployment's.
    cli = Cli.of(agent, TARRY_STORAGE_DIR=str(payload_store))
    shown = json.loads(await cli.ok("show", "two-thousand", "--json"))
    assert [m["content"] for m in shown] == expected
    async with serving(agent) as api:
        first = await api.http.get("/v1/runs/two-thousand/transcript", params={"limit": 2})
        last = await api.http.get("/v1/runs/two-thousand/transcript", params={"start": 3998})

    assert first.status_code == last.status_code == 200, (first.text, last.text)
    assert [m["content"] for m in first.json()["messages"]] == ["user 0", "answer 0"]
    assert [m["content"] for m in last.json()["messages"]] == ["user 1999", "answer 1999"]
    assert first.json()["total"] == 4000


@pytest.mark.timeout(deadline(600))  # many hand-overs, each segment replayed at teardown
async def test_a_run_of_many_pages_keeps_their_oldest_in_an_index_and_reads_whole(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(context_budget=SMALL_BUDGET)
    # A page at each hand-over, every 2 turns: 150 pages, more than a run keeps.
    expected = await chat(agent, 300, run_id="indexed", continue_as_new_after_turns=2)
    run = agent.tarry.get("indexed")

    oldest = await answer(agent, "indexed")
    assert oldest.index is not None
    newest = await answer(agent, "indexed", start=oldest.index.end)
    assert 64 <= len(newest.stored) < 128  # the references a run keeps: bounded
    assert [m.content for m in await run.transcript()] == expected
    page = await run.transcript_page(start=5, limit=3)
    assert [m.content for m in page.messages] == expected[5:8]
