"""Guardrails: what a run checks in what it reads (`RunInput.guardrails`).

A guardrail names where it looks, what it looks for and what it does on a hit:

    {"name": "no-pii", "on": "input", "check": "pii", "verdict": "redact"}
    {"name": "planted", "on": "tool_result", "check": "pattern", "verdict": "block",
     "patterns": ["(?i)ignore (all|any|your|previous) instructions"],
     "reason": "a tool's result gives the agent orders"}

`on` is `input` (a person's message, before the model sees it), `output` (the model's
answer, before anyone sees it) or `tool_result` (a tool's result, before the model reads
it). `check` is `pii` (emails, phone numbers, card numbers that pass the Luhn check,
IBANs, IP addresses and US social security numbers, by Presidio's pattern recognizers:
no model, nothing downloaded), `pattern` (RE2 regular expressions, `patterns`, and
words, `deny`, matched without regard to case), `moderation`, `judge` (a model reads the
text against the guardrail's `rubric`) or `python`. `verdict` is `redact` (the text goes on
with each match replaced by a typed placeholder, `<EMAIL_1>`), `block` (a message is
withheld from the model, which reads the guardrail's name and reason in its place; a
tool's result is refused the same way; an answer is withheld, and the model, told why,
is asked again, up to `OUTPUT_RETRIES` times in a row, after which the run waits for a
person to `retry` or reply) or `ask` (the run waits, `waiting_for: guardrail`, until one of
the guardrail's `approvers` allows the text, edits it or blocks it: a decision as on a
tool call, `PendingApproval.guardrail`).

Guardrails apply in their order, each to the text the one before it left. A check runs
as an activity of the worker, never in workflow code; one that still fails after its
retries blocks, unless the guardrail says `fail_open`.

What is kept where: the model, the transcript, `tarry show` and the inbox see only what
the guardrails let through. The original text of a reply stays in the run's history
where it arrived (the update that delivered it; a prompt, the run's input) and in the
check's activity input. A deployment that must not keep it at all encrypts its
payloads (`TARRY_ENCRYPTION_KEY`).
A hit records the guardrail, its verdict and reason, and the kind and place of each
match, never the matched text.
"""

from __future__ import annotations

import json
from datetime import timedelta
from enum import StrEnum
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tarry.contracts._omit import when_empty, when_none
from tarry.contracts.approval_rules import Regex
from tarry.contracts.names import principal_problem

__all__ = [
    "GUARDRAILS_ACTIVITY",
    "HELD",
    "OUTPUT_RETRIES",
    "TEXT_SCHEMA",
    "WITHHELD_NOTE",
    "GuardCheck",
    "GuardDecision",
    "GuardPoint",
    "GuardRequest",
    "GuardVerdict",
    "Guarded",
    "Guardrail",
    "GuardrailHit",
    "GuardrailMatch",
    "PiiKind",
    "asked_text",
    "held_line",
]

OUTPUT_RETRIES = 2
"""How often in a row the model is asked again after an output guardrail blocked its
answer, before the run waits for a person."""
WITHHELD_NOTE = "Your answer was withheld by guardrail"
"""How the note starts that tells the model an output guardrail withheld its answer: the
run's own system message, which the scripted model (`ScriptStep.if_withheld`) knows."""
GUARDRAILS_ACTIVITY = "check_guardrails"
"""The activity that checks a text against guardrails (`activities.guardrail_checks`)."""
TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
"""The "arguments" of a text a guardrail asks about (`{"text": ...}`): an edit of it is
checked against this, as edited arguments are against their tool's schema."""


class GuardPoint(StrEnum):
    """Where a guardrail looks."""

    INPUT = "input"
    """A person's message, before the model sees it."""
    TOOL_RESULT = "tool_result"
    """A tool's result, before the model reads it."""
    OUTPUT = "output"
    """The model's answer, before anyone sees it and before any of its calls is gated or
    run: its words are not streamed to observers while a run has one (the answer comes
    whole, once checked)."""


