"""Runs started on the previous code go on on this code, and new runs record only the
patch ids the compatibility ledger lists (`tarry.contracts.compatibility`).

`tests/fixtures/handed_over_before_the_catalogue.json` is the input a run of the code
before the workflow owned its tool catalogue handed to the next run of its chain (read
from a history recorded on that code, since retired: see docs/guides/upgrading.md): its
memory is flat, and it has no catalogue. `tests/fixtures/handed_over_before_the_groups.json`
is a hand-over of the code before `RunMemory` grouped the fields its handlers and its loop
write (read from the history of `test_a_long_run_keeps_in_memory_only_the_window_its_model_is_sent`,
segment 6). This code reads it into its groups and writes every hand-over back in that flat
shape, for a worker of the previous build to read (`RunMemory._flat`).
The recorded histories themselves replay in `test_replay.py`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from tarry.contracts import (
    LLM_ACTIVITY,
    TOOL_CATALOGUE_ACTIVITY,
    Act,
    AuditRecord,
    AuthNeed,
    ChatMessage,
    DecisionRecord,
    Door,
    ErrorCode,
    ErrorInfo,
    ForkOrigin,
    NotifyEvent,
    Phase,
    PinnedMessage,
    ReplyPolicy,
    TranscriptPageIndexRef,
    UserInput,
)
from tarry.contracts.a2a_configs import PushConfig
from tarry.contracts.compatibility import PATCHES
from tarry.contracts.guardrails import Guardrail
from tarry.testing.scripted_model import call, say
from tests.conftest import HISTORIES, Agent
from tests.faults import patch_ids
from workflows import waits
from workflows.memory import RunMemory, WorkflowInput
from workflows.memory_groups import Budgets, Delegations, QueuedInput, SlotMark, SpendMark

HANDED_OVER = Path(__file__).parent / "fixtures" / "handed_over_before_the_catalogue.json"
BEFORE_THE_GROUPS = Path(__file__).parent / "fixtures" / "handed_over_before_the_groups.json"
ROOT = Path(__file__).parents[1]
LEDGER_IDS = {patch.id for patch in PATCHES}


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
    at = datetime(2026, 11, 27, tzinfo=UTC)
    decided = DecisionRecord(approved=True, by="update", at=at)
    reply = UserInput(text="and then?", id="r-19", by="ann")
    act = AuditRecord(act=Act.STOP, by="bob", door=Door.CLI, at=at, what="stopped")
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
                "audit": [act.model_dump(mode="json")],
                "budget": Budgets(paused=True, raised_by="carol").model_dump(mode="json"),
                "agents": Delegations(parent="lead", started=2).model_dump(mode="json"),
                "wait": {"waiting_for": "input", "since": "2026-11-27T09:00:00Z", "turn": 18},
                "started": "2026-11-27T08:00:00Z",
                "guardrails": [
                    Guardrail(name="g", on="input", check="pii", verdict="block").model_dump(
                        mode="json"
                    )
                ],
                "spend": SpendMark(calls=4, last_tokens=1200).model_dump(mode="json"),
                "context_budgets": {"default": 100_000, "big": 400_000},
                "pins": [
                    PinnedMessage(
                        index=3, message=ChatMessage(role="user", content="the brief")
                    ).model_dump(mode="json")
                ],
                "search_index": True,
                "indexed": 3,
                "slot": SlotMark(held=True).model_dump(mode="json"),
                "auth_needed": [
                    AuthNeed(server="tickets", person="ann", call_id="c-1").model_dump(mode="json")
                ],
                "push_configs": [
                    PushConfig(id="hook", url="https://hooks.example/a2a", owner="ann").model_dump(
                        mode="json", exclude_none=True
                    )
                ],
            }
        )
    )
    return fields


def encoded(input: WorkflowInput) -> dict[str, Any]:
    """The JSON a worker of this build puts in history for `input` (a hand-over)."""
    [payload] = pydantic_data_converter.payload_converter.to_payloads([input])
    data: dict[str, Any] = json.loads(payload.data)
    return data


def fields_at_their_defaults(model: BaseModel, flattened: set[str]) -> list[str]:
    """The fields of `model`, and of its groups named in `flattened`, at their defaults."""
    found = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if name in flattened:
            found += [f"{name}.{f}" for f in fields_at_their_defaults(value, set())]
        elif value == field.get_default(call_default_factory=True):
            found.append(name)
    return found


def test_a_flat_hand_over_decodes_into_its_groups_and_is_written_back_key_for_key() -> None:
    handed = json.loads(BEFORE_THE_GROUPS.read_text())
    flat = handed["memory"] | asked_queued_and_failed()

    input = WorkflowInput.model_validate_json(json.dumps(handed | {"memory": flat}))
    memory = input.memory

    assert memory is not None
    # Every field the grouping moved is set away from its default: none can hide there.
    flattened = {"requests", "inbox", "conversation", "catalogue"}
    assert fields_at_their_defaults(memory, flattened) == []
    assert memory.approvals.remembered != {}
    state = memory.state(waits.waiting_for(memory))
    assert (state.phase, state.turn, state.message_count) == (Phase.WAITING_USER, 18, 36)
    assert (state.stopped_by, state.paused_by, state.model) == ("bob", "ann", "big")
    assert (state.pending_inputs, state.on_reply_while_running) == (1, ReplyPolicy.INTERRUPT)
    # Written in the previous build's shape: the same keys, in its order, and values.
    again = encoded(input)
    assert again == handed | {"memory": flat}
    assert list(again["memory"]) == list(flat)
    assert RunMemory.model_validate_json(memory.model_dump_json()) == memory
    # The grouped shape, which a later build will write, reads back the same too.
    grouped = {name: to_jsonable_python(value) for name, value in memory}
    assert {"requests", "inbox", "conversation", "catalogue"} <= set(grouped)
    assert RunMemory.model_validate_json(json.dumps(grouped)) == memory


def recorded_hand_overs() -> list[bytes]:
    """The hand-overs in the recorded histories written by the build before the groups
    (those before it have no `audit`), as the JSON in history."""
    found = []
    for path in sorted(HISTORIES.glob("*.json")):
        closing = WorkflowHistory.from_json(path.stem, path.read_text()).events[-1]
        if closing.HasField("workflow_execution_continued_as_new_event_attributes"):
            data = closing.workflow_execution_continued_as_new_event_attributes.input
            if "audit" in json.loads(data.payloads[0].data)["memory"]:
                found.append(data.payloads[0].data)
    return found


def test_every_hand_over_the_previous_build_recorded_is_written_again_as_it_was() -> None:
    recorded = recorded_hand_overs()

    assert len(recorded) >= 3
    for data in recorded:
        again = encoded(WorkflowInput.model_validate_json(data))
        assert again == json.loads(data)
        assert list(again["memory"]) == list(json.loads(data)["memory"])


PREVIOUS_BUILD = "ac35cb2bb020c0becccff908a483311028c1b42e"
"""The last commit before `RunMemory` was grouped: the build a hand-over is written for."""


def previous_memory_module() -> ModuleType:
    """`workflows/memory.py` as the previous build had it, loaded from git under a name
    of its own, beside today's."""
    source = subprocess.run(
        ["git", "show", f"{PREVIOUS_BUILD}:workflows/memory.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if source.returncode != 0:
        pytest.skip(f"the previous build's commit is not in this checkout: {source.stderr}")
    module = ModuleType("previous_build_memory")
    sys.modules[module.__name__] = module  # where pydantic resolves its annotations
    exec(compile(source.stdout, "previous_build_memory.py", "exec"), module.__dict__)
    return module


def test_the_previous_builds_worker_reads_a_hand_over_written_by_this_one() -> None:
    previous = previous_memory_module()
    handed = json.loads(BEFORE_THE_GROUPS.read_text())
    flat = handed["memory"] | asked_queued_and_failed()
    input = WorkflowInput.model_validate(handed | {"memory": flat})

    read = previous.WorkflowInput.model_validate_json(json.dumps(encoded(input)))

    # All but what that build does not know: the wait's and the chain's starts (a wait
    # span starts anew; the root span starts at the next hand-over to this build), the
    # worker's guardrails (it has none to apply), the run's account with its spend ledger
    # (it keeps none), and its profiles' context budgets and the run's pins (it sends its
    # model none), whether it indexes its messages for search and how far (it does not),
    # and its slot among its owner's runs (it releases none: the slot is freed once the
    # run has closed, by the next start that meets the cap, `workflows.run_slots`), and
    # the calls that wait for a person to connect (it has no OAuth servers), and where
    # the run pushes its A2A task's news (it pushes none).
    unknown = {"wait", "started", "guardrails", "spend", "context_budgets", "pins"}
    unknown |= {"search_index", "indexed", "slot", "auth_needed", "push_configs"}
    assert read.memory.model_dump(mode="json") == {
        k: v for k, v in flat.items() if k not in unknown
    }
    assert (read.memory.turn, read.memory.model, read.memory.model_queue) == (
        18,
        "big",
        "big-models",
    )
    assert [q.input.id for q in read.memory.inbox] == ["r-19"]


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


async def test_a_new_run_records_no_per_turn_patch_and_only_ids_the_ledger_lists(
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
    assert set(ids) <= LEDGER_IDS
