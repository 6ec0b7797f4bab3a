"""A run's OpenTelemetry trace, read back from a real trace store (Arize Phoenix,
`tests/phoenix.py`): the GenAI spans of its model and tool calls, its guardrail checks,
its waits for people, its sub-agent and its hand-overs in one trace; no duplicate span
after a worker is killed and every history replayed; prompts and answers only when asked
for, redacted; what a `pii` guardrail redacts in no span and no log.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tarry.client import RunHandle
from tarry.config.settings import TarrySettings
from tarry.contracts import Mode, Phase
from tarry.contracts.guardrails import GUARDRAILS_ACTIVITY
from tarry.testing.script import ScriptStep, call, fail, say
from tarry.testing.scripted_model import ScriptedModel
from tests.browser import needs_chromium
from tests.cli import TARRY, cli_env
from tests.deadline import deadline
from tests.faults import API_KEY, LOCAL_USER, CrashRig, finished, replay, wait_until
from tests.phoenix import Phoenix, new_project, phoenix_server, shoot_trace
from tests.test_guardrails import CARD, EMAIL, PII
from workers.tracing import tracing_interceptor
from workflows.agent_run import AgentRunWorkflow

Span = dict[str, Any]
RESEARCHER = '[agents.researcher]\ndescription = "Looks things up."\ntools = ["list_files"]\n'


@pytest.fixture(scope="module")
async def phoenix(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Phoenix]:
    async with phoenix_server(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


async def traced_rig(
    temporal: Client, model: ScriptedModel, tmp_path: Path, env: dict[str, str]
) -> CrashRig:
    config = tmp_path / "tarry.toml"
    config.write_text(RESEARCHER)
    return CrashRig(
        temporal,
        model.base_url,
        tmp_path / "workspaces",
        tmp_path / "logs",
        env={"TARRY_CONFIG": str(config), **env},
    )


async def settled(phoenix: Phoenix, project: str, done: Callable[[list[Span]], bool]) -> list[Span]:
    """The project's spans once `done` holds for them."""
    found: list[Span] = []

    async def check() -> bool:
        nonlocal found
        found = await phoenix.spans(project)
        return done(found)

    await wait_until(check, timeout=deadline(60), interval=0.2, what="spans in Phoenix")
    return found


def named(spans: list[Span], prefix: str) -> list[Span]:
    return [s for s in spans if s["name"].startswith(prefix)]


def workflow_of(span: Span) -> str:
    """The run a span is of: the SDK names it `temporalWorkflowID`, Tarry `tarry.run_id`."""
    attributes = span["attributes"]
    return str(attributes.get("temporalWorkflowID") or attributes.get("tarry.run_id") or "")


def of_run(spans: list[Span], run: RunHandle) -> list[Span]:
    """The spans of `run` and its sub-agents."""
    return [s for s in spans if workflow_of(s).startswith(run.id)]


def kinds(spans: list[Span]) -> Counter[str]:
    """How many spans of each kind: `chat test-model` and `RunWorkflow:AgentRun` count as
    `chat` and `RunWorkflow`."""
    return Counter(s["name"].split(" ")[0].split(":")[0] for s in spans)


def ancestors(span: Span, spans: list[Span]) -> list[str]:
    """The names of `span`'s parents, nearest first, as far as the store has them."""
    by_id = {s["context"]["span_id"]: s for s in spans}
    names, parent = [], span["parent_id"]
    while parent in by_id:
        names.append(by_id[parent]["name"])
        parent = by_id[parent]["parent_id"]
    return names


def checks(histories: list[WorkflowHistory]) -> int:
    """The guardrail checks the recorded runs scheduled."""
    return sum(
        e.activity_task_scheduled_event_attributes.activity_type.name == GUARDRAILS_ACTIVITY
        for history in histories
        for e in history.events
    )


def activity_tasks(histories: list[WorkflowHistory]) -> int:
    """The activities the recorded runs scheduled, local ones (a marker each) included."""
    return sum(
        e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        or e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        for history in histories
        for e in history.events
    )


