"""`tarry show RUN --timeline`: a run's timeline (`tarry.contracts.timeline`) as text, one
row per span: its start from the run's, its duration, kind, name, tokens and cost, and a
bar placed on the run's whole span, so the long waits stand out at a glance."""

from __future__ import annotations

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text

from tarry.contracts import RunTimeline, SpanKind, SpanStatus, TimelineSpan

__all__ = ["duration_text", "timeline_view"]

BAR_WIDTH = 14
"""Characters the run's whole span takes in the bar column: the row fits 80 columns."""
NAME_WIDTH = 48
_OTHER_COLUMNS = 58
"""The widths of the columns but the name's, with a space between each."""
_KIND_STYLE = {
    SpanKind.MODEL: "green",
    SpanKind.TOOL: "cyan",
    SpanKind.WAIT: "yellow",
    SpanKind.AGENT: "magenta",
    SpanKind.GUARDRAIL: "blue",
}


def duration_text(seconds: float) -> str:
    """`340ms`, `4.2s`, `3m05s`, `2h07m`: as long as it needs to be read at a glance."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def timeline_view(timeline: RunTimeline, width: int) -> Group:
    """The heading (run, its span, open or ended) and a row per span, `width` columns
    wide: the name takes what the other columns leave, up to `NAME_WIDTH`."""
    name_width = max(12, min(NAME_WIDTH, width - _OTHER_COLUMNS))
    state = "ended" if timeline.ended else "open"
    tokens, cost = timeline.spent()
    spent = f" · {tokens} tokens" + (f" · ${cost:.4f}" if cost else "")
    heading = Text(f"{timeline.run_id} · {duration_text(timeline.duration_s)} · {state}{spent}")
    # Every column but the name keeps its width; the name takes what is left, cut short.
    table = Table(
        Column("start", justify="right", no_wrap=True, min_width=7),
        Column("took", justify="right", no_wrap=True, min_width=8),
        Column("kind", no_wrap=True, min_width=9),
        Column("name", no_wrap=True, overflow="ellipsis", width=name_width),
        Column("tokens", justify="right", no_wrap=True, min_width=6),
        Column("cost", justify="right", no_wrap=True, min_width=7),
        Column("", no_wrap=True, min_width=BAR_WIDTH),
        box=None,
        pad_edge=False,
        collapse_padding=True,
        header_style="bold",
    )
    for span in timeline.spans:
        table.add_row(*_row(span, timeline.duration_s))
    if not timeline.spans:
        return Group(heading, Text("nothing yet: no model call, tool call or wait", "dim"))
    return Group(heading, table)


def _row(span: TimelineSpan, total: float) -> tuple[str | Text, ...]:
    took = duration_text(span.duration_s)
    if span.status is SpanStatus.OPEN:
        took += "…"
    name = span.name
    if span.verdict:
        name += f" → {span.verdict}"
    if span.by:
        name += f" · by {span.by}"
    if span.status in (SpanStatus.FAILED, SpanStatus.CANCELLED):
        name += f" ({span.status})"
    if span.attempts > 1:
        name += f" ({span.attempts} attempts)"
    if span.cached:
        name += " (cached)"
    style = _KIND_STYLE[span.kind]
    return (
        f"+{duration_text(span.offset_s)}",
        took,
        Text(span.kind.value, style),
        name,
        "" if span.tokens is None else str(span.tokens),
        "" if span.cost_usd is None else f"${span.cost_usd:.4f}",
        Text(_bar(span, total), style),
    )


def _bar(span: TimelineSpan, total: float) -> str:
    """The span's place on the run's: blank up to its start, then at least one block."""
    if total <= 0:
        return "█"
    start = min(BAR_WIDTH - 1, round(span.offset_s / total * BAR_WIDTH))
    length = max(1, round(span.duration_s / total * BAR_WIDTH))
    return " " * start + "█" * min(length, BAR_WIDTH - start)
