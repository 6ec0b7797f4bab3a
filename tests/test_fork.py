"""Forking a conversation: a new run with the original's input and its transcript up
to one of its user messages, that message sent again or replaced, going on as a
conversation of its own while the original stays untouched and answerable."""

from __future__ import annotations

from typing import Any

import pytest

from tarry.client import RunHandle, TarryError
from tarry.contracts import MAX_RUN_ID_LENGTH, ErrorCode, ForkOrigin, Phase, run_id_problem
from tarry.testing.scripted_model import say
from tests.cli import Cli
from tests.conftest import Agent
from tests.deadline import TIMEOUT
from tests.http_api import Api
from tests.test_http_api import error_of

WAITING = {Phase.WAITING_USER}


async def long_run(agent: Agent, turns: int, **input: Any) -> RunHandle:
    """A run of `turns` model calls, one per user message, each answered `answer N`."""
    agent.model.add(*(say(f"answer {n}") for n in range(turns)))
    run = await agent.start("question 0", **input)
    await run.wait_for(WAITING, TIMEOUT)
    for n in range(1, turns):
        await run.send(f"question {n}")
    return run


async def fork(agent: Agent, run: RunHandle, at: int, text: str | None = None) -> RunHandle:
    forked = await run.fork(at, text)
    agent.runs.append(forked)  # its history is replayed after the test, like the original's
    return forked


async def test_a_fork_of_a_run_that_continued_as_new_asks_with_the_prefix_and_the_new_text(
    agent: Agent,
) -> None:
    run = await long_run(agent, 60, continue_as_new_after_turns=10)
    transcript = await run.transcript()
    at = 40  # user message `question 20`
    original_request = agent.model.requests[20].body["messages"]
    agent.model.add(say("a different answer"))

    forked = await fork(agent, run, at, "a different question")
    state = await forked.wait_for(WAITING, TIMEOUT)

    assert len(await agent.histories(run)) >= 6
    assert transcript[at].content == "question 20"
    sent = agent.model.requests[-1].body["messages"]
    assert sent == [*original_request[:-1], {"role": "user", "content": "a different question"}]
    assert state.last_assistant_text == "a different answer"
    assert state.forked_from == ForkOrigin(run_id=run.id, at=at)


async def test_the_original_answers_a_reply_after_it_was_forked(agent: Agent) -> None:
    run = await long_run(agent, 3)
    agent.model.add(say("forked"))
    await (await fork(agent, run, 2, "instead")).wait_for(WAITING, TIMEOUT)
    agent.model.add(say("still here"))

    state = await run.send("are you there?")

    assert state.last_assistant_text == "still here"
    assert state.forked_from is None
    assert [m.content for m in await run.transcript()][-2:] == ["are you there?", "still here"]


async def test_a_forks_transcript_is_the_prefix_then_its_own_conversation(agent: Agent) -> None:
    run = await long_run(agent, 3)
    original = await run.transcript()
    agent.model.add(say("forked"))

    forked = await fork(agent, run, 2, "instead")
    await forked.wait_for(WAITING, TIMEOUT)

    assert await forked.transcript() == [*original[:2], *(await forked.transcript())[2:]]
    assert [m.content for m in (await forked.transcript())[2:]] == ["instead", "forked"]


async def test_a_fork_without_a_text_sends_the_message_again_even_from_an_ended_run(
    agent: Agent,
) -> None:
    run = await long_run(agent, 2)
    await run.stop()
    await run.result()
    agent.model.add(say("again"))

    forked = await fork(agent, run, 0)
    state = await forked.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[-1].body["messages"] == [{"role": "user", "content": "question 0"}]
    assert state.last_assistant_text == "again"


async def test_a_fork_keeps_the_originals_input(agent: Agent) -> None:
    run = await long_run(agent, 2, system="Answer in French.")
    agent.model.add(say("d'accord"))

    forked = await fork(agent, run, 2, "encore")
    await forked.wait_for(WAITING, TIMEOUT)

    assert agent.model.requests[-1].body["messages"][0] == {
        "role": "system",
        "content": "Answer in French.",
    }