async def chain_histories(client: Client, run_ids: list[str]) -> list[WorkflowHistory]:
    """Every recorded history of the runs' chains, each run of each chain."""
    histories: list[WorkflowHistory] = []
    for run_id in run_ids:
        async for execution in client.list_workflows(f"WorkflowId = '{run_id}'"):
            handle = client.get_workflow_handle(run_id, run_id=execution.run_id)
            histories.append(await handle.fetch_history())
    return histories


async def research_with_an_approval(
    rig: CrashRig, model: ScriptedModel, between: Callable[[], Awaitable[None]]
) -> tuple[RunHandle, RunHandle]:
    """A run under a `pii` guardrail whose first model call fails once, whose
    `write_file` waits for a person (`between` runs during that wait), then hands a task
    to a sub-agent, handing over to the next run of its chain after every turn."""
    model.add(
        fail(500),
        call("write_file", {"path": "notes.md", "content": "launch on Monday"}, id="w1"),
        call("agent__researcher", {"task": "Look it up."}, id="a1"),
        say("Found it."),  # the researcher's
        say("Done."),
    )
    await rig.worker()
    run = await rig.start(
        "Write it down, then research.",
        agents=["researcher"],
        require_approval=["write_file"],
        mode=Mode.TASK,
        continue_as_new_after_turns=1,
        guardrails=[PII],
    )
    await run.wait_for({Phase.WAITING_USER}, timeout=deadline(60))
    await between()
    await run.approve("w1")
    child = rig.tarry.get(f"{run.id}:researcher-1")
    rig.runs.append(child)
    assert (await finished(run)).output == "Done."
    return run, child


def spans_once_each(histories: list[WorkflowHistory], model: ScriptedModel) -> Counter[str]:
    """The spans of each kind that `research_with_an_approval`'s run and its sub-agent
    make, each step once: the model's calls and the worker's activities, the failed
    attempt too, and a span for each run of each chain (`histories`)."""
    return Counter(
        invoke_agent=1,
        chat=len(model.requests),
        execute_tool=1,
        guardrail=checks(histories),
        wait=1,
        RunWorkflow=len(histories),
        StartActivity=activity_tasks(histories),
        RunActivity=activity_tasks(histories) + 1,  # the failed model call, retried
    )


async def whole_trace(
    phoenix: Phoenix, project: str, run: RunHandle, expected: Counter[str]
) -> list[Span]:
    """The project's spans once none of `run`'s `expected` is missing. Call it once the
    workers stopped (a worker sends the spans it holds as it stops): Phoenix stores what
    it receives a little later, a span's parents after the span (they end after it)."""
    return await settled(phoenix, project, lambda s: kinds(of_run(s, run)) >= expected)


