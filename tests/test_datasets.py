"""Datasets: the decisions people took in recorded runs (each approve, reject and edit,
with who took it, and each final answer with its reply), kept as immutable, versioned
JSON lines for an eval to replay."""

from __future__ import annotations

import json
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tarry.client import RunHandle, datasets
from tarry.client.dataset_store import DatasetLimits
from tarry.client.datasets import DatasetStore, decision_points, parse_selection
from tarry.client.evals import start_eval, wait_report
from tarry.client.run_list import runs_query
from tarry.contracts import ErrorCode, EvalInput, Phase, WaitingFor
from tarry.contracts.datasets import DatasetManifest, DecisionPoint, Verdict
from tarry.contracts.messages import ChatMessage, DecisionRecord, FunctionCall, ToolCall
from tarry.core.errors import TarryError
from tarry.core.identities import Caller
from tarry.testing.scripted_model import call, say
from tests.cli import Cli, until_listed
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import TIMEOUT
from tests.eval_dataset import agree_on_three
from tests.eval_dataset import points as eval_points
from tests.http_api import Api
from tests.test_http_api import error_of
from tests.test_stuck_runs import REASON
from tests.test_stuck_runs import stuck as stuck  # the fixture
from tests.test_sub_agents import WRITER, child_of, team, until, write_the_plan

PLAN = {"path": "a.md", "content": "ship it"}
EDITED = {"path": "d.md", "content": "ship it on Monday"}
DECISIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("w1", "alice", {}),
    ("w2", "bob", {}),
    ("w3", "carol", {"approved": False, "reason": "not there"}),
    ("w4", "dave", {"arguments": EDITED}),
]
"""Who decides each of `decided_run`'s calls, and how."""


