"""An MCP server for the tests, built with the `mcp` package's server API: tools with
every annotation Tarry reads, slow ones to kill mid-call, an image, a failing one.

    python tests/mcp_servers.py stdio [--variant b] [--marks DIR]
    python tests/mcp_servers.py http --port N [--variant b] [--marks DIR]

`--marks DIR`: each call of a slow tool writes `<tool>.<pid>` there as it starts, so a
test knows the call is under way and which process serves it. Variant `b` lists other
tools (`lookup` is gone, `lookup_v2` is new), as a server does after an upgrade.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a5e8d5f50000000049454e44ae426082"
    )
).decode()
"""A 1x1 PNG."""


def build(variant: str, marks: Path | None) -> MCPServer:
    server: MCPServer = MCPServer("tarry-test")

    def mark(tool: str) -> None:
        if marks is not None:
            (marks / f"{tool}.{os.getpid()}").touch()

    if variant == "a":

        @server.tool(annotations=READ_ONLY)
        def lookup(key: str) -> str:
            """Looks a key up in a fixed table."""
            return f"{key} is 42"

    else:

        @server.tool(annotations=READ_ONLY)
        def lookup_v2(key: str) -> str:
            """Looks a key up in the new table."""
            return f"{key} is 43"

    @server.tool(annotations=READ_ONLY)
    async def slow_count(seconds: float) -> str:
        """Counts to the given number of seconds, changing nothing."""
        mark("slow_count")
        await asyncio.sleep(seconds)
        return f"counted {seconds} seconds"

    @server.tool(annotations=ADDITIVE)
    async def slow_append(line: str, seconds: float) -> str:
        """Appends a line to the ledger, slowly; twice is two lines."""
        mark("slow_append")
        await asyncio.sleep(seconds)
        return f"appended {line}"

    @server.tool(annotations=DESTRUCTIVE)
    def erase(what: str) -> str:
        """Erases something for good."""
        return f"erased {what}"

    @server.tool(annotations=READ_ONLY, structured_output=False)
    def picture() -> list[TextContent | ImageContent]:
        """Draws a picture."""
        return [
            TextContent(text="a single pixel"),
            ImageContent(data=PIXEL, mime_type="image/png"),
        ]

    @server.tool(annotations=READ_ONLY)
    def broken() -> str:
        """Always fails."""
        raise ToolError("the ledger is locked")

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--variant", choices=["a", "b"], default="a")
    parser.add_argument("--marks", type=Path)
    args = parser.parse_args()
    server = build(args.variant, args.marks)
    if args.transport == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
