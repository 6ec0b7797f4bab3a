"""Remote A2A agents as sub-agents: an `[agents.NAME]` naming an `a2a` card runs each
call as a task of that remote agent, durably. The remote here is the a2a-sdk's own
server (its request handler, task store and push sender) with an executor of the test's,
over real HTTP; the workers are processes a test can kill."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import SecretStr
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from starlette.applications import Starlette
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment

from activities.a2a_remote import RemoteAgents
from tarry.api.app import create_app
from tarry.api.server import ApiServer
from tarry.client import RunHandle
from tarry.contracts import Budget, Mode, Phase, RunResult, RunState, Timeouts, WaitingFor
from tarry.contracts.a2a import (
    A2A_PUSH_SIGNAL,
    A2A_SEND_ACTIVITY,
    RemoteMessage,
    RemoteState,
    RemoteTask,
)
from tarry.core.a2a_push import PUSH_TOKEN_HEADER, push_path
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.browser import chromium, needs_chromium
from tests.cli import cli_env, invoke
from tests.conftest import tool_result
from tests.deadline import TIMEOUT
from tests.faults import CRASH_TIMEOUTS, CrashRig, finished
from tests.http_api import Access, api_client
from tests.oauth_parts import OtlpReceiver
from tests.oauth_parts import otlp as otlp  # the fixture
from tests.test_inbox import first, until
from workflows.memory_groups import REMOTE_CALLS_KEPT, Delegations, RemoteCall

ACTION_KEY = "a2a-remote-test-action-key-0123456789abcdef"
QUESTION = "Which quarter?"
NO_POLL = CRASH_TIMEOUTS.model_copy(update={"remote_poll": timedelta(hours=1)})
"""A poll that never comes within a test: what ends each wait is the remote's push."""


