"""The built-in previews of gated calls (`tarry.contracts.previews`), made from what a
call would change: a file's text before and after, or the call's arguments.

Pure: the activity that runs a tool's preview reads the file and hands its text here.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from typing import Any, Literal

from tarry.contracts.previews import Preview, PreviewBlock, PreviewFile
from tarry.core.text import shorten

__all__ = ["MAX_BLOCK_CHARS", "arguments_preview", "file_change", "file_state"]

MAX_BLOCK_CHARS = 32 * 1024
"""A block's text is cut here, with a note: a preview is kept in the run's memory and
answered with its state."""
_INLINE_CHARS = 60
"""A string argument longer than this, or of several lines, is shown as a text block."""


def file_state(path: str, data: bytes | None) -> PreviewFile:
    """`path` as a preview read it: the SHA-256 of `data`, or none for no file."""
    return PreviewFile(path=path, sha256=None if data is None else hashlib.sha256(data).hexdigest())


def file_change(path: str, old: str | None, new: str) -> Preview:
    """What writing `new` to `path` does: a unified diff against `old`, or, for a file that
    does not exist (`old` None), the new file's lines."""
    new_lines = new.splitlines()
    if old is None:
        summary = f"{path}: new file, {_lines(len(new_lines))}"
        return Preview(summary=summary, blocks=[_block("text", path, new)])
    old_lines = old.splitlines()
    diff = list(difflib.unified_diff(old_lines, new_lines, f"a/{path}", f"b/{path}", lineterm=""))
    if not diff:
        return Preview(summary=f"{path}: no change")
    removed = sum(1 for line in diff[2:] if line.startswith("-"))
    added = sum(1 for line in diff[2:] if line.startswith("+"))
    change = [f"{_lines(removed)} removed"] if removed else []
    change += [f"{added} added" if removed else f"{_lines(added)} added"] if added else []
    summary = f"{path}: {', '.join(change)}"
    return Preview(summary=summary, blocks=[_block("diff", path, "\n".join(diff))])


def arguments_preview(arguments: str) -> Preview:
    """A call's arguments, each on its own: a short value on one line, a long string (or
    one of several lines) as a text block."""
    try:
        parsed: Any = json.loads(arguments)
    except ValueError:
        return Preview(summary=shorten(arguments), blocks=[_block("text", "arguments", arguments)])
    if not isinstance(parsed, dict):
        shown = json.dumps(parsed, indent=2, ensure_ascii=False)
        return Preview(summary=shorten(shown), blocks=[_block("value", "arguments", shown)])
    blocks, short = [], []
    for name, value in parsed.items():
        if isinstance(value, str) and (len(value) > _INLINE_CHARS or "\n" in value):
            blocks.append(_block("text", name, value))
            short.append(f"{name}: {_lines(len(value.splitlines()))}")
        else:
            inline = json.dumps(value, ensure_ascii=False)
            if len(inline) <= _INLINE_CHARS:
                blocks.append(_block("value", name, inline))
            else:
                blocks.append(_block("text", name, json.dumps(value, indent=2, ensure_ascii=False)))
            short.append(f"{name}={shorten(inline, 30)}")
    return Preview(summary=shorten(", ".join(short) or "no arguments", 120), blocks=blocks)


def _block(kind: Literal["diff", "text", "value"], label: str, text: str) -> PreviewBlock:
    if len(text) > MAX_BLOCK_CHARS:
        rest = text[MAX_BLOCK_CHARS:].count("\n") + 1
        text = f"{text[:MAX_BLOCK_CHARS]}\n… ({rest} more lines not shown)"
    return PreviewBlock(kind=kind, label=label, text=text)


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"
