"""Scoring an eval: what a candidate proposed, held against what a person decided.

Pure functions of their arguments, so the eval workflow scores inside its own state
(deterministically) and a report can be rebuilt from the scores anywhere.

- approved: the candidate agrees when it proposes the same tool with the same
  arguments: JSON-equal, or as close as the tool's tolerance allows;
- rejected: it agrees when it does not propose that call;
- edited: it is scored by how close its arguments come to the edited ones, and agrees
  at the tool's tolerance (JSON-equal by default);
- a final answer goes to the eval's scorer (`AnswerScorer`); the judge's verdict is
  read here from the judge model's text;
- a text a guardrail asked about: candidate guardrails agree when they flag it exactly
  when the person did not let it through as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from tarry.contracts import (
    ANSWER_TOOL,
    AnswerScorer,
    DecisionPoint,
    EvalReport,
    PointScore,
    Rate,
    Spend,
    ToolCall,
    Usage,
    Verdict,
)
from tarry.contracts.datasets import Label
from tarry.contracts.evals import GuardrailRate
from tarry.contracts.guardrails import GuardrailHit

__all__ = [
    "Z95",
    "answer_agrees",
    "arguments_of",
    "best_closeness",
    "call_score",
    "closeness",
    "guardrail_agrees",
    "guardrail_rate",
    "judge_passes",
    "judge_prompt",
    "rate",
    "report",
    "spend",
    "wilson",
]

Z95 = 1.959964
"""The normal quantile of a two-sided 95% interval."""


def arguments_of(call: ToolCall) -> Any:
    """A call's arguments as JSON, or its raw text when the model wrote no JSON."""
    try:
        return json.loads(call.function.arguments or "{}")
    except ValueError:
        return call.function.arguments


def closeness(candidate: Any, wanted: Any) -> float:
    """1.0 for JSON-equal arguments; for two objects, the share of their keys (the union
    of both) whose values are JSON-equal; 0 otherwise."""
    if candidate == wanted:
        return 1.0
    if not (isinstance(candidate, dict) and isinstance(wanted, dict)):
        return 0.0
    keys = candidate.keys() | wanted.keys()
    same = sum(1 for k in keys if k in candidate and k in wanted and candidate[k] == wanted[k])
    return same / len(keys)


def best_closeness(calls: Iterable[ToolCall], tool: str, wanted: Any) -> float:
    """The closeness of the candidate's closest call of `tool` to `wanted`; 0 without one."""
    return max(
        (closeness(arguments_of(c), wanted) for c in calls if c.function.name == tool),
        default=0.0,
    )


def call_score(
    point: DecisionPoint, calls: list[ToolCall], tolerance: Mapping[str, float]
) -> tuple[bool, float]:
    """(agrees, score) of a candidate's calls on a gated call's point."""
    assert point.proposal is not None
    tool = point.proposal.function.name
    bar = tolerance.get(tool, 1.0)
    verdict = point.label.verdict
    if verdict is Verdict.EDITED:
        score = best_closeness(calls, tool, point.label.arguments or {})
        return score >= bar, score
    proposed = best_closeness(calls, tool, arguments_of(point.proposal)) >= bar
    if verdict is Verdict.REJECTED:
        return not proposed, float(not proposed)
    return proposed, float(proposed)


def answer_agrees(scorer: AnswerScorer, candidate: str | None, original: str | None) -> bool:
    """Whether a candidate's final answer passes `scorer` (exact or contains) against the
    recorded one; no answer (it proposed a call instead) never does."""
    if candidate is None or original is None:
        return False
    if scorer is AnswerScorer.CONTAINS:
        return original.strip().casefold() in candidate.casefold()
    return candidate.strip() == original.strip()


def judge_prompt(point: DecisionPoint, candidate: str | None) -> str:
    """What the judge reads: the conversation's last user message, both answers and the
    person's reply to the original, if any."""
    asked = next((m.content for m in reversed(point.messages) if m.role == "user"), "")
    reply = point.label.reply
    return (
        f"The user asked:\n{asked}\n\nThe recorded answer:\n{point.answer}\n\n"
        + (f"The user replied to it:\n{reply}\n\n" if reply else "")
        + f"The candidate answer:\n{candidate or '(no answer: it proposed a tool call)'}\n\n"
        "Does the candidate answer do as well as the recorded one? "
        "Answer PASS or FAIL, then one sentence why."
    )


