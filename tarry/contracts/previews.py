"""What a person sees of a gated call before deciding: its preview.

A tool may declare a preview (`tarry.core.tools.tool(preview=...)`): a function run as an
activity when its call is gated, whose answer is recorded with the pending call
(`PendingApproval.preview`). What was shown is then what history holds, even once the
file it describes has changed; `PreviewFile` keeps what the preview read, so a door that
can see the workspace marks a preview stale (`tarry.core.previews.stale`) without
changing what it shows.

Arguments and file content only: a preview never carries a header, a key or a token.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tarry.contracts._omit import when_empty, when_none

__all__ = [
    "PREVIEW_ACTIVITY",
    "Preview",
    "PreviewBlock",
    "PreviewCall",
    "PreviewFile",
    "PreviewRequest",
]

PREVIEW_ACTIVITY = "preview_calls"
"""The activity that makes the previews of an answer's gated calls, all at once."""


class PreviewBlock(BaseModel):
    """One part of a preview, shown as its kind says."""

    kind: Literal["diff", "text", "value"]
    """`diff`: a unified diff (lines from `---`, `+++`, `@@`, `-`, `+`, ` `); `text`: a
    long string, shown as its lines; `value`: a short JSON value, shown on one line."""
    label: str
    """What it is: the file a diff is of, the argument a text or value is."""
    text: str


class PreviewFile(BaseModel):
    """A workspace file as the preview read it: its path and the SHA-256 of its bytes."""

    path: str
    """Relative to the run's workspace."""
    sha256: str | None = None
    """Null: there was no such file."""


class Preview(BaseModel):
    """What a person sees of a gated call: a one-line summary and blocks."""

    summary: str
    """One line: `notes.md: 8 lines removed, 1 added`, `new file, 3 lines`."""
    blocks: list[PreviewBlock] = []
    workspace: str | None = Field(default=None, exclude_if=when_none)
    """The run whose workspace `files` are in (a sub-agent's is its lead's)."""
    files: list[PreviewFile] = Field(default=[], exclude_if=when_empty)
    """The files the preview read, as it read them: changed since, the preview is stale."""


class PreviewCall(BaseModel):
    """One gated call to preview."""

    call_id: str
    tool: str
    arguments: str
    """The model's argument text."""
    server: str | None = Field(default=None, exclude_if=when_none)
    """The MCP server whose tool it is: previewed as its arguments."""


class PreviewRequest(BaseModel):
    """The input of the `preview_calls` activity: an answer's gated calls."""

    workspace: str
    """The run whose workspace the calls work in."""
    calls: list[PreviewCall]
