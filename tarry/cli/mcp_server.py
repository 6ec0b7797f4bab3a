"""`tarry mcp`: Tarry as an MCP server, so an assistant that speaks MCP can hand a long
job to a durable run, leave, and come back days later for the answer or a decision.

Its tools are the client's (`tarry.client`): start a run, read its state (waiting for
it to stop, if asked) and its transcript, reply, decide a pending tool call, list the
runs (those waiting for a person, those a schedule started) and the schedules. Each
answers JSON, as text and as structured content; an error a caller can act on is a
tool error with the same code as everywhere else: text `RUN_NOT_FOUND: no run ...`,
structured `{"code": ..., "message": ...}`.

`decide` is annotated destructive, so a host asks its user before an assistant approves
an agent's gated call, and the run records that the decision came through MCP. Read-only,
the server offers only the tools that change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from tarry.client import Tarry, TarryError
from tarry.contracts import (
    ApprovalDefault,
    ApprovalRule,
    Closed,
    ErrorCode,
    Mode,
    Phase,
    RunInput,
    WaitingFor,
)
from tarry.run_list import find_runs

__all__ = ["build_server"]

ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Any])

READS = ToolAnnotations(read_only_hint=True)
ANSWERS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
"""A start or a reply adds to a run; sent twice, it is a second reply."""
DECIDES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False)
"""A decision lets an agent's gated call run (or not): a host should ask its user first."""
Limit = Annotated[int, Field(ge=1, le=1000)]
"""How many runs a list gives at most: the HTTP API's bounds."""
SOURCE = "mcp"
"""`Decision.source` of a decision taken through this server."""
STOPS = {Phase.WAITING_USER, Phase.COMPLETED, Phase.FAILED}
INSTRUCTIONS = """Tarry runs LLM agents as durable conversations on Temporal. Start a run
with a prompt, then come back whenever you like: read its state (wait_seconds waits for
it to stop), reply when it waits for input, decide its tool calls when it waits for
approval, and read its transcript. Runs outlive this server and any worker."""


