"""A run id is one rule at every door (`tarry.contracts.RUN_ID_PATTERN`), and an id names
one conversation for good: starting under the id of any run there is, open or ended, is
`RUN_EXISTS`, never a new conversation that hides the old one."""

from __future__ import annotations

import pytest

from tarry.client import TarryError
from tarry.contracts import ErrorCode, Phase, run_id_problem
from tarry.testing.scripted_model import say
from tests.conftest import Agent
from tests.deadline import TIMEOUT

BAD_IDS = {
    "empty": "",
    "too long": "r" * 201,
    "a slash": "team/run-1",
    "a parent directory": "..",
    "a leading dot": ".hidden",
    "a space": "my run",
    "a control character": "run-\x07",
    "a right-to-left override": "run-\u202egnp.exe",
    "a newline": "run\n1",
}


@pytest.mark.parametrize("run_id", BAD_IDS.values(), ids=BAD_IDS.keys())
def test_an_id_outside_the_rule_is_named_with_what_is_wrong(run_id: str) -> None:
    problem = run_id_problem(run_id)

    assert problem is not None
    assert "run id" in problem


@pytest.mark.parametrize(
    "run_id", ["run-1a2b3c4d", "a", "team.alpha:ticket_42@example", "r" * 200, "x..y"]
)
def test_ids_inside_the_rule_pass(run_id: str) -> None:
    assert run_id_problem(run_id) is None


@pytest.mark.parametrize("run_id", BAD_IDS.values(), ids=BAD_IDS.keys())
async def test_the_client_refuses_a_bad_id_before_it_reaches_temporal(
    agent: Agent, run_id: str
) -> None:
    with pytest.raises(TarryError) as refused_start:
        await agent.start("hi", run_id=run_id)
    with pytest.raises(TarryError) as refused_get:
        agent.tarry.get(run_id)

    assert refused_start.value.code is ErrorCode.RUN_ID_INVALID
    assert refused_get.value.code is ErrorCode.RUN_ID_INVALID


async def test_starting_under_an_open_runs_id_is_run_exists(agent: Agent) -> None:
    agent.model.add(say("Hello!"))
    run = await agent.start("hi")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    with pytest.raises(TarryError) as refused:
        await agent.start("another conversation", run_id=run.id)

    assert refused.value.code is ErrorCode.RUN_EXISTS


async def test_starting_under_an_ended_runs_id_is_run_exists_and_keeps_its_transcript(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello!"))
    run = await agent.start("hi")
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await run.stop("done")
    await run.result()

    with pytest.raises(TarryError) as refused:
        await agent.start("another conversation", run_id=run.id)

    assert refused.value.code is ErrorCode.RUN_EXISTS
    assert "tarry resume" in refused.value.message
    assert [m.content for m in await run.transcript()] == ["hi", "Hello!"]
    assert (await run.result()).stop_reason == "done"