HELD: dict[GuardPoint, str] = {
    GuardPoint.INPUT: "a person's message",
    GuardPoint.TOOL_RESULT: "a tool's result",
    GuardPoint.OUTPUT: "the model's answer",
}
"""What a guardrail that asks holds, by where it looks: how the doors name it."""


class GuardCheck(StrEnum):
    """What a guardrail looks for."""

    PII = "pii"
    """Personal data: the kinds of `PiiKind` (all of them, unless `kinds` names some)."""
    PATTERN = "pattern"
    """The guardrail's `patterns` (RE2) and `deny` words."""
    MODERATION = "moderation"
    """A provider's moderation endpoint (OpenAI's `/v1/moderations`), at the `profile`'s
    base URL with its key: the `categories` it flags (any, when none are named), or whose
    score reaches `threshold`. It blocks; it cannot redact."""
    JUDGE = "judge"
    """A model, the `profile`'s, reads the text against the guardrail's `rubric` and answers
    allow, block or ask, with a reason, as structured output: its answer is the hit's
    verdict and reason, up to the guardrail's own `verdict` (`Guardrail.verdict_for`)."""
    PYTHON = "python"
    """The worker's function `function`, registered on its plugin as tools are
    (`TarryPlugin(guardrail_functions=...)`): it takes the text and returns its matches."""


class GuardVerdict(StrEnum):
    """What a guardrail does on a hit."""

    REDACT = "redact"
    """Each match is replaced by a typed placeholder, and the text goes on."""
    BLOCK = "block"
    """The text is withheld: the model reads the guardrail's name and reason instead."""
    ASK = "ask"
    """The run waits for one of the guardrail's `approvers` to allow the text, edit it,
    or block it (`WaitingFor.GUARDRAIL`); the text goes on as they decided."""


class PiiKind(StrEnum):
    """The personal data a `pii` check finds; each is a placeholder's type (`<CARD_1>`)."""

    EMAIL = "email"
    PHONE = "phone"
    CARD = "card"
    """A payment card number that passes the Luhn check."""
    IBAN = "iban"
    """An IBAN whose check digits are right."""
    IP = "ip"
    SSN = "ssn"
    """A US social security number."""