def build_server(connect: Callable[[], Awaitable[Tarry]], *, read_only: bool = False) -> MCPServer:
    """The server, connecting to Temporal with `connect` at its first tool call;
    `read_only`: only the tools that change nothing (state, transcript, waiting runs)."""
    connection: list[Tarry] = []

    async def tarry() -> Tarry:
        if not connection:
            connection.append(await connect())
        return connection[0]

    server: MCPServer = MCPServer("tarry", instructions=INSTRUCTIONS, version=version("tarry"))

    def changes(annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
        """Registers a tool that changes a run, unless the server is read-only."""
        if read_only:
            return lambda fn: fn
        return server.tool(annotations=annotations)

    @changes(ANSWERS)
    async def start_run(
        prompt: str,
        model: str = RunInput.model_fields["model"].default,
        system: str | None = None,
        tools: list[str] | None = None,
        mode: Literal["chat", "task"] = "chat",
        require_approval: list[str] | None = None,
        approval_timeout_seconds: float | None = None,
        approval_default: Literal["reject", "approve"] = "reject",
        approval_rules: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
    ) -> CallToolResult:
        """Start an agent run; returns its id and state. `model` is the worker's model
        profile to use; `tools` limits the tools it may use (null: all); `require_approval`
        names tools whose calls wait for a decision ("*": all); `approval_rules` decide
        calls by their arguments, the first that matches deciding, e.g. `{"tool":
        "write_file", "when": {"/path": "notes/*.md"}, "decision": "approve"}` (a glob, or
        `{"regex": ...}`; `reject` needs a `reason`; `ask` asks a person); in `task` mode
        the run ends with its first answer that calls no tool."""

        async def work() -> dict[str, Any]:
            input = RunInput(
                prompt=prompt,
                model=model,
                system=system,
                tools=tools,
                mode=Mode(mode),
                require_approval=require_approval or [],
                approval_timeout=approval_timeout_seconds,
                approval_default=ApprovalDefault(approval_default),
                approval_rules=[ApprovalRule.model_validate(r) for r in approval_rules or []],
            )
            run = await (await tarry()).start(input, run_id=run_id)
            return {"run_id": run.id, "state": _json(await run.state())}

        return await _answer(work)

    if not read_only:
        _closed_arguments(server, "start_run")

    @server.tool(annotations=READS)
    async def run_state(run_id: str, wait_seconds: float = 0) -> CallToolResult:
        """A run's state: phase (Running, WaitingUser, Completed, Failed), what it waits
        for (input or approval, with the pending calls), its last answer, error, usage.
        With `wait_seconds`, waits up to that long for the run to stop working."""

        async def work() -> Any:
            run = (await tarry()).get(run_id)
            if wait_seconds > 0:
                try:
                    return _json(await run.wait_for(STOPS, timeout=wait_seconds))
                except TimeoutError:
                    pass  # still working: its state as it is
            return _json(await run.state())

        return await _answer(work)

    @server.tool(annotations=READS)
    async def run_transcript(run_id: str, start: int = 0) -> CallToolResult:
        """A run's messages from `start`, in the OpenAI chat format."""

        async def work() -> Any:
            messages = await (await tarry()).get(run_id).transcript(start)
            return [m.model_dump(mode="json", exclude_none=True) for m in messages]

        return await _answer(work)

    @changes(ANSWERS)
    async def reply(run_id: str, text: str, message_id: str | None = None) -> CallToolResult:
        """Reply to a run and wait for its next stop; returns the state there (its answer
        in `last_assistant_text`). A retry with the same `message_id` is not doubled."""

        async def work() -> Any:
            return _json(await (await tarry()).get(run_id).send(text, id=message_id))

        return await _answer(work)

    @changes(DECIDES)
    async def decide(
        run_id: str,
        approved: bool,
        call_id: str | None = None,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        remember: Literal["run"] | None = None,
    ) -> CallToolResult:
        """Approve or reject a tool call the run waits on (`call_id` null: every pending
        call), optionally with edited `arguments`; returns the state at the next stop.
        `remember: "run"` decides the like calls after it the same way without asking.
        The run records the decision as taken through MCP."""

        async def work() -> Any:
            run = (await tarry()).get(run_id)
            state = await run.decide(
                call_id,
                approved=approved,
                reason=reason,
                arguments=arguments,
                source=SOURCE,
                remember=remember,
            )
            return _json(state)

        return await _answer(work)

    @server.tool(annotations=READS)
    async def waiting_runs(
        waiting_for: Literal["input", "approval"] | None = None, limit: Limit = 20
    ) -> CallToolResult:
        """The runs on this server's task queue waiting for a person (for a reply, or a
        decision on tool calls), with their prompt's first line and, for a sub-agent, the
        run it works for (`parent`): answer the sub-agent and its parent goes on; newest
        first."""

        async def work() -> Any:
            awaited = None if waiting_for is None else WaitingFor(waiting_for)
            # Its own queue only: a namespace's other runs may be encrypted with keys
            # this server does not hold.
            client = await tarry()
            page = await find_runs(
                client.client,
                phase=Phase.WAITING_USER,
                waiting_for=awaited,
                task_queue=client.task_queue,
                limit=limit,
            )
            return [_json(row) for row in page.rows]

        return await _answer(work)

    @server.tool(annotations=READS)
    async def list_runs(
        phase: Literal["Running", "WaitingUser", "Completed", "Failed"] | None = None,
        waiting_for: Literal["input", "approval", "budget", "model", "agent"] | None = None,
        schedule: str | None = None,
        limit: Limit = 20,
    ) -> CallToolResult:
        """The runs on this server's task queue, newest first, each with its phase, what it
        waits for and the schedule that started it; filtered by `phase`, `waiting_for`
        and `schedule` (a name from `list_schedules`)."""

        async def work() -> Any:
            client = await tarry()
            page = await find_runs(
                client.client,
                phase=None if phase is None else Phase(phase),
                waiting_for=None if waiting_for is None else WaitingFor(waiting_for),
                task_queue=client.task_queue,
                schedule=schedule,
                limit=limit,
            )
            return [_json(row) for row in page.rows]

        return await _answer(work)

    @server.tool(annotations=READS)
    async def list_schedules() -> CallToolResult:
        """The schedules that start runs on their own: timing, paused or not, next and
        recent runs (`list_runs` with `schedule` lists a schedule's runs)."""

        async def work() -> Any:
            return [_json(s) for s in await (await tarry()).list_schedules()]

        return await _answer(work)

    return server


def _closed_arguments(server: MCPServer, name: str) -> None:
    """The tool `name` refuses an argument it does not take, naming the nearest one it
    does (`Closed`), and its schema says so: the SDK drops such an argument without a
    word, and a misspelled `require_approval` would start a run without its gate."""
    tool = server._tool_manager.get_tool(name)
    assert tool is not None, name
    arguments = tool.fn_metadata.arg_model
    tool.fn_metadata.arg_model = type(arguments.__name__, (Closed, arguments), {})
    tool.parameters["additionalProperties"] = False


def _json(value: BaseModel) -> dict[str, Any]:
    return value.model_dump(mode="json")


async def _answer(work: Callable[[], Awaitable[Any]]) -> CallToolResult:
    """`work`'s JSON as the tool's result (a list comes as `{"result": [...]}`, since
    structured content is an object); an error a caller can act on as a tool error."""
    try:
        value = await work()
    except TarryError as e:
        return _error(e.code, e.message)
    except ValidationError as e:
        return _error(ErrorCode.INPUT_INVALID, str(e))
    except TimeoutError:
        return _error(None, "timed out waiting for the run")
    except Exception as e:  # Temporal unreachable, a bad address or key: one line
        return _error(None, f"{type(e).__name__}: {e}")
    structured = value if isinstance(value, dict) else {"result": value}
    return CallToolResult(
        content=[TextContent(text=json.dumps(value))], structured_content=structured
    )


def _error(code: ErrorCode | None, message: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text=f"{code}: {message}" if code else message)],
        structured_content={"code": code, "message": message},
        is_error=True,
    )
