"""`/a2a`: Tarry as an A2A agent, on the `a2a-sdk`'s JSON-RPC server: plain runs at
`/a2a`, each agent definition of the config file (`[agents.NAME]`) at `/a2a/NAME`, each
with its agent card at `.../.well-known/agent-card.json` (`tarry.api.a2a_card`).

A task is a run and its context the run's conversation (`tarry.api.a2a_tasks`). The
SDK's request handler interface is served here over Tarry's client, as the HTTP API's
routes use it: the run is the task's one record (no task store of the SDK's, which would
hold in memory what the run holds durably), the caller is the API's signed-in person, and
each act is checked where it happens (`tarry.api.rights`), so that ownership, shares,
approvers, guardrails and the audit trail apply as at every door. A task the caller may
not read is the protocol's "task not found", as a run that does not exist."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import ServerCallContextBuilder, create_jsonrpc_routes
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    ExtendedAgentCardNotConfiguredError,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    InvalidParamsError,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskNotCancelableError,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from temporalio.client import WorkflowExecutionStatus

from tarry.api.a2a_card import agent_card
from tarry.api.a2a_configs import config_of, find_config, shown, stored
from tarry.api.a2a_tasks import (
    a2a_errors,
    artifacts_of,
    decision_of,
    ended_status,
    history_of,
    listed_status,
    open_status,
    reply_text,
    task_of,
)
from tarry.api.auth import signed_in
from tarry.api.keyed_starts import idempotent_run_id
from tarry.api.parts import AppParts, parts_of
from tarry.api.rights import Need
from tarry.api.runs import existing
from tarry.client import Tarry
from tarry.client.rights import check_decision, check_run
from tarry.client.run_list import find_runs
from tarry.contracts import WORKFLOW_TYPE, AgentSpec, Door, ErrorCode, RunInput
from tarry.contracts.checks import reserved_id_problem, run_id_problem
from tarry.contracts.events import EventKind
from tarry.core.errors import TarryError
from tarry.core.identities import Caller

__all__ = ["A2A_PATH", "RunsAsTasks", "a2a_routes"]

A2A_PATH = "/a2a"
"""Where plain runs are served; an agent definition NAME at `/a2a/NAME`."""

CANCEL_PATIENCE = 10.0
"""Seconds a cancel waits for the stopped run to end, to answer it as canceled; a run
still ending then is answered as it stands."""

_CALL = "tarry.call"
"""Where the call context keeps who asks, and of which agent (`A2aCall`)."""


class _Person(User):
    """The signed-in person, as the SDK's context names its user."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._caller.user


@dataclass(frozen=True)
class A2aCall:
    """One A2A request: the app's parts, the person who sends it, and the agent it is to
    (None: plain runs)."""

    parts: AppParts
    caller: Caller
    agent: str | None

    @property
    def tarry(self) -> Tarry:
        """The app's client acting as the caller: what it does, the runs record as theirs."""
        return self.parts.tarry.acting_as(self.caller)

    async def check(self, run_id: str, need: Need, *, absent: bool = False) -> bool:
        """`check_run` for this caller: whether they may also change the run."""
        return await check_run(
            self.parts.tarry,
            self.parts.policy,
            self.caller,
            run_id,
            need,
            absent=absent,
            workflow=WORKFLOW_TYPE,
        )

    @property
    def workspace_root(self) -> Path | None:
        """Where the runs' workspaces are, as the workers keep them on this machine."""
        return self.parts.settings.tarry_workspace_root

    def start_input(self) -> RunInput:
        """How a new task's run starts: the agent definition's settings (the message is
        its first reply), as a lead's `agent__NAME` call starts its child."""
        spec = agent_spec(self.parts, self.agent)
        if spec is None:
            return RunInput()
        return RunInput.model_validate(spec.model_dump(exclude={"description"}))


