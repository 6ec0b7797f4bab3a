"""The tools a worker runs, each as its own Temporal activity, and their catalogue.

Tools are declared in `tarry.core.tools` (`@tool`); the `ToolHost` here runs them. Each tool
is an activity named after it, so history reads `read_file`, `write_file`, ... and each
call times out and retries on its own. Tools from elsewhere (MCP servers) come from a
`ToolSource`, which lists them and brings its own activities. The `tool_catalogue`
activity tells a run, once, which tools it has and how to treat their calls.

Whatever goes wrong in a call is the model's business, not Temporal's: bad
arguments, forbidden paths and exceptions come back as a failed `ToolResult` the
model reads and reacts to. Raising would make Temporal retry a call that would
only fail the same way again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, Field, ValidationError
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import metrics, traces
from activities.grants import Grants, person_of
from activities.workspaces import make_workspace
from tarry.contracts import (
    AGENT_TOOL_PREFIX,
    CATALOGUE_CHECK_ACTIVITY,
    CHECKED_CATALOGUE_ACTIVITY,
    FINISH_TOOL,
    TOOL_CATALOGUE_ACTIVITY,
    AgentArguments,
    AgentSpec,
    Catalogue,
    CatalogueRequest,
    CheckedCatalogue,
    ErrorCode,
    ErrorInfo,
    FinishArguments,
    NotifyEvent,
    ToolDefinition,
    ToolInvocation,
    ToolResult,
)
from tarry.contracts.activities import FOLDED_CATALOGUE_LIMIT
from tarry.contracts.guardrails import Guardrail
from tarry.contracts.memories import (
    MEMORY_TOOLS,
    ForgetArguments,
    MemoryAccess,
    RecallArguments,
    RememberArguments,
)
from tarry.contracts.previews import PREVIEW_ACTIVITY, Preview, PreviewCall, PreviewRequest
from tarry.core.grants import ToolGrant
from tarry.core.limits import Limits
from tarry.core.previews import arguments_preview, file_change, file_state
from tarry.core.tools import MAX_READ_BYTES, Tool, ToolContext, ToolError, tool

__all__ = [
    "BUILTIN_TOOLS",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolHost",
    "ToolListing",
    "ToolSource",
    "tool",
]

# --- Built-in tools ---------------------------------------------------------

WorkspacePath = Annotated[
    str, Field(description="A path relative to the workspace, such as 'notes/todo.md'.")
]


@tool(quick=True)
def read_file(
    ctx: ToolContext,
    path: WorkspacePath,
    offset: Annotated[int, Field(ge=0, description="The first byte to read.")] = 0,
    limit: Annotated[
        int | None, Field(ge=1, description="At most this many bytes; null: to the end.")
    ] = None,
) -> str:
    """Read a text file from the workspace, or the part of it `offset` and `limit` name
    (in bytes). A read too large for one result is refused with the file's size."""
    target = ctx.resolve(path)
    if not target.exists():
        raise ToolError(ErrorCode.TOOL_FAILED, f"no such file: {path}")
    if target.is_dir():
        raise ToolError(ErrorCode.TOOL_FAILED, f"is a directory, not a file: {path}")
    size, cap = target.stat().st_size, ctx.max_read_bytes
    rest = max(0, size - offset)
    part = rest if limit is None else min(limit, rest)
    # A result goes to the model with every later call and into history: never a log file.
    if part > cap:
        raise ToolError(
            ErrorCode.TOOL_FAILED,
            f"{path} has {size} bytes; one read returns at most {cap}. Read it in parts:"
            f" offset=0, limit={cap}, then offset={cap}, and so on",
            {"bytes": size, "max_read_bytes": cap},
        )
    with target.open("rb") as file:
        file.seek(offset)
        # A part may cut a character in two: its bytes read as U+FFFD.
        return file.read(part).decode("utf-8", errors="replace")


def _write_preview(ctx: ToolContext, path: WorkspacePath, content: str) -> Preview:
    """What `write_file` would do: a diff against the file as it is now, or the new file."""
    target = ctx.resolve(path)
    old = target.read_bytes() if target.is_file() else None
    text = None if old is None else old.decode("utf-8", errors="replace")
    preview = file_change(path, text, content)
    return preview.model_copy(update={"workspace": ctx.run_id, "files": [file_state(path, old)]})


