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
any text, `/` included), `{"regex": ...}` a regular expression searched in it.
A value that is not a string is matched as its JSON text (`3`, `true`); a pointer to
nothing, or arguments that are not JSON, match no rule with a `when`.

A regular expression is RE2's (the syntax of Python's `re` without backreferences and
lookaround; `\\w`, `\\d`, `\\s` are ASCII), matched in time linear in the value: the
arguments are the model's, and a pattern like `^(a+)+$` that Python's `re` backtracks
through for hours on 40 characters would freeze the worker's every run, again on each
replay. Linear is not cheap: RE2's worst case is the value's length times the size of
the pattern's compiled program (a counted repetition such as `[ab]{999}` is 999
instructions), so both are bounded: a pattern over `REGEX_PROGRAM_LIMIT` instructions is
refused with the rule, and a value over `REGEX_TEXT_LIMIT` characters is not searched: it
counts against the call (it fits an `ask` or `reject` rule, never an `approve` one).

Pure and deterministic (the workflow runs it on every tool call): no I/O, no clock.
The client, the CLI and the API validate rules with the same model, so a bad pointer
or regular expression is refused when the run starts, never met in the middle of it.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Any, Self

import re2
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)
from temporalio import workflow

__all__ = [
    "REGEX_PROGRAM_LIMIT",
    "REGEX_TEXT_LIMIT",
    "ApprovalRule",
    "Regex",
    "RuleDecision",
    "first_match",
]

REGEX_TEXT_LIMIT = 16_384
"""The longest value (in characters) a rule's regular expression is searched in: a page
of text, more than a path, a command or a URL needs. With `REGEX_PROGRAM_LIMIT`, it
bounds one search to about a tenth of a second at worst (RE2 falling back from its DFA to
its NFA, which steps every instruction for every byte)."""
LEGACY_REGEX_TEXT_LIMIT = 1 << 20
"""The text limit of runs that judged calls before `REGEX_TEXT_LIMIT`: they keep it for
those calls on replay (`workflows.approval_rules`)."""
REGEX_PROGRAM_LIMIT = 250
"""The most instructions a rule's regular expression may compile to: ten times
what a path or keyword pattern needs (`^(notes|docs)/[a-z0-9_-]+\\.md$` is 22)."""

_POINTER = re.compile(r"(/([^~/]|~[01])*)*")
"""A JSON pointer: "" (the whole arguments) or `/`-separated tokens, `~` only in `~0`, `~1`."""
_MISSING = object()
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a pattern it refuses is the caller's error, not a log line
_RE2_OPTIONS.max_mem = 1 << 20
"""RE2's memory for one pattern, its program and its DFA's cache (8 MiB by default): room
for a program 40 times `REGEX_PROGRAM_LIMIT`, so that compiling a huge pattern to refuse
it stops early, and the cached patterns of a worker stay small."""


def _re2(pattern: str) -> Any:
    """`pattern` compiled by RE2 (which caches it); raises `re2.error`."""
    return re2.compile(pattern, _RE2_OPTIONS)


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
            size = _re2(pattern).programsize
        except re2.error as e:
            why = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            if why != _TOO_LARGE:
                raise ValueError(
                    f"{pattern!r} is not a regular expression: {why} (RE2 syntax: no"
                    " backreferences or lookaround)"
                ) from None
            size = None
        # Refused at the doors; a run's own input, decoded by its workflow (always in the
        # sandbox), was admitted when it started, perhaps before the limit: refusing it
        # now would fail its every workflow task.
        if (size is None or size > REGEX_PROGRAM_LIMIT) and not workflow.unsafe.in_sandbox():
            raise ValueError(_too_costly(pattern, size))
        return pattern


_TOO_LARGE = "pattern too large - compile failed"
"""RE2's error for a pattern whose program outgrows `max_mem`."""