def agent_spec(parts: AppParts, name: str | None) -> AgentSpec | None:
    """The definition of agent `name` (None: plain runs, which have none); 404 for a
    name the config file does not define."""
    if name is None:
        return None
    spec = parts.settings.agents().get(name)
    if spec is None:
        raise HTTPException(
            404, f"no agent {name!r} here: the config file's [agents.NAME] are served at /a2a/NAME"
        )
    return spec


def call_of(context: ServerCallContext) -> A2aCall:
    call: A2aCall = context.state[_CALL]
    return call


class _CallContexts(ServerCallContextBuilder):
    """Puts the request's `A2aCall` on the SDK's call context: the person `signed_in`
    let through, at the A2A door, and the agent the path names; and its headers, as the
    SDK's own builder does."""

    def build(self, request: Request) -> ServerCallContext:
        caller = replace(request.state.caller, door=Door.A2A)
        call = A2aCall(parts_of(request), caller, request.path_params.get("agent"))
        # The SDK reads the protocol's version from them; the credentials stay out.
        headers = {k: v for k, v in request.headers.items() if k != "authorization"}
        return ServerCallContext(user=_Person(caller), state={_CALL: call, "headers": headers})


async def task(
    call: A2aCall, run_id: str, history_length: int | None = None, *, words: bool = True
) -> Task:
    """Run `run_id` as a task: an open one from its state, an ended one from its result
    (its output and files the artifacts); with the conversation's `history_length` last
    messages (None: all of them; `words` False: none)."""
    run = call.tarry.get(run_id)
    description = await run.describe()
    if description.status is WorkflowExecutionStatus.RUNNING:
        status, artifacts = open_status(run_id, await run.state()), []
    else:
        result = await run.result()
        status = ended_status(run_id, result)
        artifacts = artifacts_of(run_id, result, call.workspace_root)
    history = history_of(run_id, await run.transcript()) if words and history_length != 0 else []
    return task_of(
        run_id, status, artifacts, history[-history_length:] if history_length else history
    )


def _history_length(request: GetTaskRequest | SendMessageRequest) -> int | None:
    holder = request if isinstance(request, GetTaskRequest) else request.configuration
    return holder.history_length if holder.HasField("history_length") else None


