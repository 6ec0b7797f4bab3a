"""A harness for fault tests on real processes: a dev server that can be stopped and
started again on the same SQLite file and ports, worker processes that can be killed
and replaced, a model whose answer is a pure function of the conversation, and
helpers that spell out and compare exact transcripts.

Nothing here mocks Temporal: every fault is a real signal to a real process. The dev
server and worker processes are those of `tarry.cli.processes`, which `tarry dev` and
the benchmarks start too.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tarry.cli.processes import HOST, WorkerProcess
from tarry.client import RunHandle, Tarry, TarryError
from tarry.config.settings import DEFAULT_STICKY_TIMEOUT, DEFAULT_WORKFLOW_CACHE
from tarry.contracts import (
    ChatMessage,
    ErrorCode,
    FunctionCall,
    RunInput,
    RunResult,
    Timeouts,
    ToolCall,
    ToolResult,
)
from tarry.core.identities import local_user
from tests.deadline import HEARTBEAT, TIMEOUT, deadline
from workers.plugin import workflows_passed_through
from workflows.agent_run import AgentRunWorkflow

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
"""The project root: worker processes run there, so `python -m tests.faults_worker` resolves."""
FAULTS_WORKER = "tests.faults_worker"
"""The worker fault tests start as a process: `python -m workers` with two test tools."""
API_KEY = "sk-tarry-faults-3b1e"
"""The key fault-test workers send; the test models accept any key."""

CRASH_TIMEOUTS = Timeouts(llm_heartbeat=HEARTBEAT, llm_attempt=30, tool=3)
"""A dead worker's model call is noticed within `HEARTBEAT`, its tool call within 3 s
(tools do not heartbeat: their attempt timeout is all there is)."""


async def connect(address: str) -> Client:
    return await Client.connect(address, data_converter=pydantic_data_converter)


# --- Bounded waits that ride out faults ------------------------------------------

ATTEMPT_TIMEOUT = deadline(15)
"""The bound on one attempt of a retried action: one RPC may hang while a server restarts."""


async def eventually(
    action: Callable[[], Awaitable[T]],
    *,
    timeout: float = TIMEOUT,  # noqa: ASYNC109 - a bound for the whole retry loop
    attempt_timeout: float = ATTEMPT_TIMEOUT,
    what: str = "",
) -> T:
    """`action()` until it succeeds: while a server restarts or no worker answers, RPCs
    fail or hang. A `TarryError` is an answer, not a fault, and is raised at once, but
    for `RUN_NOT_SERVED`: a restarted server knows a worker's polls only once they come
    again. After `timeout` seconds the last failure is raised."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + timeout
    delay = 0.1
    while True:
        try:
            left = max(deadline(0.1), give_up - loop.time())
            async with asyncio.timeout(min(attempt_timeout, left)):
                return await action()
        except Exception as e:
            if isinstance(e, TarryError) and e.code is not ErrorCode.RUN_NOT_SERVED:
                raise
            if loop.time() + delay > give_up:
                raise TimeoutError(f"gave up after {timeout:g}s{f' ({what})' if what else ''}: "
                                   f"{type(e).__name__}: {e}") from e  # fmt: skip
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def finished(run: RunHandle, timeout: float = TIMEOUT) -> RunResult:  # noqa: ASYNC109
    """The run's result, once it has ended; TimeoutError past `timeout`."""
    async with asyncio.timeout(timeout):
        return await run.result()