@needs_chromium
async def test_a_runs_trace_in_phoenix_holds_its_calls_its_wait_its_sub_agent_and_hand_overs(
    temporal: Client, tmp_path: Path, phoenix: Phoenix
) -> None:
    project = new_project()
    async with ScriptedModel() as model:
        rig = await traced_rig(temporal, model, tmp_path, phoenix.worker_env(project))

        async def nothing() -> None:
            return None

        try:
            run, child = await research_with_an_approval(rig, model, nothing)
        finally:
            await rig.close()
        histories = await chain_histories(temporal, [run.id, child.id])
        spans = await whole_trace(phoenix, project, run, spans_once_each(histories, model))

    [root] = named(spans, "invoke_agent")
    assert root["parent_id"] is None
    assert root["attributes"]["tarry.run_id"] == run.id
    ran = of_run(spans, run)
    assert {s["context"]["trace_id"] for s in ran} == {root["context"]["trace_id"]}
    assert [s for s in spans if s not in ran] == []  # the client's catalogue check: no trace

    chats = named(spans, "chat ")
    assert all(s["attributes"]["gen_ai.operation.name"] == "chat" for s in chats)
    assert all(s["attributes"]["gen_ai.provider.name"] == "openai" for s in chats)
    assert all(ancestors(s, spans)[-1] == root["name"] for s in chats)
    assert all(ancestors(s, spans)[0] == "RunActivity:call_llm" for s in chats)
    ok = [s for s in chats if s["status_code"] != "ERROR"]
    assert [s["attributes"]["gen_ai.usage.output_tokens"] for s in ok] == [5, 5, 5, 5]
    assert all(s["attributes"]["gen_ai.usage.input_tokens"] > 0 for s in ok)
    lead = [s for s in chats if s["attributes"]["tarry.run_id"] == run.id]
    first_turn = [s for s in lead if s["attributes"]["tarry.turn"] == 1]
    assert sorted(s["attributes"]["tarry.attempt"] for s in first_turn) == [1, 2]
    [failed] = [s for s in chats if s["status_code"] == "ERROR"]
    assert failed["attributes"]["error.type"] == "LLM_HTTP_ERROR"
    finish = {tuple(s["attributes"]["gen_ai.response.finish_reasons"]) for s in ok}
    assert finish == {("tool_calls",), ("stop",)}

    [tool] = named(spans, "execute_tool")
    assert tool["attributes"]["gen_ai.tool.name"] == "write_file"
    assert tool["attributes"]["gen_ai.tool.call.id"] == "w1"
    assert tool["attributes"]["tarry.approval.outcome"] == "approved"
    assert tool["attributes"]["tarry.approval.decided_by"] == LOCAL_USER

    guardrails = named(spans, "guardrail ")
    assert len(guardrails) == 2  # the lead's prompt, and the task its sub-agent was given
    assert {s["name"] for s in guardrails} == {"guardrail input"}
    assert all(ancestors(s, spans)[0] == "RunActivity:check_guardrails" for s in guardrails)
    assert [
        (a["tarry.guardrail.names"], a["tarry.guardrail.verdict"], a["tarry.guardrail.hits"])
        for a in (s["attributes"] for s in guardrails)
    ] == [(["no-pii"], "allow", [])] * 2

    [wait] = named(spans, "wait ")
    assert wait["name"] == "wait approval"
    assert wait["parent_id"] == root["context"]["span_id"]
    assert wait["attributes"]["tarry.answered_by"] == LOCAL_USER
    assert wait["attributes"]["tarry.wait_seconds"] >= 0
    assert wait["start_time"] < wait["end_time"]

    [child_chat] = [s for s in chats if s["attributes"]["tarry.run_id"] == child.id]
    assert "StartChildWorkflow:AgentRun" in ancestors(child_chat, spans)
    runs = {s["attributes"]["temporalRunID"] for s in named(spans, "RunWorkflow:")}
    assert len(runs) >= 4  # the lead handed over after each of its turns, and the child

    # The same trace as a person sees it in Phoenix (the observability guide's picture).
    page = await asyncio.to_thread(
        shoot_trace,
        phoenix,
        await phoenix.project_id(project),
        root["context"]["trace_id"],
        "wait approval",
        tmp_path / "phoenix-trace.png",
    )
    assert all(name in page for name in ("invoke_agent", "chat test-model", "execute_tool"))


def at(span: Span, end: str) -> datetime:
    """The span's `start_time` or `end_time`, as Phoenix gives it."""
    return datetime.fromisoformat(span[end])


async def test_a_runs_root_span_lasts_from_its_start_to_its_end_across_hand_overs(
    temporal: Client, tmp_path: Path, phoenix: Phoenix
) -> None:
    project = new_project()
    steps = [call("list_files", {}, delay=0.5), say("Done.", delay=0.5)]
    async with ScriptedModel(steps) as model:
        rig = await traced_rig(temporal, model, tmp_path, phoenix.worker_env(project))
        try:
            await rig.worker()
            run = await rig.start("Look, slowly.", mode=Mode.TASK, continue_as_new_after_turns=1)
            await finished(run)
        finally:
            await rig.close()
        spans = await settled(
            phoenix, project, lambda s: kinds(of_run(s, run)) >= Counter(invoke_agent=1, chat=2)
        )

    [root] = named(spans, "invoke_agent")
    chats = named(spans, "chat ")
    assert len({s["attributes"]["temporalRunID"] for s in named(spans, "RunWorkflow:")}) >= 2
    assert at(root, "start_time") <= min(at(s, "start_time") for s in chats)
    assert max(at(s, "end_time") for s in chats) <= at(root, "end_time")
    assert (at(root, "end_time") - at(root, "start_time")).total_seconds() >= 1.0