class RunsAsTasks(RequestHandler):
    """The SDK's request handler over Tarry's runs. Holds nothing: each call takes what it
    works with from its context (`A2aCall`)."""

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.id, Need.READ)
            return await task(call, params.id, _history_length(params))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The runs the caller may read, newest first, a page at a time (a context is one
        run: with `context_id`, that one). Filters by status or time are refused, not
        ignored: a list that ignored them would answer another question."""
        call = call_of(context)
        if params.HasField("status_timestamp_after") or params.status:
            raise InvalidParamsError(
                message="ListTasks filters by context_id only: leave out status and"
                " status_timestamp_after, and filter the page"
            )
        async with a2a_errors():
            if params.context_id:
                run_id = context_run_id(call.caller, params.context_id)
                await call.check(run_id, Need.READ)
                found = await task(call, run_id, words=False)
                return ListTasksResponse(tasks=[found], page_size=1, total_size=1)
            page = await find_runs(
                call.parts.tarry.client,
                limit=min(params.page_size or 50, 100),
                page_token=_page_token(params.page_token),
                readable=call.parts.policy.readable_clause(call.caller),
            )
        tasks = [
            task_of(row.run_id, listed_status(row.phase, row.waiting_for)) for row in page.rows
        ]
        token = page.next_page_token
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=base64.urlsafe_b64encode(token).decode() if token else "",
            page_size=len(tasks),
            total_size=len(tasks),
        )

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        """Stops the run (a waiting run completes, a working one is aborted), canceled."""
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.id, Need.WRITE)
            run = call.tarry.get(params.id)
            if (await run.describe()).status is not WorkflowExecutionStatus.RUNNING:
                raise TaskNotCancelableError(message=f"task {params.id!r} has ended")
            await run.stop("canceled over A2A")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CANCEL_PATIENCE):
                    await run.result()
            return await task(call, params.id, words=False)

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Delivers the message and answers the task at the run's next stop point (at
        once with `return_immediately`)."""
        call = call_of(context)
        async with a2a_errors():
            wait = not params.configuration.return_immediately
            run_id = await _deliver(call, params.message, wait=wait)
            return await task(call, run_id, _history_length(params))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """Delivers the message, then streams the task until the run's next stop point:
        the task first (working), then its output and last status."""
        call = call_of(context)
        async with a2a_errors():
            offset = await _offset_before(call, params.message)
            run_id = await _deliver(call, params.message, wait=False)
            yield task_of(run_id, TaskStatus(state=TaskState.TASK_STATE_WORKING))
            async for event in _until_stop(call, run_id, offset):
                yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it stands, then, unless it has ended, until its next stop point:
        followed from the state it was read at, so that no stop point falls between."""
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.id, Need.READ)
            run = call.tarry.get(params.id)
            running = (await run.describe()).status is WorkflowExecutionStatus.RUNNING
            state = await run.state() if running else None
            if state is None or state.phase.ended:
                yield await task(call, params.id, words=False)
                return
            yield task_of(params.id, open_status(params.id, state))
            async for event in _until_stop(call, params.id, state.events):
                yield event

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Has the task's run push its news to `params.url` (`tarry.api.a2a_configs`)."""
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.task_id, Need.READ)
            settings = call.parts.settings
            config = stored(
                params,
                call.caller.user,
                settings.action_key(),
                private=settings.tarry_a2a_push_private,
            )
            await call.tarry.get(params.task_id).set_push_config(config)
        return shown(params.task_id, config)

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.task_id, Need.READ)
            run = call.tarry.get(params.task_id)
            return shown(params.task_id, await find_config(run, call.caller.user, params.id))

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.task_id, Need.READ)
            configs = await config_of(call.tarry.get(params.task_id), call.caller.user)
        return ListTaskPushNotificationConfigsResponse(
            configs=[shown(params.task_id, c) for c in configs]
        )

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        call = call_of(context)
        async with a2a_errors():
            await call.check(params.task_id, Need.READ)
            await call.tarry.get(params.task_id).delete_push_config(call.caller.user, params.id)

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


async def _deliver(call: A2aCall, message: Message, *, wait: bool) -> str:
    """Delivers `message` to its task's run: a decision on the calls it waits on (a data
    part `{"decision": ...}`), else a reply; a message naming no task starts one (its run
    under the context's id, else one its message id gives, so a retry starts none
    again). Its message id is the reply's, so a retried message enters the run once.
    The run's id, once it has taken the message (at its next stop point, if `wait`)."""
    decision = decision_of(message)
    if decision is not None:
        if not message.task_id:
            raise InvalidParamsError(message="a decision names the task (task_id) it decides in")
        writes = await call.check(message.task_id, Need.DECIDE)
        tarry = call.parts.tarry
        await check_decision(tarry, call.caller, message.task_id, decision.call_id, writes=writes)
        await call.tarry.get(message.task_id).decide(
            decision.call_id,
            approved=decision.approved,
            reason=decision.reason,
            arguments=decision.arguments,
        )
        return message.task_id
    start: RunInput | None = None
    if message.task_id:
        run_id = message.task_id
        await call.check(run_id, Need.WRITE)
    else:
        run_id = (
            context_run_id(call.caller, message.context_id)
            if message.context_id
            else idempotent_run_id(call.caller, f"a2a {message.message_id}")
        )
        call.parts.quotas.admit_start(call.caller.user)
        start = call.start_input()

    async def admit() -> None:
        await call.check(run_id, Need.WRITE)

    deliver = call.tarry.send if wait else call.tarry.reply
    await deliver(run_id, reply_text(message), id=message.message_id, start=start, admit=admit)
    return run_id


