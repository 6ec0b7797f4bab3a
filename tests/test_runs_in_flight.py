"""Runs started on the previous code go on on this code.

`tests/fixtures/handed_over_before_the_catalogue.json` is the input a run of the code
before the workflow owned its tool catalogue handed to the next run of its chain (read
from the recorded history `pre_catalogue_test_a_run_hands_over_..._0_1.json`): its
memory is flat, and it has no catalogue. The recorded histories themselves replay in
`test_replay.py`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tarry.contracts import LLM_ACTIVITY, TOOL_CATALOGUE_ACTIVITY, Phase
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from workflows.memory import RunMemory, WorkflowInput

HANDED_OVER = Path(__file__).parent / "fixtures" / "handed_over_before_the_catalogue.json"


def handed_over() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(HANDED_OVER.read_text())
    return data


def test_a_flat_memory_from_the_previous_code_loads_into_its_groups() -> None:
    flat = handed_over()["memory"]

    memory = RunMemory.model_validate_json(json.dumps(flat))

    assert (memory.phase, memory.turn, len(memory.transcript)) == (Phase.WAITING_USER, 2, 4)
    assert memory.guards.turns_since_input == flat["turns_since_input"] == 2
    assert (memory.guards.streak_tool, memory.guards.streak) == ("write_file", 1)
    assert memory.events.published == flat["published"] == 4
    assert memory.events.turn_events == flat["turn_events"] > 0
    assert memory.events.state is not None
    assert len(memory.events.state.log) == len(flat["stream"]["log"]) > 0
    assert (memory.approvals.pending, memory.approvals.schemas) == ([], {})
    assert memory.tools is None  # resolved at the run's first step


async def test_a_run_handed_over_by_the_previous_code_goes_on(agent: Agent) -> None:
    agent.model.add(say("Second."), call("list_files", {}), say("Nothing else here."))
    run = await agent.tarry.start(WorkflowInput.model_validate(handed_over()))
    agent.runs.append(run)

    second = await run.send("and now?")
    third = await run.send("look around")
    await run.stop()
    result = await run.result()

    assert (second.last_assistant_text, second.turn) == ("Second.", 3)
    assert (third.last_assistant_text, third.turn) == ("Nothing else here.", 5)
    assert (result.phase, result.turns) == (Phase.COMPLETED, 5)
    transcript = await run.transcript()
    assert [(m.role, m.content) for m in transcript if m.role != "tool"] == [
        ("user", "write hi"),
        ("assistant", None),
        ("assistant", "Wrote it."),
        ("user", "and now?"),
        ("assistant", "Second."),
        ("user", "look around"),
        ("assistant", None),
        ("assistant", "Nothing else here."),
    ]
    # The conversation stored by the previous code holds no tools: the first call sends
    # it whole, with the catalogue the run resolved; later calls send only their news.
    first, *later = agent.model.requests
    assert len(first.body["messages"]) == 5
    assert [t["function"]["name"] for t in first.body["tools"]] == [
        "read_file",
        "write_file",
        "list_files",
        "finish",
    ]
    assert [len(r.body["messages"]) for r in later] == [7, 9]
    # The catalogue is resolved once, at the first step, and handed over with the rest.
    histories = await agent.histories(run)
    activities = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for h in histories
        for e in h.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert activities.count(TOOL_CATALOGUE_ACTIVITY) == 1
    assert activities.count(LLM_ACTIVITY) == 3