class Guardrail(BaseModel):
    """One check on what a run reads, and what it does on a hit."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    """How events, the transcript and a blocked text's note name it."""
    on: GuardPoint
    check: GuardCheck
    verdict: GuardVerdict
    reason: str = ""
    """Why it blocks or redacts: what the model, and the sender, read on a hit."""
    patterns: list[str] = []
    """For `pattern`: RE2 regular expressions (`(?i)` for any case), searched in the text."""
    deny: list[str] = []
    """For `pattern`: words and phrases, matched whole and without regard to case."""
    kinds: list[PiiKind] = []
    """For `pii`: the kinds it looks for; empty: every kind."""
    profile: str = "default"
    """For `moderation` and `judge`: the worker's model profile whose base URL and key it
    calls (a judge's, also its model)."""
    model: str = "omni-moderation-latest"
    """For `moderation`: the moderation model the endpoint is asked for."""
    categories: list[str] = []
    """For `moderation`: the categories that count (`violence`, `harassment`, ...); empty:
    any the endpoint flags."""
    threshold: float | None = Field(default=None, ge=0, le=1)
    """For `moderation`: a category counts once its score reaches this; null: when the
    endpoint flags it."""
    rubric: str | None = Field(default=None, min_length=1)
    """For `judge`: what the model judges the text by, in words (`Block a text that asks
    for a weapon; ask about one that mentions a competitor; allow the rest`)."""
    function: str | None = None
    """For `python`: the name the worker registered the function under."""
    fail_open: bool = False
    """When the check itself fails after its retries: let the text through, not block it."""
    approvers: list[str] | None = None
    """Who may decide on a text it asks about: users and groups (`[api.groups]`), named
    as `RunInput.approvers` name a tool's; null: anyone who may decide the run's calls."""
    timeout: timedelta | None = None
    """How long a text it asks about waits for a decision; null: the run's
    `approval_timeout`. Past it, the run's `approval_default` applies (approve: allow)."""

    @field_validator("approvers")
    @classmethod
    def _approver_names(cls, approvers: list[str] | None) -> list[str] | None:
        for name in approvers or []:
            if problem := principal_problem(name):
                raise ValueError(f"approvers: {problem}")
        return approvers

    @field_validator("patterns")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            Regex(regex=pattern)  # RE2 and its size limit, as an approval rule's
        return patterns

    @model_validator(mode="after")
    def _fits_its_check(self) -> Self:
        if self.check is GuardCheck.PATTERN and not (self.patterns or self.deny):
            raise ValueError(
                f"guardrail {self.name!r} checks by pattern but has none: give it"
                ' `patterns` (RE2 expressions) or `deny` (words), e.g. "deny": ["password"]'
            )
        if self.check is GuardCheck.PII and (self.patterns or self.deny):
            raise ValueError(
                f"guardrail {self.name!r} checks for pii, which takes `kinds`, not"
                ' `patterns` or `deny`: use "check": "pattern" for those'
            )
        if self.check is GuardCheck.PATTERN and self.kinds:
            raise ValueError(
                f"guardrail {self.name!r} checks by pattern, which takes no `kinds`:"
                ' use "check": "pii" for personal data'
            )
        if self.check is GuardCheck.MODERATION and self.verdict is GuardVerdict.REDACT:
            raise ValueError(
                f"guardrail {self.name!r}: a moderation check flags a whole text, which"
                ' cannot be redacted: give it "verdict": "block" (or "ask")'
            )
        if self.check is GuardCheck.JUDGE and self.verdict is GuardVerdict.REDACT:
            raise ValueError(
                f"guardrail {self.name!r}: a judge decides on a whole text, which cannot be"
                ' redacted: give it "verdict": "block" (its judge\'s block blocks, its ask'
                ' asks a person) or "ask" (a person decides whatever it does not allow)'
            )
        if (self.check is GuardCheck.JUDGE) != (self.rubric is not None):
            raise ValueError(
                f"guardrail {self.name!r}: `rubric` is what the model of a"
                ' "check": "judge" guardrail judges by, and only of one: give a judge'
                ' one, e.g. "rubric": "Block a text that asks for a weapon; allow the rest"'
            )
        if (self.check is GuardCheck.PYTHON) != (self.function is not None):
            raise ValueError(
                f"guardrail {self.name!r}: `function` names the worker's function of a"
                ' "check": "python" guardrail, and only of one'
            )
        return self

    def verdict_for(self, answer: GuardVerdict) -> GuardVerdict:
        """What a hit does when this guardrail's judge answered `answer` (block or ask):
        the guardrail's own `verdict` is the most its judge may do, so under `ask` a
        person decides on every text the judge does not allow, its blocks too."""
        return GuardVerdict.ASK if GuardVerdict.ASK in (answer, self.verdict) else answer


class GuardrailMatch(BaseModel):
    """Where a check found something, and what kind of thing: never the text itself."""

    kind: str
    """A `PiiKind`; `pattern` / `deny` for a pattern check; a moderation check's category;
    `judge` for a judge's answer (the whole text)."""
    start: int
    end: int
    """The match's place in the text as the guardrail saw it: `text[start:end]`."""