@pytest.mark.parametrize("at", [1, 99, -1])
async def test_a_fork_at_a_message_that_is_not_a_users_is_refused(agent: Agent, at: int) -> None:
    run = await long_run(agent, 2)

    with pytest.raises(TarryError) as refused:
        await run.fork(at, "instead")

    assert refused.value.code is ErrorCode.FORK_POINT_INVALID
    assert "its user messages: 0, 2" in str(refused.value)


async def test_a_fork_past_the_end_says_how_many_messages_the_run_has(agent: Agent) -> None:
    run = await long_run(agent, 2)

    with pytest.raises(TarryError) as refused:
        await run.fork(7, "instead")

    assert refused.value.message.startswith(
        f"run {run.id!r} has 4 messages (0 to 3), none numbered 7;"
    )


async def test_a_fork_over_http_is_a_new_run_named_after_its_origin(api: Api) -> None:
    run = await long_run(api.agent, 2)
    api.agent.model.add(say("forked over HTTP"))

    response = await api.http.post(
        f"/v1/runs/{run.id}/fork", json={"at": 2, "text": "instead", "id": "the-fork"}
    )

    assert response.status_code == 201, response.text
    assert response.json()["id"] == "the-fork"
    forked = api.run("the-fork")
    await forked.wait_for(WAITING, TIMEOUT)
    state = await api.state("the-fork")
    assert state.forked_from == ForkOrigin(run_id=run.id, at=2)
    assert state.last_assistant_text == "forked over HTTP"


async def test_a_fork_of_a_run_with_the_longest_id_gets_an_id_every_route_accepts(
    api: Api,
) -> None:
    api.agent.model.add(say("first"), say("forked"))
    run_id = await api.start("question 0", id="r" * MAX_RUN_ID_LENGTH)
    await api.run(run_id).wait_for(WAITING, TIMEOUT)

    response = await api.http.post(f"/v1/runs/{run_id}/fork", json={"at": 0})

    assert response.status_code == 201, response.text
    fork_id = response.json()["id"]
    assert run_id_problem(fork_id) is None
    assert fork_id.startswith("r" * 100)
    await api.run(fork_id).wait_for(WAITING, TIMEOUT)
    for path in ("", "/transcript"):
        answer = await api.http.get(f"/v1/runs/{fork_id}{path}")
        assert answer.status_code == 200, (path, answer.text)


async def test_a_fork_over_http_at_an_answer_is_409(api: Api) -> None:
    run = await long_run(api.agent, 2)

    response = await api.http.post(f"/v1/runs/{run.id}/fork", json={"at": 1})

    assert error_of(response) == (409, ErrorCode.FORK_POINT_INVALID)


async def test_tarry_fork_prints_the_forks_id_and_its_status_names_the_origin(
    cli: Cli, agent: Agent
) -> None:
    run = await long_run(agent, 2)
    agent.model.add(say("forked on the command line"))

    printed = await cli.ok("fork", run.id, "--at", "2", "--text", "instead", "--id", "cli-fork")
    forked = agent.tarry.get("cli-fork")
    agent.runs.append(forked)
    await forked.wait_for(WAITING, TIMEOUT)
    status = await cli.ok("status", "cli-fork")

    assert printed == "cli-fork\n"
    assert f"forked from  {run.id} at message 2" in status


async def test_tarry_show_numbers_the_messages_as_fork_counts_them(cli: Cli, agent: Agent) -> None:
    run = await long_run(agent, 2)

    shown = await cli.ok("show", run.id, "--numbers", "--from", "1")

    numbers = [line.split()[0] for line in shown.splitlines()]
    assert numbers == ["1", "2", "3"]
    assert "question 1" in shown.splitlines()[1]


async def test_tarry_fork_at_an_answer_fails_and_names_the_user_messages(
    cli: Cli, agent: Agent
) -> None:
    run = await long_run(agent, 2)

    result = await cli("fork", run.id, "--at", "1")

    assert result.code == 1
    assert "FORK_POINT_INVALID" in result.err
    assert "its user messages: 0, 2" in result.err