async def wait_until(
    check: Callable[[], Awaitable[bool]],
    *,
    timeout: float = TIMEOUT,  # noqa: ASYNC109
    interval: float = 0.1,
    what: str = "a condition",
) -> None:
    """Polls `check()` (errors count as "not yet") until it is true; TimeoutError after."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                with contextlib.suppress(Exception):
                    # One check may hang (a query while no worker answers): bound it too.
                    async with asyncio.timeout(ATTEMPT_TIMEOUT):
                        if await check():
                            return
                await asyncio.sleep(interval)
    except TimeoutError:
        raise TimeoutError(f"{what} not reached within {timeout:g}s") from None


SCENE_TRIES = 3
"""How often `until_the_scene_happens` sets a scene up before it gives up."""


async def until_the_scene_happens(try_once: Callable[[], Awaitable[T | None]], scene: str) -> T:
    """What `try_once()` returns once it is not None: the scene it set up happened. A
    fault test's scene can hang on a window of the server's (it offers a dead worker's
    sticky queue until 10 s after its last poll), which a busy machine can miss, and a
    try that missed it tests nothing. A try that returns None must leave nothing in the
    next one's way; AssertionError after `SCENE_TRIES` tries."""
    for _ in range(SCENE_TRIES):
        if (result := await try_once()) is not None:
            return result
    raise AssertionError(f"{scene} did not happen in {SCENE_TRIES} tries")


def line_count(path: Path) -> int:
    """Lines in a file; 0 while it does not exist."""
    return len(path.read_text().splitlines()) if path.exists() else 0


async def wait_for_file_lines(path: Path, n: int, timeout: float = deadline(30)) -> None:  # noqa: ASYNC109
    async def enough() -> bool:
        return line_count(path) >= n

    await wait_until(enough, timeout=timeout, interval=0.05, what=f"{n} line(s) in {path.name}")


def fault_worker(**options: Any) -> WorkerProcess:
    """`python -m tests.faults_worker` as a process of its own (`WorkerProcess`)."""
    return WorkerProcess(module=FAULTS_WORKER, cwd=ROOT, api_key=API_KEY, **options)


# --- A model whose answer is a pure function of the conversation -------------------


@dataclass(frozen=True)
class Reply:
    """What `FunctionModel` answers to one request."""

    content: str | None = None
    calls: Sequence[tuple[str, dict[str, Any]]] = ()
    """Tool calls as (name, arguments), ids `call_<n>_<i>`: n is the assistant message's
    number in the conversation, i the call's index, so a retried request gets the same."""
    tag: str | None = None
    """Names this answer: `reached(tag)` returns once a request was answered with it."""
    hold: bool = False
    """Answer only once `release(tag)` was called: the model call stays in flight."""
    delay: float = 0.0


Answer = Callable[[list[dict[str, Any]]], Reply]


def call_id(messages: Sequence[dict[str, Any] | ChatMessage], index: int = 0) -> str:
    """The id `FunctionModel` gives call `index` of its answer to `messages`."""
    roles = [m.role if isinstance(m, ChatMessage) else m.get("role") for m in messages]
    n = 1 + roles.count("assistant")
    return f"call_{n}_{index}"


class FunctionModel:
    """An OpenAI-compatible chat-completions server whose answer is `answer(messages)`.

    Unlike a script (a FIFO that a retried request would advance), a pure function
    answers a retry exactly as it answered the first attempt: after any fault the
    conversation goes on as if nothing happened, so the expected transcript is exact."""

    def __init__(self, answer: Answer, *, port: int = 0) -> None:
        self._answer = answer
        self._port = port
        self.requests = 0
        self.answered = 0
        self.tags: Counter[str] = Counter()
        """How many requests each tag answered (more than one: a retried call)."""
        self._reached: dict[str, asyncio.Event] = {}
        self._released: dict[str, asyncio.Event] = {}
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self._runner.addresses[0][1]}/v1"

    async def start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, HOST, self._port).start()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> FunctionModel:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _event(self, events: dict[str, asyncio.Event], tag: str) -> asyncio.Event:
        return events.setdefault(tag, asyncio.Event())

    async def reached(self, tag: str, timeout: float = TIMEOUT) -> None:  # noqa: ASYNC109
        """Returns once a request was (being) answered with `tag`."""
        try:
            async with asyncio.timeout(timeout):
                await self._event(self._reached, tag).wait()
        except TimeoutError:
            raise TimeoutError(f"model: no request for {tag!r} within {timeout:g}s") from None

    def release(self, tag: str) -> None:
        self._event(self._released, tag).set()

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages: list[dict[str, Any]] = body["messages"]
        self.requests += 1
        reply = self._answer(messages)
        if reply.tag is not None:
            self.tags[reply.tag] += 1
            self._event(self._reached, reply.tag).set()
            if reply.hold:
                await self._event(self._released, reply.tag).wait()
        await asyncio.sleep(reply.delay)
        self.answered += 1
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.calls:
            message["tool_calls"] = [
                tool_call(call_id(messages, i), name, args).model_dump()
                for i, (name, args) in enumerate(reply.calls)
            ]
        prompt = 10 * len(messages)
        return web.json_response(
            {
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": body.get("model", "function-model"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if reply.calls else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": 5,
                    "total_tokens": prompt + 5,
                },
            }
        )