def _too_costly(pattern: str, size: int | None) -> str:
    """Why `pattern` is refused for its size, and how to make it smaller."""
    shown = pattern if len(pattern) <= 60 else f"{pattern[:57]}..."
    compiled = f"{size:,} instructions" if size is not None else "a program too big to build"
    return (
        f"{shown!r} is too costly to search: RE2 compiles it to {compiled}, over the limit"
        f" of {REGEX_PROGRAM_LIMIT} (searching takes up to the value's length times that)."
        " Write a smaller pattern: a counted repetition such as `{100}` repeats its part"
        " that many times, and `.` or a negated class is several instructions"
    )


def _condition_kind(value: Any) -> str:
    return "glob" if isinstance(value, str) else "regex"


Condition = Annotated[
    Annotated[str, Tag("glob")] | Annotated[Regex, Tag("regex")], Discriminator(_condition_kind)
]
"""A glob, or `{"regex": ...}`: told apart by their JSON type, so that a bad regular
expression is refused for what it is, not also as "not a string"."""


class ApprovalRule(BaseModel):
    """One rule: calls of `tool` whose arguments fit `when` are decided `decision`."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1)
    """A tool's name, or a glob of names (`*`: every tool but `finish`)."""
    when: dict[str, Condition] = {}
    """JSON pointer into the arguments -> a glob or `{"regex": ...}`; all must match.
    Empty: every call of the tool."""
    decision: RuleDecision
    reason: str | None = None
    """Why: what the model reads of a call the rule rejects (required for `reject`)."""

    @field_validator("when")
    @classmethod
    def _pointers(cls, when: dict[str, Condition]) -> dict[str, Condition]:
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

    def matches(
        self, tool: str, arguments: str, *, linear: bool = True, text_limit: int = REGEX_TEXT_LIMIT
    ) -> bool:
        """Whether a call of `tool` with the model's argument text fits this rule.
        `linear` False: regular expressions as runs started before RE2 matched them
        (Python's `re`, any length), for the calls they judged before; `text_limit`: the
        longest value searched (`LEGACY_REGEX_TEXT_LIMIT` for the calls judged before it)."""
        if not fnmatchcase(tool, self.tool):
            return False
        if not self.when:
            return True
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return False
        too_long = self.decision is not RuleDecision.APPROVE  # counts against the call
        return all(
            _fits(_resolve(parsed, p), m, linear=linear, limit=text_limit, too_long=too_long)
            for p, m in self.when.items()
        )

    @property
    def has_regex(self) -> bool:
        """Whether a condition of this rule is a regular expression."""
        return any(isinstance(m, Regex) for m in self.when.values())


def first_match(
    rules: list[ApprovalRule],
    tool: str,
    arguments: str,
    *,
    linear: bool = True,
    text_limit: int = REGEX_TEXT_LIMIT,
) -> int | None:
    """The 1-based number of the first rule a call matches (as people count the rules of
    a run, and as decisions name them: `rule 2`); None: no rule matches."""
    return next(
        (
            n
            for n, r in enumerate(rules, start=1)
            if r.matches(tool, arguments, linear=linear, text_limit=text_limit)
        ),
        None,
    )


def _resolve(document: Any, pointer: str) -> Any:
    """The value `pointer` names in `document`, or `_MISSING`."""
    if not pointer:
        return document
    node = document
    for token in pointer[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        # ASCII digits: `isdigit` alone takes `²`, which `int` refuses (the run's workflow
        # task failed on every try); no other call matches otherwise than before.
        elif isinstance(node, list) and key.isascii() and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _MISSING
    return node


def _fits(value: Any, condition: str | Regex, *, linear: bool, limit: int, too_long: bool) -> bool:
    """Whether `value` meets `condition`; `too_long`: what a value over `limit`
    characters gets from a regular expression."""
    if value is _MISSING:
        return False
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if not isinstance(condition, Regex):
        return fnmatchcase(text, condition)
    if not linear:
        return re.search(condition.regex, text) is not None
    if len(text) > limit:
        return too_long
    try:
        pattern = _re2(condition.regex)
    except re2.error:
        # Admitted before rules were checked with RE2 (or with `max_mem`), by a run
        # still in flight: it keeps the engine it was started with.
        return re.search(condition.regex, text) is not None
    return pattern.search(text) is not None
