"""What `tarry mcp`'s tools answer: JSON, as text and as structured content, and, for a
run waiting for a decision, each pending call's preview as a person reads it; or a tool
error with the code every door uses; and a tool's arguments closed to those it takes."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError

from tarry.cli.previews import pending_preview
from tarry.client import TarryError
from tarry.contracts import Closed, ErrorCode, PendingApproval
from tarry.contracts.guardrails import held_line

__all__ = ["answer", "calls_text", "close_arguments", "error", "json_of"]


def json_of(value: BaseModel) -> dict[str, Any]:
    return value.model_dump(mode="json")


async def answer(work: Callable[[], Awaitable[Any]]) -> CallToolResult:
    """`work`'s JSON as the tool's result (a list comes as `{"result": [...]}`, since
    structured content is an object), then, for a run's state with calls waiting for a
    decision, what each would do (`calls_text`); an error a caller can act on as a tool
    error."""
    try:
        value = await work()
    except TarryError as e:
        return error(e.code, e.message)
    except ValidationError as e:
        return error(ErrorCode.INPUT_INVALID, str(e))
    except TimeoutError:
        return error(None, "timed out waiting for the run")
    except Exception as e:  # Temporal unreachable, a bad address or key: one line
        return error(None, f"{type(e).__name__}: {e}")
    structured = value if isinstance(value, dict) else {"result": value}
    content = [TextContent(text=json.dumps(value))]
    if isinstance(value, dict) and value.get("pending_approvals"):
        pending = [PendingApproval.model_validate(p) for p in value["pending_approvals"]]
        content.append(TextContent(text=calls_text(pending)))
    return CallToolResult(content=content, structured_content=structured)


def calls_text(pending: list[PendingApproval]) -> str:
    """The calls a run waits on, each with its preview whole (a diff, a new file's lines,
    the arguments with long strings as text; a text a guardrail holds, its matches
    marked): what the person decides on, to be shown to them as it is before `decide`."""
    head = "Show the person each call's preview, whole, before deciding; it is what they approve."
    calls = [f"{_what(p)}, call_id {p.call_id!r}:\n{pending_preview(p).plain}" for p in pending]
    return "\n\n".join([head, *calls])


def _what(pending: PendingApproval) -> str:
    """A call's tool; a text a guardrail holds as that, with how each decision acts on it."""
    if pending.guardrail is None:
        return pending.tool
    return (
        f"{held_line(pending.tool, pending.guardrail)} (approve allows it, approve with"
        ' arguments {"text": ...} goes on with that text, reject blocks it)'
    )


def error(code: ErrorCode | None, message: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text=f"{code}: {message}" if code else message)],
        structured_content={"code": code, "message": message},
        is_error=True,
    )


def close_arguments(server: MCPServer, name: str) -> None:
    """The tool `name` refuses an argument it does not take, naming the nearest one it
    does (`Closed`), and its schema says so: the SDK drops such an argument without a
    word, and a misspelled `require_approval` would start a run without its gate."""
    tool = server._tool_manager.get_tool(name)
    assert tool is not None, name
    arguments = tool.fn_metadata.arg_model
    tool.fn_metadata.arg_model = type(arguments.__name__, (Closed, arguments), {})
    tool.parameters["additionalProperties"] = False
