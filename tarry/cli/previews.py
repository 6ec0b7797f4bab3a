"""A gated call's preview in a terminal: its summary, then each block whole, a diff's
removed lines red and added ones green (`tarry.contracts.previews`); a text a guardrail
holds, its matches marked. Shared by `tarry
status`, `watch`, `show`, `approve` and the chat, wherever a person decides.

Colour comes from rich, which drops it in a pipe or with `NO_COLOR`: the text is the same.
What a preview holds (a file's lines, a path the model chose) is printed escaped
(`tarry.core.text.escaped`): a line of it can neither recolour the screen nor move the cursor.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from tarry.client.previews import stale
from tarry.contracts import DECIDED_WAITS, PendingApproval, RunState
from tarry.contracts.guardrails import GuardrailHit, asked_text
from tarry.contracts.previews import Preview, PreviewBlock
from tarry.core.previews import arguments_preview
from tarry.core.text import escaped
from tarry.temporal.entrypoint import settings_or_exit

INDENT = "    "
STALE = "stale: the file has changed since this preview was made; it shows the call as gated"


def preview_text(preview: Preview, workspace_root: Path | None = None) -> Text:
    """`preview` as rich text, indented, marked stale when a file it read has changed
    since (checked in `workspace_root`, the workers' workspaces, when given)."""
    text = Text(INDENT).append(_shown(preview.summary), style="bold")
    if workspace_root is not None and stale(preview, workspace_root):
        text.append("\n" + INDENT).append(f"⚠ {STALE}", style="bold yellow")
    for block in preview.blocks:
        text.append("\n").append(block_text(block))
    return text


def block_text(block: PreviewBlock) -> Text:
    """One block: a value on one line, a text or diff under its label, line by line."""
    label = _shown(block.label)
    if block.kind == "value":
        return Text(INDENT).append(f"{label}: ", style="dim").append(_shown(block.text))
    text = Text(INDENT).append(f"{label}:", style="dim")
    for line in block.text.splitlines():
        shown = _shown(line)
        text.append("\n" + INDENT + "│ ", style="dim").append(shown, style=_style(block, line))
    return text


def flagged_text(text: str, hit: GuardrailHit) -> Text:
    """A text a guardrail holds, line by line under a bar, each match marked (`⟦...⟧`)
    where the guardrail found it."""
    shown, start = Text(), 0
    matches = sorted(hit.matches, key=lambda m: m.start)
    for number, line in enumerate(text.split("\n")):
        shown.append(("\n" if number else "") + INDENT + "│ ", style="dim")
        at, end = start, start + len(line)
        for match in matches:
            first, last = max(match.start, at), min(match.end, end)
            if first < last:
                shown.append(_shown(text[at:first]))
                marked = f"⟦{_shown(text[first:last])}⟧"  # marked in a pipe and over MCP too
                shown.append(marked, style="bold reverse red")
                at = last
        shown.append(_shown(text[at:end]))
        start = end + 1
    return shown


def _shown(text: str) -> str:
    """`text` as a terminal prints it as itself: tabs as spaces, control characters escaped."""
    return escaped(text.replace("\t", "    "))


def _style(block: PreviewBlock, line: str) -> str:
    if block.kind != "diff":
        return ""
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("@@"):
        return "cyan"
    if line.startswith("-"):
        return "red"
    return "green" if line.startswith("+") else ""


def decisions_preview(state: RunState) -> list[Text]:
    """What a run waiting for decisions asks people to decide on (none, for any other)."""
    if state.waiting_for not in DECIDED_WAITS:
        return []
    return [pending_preview(p) for p in state.pending_approvals]


def pending_preview(pending: PendingApproval) -> Text:
    """What a call waiting for a decision would do: its recorded preview, marked stale when
    the file it read has changed in this machine's workspaces since; a call gated before
    previews shows its arguments whole."""
    if pending.guardrail is not None:
        return flagged_text(asked_text(pending.arguments), pending.guardrail)
    if pending.preview is None:
        return preview_text(arguments_preview(pending.arguments))
    return preview_text(pending.preview, settings_or_exit().tarry_workspace_root)