@tool(preview=_write_preview)
def write_file(ctx: ToolContext, path: WorkspacePath, content: str) -> dict[str, Any]:
    """Write a text file in the workspace, creating directories; replaces an existing file."""
    target = ctx.resolve(path)
    if target.is_dir():
        raise ToolError(ErrorCode.TOOL_FAILED, f"is a directory, not a file: {path}")
    data = content.encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return {"path": target.relative_to(ctx.workspace.resolve()).as_posix(), "bytes": len(data)}


@tool(quick=True)
def list_files(ctx: ToolContext, path: WorkspacePath = ".") -> list[str]:
    """List a directory of the workspace; directory names end with '/'."""
    target = ctx.resolve(path)
    if not target.is_dir():
        raise ToolError(ErrorCode.TOOL_FAILED, f"no such directory: {path}")
    return sorted(entry.name + "/" if entry.is_dir() else entry.name for entry in target.iterdir())


BUILTIN_TOOLS: tuple[Tool, ...] = (read_file, write_file, list_files)

_FINISH = ToolDefinition(
    name=FINISH_TOOL,
    description="End the run with its final result, once the task is done.",
    parameters=FinishArguments.model_json_schema(),
)


@dataclass
class ToolListing:
    """What a `ToolSource` offers right now."""

    tools: list[ToolDefinition]
    unavailable: list[str] = field(default_factory=list)
    """Why some of its tools are missing (a server that did not answer), for the error
    that refuses a run naming one of them."""


class ToolSource(Protocol):
    """Tools the worker does not declare itself (an MCP server's): listed when a run
    starts, run by the source's own activities."""

    async def listing(self) -> ToolListing: ...

    def activities(self) -> list[Callable[..., Any]]: ...

    async def aclose(self) -> None: ...


