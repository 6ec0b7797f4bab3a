"""Text as a person reads it in one line: the UI's summaries of a run, the run list's
prompts and the command line's messages all shorten the same way. And text with a
secret taken out before it is stored or shown."""

from __future__ import annotations

import re

__all__ = ["MIN_SECRET_LENGTH", "NO_SUMMARY", "escaped", "redact", "shorten", "summary_of"]

MIN_SECRET_LENGTH = 8
"""Shorter values (a placeholder key such as `x` for a local server) are no secrets:
replacing them would mangle every word that holds them (`json.e***ception`)."""


def shorten(text: str, limit: int = 80) -> str:
    """One line of at most `limit` characters: whitespace runs become one space, and a
    line cut short ends in `…`."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def escaped(text: str) -> str:
    """`text` with each character a terminal would not print as itself (a control
    character such as ESC or a newline, a zero-width one) written as its escape
    (`\\x1b`, `\\n`, `\\u200b`): what anyone could put in a record then neither moves the
    cursor, recolours the screen, nor passes for another line or another name."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


NO_SUMMARY = "(waiting for a first message)"
"""The summary of a run started without a prompt, until its first message gives it one."""


def summary_of(prompt: str) -> str:
    """The prompt's first line, shortened: what the run lists show for a run."""
    first_line = next((line for line in prompt.splitlines() if line.strip()), "")
    return shorten(first_line, 80) if first_line else NO_SUMMARY


def redact(text: str, secret: str | None) -> str:
    """`text` with each whole occurrence of `secret` as `***`: only a secret of
    `MIN_SECRET_LENGTH` characters or more, and never inside a longer word or token."""
    if secret is None or len(secret) < MIN_SECRET_LENGTH:
        return text
    # Not inside a word: no letter, digit or `_`/`-` (which keys are made of) around it.
    word = r"[\w-]"
    return re.sub(rf"(?<!{word}){re.escape(secret)}(?!{word})", "***", text)
