"""A `judge` guardrail's check: a model reads the text against the guardrail's rubric and
answers allow, block or ask, with a reason, as structured output.

The call is made as a run's own model call is (`activities.model_calls.answer_of`): the
profile's provider, its key (read here, on the worker: neither the key nor the request
enters history) and its sampling, with the answer's JSON Schema as the provider's
structured output where it has one (OpenAI's `response_format: json_schema`). It is
not streamed: no observer sees a judge's words. The rubric is the system prompt and the
text the one user message, so the text cannot pose as the rubric; it can still argue
with its judge, as any text a model reads can.
"""

from __future__ import annotations

from typing import Literal

import httpx
from pydantic import BaseModel, ValidationError

from activities.model_calls import answer_of
from activities.provider import ModelCall, error
from tarry.config.settings import ModelProfile
from tarry.contracts import ChatMessage, ErrorCode
from tarry.contracts.guardrails import Guardrail, GuardrailHit, GuardrailMatch, GuardVerdict

__all__ = ["JUDGE_PROMPT", "Judgement", "judged"]

JUDGE_PROMPT = """You judge a text by a rubric. Answer with JSON alone: \
{{"verdict": "allow" or "block" or "ask", "reason": "why, in one short sentence"}}. \
allow: the text keeps to the rubric. block: it breaks the rubric. \
ask: a person should decide. Do not quote the text in the reason.

The rubric:
{rubric}"""
"""The judge's system prompt; the text to judge is the user message that follows it."""
REASON_CHARS = 500
"""The most of a judge's reason a hit keeps: a small model can write on and on."""


class Judgement(BaseModel):
    """A judge's answer."""

    verdict: Literal["allow", "block", "ask"]
    reason: str = ""


JUDGEMENT_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["allow", "block", "ask"]},
        "reason": {"type": "string"},
    },
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}
"""`Judgement` as the provider's structured output takes it: every field required and no
other, as OpenAI's strict mode has it."""


async def judged(
    http: httpx.AsyncClient, name: str, profile: ModelProfile, text: str, guardrail: Guardrail
) -> GuardrailHit | None:
    """`guardrail`'s hit on `text` as the judge of profile `name` answers it: None when it
    allows the text. A failed call raises, coded as a run's model call's failures are, and
    so does an answer that is no judgement (the activity retries both)."""
    call = ModelCall(
        name=name,
        profile=profile.model_copy(update={"stream": False}),
        system=JUDGE_PROMPT.format(rubric=guardrail.rubric),
        messages=[ChatMessage(role="user", content=text)],
        tools=[],
        sampling=profile.overridden_by(None),
        turn=0,
        stable=0,
        output_schema=JUDGEMENT_SCHEMA,
    )
    answer = (await answer_of(http, call)).message.content or ""
    if (judgement := _judgement(answer)) is None:
        # Not the answer itself: it may quote the text, and a failure's message is kept.
        raise error(
            ErrorCode.LLM_BAD_RESPONSE,
            f"the judge of guardrail {guardrail.name!r} (model {name!r}) answered"
            f" {len(answer)} characters that are no judgement: JSON with `verdict` (allow,"
            " block or ask) and `reason` was asked for",
        )
    if judgement.verdict == "allow":
        return None
    return GuardrailHit(
        guardrail=guardrail.name,
        verdict=guardrail.verdict_for(GuardVerdict(judgement.verdict)),
        reason=judgement.reason.strip()[:REASON_CHARS] or guardrail.reason,
        matches=[GuardrailMatch(kind="judge", start=0, end=len(text))],
    )


def _judgement(answer: str) -> Judgement | None:
    """The judgement an answer is, or holds: a model without structured output may put
    the JSON in words or a code fence, from its first `{` to its last `}`."""
    start, end = answer.find("{"), answer.rfind("}")
    try:
        return Judgement.model_validate_json(answer[start : end + 1]) if 0 <= start < end else None
    except ValidationError:
        return None
