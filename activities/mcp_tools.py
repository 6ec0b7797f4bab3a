"""MCP servers as tools: their tools join a run's catalogue as `SERVER__TOOL`, and each
call runs as the `mcp_tool` activity.

What a server says is read once per run, by the client's check before its start
(`checked_catalogue`) or by the run's `tool_catalogue` activity, and the run keeps it:
replay and later turns never ask the server what it offers. Its annotations decide how a
call is treated: `readOnlyHint` or `idempotentHint` make a call safe to retry; without
either it runs at most once; `destructiveHint` makes it wait for a person's decision
(unless the server's config says `destructive_needs_approval = false`).

Needs the `mcp` extra; `workers.plugin` imports this only for a worker configured with
MCP servers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from mcp import Client, MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    AudioContent,
    CallToolResult,
    ContentBlock,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
    ToolAnnotations,
)
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import metrics, traces
from activities.grants import Grants, person_of
from activities.mcp_connections import Connection, ServerDown, session_as
from activities.sendable import provider_name
from activities.tool_calls import ToolListing
from tarry.config.settings import McpServer
from tarry.contracts import (
    MCP_TOOL_ACTIVITY,
    ErrorCode,
    ErrorInfo,
    McpInvocation,
    ToolDefinition,
    ToolResult,
)

__all__ = ["CONNECTION_LOST", "McpHost", "tool_definition", "tool_name", "tool_result"]

log = logging.getLogger("tarry.mcp")

CONNECTION_LOST = "MCP_CONNECTION_LOST"
"""The failure type of a call whose server went away while it ran: retried for a tool
that may run twice, `TOOL_OUTCOME_UNKNOWN` for one that may not."""
_DEFAULT_BUDGET = timedelta(seconds=10)


def tool_name(server: str, tool: str) -> str:
    """`SERVER__TOOL`, as every provider takes a tool name (`provider_name`)."""
    return provider_name(f"{server}__{tool}")


def tool_definition(server: str, config: McpServer, tool: Tool) -> ToolDefinition:
    """A server's tool as a run's catalogue holds it, its annotations read as Tarry's
    treatment of its calls."""
    hints = tool.annotations or ToolAnnotations()
    # MCP: idempotentHint and destructiveHint mean something only for a tool that writes.
    writes = not hints.read_only_hint
    destructive = writes and bool(hints.destructive_hint)
    return ToolDefinition(
        name=tool_name(server, tool.name),
        description=tool.description or tool.title or "",
        parameters=tool.input_schema,
        idempotent=not writes or bool(hints.idempotent_hint),
        needs_approval=destructive and config.destructive_needs_approval,
        # Marked both, the server vouches that a call is safe to run again unasked.
        local=bool(hints.read_only_hint and hints.idempotent_hint),
        server=server,
        remote_name=tool.name,
        acts_as=config.token if config.auth == "oauth" and config.token != "service" else None,
    )


def tool_result(server: str, tool: str, result: CallToolResult) -> ToolResult:
    """What the model reads of a result: its text, with a line for each block that is
    not text; the blocks themselves are kept as the server gave them when any is not."""
    text = "\n".join(_summary(block) for block in result.content)
    blocks = None
    if any(not isinstance(block, TextContent) for block in result.content):
        blocks = [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content
        ]
    if result.is_error:
        error = ErrorInfo(
            code=ErrorCode.TOOL_FAILED,
            message=text or f"{tool} on MCP server {server!r} failed without a word",
            details={"server": server, "tool": tool},
        )
        return ToolResult(ok=False, error=error, blocks=blocks)
    data = result.structured_content if not result.content else text
    return ToolResult(ok=True, data=data, blocks=blocks)


def _summary(block: ContentBlock) -> str:
    """A block as the model reads it: text as it is, anything else as one line."""
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    resource = block.resource
    if isinstance(resource, TextResourceContents):
        return f"[resource: {resource.uri}]\n{resource.text}"
    kind = resource.mime_type or "binary"
    return f"[resource: {resource.uri}, {kind}, {_decoded_size(resource.blob)} bytes]"


def _decoded_size(base64_text: str) -> int:
    return len(base64_text) * 3 // 4 - base64_text[-2:].count("=")


class McpHost:
    """The worker's MCP servers: a `ToolSource` for `activities.tool_calls.ToolHost`."""

    def __init__(self, servers: Mapping[str, McpServer], grants: Grants | None = None) -> None:
        self._configs = dict(servers)
        self._grants = grants or Grants(None)
        self._connections = {name: Connection(name, c) for name, c in servers.items()}

    async def listing(self) -> ToolListing:
        """Every server's tools, asked now; a server that does not answer within half the
        activity's time adds none, and says why."""
        listed = await asyncio.gather(
            *(self._list(name) for name in self._connections), return_exceptions=True
        )
        listing = ToolListing(tools=[])
        for name, tools in zip(self._connections, listed, strict=True):
            if isinstance(tools, BaseException):
                log.warning("MCP server %r listed no tools: %s", name, tools)
                listing.unavailable.append(f"MCP server {name!r} listed no tools: {tools}")
            else:
                listing.tools.extend(tools)
        return listing

    async def _list(self, name: str) -> list[ToolDefinition]:
        seconds = _budget().total_seconds() / 2
        timeout = asyncio.timeout(seconds)
        try:
            async with timeout:
                tools = await _every_page(self._connections[name])
        except TimeoutError:
            if not timeout.expired():
                raise
            # asyncio's own says nothing: the warning would end in a bare colon.
            raise TimeoutError(
                f"no answer within {seconds:g} s (half the step's `timeouts.tool`; "
                "a stdio server's start counts)"
            ) from None
        return [tool_definition(name, self._configs[name], t) for t in tools]

    def activities(self) -> list[Callable[..., Any]]:
        return [self.call]

    @activity.defn(name=MCP_TOOL_ACTIVITY)
    async def call(self, invocation: McpInvocation) -> ToolResult:
        name = f"{invocation.server}__{invocation.tool}"
        with traces.tool_call(name, invocation) as span:
            result = await self._call(invocation)
            traces.tool_ended(span, result)
        metrics.tool_called(name, result)
        return result

    async def _call(self, invocation: McpInvocation) -> ToolResult:
        """One call of a server's tool. A server that cannot be reached is asked again
        until the attempt's time is nearly up, then the model reads `TOOL_FAILED` naming
        it; one that goes away during the call fails the attempt (`CONNECTION_LOST`)."""
        server, tool = invocation.server, invocation.tool
        connection = self._connections.get(server)
        if connection is None:
            return ToolResult.failure(
                ErrorCode.TOOL_FAILED, f"this worker has no MCP server {server!r} any more"
            )
        try:
            arguments = json.loads(invocation.arguments or "{}")
        except json.JSONDecodeError as e:
            return ToolResult.failure(
                ErrorCode.TOOL_INVALID_ARGUMENTS, f"arguments are not valid JSON: {e}"
            )
        if not isinstance(arguments, dict):
            return ToolResult.failure(
                ErrorCode.TOOL_INVALID_ARGUMENTS, "arguments must be a JSON object"
            )
        config = self._configs[server]
        if config.auth == "oauth" and config.token != "service":
            return await self._call_as(invocation, config, arguments)
        client = await _reach(connection)
        try:
            result = await client.call_tool(tool, arguments)
        except Exception as e:
            if (refusal := _refusal(server, tool, e)) is not None:
                return refusal
            await connection.retire()
            raise _lost(server, tool, e) from e
        return tool_result(server, tool, result)

    async def _call_as(
        self, invocation: McpInvocation, config: McpServer, arguments: dict[str, Any]
    ) -> ToolResult:
        """A call with a person's own grant, in a session of its own; `AUTH_REQUIRED`
        (the run waits for them to connect) when they have none that works."""
        server, tool = invocation.server, invocation.tool
        person = person_of(config.token, invocation)
        bearer = await self._grants.bearer(server, person)
        refused = False

        def mark_refused() -> None:
            nonlocal refused
            refused = True

        try:
            async with session_as(config, bearer, mark_refused) as client:
                result = await client.call_tool(tool, arguments)
        except Exception as e:
            if refused and person is not None:
                raise await self._grants.refused(server, person) from None
            if (refusal := _refusal(server, tool, e)) is not None:
                return refusal
            raise _lost(server, tool, e) from None
        return tool_result(server, tool, result).model_copy(update={"acting_for": person})

    async def aclose(self) -> None:
        """Closes every session (and stops every stdio server); once workers stopped."""
        await asyncio.gather(*(c.retire() for c in self._connections.values()))


