"""Approval rules: a run's standing answers to its tool calls (`RunInput.approval_rules`).

A rule names a tool, a condition on the call's arguments and a decision: `approve`
(no person is asked), `reject` (the model reads the rule's reason) or `ask` (a person
decides, even for a tool outside `require_approval`). The first rule that matches a
call decides it; a call no rule matches is gated as `require_approval` says.

    {"tool": "write_file", "when": {"/path": "notes/*.md"}, "decision": "approve"}
    {"tool": "write_file", "when": {"/path": {"regex": "^/etc"}}, "decision": "ask"}
    {"tool": "delete_file", "decision": "reject", "reason": "nothing is deleted here"}

`when` maps JSON pointers (RFC 6901) into the arguments to what the value there must
match, every entry at once: a string is a glob matching the whole value (`*` matches
any text, `/` included), `{"regex": ...}` a Python regular expression searched in it.
A value that is not a string is matched as its JSON text (`3`, `true`); a pointer to
nothing, or arguments that are not JSON, match no rule with a `when`.

Pure and deterministic (the workflow runs it on every tool call): no I/O, no clock.
The client, the CLI and the API validate rules with the same model, so a bad pointer
or regular expression is refused when the run starts, never met in the middle of it.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ApprovalRule", "Regex", "RuleDecision", "first_match"]

_POINTER = re.compile(r"(/([^~/]|~[01])*)*")
"""A JSON pointer: "" (the whole arguments) or `/`-separated tokens, `~` only in `~0`, `~1`."""
_MISSING = object()


class RuleDecision(StrEnum):
    """What a matching rule does with a call."""

    APPROVE = "approve"
    """The call runs without asking anyone; for a tool no one is asked about, nothing
    changes."""
    REJECT = "reject"
    """The call does not run; the model reads the rule's reason (`TOOL_REJECTED`)."""
    ASK = "ask"
    """A person decides, as for a tool in `require_approval`, whatever the tool."""


class Regex(BaseModel):
    """A condition by regular expression: `{"regex": "^/etc"}`, searched in the value."""

    model_config = ConfigDict(extra="forbid")

    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"{pattern!r} is not a regular expression: {e}") from None
        return pattern


class ApprovalRule(BaseModel):
    """One rule: calls of `tool` whose arguments fit `when` are decided `decision`."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1)
    """A tool's name, or a glob of names (`*`: every tool but `finish`)."""
    when: dict[str, str | Regex] = {}
    """JSON pointer into the arguments -> a glob or `{"regex": ...}`; all must match.
    Empty: every call of the tool."""
    decision: RuleDecision
    reason: str | None = None
    """Why: what the model reads of a call the rule rejects (required for `reject`)."""

    @field_validator("when")
    @classmethod
    def _pointers(cls, when: dict[str, str | Regex]) -> dict[str, str | Regex]:
        for pointer in when:
            if not _POINTER.fullmatch(pointer):
                raise ValueError(
                    f"{pointer!r} is not a JSON pointer: write `/path` for the argument"
                    " `path`, `/options/0` into an object or a list (`~1` for `/`, `~0` for `~`)"
                )
        return when

    @model_validator(mode="after")
    def _reject_says_why(self) -> Self:
        if self.decision is RuleDecision.REJECT and not (self.reason or "").strip():
            raise ValueError("a rule that rejects needs a reason: the model reads it")
        return self

    def matches(self, tool: str, arguments: str) -> bool:
        """Whether a call of `tool` with the model's argument text fits this rule."""
        if not fnmatchcase(tool, self.tool):
            return False
        if not self.when:
            return True
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return False
        return all(_fits(_resolve(parsed, p), m) for p, m in self.when.items())


def first_match(rules: list[ApprovalRule], tool: str, arguments: str) -> int | None:
    """The 1-based number of the first rule a call matches (as people count the rules of
    a run, and as decisions name them: `rule 2`); None: no rule matches."""
    return next((n for n, r in enumerate(rules, start=1) if r.matches(tool, arguments)), None)


def _resolve(document: Any, pointer: str) -> Any:
    """The value `pointer` names in `document`, or `_MISSING`."""
    if not pointer:
        return document
    node = document
    for token in pointer[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _MISSING
    return node


def _fits(value: Any, condition: str | Regex) -> bool:
    if value is _MISSING:
        return False
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(condition, Regex):
        # Hazard: the workflow runs this on the model's arguments inside its task; a
        # pattern that backtracks without end would stall the run's workflow task.
        return re.search(condition.regex, text) is not None
    return fnmatchcase(text, condition)
