"""The tools a worker offers to the model, each run as its own Temporal activity.

A tool is a plain typed function, and its signature is the single source of truth:
pydantic turns it into both the JSON schema the model sees and the validator its
arguments pass through, so the two cannot drift apart. Each tool is an activity
named after it, so history reads `read_file`, `write_file`, ... and each call
times out and retries on its own.

Whatever goes wrong in a call is the model's business, not Temporal's: bad
arguments, forbidden paths and exceptions come back as a failed `ToolResult` the
model reads and reacts to. Raising would make Temporal retry a call that would
only fail the same way again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python
from temporalio import activity

from tarry.contracts import FINISH_TOOL, ErrorCode, FinishArguments, ToolInvocation, ToolResult

_MAX_PATH = 1024
_MAX_NAME = 255
"""Longer paths and names are refused before the filesystem fails on them."""


class ToolError(Exception):
    """Raised by a tool to fail with a specific code and a message the model will read."""

    def __init__(
        self, code: ErrorCode, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call it serves; injected, never given by the model."""

    run_id: str
    call_id: str
    workspace: Path
    """This run's own directory, `<workspace_root>/<run_id>`."""

    def resolve(self, path: str) -> Path:
        """Confine a model-given path to the workspace, following symlinks."""
        # `..` and absolute paths are refused outright, even when they would land
        # inside: the model should not learn to navigate the worker's filesystem.
        relative = Path(path)
        if "\0" in path or relative.is_absolute() or ".." in relative.parts:
            raise ToolError(
                ErrorCode.TOOL_FORBIDDEN, f"path must stay inside the workspace: {path}"
            )
        if len(path) > _MAX_PATH or any(len(part) > _MAX_NAME for part in relative.parts):
            raise ToolError(ErrorCode.TOOL_FORBIDDEN, "path too long for the workspace")
        root = self.workspace.resolve()
        target = (root / relative).resolve()
        if not target.is_relative_to(root):
            raise ToolError(ErrorCode.TOOL_FORBIDDEN, f"path leads outside the workspace: {path}")
        # A hard link is a second name for a file that may live outside: reading it
        # would leak that file, writing it would change it.
        if target.is_file() and target.stat().st_nlink > 1:
            raise ToolError(
                ErrorCode.TOOL_FORBIDDEN, f"{path} is hard-linked to a file outside the workspace"
            )
        return target


@dataclass(frozen=True)
class Tool:
    """A function the model may call, with the schema of its arguments."""

    name: str
    description: str
    arguments: type[BaseModel]
    """The model's arguments, built from the signature; the `ToolContext` is not among them."""
    fn: Callable[..., Any]
    context_param: str | None = None
    """The parameter that receives the `ToolContext`, if the function takes one."""
    approval: bool = False
    """Every call waits for a person's decision, whatever the run asks."""
    idempotent: bool = True
    """Running a call twice does no harm, so a call cut short (its worker died) is retried.
    False: one attempt only, and the model hears `TOOL_OUTCOME_UNKNOWN` if it is cut short."""

    def spec(self) -> dict[str, Any]:
        """The entry for the `tools` list of an OpenAI chat completion request."""
        return _function_spec(self.name, self.description, self.arguments)


def _function_spec(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": arguments.model_json_schema(),
        },
    }