async def decided_run(agent: Agent, prompt: str = "write the plans") -> RunHandle:
    """A run whose four gated `write_file` calls are decided as `DECISIONS` says, whose
    answer erin replies to, and whose second answer nobody has replied to yet."""
    agent.model.add(
        *(
            call("write_file", PLAN | {"path": f"{name[1]}.md"}, id=name)
            for name, _, _ in DECISIONS
        ),
        say("All four handled."),
        say("You're welcome."),
    )
    run = await agent.start(prompt, require_approval=["write_file"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    for call_id, person, decision in DECISIONS:
        await agent.tarry.get(run.id, Caller(person)).decide(call_id, **decision)
    await agent.tarry.get(run.id, Caller("erin")).send("thanks")
    await until_listed(agent.tarry.client, runs_query(task_queue=agent.tarry.task_queue), run.id)
    return run


def labels(points: list[DecisionPoint]) -> list[tuple[Any, ...]]:
    return [
        (
            p.id.split("/", 1)[1],
            p.label.verdict,
            p.label.by,
            p.label.reason,
            p.label.arguments,
            p.label.reply,
        )
        for p in points
    ]


async def test_a_dataset_holds_each_decision_with_who_took_it_and_each_answer_with_its_reply(
    agent: Agent,
) -> None:
    run = await decided_run(agent)

    manifest = await agent.tarry.datasets.create("plans", "tool=write_file")
    points = agent.tarry.datasets.points("plans")

    assert (manifest.name, manifest.version, manifest.runs, manifest.points) == ("plans", 1, 1, 6)
    assert labels(points) == [
        ("1/w1", Verdict.APPROVED, "alice", None, None, None),
        ("3/w2", Verdict.APPROVED, "bob", None, None, None),
        ("5/w3", Verdict.REJECTED, "carol", "not there", None, None),
        ("7/w4", Verdict.EDITED, "dave", None, EDITED, None),
        ("9/answer", Verdict.ANSWERED, "erin", None, None, "thanks"),
        ("11/answer", Verdict.ANSWERED, None, None, None, None),
    ]
    assert {p.run_id for p in points} == {run.id}
    proposals = [p.proposal.function.name for p in points if p.proposal is not None]
    assert proposals == ["write_file"] * 4
    assert [p.answer for p in points[4:]] == ["All four handled.", "You're welcome."]


async def test_each_point_holds_the_conversation_before_its_proposal_as_the_model_was_sent_it(
    agent: Agent,
) -> None:
    run = await decided_run(agent)
    transcript = await run.transcript()

    await agent.tarry.datasets.create("plans")
    points = agent.tarry.datasets.points("plans")

    for point in points:
        index = int(point.id.split("/")[1])
        assert [m.for_model() for m in point.messages] == [
            m.for_model() for m in transcript[:index]
        ]
        assert all(m.decision is None and m.by is None for m in point.messages)
        assert point.model == "default"
        assert "write_file" in {t.name for t in point.tools}
        assert point.usage is not None
        assert point.usage.total_tokens > 0
        assert point.latency_ms is not None
    assert points[4].messages[-1].role == "tool"  # after the last decision's tool message
    assert points[5].messages[-1].content == "thanks"


async def test_a_dataset_holds_no_api_key(agent: Agent) -> None:
    await decided_run(agent)

    await agent.tarry.datasets.create("plans")

    assert CANARY_KEY not in agent.tarry.datasets.export("plans")


async def test_creating_a_dataset_again_makes_a_new_version_and_leaves_the_old_one_as_it_was(
    agent: Agent,
) -> None:
    first = await decided_run(agent)
    await agent.tarry.datasets.create("plans", "tool=write_file")
    exported = agent.tarry.datasets.export("plans", 1)
    second = await decided_run(agent, "write the other plans")

    manifest = await agent.tarry.datasets.create("plans", "tool=write_file")

    assert (manifest.version, manifest.runs, manifest.points) == (2, 2, 12)
    assert {p.run_id for p in agent.tarry.datasets.points("plans")} == {first.id, second.id}
    assert agent.tarry.datasets.export("plans", 1) == exported
    assert agent.tarry.datasets.show("plans", 1).runs == 1
    assert [m.version for m in agent.tarry.datasets.latest()] == [2]
    stored = agent.tarry.datasets.store.root / "plans"
    assert all(path.stat().st_mode & 0o222 == 0 for path in stored.iterdir())  # read-only


async def test_a_query_selects_runs_by_tool_and_phase(agent: Agent) -> None:
    decided = await decided_run(agent)
    agent.model.add(say("hello"))
    chat = await agent.start("hi")
    await chat.wait_for({Phase.WAITING_USER}, TIMEOUT)
    for run in (decided, chat):  # visibility records a run's phase a moment after it
        waiting = runs_query(Phase.WAITING_USER, task_queue=agent.tarry.task_queue)
        await until_listed(agent.tarry.client, waiting, run.id)

    by_tool = await agent.tarry.datasets.create("writes", "tool=write_file")
    everything = await agent.tarry.datasets.create("all", "phase=waitinguser")
    nothing = await agent.tarry.datasets.create("none", "phase=Completed")

    assert {p.run_id for p in agent.tarry.datasets.points("writes")} == {decided.id}
    assert {p.run_id for p in agent.tarry.datasets.points("all")} == {decided.id, chat.id}
    assert (by_tool.runs, everything.runs, nothing.runs) == (1, 2, 0)


@pytest.mark.parametrize(
    "query",
    [
        "phase=Sleeping",
        "tool",
        "colour=blue",
        "since=yesterday",
        "user=o'brien",
        "limit=0",
        "limit=²",
    ],
)
def test_a_query_it_cannot_read_is_dataset_invalid(query: str) -> None:
    with pytest.raises(TarryError) as raised:
        parse_selection(query)

    assert raised.value.code is ErrorCode.DATASET_INVALID


def test_a_query_becomes_a_visibility_query_of_checked_names_and_formatted_times() -> None:
    selection = parse_selection("user=alice since=2026-11-01 model=cheap")

    assert selection.visibility_query("q", None).endswith(
        " AND TaskQueue = 'q' AND WorkflowType = 'AgentRun' AND TarryOwner = 'alice'"
        " AND TarryModel = 'cheap'"
        " AND StartTime >= '2026-11-01T00:00:00+00:00'"
    )


def test_only_a_decision_a_person_took_is_a_label() -> None:
    moment = datetime(2026, 11, 27, tzinfo=UTC)
    transcript = [ChatMessage(role="user", content="write")]
    for n, by in enumerate(("deadline", "rule", "stop", "update")):
        proposal = ToolCall(id=f"c{n}", function=FunctionCall(name="write_file", arguments="{}"))
        decision = DecisionRecord(approved=by == "rule", by=by, at=moment, user="ann")
        transcript += [
            ChatMessage(role="assistant", tool_calls=[proposal]),
            ChatMessage(role="tool", tool_call_id=f"c{n}", content="{}", decision=decision),
        ]

    points = decision_points("r", transcript)

    assert [(p.id, p.label.verdict, p.label.by) for p in points] == [
        ("r/7/c3", Verdict.REJECTED, "ann")
    ]


async def test_the_command_line_creates_shows_and_exports_a_dataset(
    agent: Agent,
) -> None:
    await decided_run(agent)
    cli = Cli.of(agent, TARRY_DATASETS_DIR=str(agent.tarry.datasets.store.root))

    created = json.loads(
        await cli.ok("dataset", "create", "plans", "--from", "tool=write_file", "--json")
    )
    shown = await cli.ok("dataset", "show", "plans")
    exported = await cli.ok("dataset", "export", "plans", "--version", "1")

    assert (created["version"], created["points"]) == (1, 6)
    assert "labels    2 answered, 2 approved, 1 edited, 1 rejected" in shown
    assert exported == agent.tarry.datasets.export("plans")
    round_tripped = [DecisionPoint.model_validate_json(line) for line in exported.splitlines()]
    assert round_tripped == agent.tarry.datasets.points("plans")
    missing = await cli("dataset", "show", "plans", "--version", "2")
    missing.assert_one_error_line(f"error: {ErrorCode.DATASET_NOT_FOUND}")
    not_exported = await cli("dataset", "export", "plans", "--version", "2")
    not_exported.assert_one_error_line(f"error: {ErrorCode.DATASET_NOT_FOUND}")
    bad = await cli("dataset", "create", "plans", "--from", "colour=blue")
    bad.assert_one_error_line(f"error: {ErrorCode.DATASET_INVALID}")


async def test_the_http_api_creates_lists_shows_and_exports_a_dataset(api: Api) -> None:
    await decided_run(api.agent)

    created = await api.http.post(
        "/v1/datasets", json={"name": "plans", "query": "tool=write_file"}
    )
    shown = await api.http.get("/v1/datasets/plans", params={"version": 1})
    exported = await api.http.get("/v1/datasets/plans/points")
    listed = await api.http.get("/v1/datasets")

    assert created.status_code == 201, created.text
    assert shown.json() == created.json()
    assert (shown.json()["points"], shown.json()["query"]) == (6, "tool=write_file")
    assert exported.headers["content-type"].startswith("application/jsonl")
    assert exported.text == api.agent.tarry.datasets.export("plans")
    assert [d["name"] for d in listed.json()["datasets"]] == ["plans"]
    unreadable = await api.http.post("/v1/datasets", json={"name": "plans", "query": "tool"})
    assert error_of(unreadable) == (422, ErrorCode.DATASET_INVALID)
    missing = await api.http.get("/v1/datasets/plans", params={"version": 2})
    assert error_of(missing) == (404, ErrorCode.DATASET_NOT_FOUND)


async def test_a_query_selects_the_runs_of_a_sub_agent(agent_factory: Any) -> None:
    agent = await team(agent_factory, writer=WRITER)
    write_the_plan(agent)
    lead = await agent.start("Get the plan written.", agents=["writer"])
    writer = await child_of(agent, lead, name="writer")
    await until(writer, lambda s: s.waiting_for is WaitingFor.APPROVAL)
    await agent.tarry.get(writer.id, Caller("ann")).decide("w1")
    await until(lead, lambda s: s.waiting_for is WaitingFor.INPUT)
    await until_listed(agent.tarry.client, runs_query(task_queue=agent.tarry.task_queue), writer.id)

    manifest = await agent.tarry.datasets.create("writers", "agent=writer")

    points = agent.tarry.datasets.points("writers")
    assert manifest.runs == 1
    assert [(p.run_id, p.label.verdict, p.label.by) for p in points] == [
        (writer.id, Verdict.APPROVED, "ann"),
        (writer.id, Verdict.ANSWERED, None),
    ]


def long_conversation(turns: int, words: int) -> list[ChatMessage]:
    """A chat of `turns` questions of `words` bytes each, each answered: `turns` points."""
    transcript: list[ChatMessage] = []
    for n in range(turns):
        transcript += [
            ChatMessage(role="user", content=f"question {n} " + "x" * words, by="ann"),
            ChatMessage(role="assistant", content=f"answer {n}"),
        ]
    return transcript


def stored_bytes(store: DatasetStore, name: str) -> int:
    return sum(path.stat().st_size for path in (store.root / name).iterdir())


def manifest_of(name: str) -> DatasetManifest:
    return DatasetManifest(
        name=name, version=1, query="", created_at=datetime.now(UTC), runs=1, points=0
    )


def test_a_long_conversation_is_stored_once_not_once_per_point(tmp_path: Path) -> None:
    transcript = long_conversation(turns=40, words=10_000)
    transcript_bytes = sum(len(m.model_dump_json()) for m in transcript)
    points = decision_points("r", transcript)
    store = DatasetStore(tmp_path)

    store.write(manifest_of("long"), points)

    assert len(points) == 40
    assert stored_bytes(store, "long") < 2 * transcript_bytes  # a copy a point: 20 times
    assert store.points("long") == points


def test_the_points_of_a_run_are_read_back_sharing_its_messages_not_a_copy_each(
    tmp_path: Path,
) -> None:
    store = DatasetStore(tmp_path)
    store.write(manifest_of("long"), decision_points("r", long_conversation(turns=3, words=10)))

    first, *_, last = store.points("long")

    assert last.messages[: len(first.messages)] == first.messages
    assert all(a is b for a, b in zip(first.messages, last.messages, strict=False))


def test_a_version_stored_a_whole_point_a_line_before_is_read_as_it_was(
    tmp_path: Path,
) -> None:
    points = decision_points("r", long_conversation(turns=3, words=10))
    folder = tmp_path / "older"
    folder.mkdir()
    (folder / "1.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in points))
    (folder / "1.json").write_text(manifest_of("older").model_dump_json())
    store = DatasetStore(tmp_path)

    assert store.points("older") == points
    assert store.write(manifest_of("older"), points).version == 2
    assert store.points("older", 2) == points


@pytest.mark.parametrize(
    ("limits", "setting"),
    [
        (DatasetLimits(max_points=39), "TARRY_DATASET_MAX_POINTS"),
        (DatasetLimits(max_bytes=300_000), "TARRY_DATASET_MAX_BYTES"),
    ],
)
def test_a_version_over_a_cap_is_dataset_too_large_and_leaves_nothing(
    tmp_path: Path, limits: DatasetLimits, setting: str
) -> None:
    points = decision_points("r", long_conversation(turns=40, words=10_000))
    store = DatasetStore(tmp_path, limits)

    with pytest.raises(TarryError) as raised:
        store.write(manifest_of("long"), points)

    assert raised.value.code is ErrorCode.DATASET_TOO_LARGE
    assert setting in raised.value.message
    assert "narrow the query" in raised.value.message
    assert store.versions("long") == []
    assert list((tmp_path / "long").iterdir()) == []


def test_a_dataset_with_all_its_versions_is_dataset_too_many_versions(tmp_path: Path) -> None:
    points = decision_points("r", long_conversation(turns=2, words=10))
    store = DatasetStore(tmp_path, DatasetLimits(max_versions=2))
    for _ in range(2):
        store.write(manifest_of("kept"), points)

    with pytest.raises(TarryError) as raised:
        store.write(manifest_of("kept"), points)

    assert raised.value.code is ErrorCode.DATASET_TOO_MANY_VERSIONS
    assert "TARRY_DATASET_MAX_VERSIONS" in raised.value.message
    assert store.versions("kept") == [1, 2]


def test_a_dataset_s_files_and_directories_are_its_owner_s_alone(tmp_path: Path) -> None:
    store = DatasetStore(tmp_path / "datasets")

    store.write(manifest_of("mine"), decision_points("r", long_conversation(turns=2, words=10)))

    folders = [store.root, store.root / "mine"]
    files = list((store.root / "mine").iterdir())
    assert files
    assert [stat.S_IMODE(f.stat().st_mode) for f in folders] == [0o700, 0o700]
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o400}


async def test_the_http_api_refuses_a_version_over_its_caps_with_dataset_too_large(
    api: Api,
) -> None:
    await decided_run(api.agent)
    api.agent.tarry.datasets.store.limits = DatasetLimits(max_points=5)

    created = await api.http.post("/v1/datasets", json={"name": "plans"})

    assert error_of(created) == (422, ErrorCode.DATASET_TOO_LARGE)
    assert api.agent.tarry.datasets.store.versions("plans") == []


async def test_a_stuck_run_is_left_out_and_named_with_why_and_the_others_kept(
    stuck: tuple[Agent, RunHandle],
) -> None:
    agent, unreadable = stuck
    run = await decided_run(agent)

    manifest = await agent.tarry.datasets.create("plans")

    assert {p.run_id for p in agent.tarry.datasets.points("plans")} == {run.id}
    assert manifest.runs == 1
    assert [(s.run_id, s.code) for s in manifest.skipped] == [
        (unreadable.id, ErrorCode.RUN_TASK_FAILING)
    ]
    assert REASON in manifest.skipped[0].message


async def test_the_command_line_names_the_runs_a_dataset_left_out(
    stuck: tuple[Agent, RunHandle],
) -> None:
    agent, unreadable = stuck
    cli = Cli.of(agent, TARRY_DATASETS_DIR=str(agent.tarry.datasets.store.root))

    created = await cli.ok("dataset", "create", "plans")
    shown = await cli.ok("dataset", "show", "plans")

    for out in (created, shown):
        assert re.search(rf"\nskipped +{unreadable.id} \({ErrorCode.RUN_TASK_FAILING}: ", out)


async def test_a_run_that_does_not_answer_in_time_is_left_out_and_named(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await decided_run(agent)
    monkeypatch.setattr(datasets, "RUN_READ_TIMEOUT", timedelta(0))

    manifest = await agent.tarry.datasets.create("plans")

    assert (manifest.runs, manifest.points) == (0, 0)
    assert [(s.run_id, s.code) for s in manifest.skipped] == [
        (run.id, ErrorCode.TEMPORAL_UNAVAILABLE)
    ]
    assert manifest.skipped[0].message == "no answer within 0 s"


async def test_a_terminated_run_its_worker_cannot_replay_is_left_out_and_named(
    stuck: tuple[Agent, RunHandle],
) -> None:
    agent, unreadable = stuck
    await agent.tarry.client.get_workflow_handle(unreadable.id).terminate("by an operator")
    run = await decided_run(agent)

    manifest = await agent.tarry.datasets.create("plans")

    assert {p.run_id for p in agent.tarry.datasets.points("plans")} == {run.id}
    assert [s.run_id for s in manifest.skipped] == [unreadable.id]


async def test_a_dataset_selects_runs_and_never_an_eval(api: Api) -> None:
    agree_on_three(api.agent.model)
    input = EvalInput(dataset="decisions", points=eval_points(), model="default")
    tarry = api.agent.tarry
    handle = await start_eval(tarry.client, tarry.task_queue, "alice", input)
    await wait_report(handle)
    await until_listed(tarry.client, runs_query(task_queue=tarry.task_queue), handle.id)

    created = await api.http.post("/v1/datasets", json={"name": "everything"})

    assert created.status_code == 201, created.text
    assert created.json()["skipped"] == []
    assert handle.id not in {p.run_id for p in tarry.datasets.points("everything")}
