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

from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib.metadata import version
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from tarry.cli.mcp_answers import answer, close_arguments, json_of
from tarry.client import Tarry
from tarry.client.rights import check_decision, check_run
from tarry.client.run_list import find_runs
from tarry.contracts import (
    WORKFLOW_TYPE,
    ApprovalDefault,
    ApprovalRule,
    Door,
    Mode,
    Need,
    Phase,
    RunInput,
    WaitingFor,
)
from tarry.contracts.guardrails import Guardrail
from tarry.contracts.memories import MemoryAccess
from tarry.core.identities import Caller
from tarry.core.ownership import Policy
from tarry.search import Readable, SearchQuery, StoreOpener
from tarry.search.memory_store import refuse_foreign_scope

__all__ = ["build_server"]

ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Any])

READS = ToolAnnotations(read_only_hint=True)
ANSWERS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
"""A start or a reply adds to a run; sent twice, it is a second reply."""
DECIDES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False)
"""A decision lets an agent's gated call run (or not): a host should ask its user first."""
Limit = Annotated[int, Field(ge=1, le=1000)]
"""How many runs a list gives at most: the HTTP API's bounds."""
MemoryAccessName = Annotated[str, Field(json_schema_extra={"enum": list(MemoryAccess)})]
"""`RunInput.memory_access`, its values in the schema, checked by `RunInput` (as the
API's): another is `INPUT_INVALID`."""
SOURCE = "mcp"
"""`Decision.source` of a decision taken through this server."""
STOPS = {Phase.WAITING_USER, Phase.COMPLETED, Phase.FAILED}
INSTRUCTIONS = """Tarry runs LLM agents as durable conversations on Temporal. Start a run
with a prompt, then come back whenever you like: read its state (wait_seconds waits for
it to stop), reply when it waits for input, decide its tool calls when it waits for
approval, and read its transcript. Runs outlive this server and any worker."""