async def test_a_killed_worker_and_every_history_replayed_add_no_span(
    temporal: Client, tmp_path: Path, phoenix: Phoenix, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = new_project()
    async with ScriptedModel() as model:
        rig = await traced_rig(temporal, model, tmp_path, phoenix.worker_env(project))

        async def kill_the_worker() -> None:
            # Once the spans so far are stored: a killed process sends nothing more.
            await settled(phoenix, project, lambda s: len(named(s, "chat ")) == 2)
            await rig.workers[0].kill()
            await rig.worker()

        try:
            run, child = await research_with_an_approval(rig, model, kill_the_worker)
        finally:
            await rig.close()
        histories = await chain_histories(temporal, [run.id, child.id])
        once_each = spans_once_each(histories, model)
        spans = await whole_trace(phoenix, project, run, once_each)

        for name, value in phoenix.worker_env(project).items():
            monkeypatch.setenv(name, value)
        tracing = tracing_interceptor(TarrySettings())
        replayer = Replayer(
            workflows=[AgentRunWorkflow],
            data_converter=pydantic_data_converter,
            interceptors=[tracing],
        )
        try:
            for history in histories:
                await replay(replayer, history)
            # Sent last, in the replays' batch: once it is stored, so is whatever they emitted.
            tracing.tracer.start_span("replayed").end()
        finally:
            tracing.shutdown()

    after = await settled(phoenix, project, lambda s: bool(named(s, "replayed")))
    assert sorted(s["context"]["span_id"] for s in after if s["name"] != "replayed") == sorted(
        s["context"]["span_id"] for s in spans
    )
    found = kinds(of_run(spans, run))
    assert {kind: found[kind] for kind in once_each} == once_each  # none twice
    ours = named(spans, "chat ") + named(spans, "execute_tool") + named(spans, "wait ")
    keys = [
        (s["name"], *(s["attributes"].get(f"tarry.{k}") for k in ("run_id", "turn", "attempt")))
        for s in ours
    ]
    assert len(keys) == len(set(keys))


SECRET_PROMPT = f"Log in with {API_KEY} and write it down."


@pytest.mark.parametrize("content", [False, True], ids=["content-off", "content-on"])
async def test_prompts_and_answers_are_in_spans_only_when_asked_for_and_never_the_key(
    temporal: Client, tmp_path: Path, phoenix: Phoenix, content: bool
) -> None:
    project = new_project()
    env = phoenix.worker_env(project, TARRY_TRACE_CONTENT="1" if content else "0")
    async with ScriptedModel() as model:
        rig = await traced_rig(temporal, model, tmp_path, env)
        model.add(
            call("write_file", {"path": "login.md", "content": "logged in"}, id="w1"),
            say("Written down."),
        )
        try:
            await rig.worker()
            run = await rig.start(SECRET_PROMPT, mode=Mode.TASK)
            assert (await finished(run)).output == "Written down."
            spans = await settled(
                phoenix,
                project,
                lambda s: len(named(s, "chat ")) == 2 and bool(named(s, "execute_tool")),
            )
        finally:
            await rig.close()

    everything = json.dumps([s["attributes"] for s in spans])
    assert API_KEY not in everything
    first, second = named(spans, "chat ")
    [tool] = named(spans, "execute_tool")
    if not content:
        assert "Log in with" not in everything
        assert "Written down." not in everything
        assert "logged in" not in everything
        return
    sent = json.loads(first["attributes"]["gen_ai.input.messages"])
    assert sent[-1] == {"role": "user", "content": "Log in with *** and write it down."}
    said = json.loads(second["attributes"]["gen_ai.output.messages"])
    assert said[0]["content"] == "Written down."
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"])["content"] == "logged in"


CANARY = "canary-4c1f9b"
"""Stands for what a provider's error body or a model's broken answer may hold: a
prompt's words echoed back, an account's name, a key."""


async def test_without_content_a_failed_model_calls_spans_hold_its_type_and_status_not_its_words(
    temporal: Client, tmp_path: Path, phoenix: Phoenix
) -> None:
    project = new_project()
    env = phoenix.worker_env(project, TARRY_TRACE_CONTENT="0")
    async with ScriptedModel() as model:
        rig = await traced_rig(temporal, model, tmp_path, env)
        model.add(
            fail(500, content=f"upstream echoed {CANARY}"),
            ScriptStep(body=f'{{"choices": "{CANARY}"}}'),
            say("Done."),
        )
        try:
            await rig.worker()
            run = await rig.start("Say done.", mode=Mode.TASK)
            assert (await finished(run)).output == "Done."
        finally:
            await rig.close()
        spans = await settled(
            phoenix, project, lambda s: len(named(s, "RunActivity:call_llm")) == 3
        )

    assert CANARY not in json.dumps(spans)
    failed = [s for s in named(spans, "chat ") if s["status_code"] == "ERROR"]
    assert [
        (s["attributes"]["error.type"], s["attributes"].get("http.response.status_code"))
        for s in failed
    ] == [("LLM_HTTP_ERROR", 500), ("LLM_BAD_RESPONSE", None)]


@asynccontextmanager
async def api_process(rig: CrashRig, log: Path) -> AsyncIterator[httpx.AsyncClient]:
    """`tarry serve` as a process of its own over the rig's runs, everything it prints
    going to `log`; a client of it."""
    address = rig.client.service_client.config.target_host
    with log.open("wb") as err:
        serve = await asyncio.create_subprocess_exec(
            str(TARRY), "serve", "--port", "0", env=cli_env(address, rig.task_queue),
            stdout=asyncio.subprocess.PIPE, stderr=err,
        )  # fmt: skip
        assert serve.stdout is not None
        first = await asyncio.wait_for(serve.stdout.readline(), timeout=deadline(30))
        try:
            url = first.decode().split()[3]  # "HTTP API on URL (docs ...)"
            async with httpx.AsyncClient(base_url=url, timeout=deadline(60)) as http:
                yield http
        finally:
            serve.send_signal(signal.SIGINT)
            rest, _ = await asyncio.wait_for(serve.communicate(), timeout=deadline(30))
            err.write(first + rest)


async def test_a_reply_s_email_and_card_under_a_pii_guardrail_are_in_no_span_and_no_log(
    temporal: Client, tmp_path: Path, phoenix: Phoenix
) -> None:
    project = new_project()
    # Prompts and answers traced too: what the model was sent is in its `chat` spans.
    env = phoenix.worker_env(project, TARRY_TRACE_CONTENT="1")
    async with ScriptedModel() as model:
        rig = await traced_rig(temporal, model, tmp_path, env)
        model.add(say("Noted."), say("Sent."))
        try:
            await rig.worker()
            run = await rig.start("Hello", guardrails=[PII])
            await run.wait_for({Phase.WAITING_USER}, timeout=deadline(60))
            async with api_process(rig, tmp_path / "logs" / "api.log") as api:
                reply = f"Mail the receipt to {EMAIL}, card {CARD}"
                sent = await api.post(f"/v1/runs/{run.id}/messages?wait=true", json={"text": reply})
            assert sent.status_code == 200, sent.text
            spans = await settled(
                phoenix,
                project,
                lambda s: len(named(s, "chat ")) == 2 and len(named(s, "guardrail ")) == 2,
            )
        finally:
            await rig.close()

    logs = {path.name: path.read_text() for path in (tmp_path / "logs").iterdir()}
    assert set(logs) == {"worker-1.log", "api.log"}
    exported = json.dumps(spans)
    for original in (EMAIL, CARD):
        assert original not in exported
        assert [name for name, text in logs.items() if original in text] == []
    assert "Mail the receipt to <EMAIL_1>, card <CARD_1>" in exported  # as the model was sent it
    checked = [s["attributes"] for s in named(spans, "guardrail ")]
    assert sorted(a["tarry.guardrail.verdict"] for a in checked) == ["allow", "redact"]
