"""How a tool is declared: `@tool`, `Tool`, `ToolContext`, `ToolError`.

A tool is a plain typed function, and its signature is the single source of truth:
pydantic turns it into both the JSON schema the model sees and the validator its
arguments pass through, so the two cannot drift apart.

This module declares tools; it runs none. A library user declares tools here, at the
ground floor, without importing the worker; `activities.tool_calls.ToolHost` runs them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import BaseModel, ConfigDict, create_model

from tarry.contracts import ErrorCode, ToolDefinition
from tarry.contracts.previews import Preview

if TYPE_CHECKING:
    from tarry.core.grants import ToolGrant

__all__ = ["MAX_READ_BYTES", "OAuth", "Tool", "ToolContext", "ToolError", "tool"]

MAX_READ_BYTES = 1024 * 1024
"""The most a tool reads into one result by default (`TARRY_READ_FILE_MAX_BYTES`): a
result is sent to the model with every later call, and kept in history."""

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
    max_read_bytes: int = MAX_READ_BYTES
    """The most a tool should read into one result (the worker's setting)."""
    grant: ToolGrant | None = None
    """The person's grant a tool declared with `oauth` calls its API with (an
    `httpx.Auth`, `grant.client()`); None for any other tool, and in a preview."""

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
class OAuth:
    """A tool's need of a person's grant to an OAuth provider (`[oauth_providers.NAME]`),
    and whose: the run's owner (`owner`), or the person who approved the call
    (`approver`; the owner's where no person decided). A call finds it in
    `ToolContext.grant`; a person who has not connected makes the run wait for them."""

    provider: str
    token: Literal["owner", "approver"] = "owner"


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
    quick: bool = False
    """The tool only reads and answers in milliseconds: its calls run as local activities
    (see `ToolDefinition.local`), unless the run gates them."""
    preview: Callable[..., Preview] | None = None
    """What a person deciding on a gated call is shown: called like the tool (the same
    arguments and `ToolContext`), as an activity, when the call is gated; it must change
    nothing. None: the call's arguments (`tarry.core.previews.arguments_preview`)."""
    oauth: OAuth | None = None
    """Each call carries a person's grant to this provider (`ToolContext.grant`)."""

    def __post_init__(self) -> None:
        # A local activity that its worker's death cut short runs again, unasked.
        if self.quick and not self.idempotent:
            raise TypeError(f"tool {self.name}: a quick tool must be idempotent")

    def definition(self) -> ToolDefinition:
        """The tool as a run's catalogue holds it."""
        return ToolDefinition(
            name=self.name,
            description=self.description,
            parameters=self.arguments.model_json_schema(),
            idempotent=self.idempotent,
            needs_approval=self.approval,
            local=self.quick,
            acts_as=None if self.oauth is None else self.oauth.token,
        )


def _make_tool(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    approval: bool,
    idempotent: bool,
    quick: bool,
    preview: Callable[..., Preview] | None = None,
    oauth: str | OAuth | None = None,
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
    if isinstance(oauth, str):
        oauth = OAuth(oauth)
    return Tool(
        tool_name,
        description,
        arguments,
        fn,
        context_param,
        approval,
        idempotent,
        quick,
        preview,
        oauth,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    approval: bool = False,
    idempotent: bool = True,
    quick: bool = False,
    preview: Callable[..., Preview] | None = None,
    oauth: str | OAuth | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    approval: bool = False,
    idempotent: bool = True,
    quick: bool = False,
    preview: Callable[..., Preview] | None = None,
    oauth: str | OAuth | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a typed function a tool: `@tool` or `@tool(name=..., description=..., approval=True)`.

    `approval=True` makes every call wait for a person's decision before it runs;
    `idempotent=False` (sending mail, paying) runs each call at most once; `quick=True`
    (a read-only tool that answers in milliseconds) runs ungated calls as local
    activities, a server round trip fewer per call; `preview=fn` shows a person deciding on
    a gated call what it would do (`fn` takes the tool's arguments and returns a
    `Preview`: `write_file`'s is a diff); `oauth="PROVIDER"` (or `OAuth("PROVIDER",
    token="approver")`) makes each call carry a person's grant to that provider
    (`ToolContext.grant`), and a run wait for them to connect when they have none."""
    options = (approval, idempotent, quick, preview, oauth)
    if fn is not None:
        return _make_tool(fn, name, description, *options)
    return lambda f: _make_tool(f, name, description, *options)