def build_server(
    connect: Callable[[], Awaitable[Tarry]],
    *,
    read_only: bool = False,
    policy: Policy | None = None,
    search: StoreOpener | None = None,
) -> MCPServer:
    """The server, connecting to Temporal with `connect` at its first tool call;
    `read_only`: only the tools that change nothing (state, transcript, waiting runs);
    `policy`: who may use which runs, for the callers the HTTP transport signs in (over
    stdio the local user is an operator, as the CLI is); `search`: the search index."""
    connection: list[Tarry] = []

    async def tarry(ctx: Context) -> Tarry:
        """The client, acting as whoever signed in to this request (`tarry mcp --http`
        with tokens, `tarry.cli.mcp_http`); else as `TARRY_USER`, or `cli:$USER`."""
        if not connection:
            connected = await connect()  # acting at this server's door
            connection.append(connected.acting_as(replace(connected.caller, door=Door.MCP)))
        caller = _caller_of(ctx)
        if caller is None:
            return connection[0]
        return connection[0].acting_as(replace(caller, door=Door.MCP))

    async def allowed(ctx: Context, run_id: str, need: Need) -> Tarry:
        """The client, once the signed-in caller may do what `need` says to run `run_id`:
        `RUN_NOT_FOUND` for a run they may not read, `NOT_ALLOWED` for a change they lack
        the right to, as at the HTTP API's doors (`tarry.api.rights`)."""
        client = await tarry(ctx)
        caller = _caller_of(ctx)
        if caller is not None and policy is not None:
            await check_run(client, policy, caller, run_id, need, workflow=WORKFLOW_TYPE)
        return client

    async def decider(ctx: Context, run_id: str, call_id: str | None) -> Tarry:
        """The client, once the signed-in caller may decide call `call_id` (None: every
        pending call) of run `run_id`, by the rule every door shares (`check_decision`)."""
        client = await tarry(ctx)
        caller = _caller_of(ctx)
        if caller is not None and policy is not None:
            writes = await check_run(
                client, policy, caller, run_id, Need.DECIDE, workflow=WORKFLOW_TYPE
            )
            await check_decision(client, caller, run_id, call_id, writes=writes)
        return client

    def readable(ctx: Context) -> str | None:
        """The run lists' visibility condition for the signed-in caller (None: all)."""
        caller = _caller_of(ctx)
        return None if caller is None or policy is None else policy.readable_clause(caller)

    server: MCPServer = MCPServer("tarry", instructions=INSTRUCTIONS, version=version("tarry"))

    def changes(annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
        """Registers a tool that changes a run, unless the server is read-only."""
        if read_only:
            return lambda fn: fn
        return server.tool(annotations=annotations)

    @changes(ANSWERS)
    async def start_run(
        ctx: Context,
        prompt: str,
        model: str = RunInput.model_fields["model"].default,
        system: str | None = None,
        tools: list[str] | None = None,
        mode: Literal["chat", "task"] = "chat",
        require_approval: list[str] | None = None,
        approval_timeout_seconds: float | None = None,
        approval_default: Literal["reject", "approve"] = "reject",
        approval_rules: list[dict[str, Any]] | None = None,
        guardrails: list[dict[str, Any]] | None = None,
        memory_access: MemoryAccessName = MemoryAccess.OFF,
        memory_scope: str | None = None,
        run_id: str | None = None,
    ) -> CallToolResult:
        """Start an agent run; returns its id and state. `model` is the worker's model
        profile to use; `tools` limits the tools it may use (null: all); `require_approval`
        names tools whose calls wait for a decision ("*": all); `approval_rules` decide
        calls by their arguments, the first that matches deciding, e.g. `{"tool":
        "write_file", "when": {"/path": "notes/*.md"}, "decision": "approve"}` (a glob, or
        `{"regex": ...}`; `reject` needs a `reason`; `ask` asks a person); `guardrails` check
        what it reads and says, e.g. `{"name": "no-pii", "on": "input", "check": "pii",
        "verdict": "redact"}` (`on`: input, output, tool_result; `check`: pii, pattern,
        moderation; `verdict`: redact, block); `memory_access` gives it memory tools (read:
        recall; read-write: remember, recall, forget) over `memory_scope`'s memories (a
        user, `group:NAME`, `agent:NAME`; null: yours); in `task` mode the run ends with
        its first answer that calls no tool."""

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
                guardrails=[Guardrail.model_validate(g) for g in guardrails or []],
                memory_access=memory_access,
                memory_scope=memory_scope,
            )
            if (caller := _caller_of(ctx)) is not None and policy is not None:
                refuse_foreign_scope(policy, caller, input)
            run = await (await tarry(ctx)).start(input, run_id=run_id)
            return {"run_id": run.id, "state": json_of(await run.state())}

        return await answer(work)

    if not read_only:
        close_arguments(server, "start_run")

    @server.tool(annotations=READS)
    async def run_state(ctx: Context, run_id: str, wait_seconds: float = 0) -> CallToolResult:
        """A run's state: phase (Running, WaitingUser, Completed, Failed), what it waits
        for (input or approval, with the pending calls), its last answer, error, usage.
        With `wait_seconds`, waits up to that long for the run to stop working."""

        async def work() -> Any:
            run = (await allowed(ctx, run_id, Need.READ)).get(run_id)
            if wait_seconds > 0:
                try:
                    return json_of(await run.wait_for(STOPS, timeout=wait_seconds))
                except TimeoutError:
                    pass  # still working: its state as it is
            return json_of(await run.state())

        return await answer(work)

    @server.tool(annotations=READS)
    async def run_transcript(ctx: Context, run_id: str, start: int = 0) -> CallToolResult:
        """A run's messages from `start`, in the OpenAI chat format."""

        async def work() -> Any:
            messages = await (await allowed(ctx, run_id, Need.READ)).get(run_id).transcript(start)
            return [m.model_dump(mode="json", exclude_none=True) for m in messages]

        return await answer(work)

    @changes(ANSWERS)
    async def reply(
        ctx: Context, run_id: str, text: str, message_id: str | None = None
    ) -> CallToolResult:
        """Reply to a run and wait for its next stop; returns the state there (its answer
        in `last_assistant_text`). A retry with the same `message_id` is not doubled."""

        async def work() -> Any:
            client = await allowed(ctx, run_id, Need.WRITE)
            return json_of(await client.get(run_id).send(text, id=message_id))

        return await answer(work)

    @changes(DECIDES)
    async def decide(
        ctx: Context,
        run_id: str,
        approved: bool,
        call_id: str | None = None,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
        remember: Literal["run"] | None = None,
    ) -> CallToolResult:
        """Approve or reject a tool call the run waits on (`call_id` null: every pending
        call), once the person has seen its preview whole (`run_state` shows each), with
        edited `arguments` if they want; returns the state at the next stop.
        `remember: "run"` decides the like calls after it the same way without asking.
        The run records the decision as taken through MCP."""

        async def work() -> Any:
            run = (await decider(ctx, run_id, call_id)).get(run_id)
            state = await run.decide(
                call_id,
                approved=approved,
                reason=reason,
                arguments=arguments,
                source=SOURCE,
                remember=remember,
            )
            return json_of(state)

        return await answer(work)

    @server.tool(annotations=READS)
    async def waiting_runs(
        ctx: Context,
        waiting_for: WaitingFor | None = None,
        limit: Limit = 20,
    ) -> CallToolResult:
        """The runs on this server's task queue waiting for a person (for `waiting_for`
        alone: a reply, a decision on tool calls...), with their prompt's first line and,
        for a sub-agent, the run it works for (`parent`): answer the sub-agent and its
        parent goes on; newest first."""

        async def work() -> Any:
            # Its own queue only: a namespace's other runs may be encrypted with keys
            # this server does not hold.
            client = await tarry(ctx)
            page = await find_runs(
                client.client,
                phase=Phase.WAITING_USER,
                waiting_for=waiting_for,
                task_queue=client.task_queue,
                limit=limit,
                readable=readable(ctx),
            )
            return [json_of(row) for row in page.rows]

        return await answer(work)

    @server.tool(annotations=READS)
    async def list_runs(
        ctx: Context,
        phase: Literal["Running", "WaitingUser", "Completed", "Failed"] | None = None,
        waiting_for: WaitingFor | None = None,
        schedule: str | None = None,
        limit: Limit = 20,
    ) -> CallToolResult:
        """The runs on this server's task queue, newest first, each with its phase, what it
        waits for and the schedule that started it; filtered by `phase`, `waiting_for`
        and `schedule` (a name from `list_schedules`)."""

        async def work() -> Any:
            client = await tarry(ctx)
            page = await find_runs(
                client.client,
                phase=None if phase is None else Phase(phase),
                waiting_for=waiting_for,
                task_queue=client.task_queue,
                schedule=schedule,
                limit=limit,
                readable=readable(ctx),
            )
            return [json_of(row) for row in page.rows]

        return await answer(work)

    @server.tool(annotations=READS)
    async def list_schedules(ctx: Context) -> CallToolResult:
        """The schedules that start runs on their own: timing, paused or not, next and
        recent runs (`list_runs` with `schedule` lists a schedule's runs)."""

        async def work() -> Any:
            return [json_of(s) for s in await (await tarry(ctx)).list_schedules(readable(ctx))]

        return await answer(work)

    @server.tool(annotations=READS)
    async def search_messages(
        ctx: Context, text: str, agent: str | None = None, limit: Limit = 20
    ) -> CallToolResult:
        """The messages of every run with all the words of `text` (and, with an embedding
        profile, those near it in meaning), best first: each its run, its index in the
        transcript (`run_transcript` from there) and a snippet, the words in `[` `]`;
        `agent`: only that sub-agent's runs."""

        async def work() -> Any:
            caller = _caller_of(ctx)
            mine = None if caller is None or policy is None else Readable.of(policy, caller)
            query = SearchQuery(text, agent=agent, readable=mine, limit=limit)
            hits = await (search or StoreOpener(None)).search(query)
            return [json_of(hit) for hit in hits]

        return await answer(work)

    return server


def _caller_of(ctx: Context) -> Caller | None:
    """Who the HTTP transport's sign-in found behind this request; None over stdio."""
    request = ctx.request_context.request
    caller: Caller | None = getattr(getattr(request, "state", None), "caller", None)
    return caller