def last_user_text(messages: Sequence[dict[str, Any]]) -> str:
    return next((str(m.get("content")) for m in reversed(messages) if m["role"] == "user"), "")


def answers_since_user(messages: Sequence[dict[str, Any]]) -> int:
    """How many assistant messages follow the last user message."""
    count = 0
    for m in reversed(messages):
        if m["role"] == "user":
            break
        count += m["role"] == "assistant"
    return count


# --- Exact transcripts ----------------------------------------------------------


def tool_call(id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(id=id, function=FunctionCall(name=name, arguments=json.dumps(arguments)))


LOCAL_USER = local_user(None)
"""Who the tests' clients act as (the suite clears `TARRY_USER`): the author of their
replies and prompts in a transcript."""


def user(text: str, by: str = LOCAL_USER) -> ChatMessage:
    return ChatMessage(role="user", content=text, by=by)


def assistant(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def calling(*calls: ToolCall) -> ChatMessage:
    return ChatMessage(role="assistant", tool_calls=list(calls))


def tool_ok(call: ToolCall, data: Any) -> ChatMessage:
    return ChatMessage(
        role="tool", tool_call_id=call.id, content=ToolResult.success(data).to_content()
    )


def written(path: str, content: str) -> dict[str, Any]:
    """What `write_file` answers."""
    return {"path": path, "bytes": len(content.encode())}


def _lines(messages: Iterable[ChatMessage]) -> list[str]:
    return [m.model_dump_json(exclude_none=True) for m in messages]


def transcript_diff(expected: Sequence[ChatMessage], actual: Sequence[ChatMessage]) -> str:
    """A unified diff, one message per line; empty when the transcripts are equal."""
    return "\n".join(
        difflib.unified_diff(
            _lines(expected), _lines(actual), "expected", "actual", lineterm="", n=2
        )
    )


def assert_transcript(actual: Sequence[ChatMessage], expected: Sequence[ChatMessage]) -> None:
    """Every message exactly once, in order; the assertion message is the diff."""
    diff = transcript_diff(expected, actual)
    assert not diff, "transcripts differ:\n" + diff


# --- History ---------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """What history keeps of one activity: the last attempt, and what failed before it."""

    activity: str
    attempts: int
    last_failure: str
    """The error code (`ApplicationError.type`) or message of the failure before it."""
    scheduled: float
    started: float
    """Event times (seconds): skipped time on the time-skipping server."""


async def activity_attempts(client: Client, run_id: str) -> list[Attempt]:
    """One `Attempt` per activity the run started, in order."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled: dict[int, tuple[str, float]] = {}
    attempts: list[Attempt] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[e.event_id] = (name, e.event_time.ToDatetime().timestamp())
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            s = e.activity_task_started_event_attributes
            name, at = scheduled[s.scheduled_event_id]
            failure = s.last_failure
            attempts.append(
                Attempt(
                    activity=name,
                    attempts=s.attempt,
                    last_failure=failure.application_failure_info.type or failure.message,
                    scheduled=at,
                    started=e.event_time.ToDatetime().timestamp(),
                )
            )
    return attempts


async def local_activities(client: Client, run_id: str) -> list[str]:
    """The activity type of each local activity the run's history records (a marker each)."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    names = []
    for e in history.events:
        marker = e.marker_recorded_event_attributes
        if marker.marker_name == "core_local_activity":
            data = json.loads(marker.details["data"].payloads[0].data)
            names.append(data["activity_type"])
    return names


def patch_ids(history: WorkflowHistory) -> list[str]:
    """The id of each patch marker the history records (`workflow.patched` and
    `workflow.deprecate_patch` answered live), in order."""
    ids = []
    for e in history.events:
        marker = e.marker_recorded_event_attributes
        if marker.marker_name == "core_patch":
            ids.append(json.loads(marker.details["patch-data"].payloads[0].data)["id"])
    return ids


async def workflow_task_failures(client: Client, run_id: str) -> list[str]:
    """The messages of the run's failed workflow tasks: a run stuck on one (e.g. a
    nondeterminism error) retries it forever and never moves again."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def check_replay(client: Client, run_ids: Iterable[str]) -> None:
    """Each run's history, faults and all, replays without non-determinism, sandboxed as
    a worker does."""
    replayer = Replayer(
        workflows=[AgentRunWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflows_passed_through(None),
    )
    for run_id in run_ids:
        await replay(replayer, await client.get_workflow_handle(run_id).fetch_history())


async def replay(replayer: Replayer, history: WorkflowHistory) -> None:
    """Replays `history`, raising on non-determinism. The SDK's 2 s deadlock timer can
    trip on a busy machine (a long history's activation held up by a GC pass, seen once
    in a full run): that is not a determinism fault, so such a replay is tried again.
    A segment read a moment after a hand-over may hold its start alone: it made no
    command to check, and the SDK's replayer never returns from such a history."""
    if not any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events
    ):
        return
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure and "[TMPRL1101]" in str(result.replay_failure):
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure:
        raise result.replay_failure


# --- A rig for crash tests: worker processes on a task queue of their own ------------


@dataclass
class CrashRig:
    """Worker processes on a fresh task queue of a running server, and the runs started
    through them. `close()` stops every worker it started and checks replay."""

    client: Client
    model_url: str
    workspace_root: Path
    log_dir: Path
    workflow_cache: int = DEFAULT_WORKFLOW_CACHE
    """The cache every worker process of the rig keeps (`TARRY_WORKFLOW_CACHE`)."""
    sticky_timeout: float = DEFAULT_STICKY_TIMEOUT
    """How long a task waits for a dead worker's sticky queue (`TARRY_STICKY_TIMEOUT`)."""
    env: dict[str, str] = field(default_factory=dict)
    """More of the worker processes' environment (`TARRY_CONFIG`, say)."""
    task_queue: str = field(default_factory=lambda: f"faults-{uuid.uuid4().hex[:8]}")
    workers: list[WorkerProcess] = field(default_factory=list)
    runs: list[RunHandle] = field(default_factory=list)

    @property
    def tarry(self) -> Tarry:
        return Tarry(self.client, self.task_queue)

    async def worker(self) -> WorkerProcess:
        """A new worker process, once it is ready."""
        worker = fault_worker(
            address=self.client.service_client.config.target_host,
            task_queue=self.task_queue,
            model_url=self.model_url,
            workspace_root=self.workspace_root,
            log=self.log_dir / f"worker-{len(self.workers) + 1}.log",
            extra_env={
                "TARRY_WORKFLOW_CACHE": str(self.workflow_cache),
                "TARRY_STICKY_TIMEOUT": str(self.sticky_timeout),
                **self.env,
            },
        )
        self.workers.append(worker)
        await worker.start()
        return worker

    async def start(self, prompt: str, **input: Any) -> RunHandle:
        input.setdefault("timeouts", CRASH_TIMEOUTS)
        run = await self.tarry.start(RunInput(prompt=prompt, **input))
        self.runs.append(run)
        return run

    def workspace(self, run: RunHandle) -> Path:
        return self.workspace_root / run.id

    async def close(self) -> None:
        for worker in self.workers:
            await worker.stop()
        await check_replay(self.client, [run.id for run in self.runs])


def elapsed(since: float) -> str:
    return f"{time.monotonic() - since:.1f} s"
