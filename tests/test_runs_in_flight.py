"""Runs started on the previous code go on on this code, and new runs record only the
patch ids the upgrading guide's table lists.

`tests/fixtures/handed_over_before_the_catalogue.json` is the input a run of the code
before the workflow owned its tool catalogue handed to the next run of its chain (read
from a history recorded on that code, since retired: see docs/guides/upgrading.md): its
memory is flat, and it has no catalogue. `tests/fixtures/handed_over_before_the_groups.json`
is a hand-over of the code before `RunMemory` grouped the fields its handlers and its loop
write (read from the history of `test_a_long_run_keeps_in_memory_only_the_window_its_model_is_sent`,
segment 6).
The recorded histories themselves replay in `test_replay.py`.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tarry.contracts import (
    LLM_ACTIVITY,
    TOOL_CATALOGUE_ACTIVITY,
    DecisionRecord,
    ErrorCode,
    ErrorInfo,
    ForkOrigin,
    NotifyEvent,
    Phase,
    ReplyPolicy,
    TranscriptPageIndexRef,
    UserInput,
)
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.faults import patch_ids
from workflows.memory import RunMemory, WorkflowInput
from workflows.memory_groups import QueuedInput

HANDED_OVER = Path(__file__).parent / "fixtures" / "handed_over_before_the_catalogue.json"
BEFORE_THE_GROUPS = Path(__file__).parent / "fixtures" / "handed_over_before_the_groups.json"
ROOT = Path(__file__).parents[1]
GUIDE = ROOT / "docs" / "guides" / "upgrading.md"


def listed_patch_ids() -> set[str]:
    """The ids in the first column of the upgrading guide's table of patch ids."""
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", GUIDE.read_text(), re.MULTILINE))


def handed_over() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(HANDED_OVER.read_text())
    return data


def test_a_flat_memory_from_the_previous_code_loads_into_its_groups() -> None:
    flat = handed_over()["memory"]

    memory = RunMemory.model_validate_json(json.dumps(flat))

    assert (memory.phase, memory.conversation.turn) == (Phase.WAITING_USER, 2)
    assert len(memory.conversation.transcript) == 4
    assert memory.guards.turns_since_input == flat["turns_since_input"] == 2
    assert (memory.guards.streak_tool, memory.guards.streak) == ("write_file", 1)
    assert memory.events.published == flat["published"] == 4
    assert memory.events.turn_events == flat["turn_events"] > 0
    assert memory.events.state is not None
    assert len(memory.events.state.log) == len(flat["stream"]["log"]) > 0
    assert (memory.approvals.pending, memory.approvals.schemas) == ([], {})
    assert memory.catalogue.tools is None  # resolved at the run's first step


def asked_queued_and_failed() -> dict[str, Any]:
    """Flat fields the recorded hand-over has at their defaults, as a run that was asked
    for everything, had replies queued and a model failing would have handed them over."""
    failure = ErrorInfo(code=ErrorCode.LLM_HTTP_ERROR, message="503 from the model")
    decided = DecisionRecord(approved=True, by="update", at=datetime(2026, 11, 27, tzinfo=UTC))
    reply = UserInput(text="and then?", id="r-19", by="ann")
    fields: dict[str, Any] = json.loads(
        json.dumps(
            {
                "pause_requested": True,
                "paused_by": "ann",
                "stop_requested": True,
                "stop_reason": "enough",
                "stopped_by": "bob",
                "retry_requested": True,
                "model": "big",
                "reply_policy": ReplyPolicy.INTERRUPT,
                "inbox": [QueuedInput(seq=19, input=reply).model_dump(mode="json")],
                "seen_ids": {"r-19": 19},
                "received": 19,
                "page_index": TranscriptPageIndexRef(claim={"key": "index"}, end=10).model_dump(
                    mode="json"
                ),
                "context_from": 2,
                "segment_turns": 1,
                "output": "the result",
                "model_queue": "big-models",
                "notify_events": [NotifyEvent.ENDED],
                "error": failure.model_dump(mode="json"),
                "warning": ErrorCode.LLM_TRUNCATED,
                "model_failure": failure.model_dump(mode="json"),
                "forked_from": ForkOrigin(run_id="first", at=3).model_dump(mode="json"),
                "remembered": {"write_file": decided.model_dump(mode="json")},
                "audit": [],
            }
        )
    )
    return fields


def flat_again(grouped: dict[str, Any]) -> dict[str, Any]:
    """A grouped memory's JSON with the groups' fields flat, as the code before wrote it."""
    renamed = {"pause": "pause_requested", "stop": "stop_requested", "retry": "retry_requested"}
    flat = dict(grouped)
    for group in ("requests", "inbox", "conversation", "catalogue"):
        for name, value in flat.pop(group).items():
            flat[renamed.get(name, name)] = value
    flat["inbox"] = flat.pop("queued")
    flat["approvals"] = dict(flat["approvals"])
    flat["remembered"] = flat["approvals"].pop("remembered")
    return flat


def test_a_flat_hand_over_decodes_into_the_same_memory_in_groups() -> None:
    handed = json.loads(BEFORE_THE_GROUPS.read_text())
    flat = handed["memory"] | asked_queued_and_failed()

    memory = WorkflowInput.model_validate_json(json.dumps(handed | {"memory": flat})).memory

    assert memory is not None
    grouped = json.loads(memory.model_dump_json())
    assert {"requests", "inbox", "conversation", "catalogue"} <= set(grouped)
    assert flat_again(grouped) == flat  # every field, and its value, found in its group
    assert RunMemory.model_validate(grouped) == memory  # the new shape reads back the same
    state = memory.state()
    assert (state.phase, state.turn, state.message_count) == (Phase.WAITING_USER, 18, 36)
    assert (state.stopped_by, state.paused_by, state.model) == ("bob", "ann", "big")
    assert (state.pending_inputs, state.on_reply_while_running) == (1, ReplyPolicy.INTERRUPT)


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


def test_every_patch_id_the_workflows_ask_for_has_a_row_in_the_upgrading_guide() -> None:
    source = "\n".join(path.read_text() for path in sorted((ROOT / "workflows").glob("*.py")))
    defined = re.findall(r'^_?[A-Z0-9_]*PATCH = "([a-z0-9-]+)"$', source, re.MULTILINE)
    asked = re.findall(r"(?:patched|deprecate_patch)\(([^)]*)\)", source)

    assert set(defined) == listed_patch_ids()
    # Every id is one of those constants: none is made up as the run goes (per turn, say).
    assert {name for name in asked if not re.fullmatch(r"_?[A-Z0-9_]*PATCH", name)} == set()


async def test_a_new_run_records_no_per_turn_patch_and_only_ids_the_upgrading_guide_lists(
    agent: Agent,
) -> None:
    agent.model.add(call("list_files", {}), say("Nothing here."), say("Still nothing."))
    run = await agent.start(continue_as_new_after_turns=2)

    first = await run.send("look around")
    second = await run.send("and now?")

    assert (first.last_assistant_text, second.last_assistant_text) == (
        "Nothing here.",
        "Still nothing.",
    )
    histories = await agent.histories(run)
    assert len(histories) == 2  # it handed over once: the hand-over's id is among them
    ids = [patch_id for history in histories for patch_id in patch_ids(history)]
    assert "continue-as-new" in ids
    assert not [i for i in ids if re.fullmatch(r"tool-catalogue-\d+", i)]
    assert set(ids) <= listed_patch_ids()