def context_run_id(caller: Caller, context_id: str) -> str:
    """The run a context names: the context's id itself when a person may start a run
    under it, else one made from the sender and it, the same for every message to that
    context. Another agent's context id can be an id no person may take: a Tarry lead's
    call is `LEAD:NAME-N`, a sub-agent's id, which only that lead starts a run under."""
    if run_id_problem(context_id) is None and reserved_id_problem(context_id) is None:
        return context_id
    return idempotent_run_id(caller, f"a2a context {context_id}")


async def _offset_before(call: A2aCall, message: Message) -> int:
    """Where the run's events stand before `message` reaches it: its answer follows."""
    context = message.context_id and context_run_id(call.caller, message.context_id)
    run_id = message.task_id or context
    run = await existing(call.parts.tarry, run_id) if run_id else None
    if run is None:
        return 0
    await call.check(run.id, Need.READ)
    return (await run.state()).events


async def _until_stop(
    call: A2aCall, run_id: str, offset: int
) -> AsyncGenerator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
    """The run's events from `offset` as task events, up to its next stop point: then
    its status, after its artifact for a run that ended."""
    events = call.parts.feeds.events(run_id, offset)
    async with contextlib.aclosing(events):
        async for event in events:
            if event.kind is not EventKind.STOP or event.state is None:
                continue
            if not event.state.phase.ended:
                status = open_status(run_id, event.state)
                yield TaskStatusUpdateEvent(task_id=run_id, context_id=run_id, status=status)
                return
            result = await call.tarry.get(run_id).result()
            for artifact in artifacts_of(run_id, result, call.workspace_root):
                yield TaskArtifactUpdateEvent(
                    task_id=run_id, context_id=run_id, artifact=artifact, last_chunk=True
                )
            status = ended_status(run_id, result)
            yield TaskStatusUpdateEvent(task_id=run_id, context_id=run_id, status=status)
            return
    raise TarryError(ErrorCode.RUN_ENDED, f"run {run_id!r} ended without a stop point")


def _page_token(cursor: str) -> bytes | None:
    if not cursor:
        return None
    try:
        return base64.urlsafe_b64decode(cursor.encode("ascii"))
    except (binascii.Error, ValueError):
        raise TarryError(
            ErrorCode.INPUT_INVALID, "page_token: not a token this server gave"
        ) from None


Endpoint = Callable[[Request], Awaitable[Response]]


def _signed_in(endpoint: Endpoint) -> Endpoint:
    """`endpoint` for the people the API lets in (401 for anyone else), of an agent the
    config defines (404 otherwise), before the SDK reads the request."""

    async def guarded(request: Request) -> Response:
        await signed_in(request)
        agent_spec(parts_of(request), request.path_params.get("agent"))
        return await endpoint(request)

    return guarded


async def _card(request: Request) -> Response:
    """The agent's card, for anyone: it says how to sign in, and holds no data. Its
    endpoint's URL is the configured `TARRY_PUBLIC_URL`'s, else the request's own."""
    parts = parts_of(request)
    name = request.path_params.get("agent")
    spec = agent_spec(parts, name)
    base = parts.settings.tarry_public_url or str(request.base_url)
    url = base.rstrip("/") + A2A_PATH + (f"/{name}" if name else "")
    return JSONResponse(agent_card_to_dict(agent_card(url, name, spec, parts.sign_in)))


def a2a_routes() -> list[BaseRoute]:
    """The A2A endpoints and cards, to add to the API's app (`tarry.api.app`)."""
    handler, contexts = RunsAsTasks(), _CallContexts()
    routes: list[BaseRoute] = []
    for path in (A2A_PATH, f"{A2A_PATH}/{{agent}}"):
        for rpc in create_jsonrpc_routes(handler, rpc_url=path, context_builder=contexts):
            assert isinstance(rpc, Route)
            routes.append(Route(rpc.path, _signed_in(rpc.endpoint), methods=["POST"]))
        routes.append(Route(path + AGENT_CARD_WELL_KNOWN_PATH, _card, methods=["GET"]))
    return routes