@dataclass
class AskingOnce(AgentExecutor):
    """A remote agent whose task works until the test releases it, asks `QUESTION` once,
    and completes with a report for the answer."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    messages: list[str] = field(default_factory=list)
    """The ids of the messages it received, in order."""
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    tokens: int | None = None
    """The tokens it reports it spent, in its completed task's `usage` metadata."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id is not None
        assert context.context_id is not None
        self.messages.append(context.message.message_id)
        task = TaskUpdater(event_queue, context.task_id, context.context_id)
        if context.current_task is None:
            status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            first = Task(id=context.task_id, context_id=context.context_id, status=status)
            first.history.append(context.message)
            await event_queue.enqueue_event(first)
            await task.start_work()
            self.started.set()
            await self.release.wait()
            await task.requires_input(task.new_agent_message([Part(text=QUESTION)]))
            return
        await task.add_artifact([Part(text=f"The report for {context.get_user_input()}.")])
        usage = {"usage": {"total_tokens": self.tokens}} if self.tokens else None
        await task.update_status(TaskState.TASK_STATE_COMPLETED, metadata=usage)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        self.cancelled.set()
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@asynccontextmanager
async def remote_agent(executor: AgentExecutor) -> AsyncIterator[str]:
    """The a2a-sdk's server of `executor` on a free loopback port: its card's URL."""
    app = Starlette()
    async with ApiServer(app, "127.0.0.1", 0) as server, httpx.AsyncClient() as http:
        card = AgentCard(
            name="researcher",
            description="Writes reports.",
            version="1",
            supported_interfaces=[
                AgentInterface(
                    url=f"{server.url}/", protocol_binding="JSONRPC", protocol_version="1.0"
                )
            ],
            capabilities=AgentCapabilities(push_notifications=True),
            default_input_modes=["text"],
            default_output_modes=["text"],
            skills=[
                AgentSkill(
                    id="report", name="report", description="Writes a report.", tags=["reports"]
                )
            ],
        )
        pushes = InMemoryPushNotificationConfigStore()
        handler = DefaultRequestHandler(
            executor,
            InMemoryTaskStore(),
            card,
            push_config_store=pushes,
            push_sender=BasePushNotificationSender(http, pushes),
        )
        app.router.routes.extend(
            [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        )
        yield f"{server.url}/.well-known/agent-card.json"


@dataclass
class Stack:
    """A Tarry stack whose lead delegates to the remote: its API, and its workers."""

    rig: CrashRig
    api: httpx.AsyncClient
    url: str
    """The API's, and its inbox's."""
    remote: AskingOnce
    model: ScriptedModel

    async def start(self, timeouts: Timeouts = NO_POLL, **input: Any) -> RunHandle:
        self.model.add_conversation(
            "Get me the report.",
            call("agent__researcher", {"task": "Write the report."}, id="a1"),
            say("Here is the report."),
        )
        return await self.rig.start(
            "Get me the report.", agents=["researcher"], mode=Mode.TASK, timeouts=timeouts, **input
        )

    async def asking(
        self, timeouts: Timeouts = NO_POLL, **input: Any
    ) -> tuple[RunHandle, RunState]:
        """The lead, started, once the remote was let work and asks: the lead, and its
        state while the question waits for a person."""
        lead = await self.start(timeouts, **input)
        self.remote.release.set()
        return lead, await asked(lead)

    async def answered(self, timeouts: Timeouts = NO_POLL) -> Exchange:
        """The whole exchange: the lead starts, the remote is let work and asks, the
        person answers "Q3" on the API, and the lead finishes."""
        lead, asking = await self.asking(timeouts)
        await self.api.post(f"/v1/runs/{lead.id}/messages", json={"text": "Q3"})
        result = await finished(lead)
        history = await self.rig.client.get_workflow_handle(lead.id).fetch_history()
        return Exchange(lead, asking, result, history)


@dataclass
class Exchange:
    """A lead's exchange with the remote, once it finished (`Stack.answered`)."""

    lead: RunHandle
    asking: RunState
    """The lead's state while the remote's question waited for the person."""
    result: RunResult
    history: WorkflowHistory


@asynccontextmanager
async def stack(
    temporal: Client, tmp_path: Path, *, pushes: bool = True, answers: str = "person"
) -> AsyncIterator[Stack]:
    """The remote agent, Tarry's API (with the action key the pushes' tokens come from;
    without `pushes`, none: the calls poll) and a rig of workers whose config names the
    remote as `researcher`, its questions answered by `answers` (`a2a_answers`)."""
    remote = AskingOnce()
    async with remote_agent(remote) as card, ScriptedModel() as model:
        rig = CrashRig(temporal, model.base_url, tmp_path / "workspaces", tmp_path / "logs")
        settings = Access.of().settings.model_copy(
            update={"tarry_action_key": SecretStr(ACTION_KEY)}
        )
        async with (
            ApiServer(create_app(rig.tarry, settings), "127.0.0.1", 0) as server,
            api_client(server.url) as api,
        ):
            config = tmp_path / "tarry.toml"
            config.write_text(
                f'[agents.researcher]\ndescription = "Reports."\na2a = "{card}"\n'
                f'a2a_answers = "{answers}"\n'
            )
            rig.env.update(TARRY_CONFIG=str(config), TARRY_PUBLIC_URL=server.url)
            if pushes:
                rig.env["TARRY_ACTION_KEY"] = ACTION_KEY
            try:
                yield Stack(rig, api, server.url, remote, model)
            finally:
                await rig.close()


async def asked(run: RunHandle) -> RunState:
    """The lead's state once it waits for the remote's question to be answered."""
    async with asyncio.timeout(TIMEOUT):
        while (state := await run.state()).waiting_for is not WaitingFor.REMOTE:
            await asyncio.sleep(0.2)
    return state


def scheduled(history: WorkflowHistory, activity: str) -> list[Any]:
    """The inputs of `activity`'s scheduled tasks in the run's history, in order."""
    return [
        e.activity_task_scheduled_event_attributes.input
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]


def pushes(history: WorkflowHistory) -> list[Any]:
    """The payloads of the `a2a_push` signals the API sent the run."""
    return [
        e.workflow_execution_signaled_event_attributes.input
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == A2A_PUSH_SIGNAL
    ]


def timers_fired(history: WorkflowHistory) -> int:
    return sum(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED for e in history.events)


async def test_a_lead_survives_a_worker_killed_while_its_remote_agent_works(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        first = await s.rig.worker()
        lead = await s.start()
        async with asyncio.timeout(TIMEOUT):
            await s.remote.started.wait()
        await first.kill()
        s.remote.release.set()  # it asks while no worker runs: the push waits in history
        await s.rig.worker()
        state = await asked(lead)
        view = (await s.api.get(f"/v1/runs/{lead.id}")).json()
        answer = await s.api.post(f"/v1/runs/{lead.id}/messages", json={"text": "Q3"})
        result = await finished(lead)
        transcript = await lead.transcript()
        history = await temporal.get_workflow_handle(lead.id).fetch_history()

    assert state.question == QUESTION
    assert state.waiting_on == f"{lead.id}:researcher-1"
    assert (view["waiting_for"], view["question"]) == ("remote", QUESTION)
    assert view["children"] == []  # a remote call is no run to link to
    assert answer.status_code == 202, answer.text  # taken; the lead goes on with it
    assert result.phase is Phase.COMPLETED
    assert result.output == "Here is the report."
    [delegated] = [m for m in transcript if m.tool_call_id == "a1"]
    assert tool_result(delegated)["data"] == "The report for Q3."
    assert s.remote.messages == [f"{lead.id}:researcher-1#1", f"{lead.id}:researcher-1#2"]
    assert len(scheduled(history, A2A_SEND_ACTIVITY)) == 2  # the kill sent nothing twice


async def test_history_shows_one_send_per_message_to_the_remote(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        done = await s.answered()

    converter = temporal.data_converter
    sent = [
        (await converter.decode(payloads.payloads, [RemoteMessage]))[0]
        for payloads in scheduled(done.history, A2A_SEND_ACTIVITY)
    ]
    assert [(m.message_id, m.text) for m in sent] == [
        (f"{done.lead.id}:researcher-1#1", "Write the report."),
        (f"{done.lead.id}:researcher-1#2", "Q3"),
    ]


async def test_the_remote_s_signed_pushes_end_its_waits_without_polling(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        done = await s.answered()

    assert done.result.phase is Phase.COMPLETED
    assert timers_fired(done.history) == 0  # no poll came due: the pushes ended each wait
    assert pushes(done.history)


async def test_without_pushes_the_lead_polls_the_remote_task_on_a_slow_timer(
    temporal: Client, tmp_path: Path
) -> None:
    polling = CRASH_TIMEOUTS.model_copy(update={"remote_poll": timedelta(seconds=1)})
    async with stack(temporal, tmp_path, pushes=False) as s:
        await s.rig.worker()
        done = await s.answered(polling)

    assert done.result.output == "Here is the report."
    assert pushes(done.history) == []
    assert timers_fired(done.history) >= 1  # a poll came due and found the question


async def test_a_forged_push_is_refused_and_the_run_not_told(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        lead = await s.start()
        async with asyncio.timeout(TIMEOUT):
            await s.remote.started.wait()
        forged = {"statusUpdate": {"taskId": "forged", "status": {"state": "TASK_STATE_COMPLETED"}}}
        path = push_path(lead.id, f"{lead.id}:researcher-1")
        refused = await s.api.post(path, json=forged, headers={PUSH_TOKEN_HEADER: "0" * 64})
        unsigned = await s.api.post(path, json=forged)
        state = await lead.state()
        history = await temporal.get_workflow_handle(lead.id).fetch_history()
        s.remote.release.set()
        await asked(lead)
        await lead.stop()
        await finished(lead)

    converter = temporal.data_converter

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "A2A_PUSH_REFUSED"
    assert unsigned.status_code == 403
    assert state.phase is Phase.RUNNING
    told = [(await converter.decode(p.payloads, [RemoteTask]))[0] for p in pushes(history)]
    assert "forged" not in [news.task_id for news in told]


async def test_the_lead_s_run_view_lists_its_remote_call_with_its_task_and_state(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        lead, _ = await s.asking()
        asking = (await s.api.get(f"/v1/runs/{lead.id}")).json()
        await s.api.post(f"/v1/runs/{lead.id}/messages", json={"text": "Q3"})
        await finished(lead)
        ended = (await s.api.get(f"/v1/runs/{lead.id}")).json()

    [call] = asking["remote_calls"]
    assert (call["call"], call["agent"]) == (f"{lead.id}:researcher-1", "researcher")
    assert call["task_id"]  # the remote's own id for the task
    assert call["state"] == "input_required"
    assert ended["remote_calls"] == [call | {"state": "completed"}]  # listed once it ended
    assert ended["children"] == []  # a remote call is no run of this deployment


async def test_status_shows_the_lead_s_remote_call_among_its_sub_agents(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        lead, state = await s.asking()
        env = cli_env(temporal.service_client.config.target_host, s.rig.task_queue)
        status = await asyncio.to_thread(invoke, env, ("status", lead.id), "")
        await lead.stop()
        await finished(lead)

    [call] = state.remote_calls
    assert status.code == 0, status
    rows = dict(line.split("  ", 1) for line in status.out.splitlines() if "  " in line)
    assert rows["remote agents"].strip() == (
        f"researcher {lead.id}:researcher-1 task {call.task_id} input_required"
    )


async def test_the_remote_s_reported_tokens_count_in_the_lead_s_budget_which_holds_at_its_cap(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        s.remote.tokens = 5000
        await s.rig.worker()
        lead, _ = await s.asking(budget=Budget(max_total_tokens=1000))
        await s.api.post(f"/v1/runs/{lead.id}/messages", json={"text": "Q3"})
        async with asyncio.timeout(TIMEOUT):
            while (state := await lead.state()).waiting_for is not WaitingFor.BUDGET:
                await asyncio.sleep(0.2)
        asked_model = len(s.model.requests)
        await lead.stop()
        await finished(lead)

    assert state.usage.total_tokens > 5000  # the lead's model call and the remote's tokens
    assert state.warning == "BUDGET_EXCEEDED"
    assert asked_model == 1  # over its cap after the call: the model is not asked again


async def test_the_lead_s_timeline_shows_each_request_to_the_remote_with_its_task(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        done = await s.answered()
        timeline = (await s.api.get(f"/v1/runs/{done.lead.id}/timeline")).json()

    [call] = done.asking.remote_calls
    remote = [span for span in timeline["spans"] if span["kind"] == "agent"]
    assert {span["task_id"] for span in remote} == {call.task_id}
    assert {"researcher: Write the report.", "researcher: Q3"} <= {s["name"] for s in remote}
    assert {span["status"] for span in remote} == {"ok"}


async def test_the_lead_s_audit_trail_names_the_remote_call_the_person_answered(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        done = await s.answered()
        trail = (await s.api.get("/v1/audit", params={"run": done.lead.id})).json()

    replies = [r for r in trail["records"] if r["act"] == "reply"]
    assert [r["what"] for r in replies] == [
        "reply 2 (2 characters): the answer to remote agent researcher's question"
        f" ({done.lead.id}:researcher-1)"
    ]


async def test_the_trace_has_a_span_per_request_to_the_remote_with_its_task_id(
    temporal: Client, tmp_path: Path, otlp: OtlpReceiver
) -> None:
    async with stack(temporal, tmp_path) as s:
        s.rig.env.update(TARRY_TRACING="1", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=otlp.url)
        await s.rig.worker()
        done = await s.answered()
    # The workers stopped with the stack: they sent the spans they held as they stopped.

    [call] = done.asking.remote_calls
    remote = [span for span in exported_spans(otlp) if "tarry.a2a.operation" in span]
    sent = {
        span.get("tarry.a2a.message_id") for span in remote if span["tarry.a2a.operation"] == "send"
    }
    assert sent == {f"{done.lead.id}:researcher-1#1", f"{done.lead.id}:researcher-1#2"}
    assert {span["tarry.a2a.task_id"] for span in remote} == {call.task_id}  # the first's too
    assert {span["gen_ai.agent.name"] for span in remote} == {"researcher"}


def exported_spans(otlp: OtlpReceiver) -> list[dict[str, Any]]:
    """The attributes of each span the workers exported to `otlp`."""
    spans = []
    for body in otlp.bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                spans += [
                    {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                    for span in scope.spans
                ]
    return spans


async def test_the_lead_s_model_answers_the_remote_s_question_when_the_agent_allows_it(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path, answers="model") as s:
        await s.rig.worker()
        s.model.add(
            call("agent__researcher", {"task": "Write the report."}, id="a1"),
            say("Q3"),  # asked aside: the remote's question is the call's interim result
            say("Here is the report."),
        )
        lead = await s.rig.start(
            "Get me the report.", agents=["researcher"], mode=Mode.TASK, timeouts=NO_POLL
        )
        s.remote.release.set()
        result = await finished(lead)  # no person replied
        transcript = await lead.transcript()

    aside = s.model.requests[1].body["messages"]
    assert aside[-1]["role"] == "tool"
    assert aside[-1]["tool_call_id"] == "a1"
    assert QUESTION in aside[-1]["content"]
    assert s.remote.messages == [f"{lead.id}:researcher-1#1", f"{lead.id}:researcher-1#2"]
    [delegated] = [m for m in transcript if m.tool_call_id == "a1"]
    assert tool_result(delegated)["data"] == "The report for Q3."  # the model's answer went
    assert result.output == "Here is the report."


async def test_stopping_the_lead_cancels_the_remote_task(temporal: Client, tmp_path: Path) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        lead, _ = await s.asking()
        await lead.stop()
        await finished(lead)
        async with asyncio.timeout(TIMEOUT):
            await s.remote.cancelled.wait()

    assert s.remote.cancelled.is_set()


async def test_a_send_retried_after_its_message_got_there_does_not_send_it_again() -> None:
    remote = AskingOnce()
    async with remote_agent(remote) as card:
        agents = RemoteAgents({}, "http://127.0.0.1:9", None)
        message = RemoteMessage(
            agent="researcher",
            card=card,
            message_id="lead:researcher-1#1",
            text="Write the report.",
            call="lead:researcher-1",
            run_id="lead",
        )
        first = ActivityEnvironment()
        sent = await first.run(agents.send, message)
        retried = ActivityEnvironment()
        retried.info = dataclasses.replace(retried.info, attempt=2)
        again = await retried.run(agents.send, message)
        remote.release.set()
        await agents.aclose()

    assert again.task_id == sent.task_id
    assert remote.messages == ["lead:researcher-1#1"]


@needs_chromium
async def test_the_lead_s_inbox_page_lists_the_remote_call_and_its_question_answers_it(
    temporal: Client, tmp_path: Path
) -> None:
    async with stack(temporal, tmp_path) as s:
        await s.rig.worker()
        lead, _ = await s.asking()
        with chromium() as browser:
            await asyncio.to_thread(browser.get, f"{s.url}/#/runs/{lead.id}")
            line = await until(lambda: first(browser, "#run-tree .waiting-on"), "the question")
            asks = line.text
            listed = browser.find_element(By.CSS_SELECTOR, "#run-tree .remote-call").text
            task_id = (await lead.state()).remote_calls[0].task_id
            box = browser.find_element(By.ID, "reply-text")
            await asyncio.to_thread(box.send_keys, "Q3", Keys.ENTER)
            result = await finished(lead)

    assert asks == (
        f"Its remote agent {lead.id}:researcher-1 asks: {QUESTION} Your reply is its answer."
    )
    assert listed == (
        f"Remote agent researcher: {lead.id}:researcher-1 (task {task_id}, input_required)"
    )
    assert result.output == "Here is the report."
    assert s.remote.messages[-1] == f"{lead.id}:researcher-1#2"


def test_a_lead_keeps_its_latest_ended_remote_calls_and_every_one_under_way() -> None:
    agents = Delegations()
    for n in range(REMOTE_CALLS_KEPT + 10):
        agents.remote[f"lead:researcher-{n}"] = RemoteCall(
            agent="researcher", state=RemoteState.COMPLETED
        )
    agents.remote["lead:researcher-under-way"] = RemoteCall(agent="researcher")

    agents.forget_ended()

    assert list(agents.remote) == [
        *(f"lead:researcher-{n}" for n in range(10, REMOTE_CALLS_KEPT + 10)),
        "lead:researcher-under-way",
    ]