class ToolHost:
    """The tools of one worker: their catalogue, and their activities."""

    def __init__(
        self,
        workspace_root: Path,
        tools: Iterable[Tool] = BUILTIN_TOOLS,
        sources: Sequence[ToolSource] = (),
        model_queues: Mapping[str, str] | None = None,
        profiles: Collection[str] | None = None,
        max_read_bytes: int = MAX_READ_BYTES,
        workspace_template: Path | None = None,
        agents: Mapping[str, AgentSpec] | None = None,
        notify_events: Sequence[NotifyEvent] = (),
        guardrails: Sequence[Guardrail] = (),
        context_budgets: Mapping[str, int] | None = None,
        grants: Grants | None = None,
    ) -> None:
        """`model_queues`: the task queue of each model profile that has its own, which
        a run resolves with its tools (`Catalogue`); `profiles`: the names of the worker's
        model profiles, so a run naming another is refused at its start like an unknown
        tool (None: not checked here; the model call refuses it); `max_read_bytes`: the
        most a tool reads into one result (`ToolContext.max_read_bytes`);
        `workspace_template`: a directory whose files a new workspace starts with;
        `agents`: the sub-agents of the config file, which a run resolves by name;
        `notify_events`: the stop points the worker's `[[notify]]` entries want, which a
        run learns with its tools (the catalogue is all a run learns of the worker);
        `guardrails`: the worker's `[[guardrail]]` entries, which a run learns the same way
        and applies before its own; `context_budgets`: each profile's, which a run learns
        too, to refuse pins that would fill its model's window; `grants`: people's grants,
        for the tools declared with `oauth` (`activities.grants`)."""
        self._root = workspace_root
        self._template = workspace_template
        self._tools: dict[str, Tool] = {}
        self._definitions: dict[str, ToolDefinition] = {}
        """Each registered tool's definition, made once: its JSON schema took most of the
        time of every run's `tool_catalogue` activity when it was made for each run."""
        self._sources = sources
        self._model_queues = dict(model_queues or {})
        self._profiles = None if profiles is None else sorted(profiles)
        self._max_read_bytes = max_read_bytes
        self._agents = dict(agents or {})
        self._notify_events = list(notify_events)
        self._guardrails = list(guardrails)
        self._context_budgets = dict(context_budgets or {})
        self._grants = grants or Grants(None)
        self.payload_limit: int | None = None
        """The largest payload the worker's data converter puts in history, which a run
        learns with its tools: set once the worker's client is known (`TarryPlugin`)."""
        self.search_index = False
        """Whether the worker indexes runs' messages, which a run learns with its tools."""
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name == FINISH_TOOL:
            raise ValueError(f"{FINISH_TOOL!r} is reserved: the workflow handles it itself")
        if tool.name in MEMORY_TOOLS:
            raise ValueError(f"{tool.name!r} is reserved: a run's memory tool (memory_access)")
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._definitions[tool.name] = tool.definition()

    @property
    def names(self) -> list[str]:
        return [*self._tools, FINISH_TOOL]

    def catalogue(
        self, request: CatalogueRequest, listed: Iterable[ToolDefinition] = ()
    ) -> list[ToolDefinition]:
        """The tools a run may use (`request.tools`, None: all): the registered ones in
        registration order, then `listed` (the sources'), the memory tools its
        `memory_access` offers, `finish` last; gated: those the run names (`*`: all) and
        those that need approval of their own."""
        allowed, gated = request.tools, request.require_approval
        offered = [
            t
            for t in [*self._definitions.values(), *listed]
            if allowed is None or t.name in allowed
        ]
        return [
            *(
                t.model_copy(
                    update={"needs_approval": t.needs_approval or "*" in gated or t.name in gated}
                )
                for t in [*offered, *_memory_tools(request.memory)]
            ),
            _FINISH,
        ]

    async def invoke(self, name: str, invocation: ToolInvocation) -> ToolResult:
        """Run one tool call; every failure of the call itself becomes a failed result.
        A tool declared with `oauth` runs with its person's grant, and the call fails
        with `AUTH_REQUIRED` (the run waits for them to connect) when they have none that
        works: none stored, refresh refused, or an API answered it 401."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult.failure(ErrorCode.TOOL_NOT_FOUND, f"no tool named {name!r}")
        if tool.oauth is None:
            return await self._run(tool, invocation, None)
        provider = tool.oauth.provider
        person = person_of(tool.oauth.token, invocation)
        token = await self._grants.bearer(provider, person)
        assert person is not None  # `bearer` found none for nobody
        grant = ToolGrant(provider, person, token)
        result = await self._run(tool, invocation, grant)
        if grant.refused:
            raise await self._grants.refused(provider, person)
        return result.model_copy(update={"acting_for": person})

    async def _run(
        self, tool: Tool, invocation: ToolInvocation, grant: ToolGrant | None
    ) -> ToolResult:
        try:
            kwargs = _parse_arguments(tool, invocation.arguments)
            if tool.context_param is not None:
                kwargs[tool.context_param] = self._context(invocation, grant)
            if inspect.iscoroutinefunction(tool.fn):
                data = await tool.fn(**kwargs)
            else:
                # Sync tools may block on disk or network; keep the event loop free.
                data = await asyncio.to_thread(tool.fn, **kwargs)
            return ToolResult.success(to_jsonable_python(data))
        except ToolError as e:
            return ToolResult.failure(e.code, e.message, e.details)
        except Exception as e:  # CancelledError is a BaseException and propagates
            return ToolResult.failure(ErrorCode.TOOL_FAILED, f"{type(e).__name__}: {e}")

    def activities(self) -> list[Callable[..., Any]]:
        """One activity per registered tool, named after it, `tool_catalogue`, the
        client's checks of a run's names before it starts one, and the sources' activities."""
        return [
            self._catalogue_activity,
            self._check_activity,
            self._checked_catalogue_activity,
            self._preview_activity,
            *(self._activity(name) for name in self._tools),
            *(fn for source in self._sources for fn in source.activities()),
        ]

    def unknown(self, request: CatalogueRequest, names: Iterable[str] | None = None) -> list[str]:
        """The names a run asks for that this worker has no tool for (among `names`,
        when given: the registered tools' and the sources')."""
        known = {*(self.names if names is None else names), "*"}
        return sorted({*(request.tools or []), *request.require_approval} - known)

    @activity.defn(name=TOOL_CATALOGUE_ACTIVITY)
    async def _catalogue_activity(
        self, request: CatalogueRequest
    ) -> Catalogue | list[ToolDefinition]:
        listings = await self._listings()
        if refusal := self._refusal(request, listings):
            raise ApplicationError(refusal.message, type=refusal.code, non_retryable=True)
        catalogue = self._resolved(request, listings)
        # A workflow from before `Catalogue` reads a bare list: the compatibility ledger's
        # `catalogue-as-a-list`, which goes on its date.
        return catalogue.tools if request.profile is None else catalogue

    @activity.defn(name=CATALOGUE_CHECK_ACTIVITY)
    async def _check_activity(self, request: CatalogueRequest) -> ErrorInfo | None:
        """Why this worker would refuse a run that asks for `request`, as a value: the
        client asks before it starts the run, and a refusal is its answer, not a failed
        activity in the worker's log."""
        return self._refusal(request, await self._listings())

    @activity.defn(name=CHECKED_CATALOGUE_ACTIVITY)
    async def _checked_catalogue_activity(self, request: CatalogueRequest) -> CheckedCatalogue:
        """`catalogue_check`'s answer, or the catalogue the run would resolve, which the
        client starts the run with: one task for both the check and the run's tools."""
        listings = await self._listings()
        if refusal := self._refusal(request, listings):
            return CheckedCatalogue(refusal=refusal)
        catalogue = self._resolved(request, listings)
        if len(catalogue.model_dump_json()) > FOLDED_CATALOGUE_LIMIT:
            return CheckedCatalogue()
        return CheckedCatalogue(catalogue=catalogue)

    def _resolved(self, request: CatalogueRequest, listings: list[ToolListing]) -> Catalogue:
        """What a run asking for `request` keeps of this worker's configuration."""
        listed = [t for listing in listings for t in listing.tools]
        agents = {name: self._agents[name] for name in request.agents}
        profiles = {name: self._model_queues.get(name) for name in self._profiles or ()}
        return Catalogue(
            tools=self.catalogue(request, [*listed, *map(_agent_tool, agents.items())]),
            model_queue=self._model_queues.get(request.profile or ""),
            profiles=profiles,
            agents=agents,
            notify_events=self._notify_events,
            payload_limit=self.payload_limit,
            guardrails=self._guardrails,
            context_budgets=self._context_budgets,
            search_index=self.search_index,
        )

    @activity.defn(name=PREVIEW_ACTIVITY)
    async def _preview_activity(self, request: PreviewRequest) -> dict[str, Preview]:
        """The previews of an answer's gated calls, by call id (`tarry.contracts.previews`)."""
        return {
            call.call_id: await asyncio.to_thread(self.preview, request.workspace, call)
            for call in request.calls
        }

    def preview(self, workspace: str, call: PreviewCall) -> Preview:
        """What a person deciding on `call` sees: its tool's preview, or its arguments (an
        MCP server's tool, a sub-agent, a tool that declares none, or a preview that failed:
        the call's own activity will say what is wrong with it)."""
        tool = self._tools.get(call.tool) if call.server is None else None
        if tool is None or tool.preview is None:
            return arguments_preview(call.arguments)
        try:
            kwargs = _parse_arguments(tool, call.arguments)
            if tool.context_param is not None:
                invocation = ToolInvocation(run_id=workspace, call_id=call.call_id, arguments="")
                kwargs[tool.context_param] = self._context(invocation)
            preview: Preview = tool.preview(**kwargs)
        except Exception as e:
            activity.logger.warning("the preview of %s failed: %s", call.tool, e)
            return arguments_preview(call.arguments)
        return preview

    async def _listings(self) -> list[ToolListing]:
        return list(await asyncio.gather(*(source.listing() for source in self._sources)))

    def _refusal(self, request: CatalogueRequest, listings: list[ToolListing]) -> ErrorInfo | None:
        """`TOOL_NOT_FOUND` or `LLM_UNKNOWN_PROFILE` when the run names a tool, agent or
        model profile this worker lacks (with the names there are), `MODEL_NOT_ALLOWED`
        when an agent's profile is outside `request.models`; None when it may start."""
        listed = [t.name for listing in listings for t in listing.tools]
        names = [
            *self.names,
            *listed,
            *(AGENT_TOOL_PREFIX + name for name in request.agents),
            *request.memory.tools(),
        ]
        # A typo in `require_approval` would otherwise switch a gate off without a word.
        if unknown := self.unknown(request, names):
            why = "".join(f"; {reason}" for listing in listings for reason in listing.unavailable)
            return ErrorInfo(
                code=ErrorCode.TOOL_NOT_FOUND,
                message=f"no tool named {', '.join(map(repr, unknown))}; this worker has "
                f"{', '.join(names)} ('*' in require_approval gates them all){why}",
            )
        # A typo in `--model` would otherwise fail the run only at its first model call.
        if self._profiles is not None and request.profile not in (None, *self._profiles):
            return ErrorInfo(
                code=ErrorCode.LLM_UNKNOWN_PROFILE,
                message=f"no model profile {request.profile!r} on this worker; "
                f"configured: {', '.join(self._profiles)}",
            )
        if request.memory is not MemoryAccess.OFF and not self.search_index:
            return ErrorInfo(
                code=ErrorCode.SEARCH_UNAVAILABLE,
                message=f"memory_access {request.memory.value!r}: this worker keeps no memory"
                " store; set TARRY_SEARCH_INDEX (a SQLite file's path) for it, or start the run"
                " with memory off",
            )
        if unknown_agents := sorted(set(request.agents) - set(self._agents)):
            return ErrorInfo(
                code=ErrorCode.TOOL_NOT_FOUND,
                message=f"no agent named {', '.join(map(repr, unknown_agents))}; this worker's "
                f"config has {', '.join(self._agents) or 'none'} ([agents.NAME] tables)",
            )
        allowed = Limits(models=None if request.models is None else tuple(request.models))
        for name in request.agents:
            spec = self._agents[name]
            # Its runs would be the starter's, on a profile their limits keep them from.
            if refused := allowed.model_problem(spec.model, f"agent {name!r}"):
                return ErrorInfo(code=refused.code, message=refused.message)
            # A typo in an agent's tools would otherwise fail each of its runs, not this one.
            needs = CatalogueRequest(tools=spec.tools, require_approval=spec.require_approval)
            if unknown := self.unknown(needs, [*self.names, *listed]):
                return ErrorInfo(
                    code=ErrorCode.TOOL_NOT_FOUND,
                    message=f"agent {name!r} names no tool of this worker: "
                    f"{', '.join(map(repr, unknown))}",
                )
        return None

    def _activity(self, name: str) -> Callable[[ToolInvocation], Awaitable[ToolResult]]:
        async def run_tool(invocation: ToolInvocation) -> ToolResult:
            with traces.tool_call(name, invocation) as span:
                result = await self.invoke(name, invocation)
                traces.tool_ended(span, result)
            metrics.tool_called(name, result)
            return result

        return activity.defn(name=name)(run_tool)

    def _context(self, invocation: ToolInvocation, grant: ToolGrant | None = None) -> ToolContext:
        # The run id names a directory directly under the root, so it must be one plain name.
        run_id = invocation.run_id
        if run_id in ("", ".", "..") or any(c in run_id for c in "/\\\0"):
            raise ToolError(ErrorCode.TOOL_FORBIDDEN, f"run id cannot name a workspace: {run_id!r}")
        workspace = self._root / run_id
        make_workspace(workspace, self._template)
        return ToolContext(run_id, invocation.call_id, workspace, self._max_read_bytes, grant)


