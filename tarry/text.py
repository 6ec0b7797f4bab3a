"""Text as a person reads it in one line: the UI's summaries of a run, the run list's
prompts and the command line's messages all shorten the same way."""

from __future__ import annotations

__all__ = ["shorten"]


def shorten(text: str, limit: int = 80) -> str:
    """One line of at most `limit` characters: whitespace runs become one space, and a
    line cut short ends in `…`."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
