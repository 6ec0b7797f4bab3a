"""The guardrails' checks: a text against a run's guardrails, as a (local) activity.

`pattern` searches with RE2, in time linear in the text; `pii` is
`activities.guardrail_pii` (Presidio, the `guardrails` extra), loaded the first time a
`pii` guardrail checks a text.
"""

from __future__ import annotations

import asyncio
import re

import re2
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import metrics
from tarry.contracts import ErrorCode
from tarry.contracts.guardrails import (
    GUARDRAILS_ACTIVITY,
    GuardCheck,
    Guarded,
    Guardrail,
    GuardrailHit,
    GuardrailMatch,
    GuardRequest,
    GuardVerdict,
    PiiKind,
)

__all__ = ["check_guardrails", "find", "guard"]


@activity.defn(name=GUARDRAILS_ACTIVITY)
async def check_guardrails(request: GuardRequest) -> Guarded:
    """The text as `request.guardrails` let it through, and their hits: CPU work, done
    in a thread so that the worker's other activities go on meanwhile."""
    guarded = await asyncio.to_thread(guard, request.text, request.guardrails)
    metrics.guardrails_hit(guarded.hits)
    return guarded


def guard(text: str, guardrails: list[Guardrail]) -> Guarded:
    """Applies `guardrails` in order, each to the text the one before left; stops at the
    first that blocks."""
    hits: list[GuardrailHit] = []
    for guardrail in guardrails:
        matches = find(text, guardrail)
        if not matches:
            continue
        hits.append(
            GuardrailHit(
                guardrail=guardrail.name,
                verdict=guardrail.verdict,
                reason=guardrail.reason,
                matches=matches,
            )
        )
        if guardrail.verdict is GuardVerdict.BLOCK:
            break
        text = _redacted(text, matches)
    return Guarded(text=text, hits=hits)


def find(text: str, guardrail: Guardrail) -> list[GuardrailMatch]:
    """What `guardrail` finds in `text`, in order, without overlaps (the longer wins)."""
    if guardrail.check is GuardCheck.PII:
        found = _pii(text, frozenset(guardrail.kinds or PiiKind))
    else:
        found = [m for p in guardrail.patterns for m in _search(p, text, "pattern")]
        found += [m for word in guardrail.deny for m in _search(_word(word), text, "deny")]
    return _without_overlaps(found)


def _pii(text: str, kinds: frozenset[PiiKind]) -> list[GuardrailMatch]:
    try:
        from activities.guardrail_pii import find_pii
    except ModuleNotFoundError as e:
        raise ApplicationError(
            f"a pii guardrail needs Presidio, which this worker lacks ({e}): install"
            " `tarry[guardrails]` on the worker",
            type=ErrorCode.GUARDRAIL_UNAVAILABLE,
            non_retryable=True,
        ) from None
    return find_pii(text, kinds)


def _search(pattern: str, text: str, kind: str) -> list[GuardrailMatch]:
    return [
        GuardrailMatch(kind=kind, start=m.start(), end=m.end())
        for m in re2.finditer(pattern, text)
        if m.end() > m.start()
    ]


def _word(word: str) -> str:
    """A deny word as a pattern: whole, in any case."""
    return rf"(?i)(?:^|\b){re.escape(word)}(?:\b|$)"


def _without_overlaps(found: list[GuardrailMatch]) -> list[GuardrailMatch]:
    kept: list[GuardrailMatch] = []
    for match in sorted(found, key=lambda m: (m.start, -(m.end - m.start))):
        if not kept or match.start >= kept[-1].end:
            kept.append(match)
    return kept


def _redacted(text: str, matches: list[GuardrailMatch]) -> str:
    """`text` with each match replaced by its kind's placeholder, numbered by the order
    of first appearance: the same value twice is the same placeholder."""
    numbers: dict[tuple[str, str], int] = {}
    counts: dict[str, int] = {}
    pieces: list[str] = []
    end = 0
    for m in matches:
        value = text[m.start : m.end]
        if (m.kind, value) not in numbers:
            counts[m.kind] = counts.get(m.kind, 0) + 1
            numbers[m.kind, value] = counts[m.kind]
        pieces += [text[end : m.start], f"<{m.kind.upper()}_{numbers[m.kind, value]}>"]
        end = m.end
    return "".join([*pieces, text[end:]])