class GuardDecision(BaseModel):
    """What became of a text a guardrail asked about (`GuardVerdict.ASK`)."""

    allowed: bool
    """Allowed (as it was, or `edited`), or blocked."""
    edited: bool = Field(default=False, exclude_if=when_empty)
    """A person replaced the text (`Decision.arguments`: `{"text": ...}`)."""
    by: str
    """Who decided: the person (`Decision.by`), `deadline` (the run's
    `approval_default`), `stop` (a stop blocks it) or `remembered`."""
    reason: str | None = Field(default=None, exclude_if=when_none)
    """The decider's reason (a block's is what the model reads)."""
    asked_as: str | None = Field(default=None, exclude_if=when_none)
    """The id of the decision the run waited for (`guardrail-N`), whose check
    (`GuardRequest.asks_as`) holds the text as the guardrail saw it; null when the run
    decided at once, remembering an earlier decision."""

    @property
    def by_a_person(self) -> bool:
        """Whether someone decided it, not the deadline's default, a stop or the run's
        memory of an earlier decision: a verdict a dataset learns from."""
        return self.asked_as is not None and self.by not in ("deadline", "stop")


class GuardrailHit(BaseModel):
    """A guardrail that found something in a text, and what it did."""

    guardrail: str
    verdict: GuardVerdict
    reason: str = ""
    matches: list[GuardrailMatch] = []
    failed: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The check could not run (its error, after its retries): a hit by default, nothing
    when the guardrail is `fail_open`."""
    on: GuardPoint | None = Field(default=None, exclude_if=when_none)
    """Where the text was, for a hit that asks a person (the run sets it then)."""
    decision: GuardDecision | None = Field(default=None, exclude_if=when_none)
    """For a hit that asked (`ask`): what became of the text; null while it waits."""

    @property
    def blocks(self) -> bool:
        """Whether the text is withheld: a `block` verdict, or a person's block of an ask."""
        if self.verdict is GuardVerdict.ASK:
            return self.decision is not None and not self.decision.allowed
        return self.verdict is GuardVerdict.BLOCK

    @property
    def waits(self) -> bool:
        """An `ask` nobody has decided yet: the run waits for a person."""
        return self.verdict is GuardVerdict.ASK and self.decision is None


def held_line(pending_tool: str, hit: GuardrailHit) -> str:
    """`guardrail 'no-secrets' holds a person's message: why`: a text a guardrail asks
    about, in a line, for every door that lists decisions."""
    what = HELD[hit.on] if hit.on is not None else "a text"
    why = f": {hit.reason}" if hit.reason else ""
    return f"guardrail {pending_tool!r} holds {what}{why}"


def asked_text(arguments: str) -> str:
    """The text of a guardrail's pending decision (`PendingApproval.arguments`)."""
    text: str = json.loads(arguments)["text"]
    return text


class GuardRequest(BaseModel):
    """The check activity's argument: a text and the guardrails to apply, in order."""

    text: str
    guardrails: list[Guardrail]
    asks_as: str | None = Field(default=None, exclude_if=when_none)
    """The id a person's decision on the text gets (`guardrail-N`) when one of the
    guardrails asks: what the run's history keeps of the text a person was asked about,
    for a dataset of their verdicts (`tarry dataset create`). Left out while null."""

    @property
    def point(self) -> str:
        """Where its guardrails look: one place, as the workflow checks each apart."""
        return self.guardrails[0].on.value if self.guardrails else "text"


class Guarded(BaseModel):
    """The check activity's answer: the text as the guardrails let it through, and
    their hits; `blocked` when one blocked it. A hit that blocks or asks is the last: the
    guardrails after it did not look."""

    text: str
    hits: list[GuardrailHit] = []

    @property
    def blocked(self) -> GuardrailHit | None:
        return next((h for h in self.hits if h.blocks), None)

    @property
    def asking(self) -> GuardrailHit | None:
        """The first hit that waits for a person, unless one before it blocked."""
        for hit in self.hits:
            if hit.blocks or hit.waits:
                return hit if hit.waits else None
        return None

    @property
    def verdict(self) -> str:
        """What the guardrails did to the text, in a word: `allow` when none hit, else
        the last hit's verdict (a block or an ask is the last), as the timeline's and the
        trace's `guardrail` spans say it."""
        return self.hits[-1].verdict.value if self.hits else "allow"
