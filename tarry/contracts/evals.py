"""What an eval is made of in Temporal: its input, each point's score and the report.

An eval (`EVAL_WORKFLOW`) replays the decision points of a dataset (`DecisionPoint`)
against a candidate model profile: the model proposes, no tool runs, nobody is asked.
A dataset's guardrail points (what people decided on a text a guardrail asked about) are
checked against a candidate guardrail setup instead: it agrees where it flags exactly the
texts people did not let through as they were.
Each point's score is kept in the workflow's state, so a worker that dies mid-eval
costs nothing but the calls in flight, and no point is scored twice.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, Field, model_validator

from tarry.contracts._closed import NOT_A_BOOLEAN
from tarry.contracts._omit import when_empty, when_none
from tarry.contracts.datasets import DecisionPoint, Label, Verdict
from tarry.contracts.guardrails import Guardrail, GuardrailHit
from tarry.contracts.ledger import DailyCaps
from tarry.contracts.messages import ToolCall, Usage
from tarry.contracts.names import ErrorInfo
from tarry.contracts.run import Budget, Timeouts

__all__ = [
    "ANSWER_TOOL",
    "EVAL_REPORT_QUERY",
    "EVAL_WORKFLOW",
    "GUARDRAILS_CANDIDATE",
    "AnswerScorer",
    "EvalInput",
    "EvalReport",
    "GuardrailRate",
    "PointScore",
    "Rate",
    "Spend",
]

EVAL_WORKFLOW = "EvalRun"
EVAL_REPORT_QUERY = "report"
ANSWER_TOOL = "answer"
"""The "tool" a final answer counts under in the per-tool figures."""
GUARDRAILS_CANDIDATE = "guardrails"
"""The candidate a report names for an eval of a guardrail setup alone, with no model."""


class AnswerScorer(StrEnum):
    """How a candidate's final answer is held against the recorded one."""

    EXACT = "exact"
    """The same text, but for surrounding whitespace."""
    CONTAINS = "contains"
    """The recorded answer appears in the candidate's, ignoring case."""
    JUDGE = "judge"
    """A judge model profile (`EvalInput.judge`) reads both with `EvalInput.rubric` and
    says PASS or FAIL."""


class EvalInput(BaseModel):
    """The eval workflow's input."""

    dataset: str
    """The dataset's name or file, for the report."""
    points: list[DecisionPoint]
    model: str | None = None
    """The candidate model profile, which the points of proposals and answers ask; null
    for an eval of `guardrails` alone."""
    guardrails: list[Guardrail] | None = Field(default=None, exclude_if=when_none)
    """The candidate guardrail setup, which checks the text of each guardrail point:
    those of its guardrails that look where the point's text was (`on`)."""
    system: str | None = Field(default=None, exclude_if=when_none)
    """Replaces each point's system prompt; null: each point's own."""
    tools: list[str] | None = Field(default=None, exclude_if=when_none)
    """Offers only these of each point's tools; null: the catalogue it was recorded with."""
    concurrency: int = Field(default=4, ge=1, le=64)
    """How many points are asked at once."""
    budget: Budget | None = Field(default=None, exclude_if=when_none)
    """Once the candidate's calls have spent it, no further point is asked."""
    spend: DailyCaps | None = Field(default=None, exclude_if=when_none)
    """The owner's daily caps (`[limits]`), set by `start_eval` from their limits: each
    model call reserves on their ledger of the day, as a run's does; at the cap no
    further point is asked (`stopped: "spend_cap"`). Null: no ledger."""
    tolerance: dict[str, Annotated[float, Field(ge=0, le=1)]] = {}
    """Per tool: the closeness of arguments (`tarry.client.evals.closeness`) at which a call
    counts as the same; a tool not named needs JSON-equal arguments (1.0)."""
    scorer: AnswerScorer = AnswerScorer.EXACT
    judge: str | None = Field(default=None, exclude_if=when_none)
    """The judge's model profile, for `AnswerScorer.JUDGE`."""
    rubric: str | None = Field(default=None, exclude_if=when_none)
    timeouts: Timeouts = Timeouts()
    min_agreement: Annotated[float | None, NOT_A_BOOLEAN] = Field(
        default=None, ge=0, le=1, exclude_if=when_none
    )
    """The bar the CLI gates on, kept with the eval so `tarry eval status` shows it."""

    @model_validator(mode="after")
    def _has_candidates(self) -> Self:
        for point in self.points:
            if point.guardrail is None and self.model is None:
                raise ValueError(f"point {point.id} is a proposal: give the candidate `model`")
            if point.guardrail is not None and self.guardrails is None:
                raise ValueError(
                    f"point {point.id} is a guardrail's: give the candidate `guardrails`"
                )
        return self

    @property
    def candidate(self) -> str:
        """What the report names as the candidate: the model, or the guardrails alone."""
        return self.model or GUARDRAILS_CANDIDATE


class PointScore(BaseModel):
    """One point, asked and scored."""

    id: str
    run_id: str
    tool: str
    """The proposal's tool; `answer` for a final answer; `guardrail NAME` for a text."""
    guardrail: str | None = Field(default=None, exclude_if=when_none)
    """For a guardrail point: the guardrail that asked people about its text."""
    verdict: Verdict
    agrees: bool
    score: float
    """1.0 when it agrees; an edit's closeness to the edited arguments; 0 otherwise."""
    original: ToolCall | None = None
    original_answer: str | None = Field(default=None, exclude_if=when_none)
    label: Label
    candidate_calls: list[ToolCall] = []
    candidate_answer: str | None = Field(default=None, exclude_if=when_none)
    candidate_hits: list[GuardrailHit] = Field(default=[], exclude_if=when_empty)
    """For a guardrail point: what the candidate guardrails found in its text."""
    usage: Usage = Usage()
    latency_ms: float = 0.0
    original_usage: Usage | None = Field(default=None, exclude_if=when_none)
    original_latency_ms: float | None = Field(default=None, exclude_if=when_none)
    error: ErrorInfo | None = Field(default=None, exclude_if=when_none)
    """The model call failed for good: the point counts as not scored, not as a
    disagreement."""


class Rate(BaseModel):
    """Agreement over some points, with its 95% Wilson interval."""

    points: int
    agreed: int
    agreement: float
    low: float
    high: float


class GuardrailRate(Rate):
    """Agreement on one guardrail's points, and how the candidate disagreed."""

    flagged_allowed: int
    """Texts the candidate flagged that people let through as they were."""
    missed_blocked: int
    """Texts people blocked or edited that the candidate let through."""


class Spend(BaseModel):
    """Cost and mean latency of the candidate and, where recorded, the original calls."""

    candidate_usage: Usage
    original_usage: Usage
    candidate_latency_ms: float | None
    original_latency_ms: float | None
    compared: int
    """Points whose original recorded its usage: `original_usage` sums theirs only."""


class EvalReport(BaseModel):
    """What the eval found so far; complete once `done`."""

    eval_id: str
    dataset: str
    model: str
    total: int
    scored: int
    errors: int
    done: bool
    stopped: str | None = None
    """Why points were left unasked: `budget`, or `spend_cap` (the owner's daily cap)."""
    overall: Rate
    per_tool: dict[str, Rate]
    per_guardrail: dict[str, GuardrailRate] = Field(default={}, exclude_if=when_empty)
    """By the guardrail that asked people (the points' own guardrail)."""
    spend: Spend
    disagreements: list[PointScore]
    min_agreement: float | None = None
