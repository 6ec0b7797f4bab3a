"""The result limit's stage (`workflows.result_limit`): what the model reads of a tool's
result that is longer than the run's `max_tool_result_chars`."""

from __future__ import annotations

import json

from tarry.contracts import Phase
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, tool_result
from tests.deadline import TIMEOUT

WAITING = {Phase.WAITING_USER}
LONG = "x" * 300


async def test_a_result_over_the_limit_reaches_the_model_cut_with_a_note(agent: Agent) -> None:
    agent.model.add(
        call("write_file", {"path": "long.txt", "content": LONG}),
        call("read_file", {"path": "long.txt"}),
        say("It is long."),
    )
    run = await agent.start("read the long file", max_tool_result_chars=100)
    await run.wait_for(WAITING, TIMEOUT)

    read = (await run.transcript())[4]
    note = "[200 more characters cut: this run reads at most 100 characters of a tool's result]"
    assert tool_result(read) == {"ok": True, "data": f"{'x' * 100}\n{note}"}
    sent = json.dumps(agent.model.requests[2].body["messages"][-1])
    assert note in sent
    assert "x" * 101 not in sent


async def test_a_result_within_the_limit_reaches_the_model_whole(agent: Agent) -> None:
    agent.model.add(call("write_file", {"path": "long.txt", "content": LONG}), say("Written."))
    run = await agent.start("write the long file", max_tool_result_chars=100)
    await run.wait_for(WAITING, TIMEOUT)

    written = (await run.transcript())[2]
    assert tool_result(written) == {"ok": True, "data": {"path": "long.txt", "bytes": 300}}


async def test_a_run_without_a_limit_reads_a_result_whole(agent: Agent) -> None:
    agent.model.add(
        call("write_file", {"path": "long.txt", "content": LONG}),
        call("read_file", {"path": "long.txt"}),
        say("It is long."),
    )
    run = await agent.start("read the long file")
    await run.wait_for(WAITING, TIMEOUT)

    read = (await run.transcript())[4]
    assert tool_result(read) == {"ok": True, "data": LONG}