def _make_tool(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    approval: bool,
    idempotent: bool,
) -> Tool:
    tool_name = name or fn.__name__
    # Resolve string annotations, keeping `Annotated` metadata such as descriptions.
    hints = inspect.get_annotations(fn, eval_str=True)
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(fn).parameters.values():
        # Arguments arrive by keyword from a JSON object, so nothing else can be filled.
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"tool {tool_name}: parameter {param.name} must be passable by keyword")
        hint = hints.get(param.name, Any)
        if hint is ToolContext:
            context_param = param.name
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hint, default)
    # Unknown arguments are rejected, so a misspelt optional one is not silently ignored.
    arguments = create_model(tool_name, __config__=ConfigDict(extra="forbid"), **fields)
    if description is None:
        # The docstring's first paragraph, unwrapped: the rest is for programmers.
        paragraph = (inspect.getdoc(fn) or "").split("\n\n")[0]
        description = " ".join(paragraph.split())
    return Tool(tool_name, description, arguments, fn, context_param, approval, idempotent)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    approval: bool = False,
    idempotent: bool = True,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: bool = False,
    idempotent: bool = True,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a typed function a tool: `@tool` or `@tool(name=..., description=..., approval=True)`.

    `approval=True` makes every call wait for a person's decision before it runs;
    `idempotent=False` (sending mail, paying) runs each call at most once."""
    if fn is not None:
        return _make_tool(fn, name, description, approval, idempotent)
    return lambda f: _make_tool(f, name, description, approval, idempotent)


# --- Built-in tools ---------------------------------------------------------

WorkspacePath = Annotated[
    str, Field(description="A path relative to the workspace, such as 'notes/todo.md'.")
]


@tool
def read_file(ctx: ToolContext, path: WorkspacePath) -> str:
    """Read a text file from the workspace."""
    target = ctx.resolve(path)
    if not target.exists():
        raise ToolError(ErrorCode.TOOL_FAILED, f"no such file: {path}")
    if target.is_dir():
        raise ToolError(ErrorCode.TOOL_FAILED, f"is a directory, not a file: {path}")
    return target.read_text(encoding="utf-8", errors="replace")


@tool
def write_file(ctx: ToolContext, path: WorkspacePath, content: str) -> dict[str, Any]:
    """Write a text file in the workspace, creating directories; replaces an existing file."""
    target = ctx.resolve(path)
    if target.is_dir():
        raise ToolError(ErrorCode.TOOL_FAILED, f"is a directory, not a file: {path}")
    data = content.encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return {"path": target.relative_to(ctx.workspace.resolve()).as_posix(), "bytes": len(data)}


@tool
def list_files(ctx: ToolContext, path: WorkspacePath = ".") -> list[str]:
    """List a directory of the workspace; directory names end with '/'."""
    target = ctx.resolve(path)
    if not target.is_dir():
        raise ToolError(ErrorCode.TOOL_FAILED, f"no such directory: {path}")
    return sorted(entry.name + "/" if entry.is_dir() else entry.name for entry in target.iterdir())


BUILTIN_TOOLS: tuple[Tool, ...] = (read_file, write_file, list_files)

_FINISH_SPEC = _function_spec(
    FINISH_TOOL, "End the run with its final result, once the task is done.", FinishArguments
)


class ToolHost:
    """The tools of one worker: their specs for the model, and their activities."""

    def __init__(self, workspace_root: Path, tools: Iterable[Tool] = BUILTIN_TOOLS) -> None:
        self._root = workspace_root
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name == FINISH_TOOL:
            raise ValueError(f"{FINISH_TOOL!r} is reserved: the workflow handles it itself")
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        return [*self._tools, FINISH_TOOL]

    def specs(self, allowed: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The specs of the allowed tools (None: all), in registration order, `finish` last."""
        offered = [t for t in self._tools.values() if allowed is None or t.name in allowed]
        return [*(t.spec() for t in offered), _FINISH_SPEC]

    def gated(
        self, allowed: Sequence[str] | None, require_approval: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """The allowed tools whose calls need a decision, with their argument schemas:
        those the run names (`*`: all) and those that declare `approval=True`."""
        return {
            t.name: t.arguments.model_json_schema()
            for t in self._tools.values()
            if (allowed is None or t.name in allowed)
            and (t.approval or "*" in require_approval or t.name in require_approval)
        }

    def non_idempotent(self, allowed: Sequence[str] | None) -> list[str]:
        """The allowed tools that must not run twice."""
        return [
            t.name
            for t in self._tools.values()
            if (allowed is None or t.name in allowed) and not t.idempotent
        ]

    async def invoke(self, name: str, invocation: ToolInvocation) -> ToolResult:
        """Run one tool call; every failure of the call itself becomes a failed result."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult.failure(ErrorCode.TOOL_NOT_FOUND, f"no tool named {name!r}")
        try:
            kwargs = _parse_arguments(tool, invocation.arguments)
            if tool.context_param is not None:
                kwargs[tool.context_param] = self._context(invocation)
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
        """One activity per registered tool, named after it."""
        return [self._activity(name) for name in self._tools]

    def _activity(self, name: str) -> Callable[[ToolInvocation], Awaitable[ToolResult]]:
        async def run_tool(invocation: ToolInvocation) -> ToolResult:
            return await self.invoke(name, invocation)

        return activity.defn(name=name)(run_tool)

    def _context(self, invocation: ToolInvocation) -> ToolContext:
        # The run id names a directory directly under the root, so it must be one plain name.
        run_id = invocation.run_id
        if run_id in ("", ".", "..") or any(c in run_id for c in "/\\\0"):
            raise ToolError(ErrorCode.TOOL_FORBIDDEN, f"run id cannot name a workspace: {run_id!r}")
        workspace = self._root / run_id
        workspace.mkdir(parents=True, exist_ok=True)
        return ToolContext(run_id, invocation.call_id, workspace)


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