def judge_passes(text: str | None) -> bool:
    """The judge's verdict: PASS before any FAIL in its answer."""
    words = (text or "").upper()
    passed, failed = words.find("PASS"), words.find("FAIL")
    return passed >= 0 and (failed < 0 or passed < failed)


def wilson(agreed: int, points: int) -> tuple[float, float]:
    """The 95% Wilson score interval of `agreed` out of `points`: unlike the normal one
    it stays inside [0, 1] and means something for the small counts a dataset's tools
    have. (0, 1) for no points."""
    if points == 0:
        return 0.0, 1.0
    p = agreed / points
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * points)) / (1 + z2 / points)
    half = Z95 * math.sqrt(p * (1 - p) / points + z2 / (4 * points * points)) / (1 + z2 / points)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(scores: list[PointScore]) -> Rate:
    agreed = sum(1 for s in scores if s.agrees)
    low, high = wilson(agreed, len(scores))
    return Rate(
        points=len(scores),
        agreed=agreed,
        agreement=agreed / len(scores) if scores else 0.0,
        low=low,
        high=high,
    )


def guardrail_agrees(label: Label, hits: list[GuardrailHit]) -> bool:
    """Whether candidate guardrails that found `hits` in a text agree with the person's
    verdict on it: they flag it exactly when the person did not let it through as it was
    (blocked it, or edited it)."""
    return bool(hits) == (label.verdict is not Verdict.APPROVED)


def guardrail_rate(scores: list[PointScore]) -> GuardrailRate:
    flagged = [s for s in scores if s.candidate_hits]
    return GuardrailRate(
        **rate(scores).model_dump(),
        flagged_allowed=sum(1 for s in flagged if s.verdict is Verdict.APPROVED),
        missed_blocked=sum(
            1 for s in scores if not s.candidate_hits and s.verdict is not Verdict.APPROVED
        ),
    )


def spend(scores: list[PointScore]) -> Spend:
    """The candidate's cost and latency beside the original calls'; the originals'
    figures cover the points that recorded them."""
    usage, original = Usage(), Usage()
    compared = 0
    for s in scores:
        usage = usage + s.usage
        if s.original_usage is not None:
            original = original + s.original_usage
            compared += 1
    latencies = [s.original_latency_ms for s in scores if s.original_latency_ms is not None]
    return Spend(
        candidate_usage=usage,
        original_usage=original,
        candidate_latency_ms=sum(s.latency_ms for s in scores) / len(scores) if scores else None,
        original_latency_ms=sum(latencies) / len(latencies) if latencies else None,
        compared=compared,
    )


def report(
    eval_id: str,
    dataset: str,
    model: str,
    total: int,
    scores: Iterable[PointScore],
    *,
    done: bool,
    stopped: str | None = None,
    min_agreement: float | None = None,
) -> EvalReport:
    """The report of the points scored so far; those whose call failed count apart."""
    all_scores = list(scores)
    scored = [s for s in all_scores if s.error is None]
    proposals = [s for s in scored if s.guardrail is None]
    tools = sorted({s.tool for s in proposals}, key=lambda t: (t == ANSWER_TOOL, t))
    guardrails = sorted({s.guardrail for s in scored if s.guardrail is not None})
    return EvalReport(
        eval_id=eval_id,
        dataset=dataset,
        model=model,
        total=total,
        scored=len(scored),
        errors=len(all_scores) - len(scored),
        done=done,
        stopped=stopped,
        overall=rate(scored),
        per_tool={t: rate([s for s in proposals if s.tool == t]) for t in tools},
        per_guardrail={
            g: guardrail_rate([s for s in scored if s.guardrail == g]) for g in guardrails
        },
        spend=spend(scored),
        disagreements=[s for s in scored if not s.agrees],
        min_agreement=min_agreement,
    )