def _agent_tool(agent: tuple[str, AgentSpec]) -> ToolDefinition:
    """The tool `agent__NAME` that hands a task to the sub-agent `NAME`: the workflow
    runs its calls itself, as child runs. Not idempotent: a call cut short is not
    delegated again."""
    name, spec = agent
    return ToolDefinition(
        name=AGENT_TOOL_PREFIX + name,
        description=spec.description or AgentArguments.__doc__ or "",
        parameters=AgentArguments.model_json_schema(),
        idempotent=False,
    )


_MEMORY_ARGUMENTS: tuple[type[BaseModel], ...] = (
    RememberArguments,
    RecallArguments,
    ForgetArguments,
)
_MEMORY_TOOLS = {
    name: ToolDefinition(
        name=name, description=arguments.__doc__ or "", parameters=arguments.model_json_schema()
    )
    for name, arguments in zip(MEMORY_TOOLS, _MEMORY_ARGUMENTS, strict=True)
}


def _memory_tools(access: MemoryAccess) -> list[ToolDefinition]:
    """The memory tools `access` offers (`activities.memories` runs their calls)."""
    return [_MEMORY_TOOLS[name] for name in access.tools()]


def _parse_arguments(tool: Tool, text: str) -> dict[str, Any]:
    """The model's raw argument text, as validated keyword arguments for the tool."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(
            ErrorCode.TOOL_INVALID_ARGUMENTS, f"arguments are not valid JSON: {e}"
        ) from None
    if not isinstance(raw, dict):
        raise ToolError(ErrorCode.TOOL_INVALID_ARGUMENTS, "arguments must be a JSON object")
    try:
        args = tool.arguments.model_validate(raw)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False, include_context=False)
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in errors)
        raise ToolError(
            ErrorCode.TOOL_INVALID_ARGUMENTS,
            f"invalid arguments for {tool.name}: {problems}",
            {"errors": to_jsonable_python(errors)},
        ) from None
    # Attributes, not model_dump(): nested models reach the tool as models.
    return {field: getattr(args, field) for field in tool.arguments.model_fields}