async def _every_page(connection: Connection) -> list[Tool]:
    """The server's tools, every page of them; a session found broken is retired."""
    client = await connection.client()
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        try:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        except Exception as e:
            if _broken(e):
                await connection.retire()
            raise
        tools.extend(page.tools)
        if (cursor := page.next_cursor) is None:
            return tools


def _refusal(server: str, tool: str, e: Exception) -> ToolResult | None:
    """The model's `TOOL_FAILED` for an error reply over a session that still works."""
    if not isinstance(e, MCPError) or _broken(e):
        return None
    return ToolResult.failure(
        ErrorCode.TOOL_FAILED,
        f"MCP server {server!r} refused {tool}: {e.message}",
        {"server": server, "tool": tool, "code": e.code},
    )


def _lost(server: str, tool: str, e: Exception) -> ApplicationError:
    return ApplicationError(
        f"MCP server {server!r} went away during {tool}: {e}", type=CONNECTION_LOST
    )


def _broken(e: Exception) -> bool:
    """Whether the session is gone: an error reply (an unknown tool, invalid arguments)
    comes over a session that still works; a closed connection or a transport's own
    exception does not."""
    return not isinstance(e, MCPError) or e.code == CONNECTION_CLOSED


async def _reach(connection: Connection) -> Client:
    """The connection's session, asked for again with backoff while the server is down,
    until most of the attempt's time is spent: the call was never sent, so waiting is
    safe for any tool; then a non-retryable `TOOL_FAILED` that names the server."""
    deadline = time.monotonic() + _budget().total_seconds() * 0.8
    delay = 0.2
    while True:
        try:
            return await connection.client()
        except ServerDown as e:
            if time.monotonic() + delay > deadline:
                raise ApplicationError(
                    str(e), type=ErrorCode.TOOL_FAILED, non_retryable=True
                ) from e
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def _budget() -> timedelta:
    """The time one attempt of the running activity has."""
    if activity.in_activity():
        return activity.info().start_to_close_timeout or _DEFAULT_BUDGET
    return _DEFAULT_BUDGET
