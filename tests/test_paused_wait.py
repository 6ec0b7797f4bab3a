"""The `paused` wait (`workflows.waits.paused`): a run a person paused says so, in its
state and where runs are listed, and a reply lets it go on."""

from __future__ import annotations

from tarry.client.run_handle import RunHandle
from tarry.client.run_list import find_runs
from tarry.contracts import Phase, WaitingFor
from tarry.testing.scripted_model import call, say
from tests.cli import until_listed
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}


async def paused_run(agent: Agent) -> RunHandle:
    """A run paused while its tool call runs, once it waits."""
    agent.model.add(call("list_files", {}, delay=1.0), say("Going on."))
    run = await agent.start("look around")
    await agent.model.wait_for_requests(1, timeout=deadline(10))
    await run.pause()
    await run.wait_for(WAITING, TIMEOUT)
    return run


async def test_a_paused_run_waits_for_paused_naming_who_paused_it(agent: Agent) -> None:
    run = await paused_run(agent)

    state = await run.state()

    assert state.waiting_for is WaitingFor.PAUSED
    assert state.paused_by is not None


async def test_a_paused_run_is_listed_as_waiting_for_paused(agent: Agent) -> None:
    run = await paused_run(agent)
    client = agent.tarry.client

    await until_listed(client, "TarryWaitingFor = 'paused'", run.id)

    page = await find_runs(client, waiting_for=WaitingFor.PAUSED, limit=100)
    assert run.id in [row.run_id for row in page.rows]


async def test_a_reply_lets_a_paused_run_go_on(agent: Agent) -> None:
    run = await paused_run(agent)

    state = await run.send("go on")

    assert state.last_assistant_text == "Going on."
    assert state.waiting_for is WaitingFor.INPUT
    assert state.paused_by is None
