"""The guardrails' checks: a text against a run's guardrails, as a (local) activity.

`pattern` searches with RE2, in time linear in the text; `pii` is
`activities.guardrail_pii` (Presidio, the `guardrails` extra), loaded the first time a
`pii` guardrail checks a text; `moderation` is `activities.guardrail_moderation`, `judge`
`activities.guardrail_judge`; and `python` calls a function the worker registered.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping

import httpx
import re2
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import metrics, traces
from activities.guardrail_judge import judged
from activities.guardrail_moderation import moderated
from tarry.config.settings import ModelProfile
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

__all__ = ["GuardrailChecks", "GuardrailFunction"]

GuardrailFunction = Callable[[str], Iterable[GuardrailMatch] | Awaitable[Iterable[GuardrailMatch]]]
"""A `python` guardrail's check: the text in, its matches out (sync, or a coroutine)."""


class GuardrailChecks:
    """The check activity's host: the worker's model profiles (a `moderation` or `judge`
    check calls its profile's endpoint with its key) and its registered functions."""

    def __init__(
        self,
        profiles: Mapping[str, ModelProfile] | None = None,
        http: httpx.AsyncClient | None = None,
        functions: Mapping[str, GuardrailFunction] | None = None,
    ) -> None:
        self._profiles = dict(profiles or {})
        self._http = http
        self._functions = dict(functions or {})

    @activity.defn(name=GUARDRAILS_ACTIVITY)
    async def check_guardrails(self, request: GuardRequest) -> Guarded:
        """The text as `request.guardrails` let it through, and their hits."""
        with traces.guardrail(request) as span:
            guarded = await self.guard(request.text, request.guardrails)
            traces.guarded(span, guarded)
        metrics.guardrails_hit(guarded.hits)
        return guarded

    async def guard(self, text: str, guardrails: list[Guardrail]) -> Guarded:
        """Applies `guardrails` in order, each to the text the one before left; stops at
        the first that blocks or asks a person (who decides on the text as it is then)."""
        hits: list[GuardrailHit] = []
        for guardrail in guardrails:
            hit = await self.hit(text, guardrail)
            if hit is None:
                continue
            hits.append(hit)
            if hit.verdict is not GuardVerdict.REDACT:
                break
            text = _redacted(text, hit.matches)
        return Guarded(text=text, hits=hits)

    async def hit(self, text: str, guardrail: Guardrail) -> GuardrailHit | None:
        """What `guardrail` finds in `text` and does about it; None when it finds nothing.
        A judge's answer is its hit; any other check's matches take the guardrail's verdict."""
        if guardrail.check is GuardCheck.JUDGE:
            http, profile = self._model(guardrail)
            return await judged(http, guardrail.profile, profile, text, guardrail)
        matches = _without_overlaps(await self.find(text, guardrail))
        if not matches:
            return None
        return GuardrailHit(
            guardrail=guardrail.name,
            verdict=guardrail.verdict,
            reason=guardrail.reason,
            matches=matches,
        )

    async def find(self, text: str, guardrail: Guardrail) -> list[GuardrailMatch]:
        """What a guardrail that is no judge finds in `text`, in any order."""
        if guardrail.check is GuardCheck.PII:
            # CPU work: in a thread, so the worker's other activities go on meanwhile.
            kinds = frozenset(guardrail.kinds or PiiKind)
            return await asyncio.to_thread(_pii, text, kinds)
        if guardrail.check is GuardCheck.PATTERN:
            found = [m for p in guardrail.patterns for m in _search(p, text, "pattern")]
            return found + [m for w in guardrail.deny for m in _search(_word(w), text, "deny")]
        if guardrail.check is GuardCheck.MODERATION:
            http, profile = self._model(guardrail)
            return await moderated(http, profile, text, guardrail)
        return await self._function(text, guardrail)

    def _model(self, guardrail: Guardrail) -> tuple[httpx.AsyncClient, ModelProfile]:
        """The HTTP client, and the profile, a `moderation` or `judge` guardrail calls."""
        profile = self._profiles.get(guardrail.profile)
        if profile is None or self._http is None:
            raise _unavailable(
                f"guardrail {guardrail.name!r} calls the {guardrail.check.value} model of"
                f" profile {guardrail.profile!r}, which this worker lacks;"
                f" configured: {', '.join(self._profiles) or 'none'}"
            )
        return self._http, profile

    async def _function(self, text: str, guardrail: Guardrail) -> list[GuardrailMatch]:
        name = guardrail.function or ""
        if (function := self._functions.get(name)) is None:
            raise _unavailable(
                f"guardrail {guardrail.name!r} calls the function {name!r}, which this worker"
                f" does not register; registered: {', '.join(self._functions) or 'none'}"
            )
        found = function(text)
        if inspect.isawaitable(found):
            found = await found
        return list(found)


def _unavailable(message: str) -> ApplicationError:
    return ApplicationError(message, type=ErrorCode.GUARDRAIL_UNAVAILABLE, non_retryable=True)


def _pii(text: str, kinds: frozenset[PiiKind]) -> list[GuardrailMatch]:
    try:
        from activities.guardrail_pii import find_pii
    except ModuleNotFoundError as e:
        raise _unavailable(
            f"a pii guardrail needs Presidio, which this worker lacks ({e}): install"
            " `tarry[guardrails]` on the worker"
        ) from None
    return find_pii(text, kinds)


def _search(pattern: str, text: str, kind: str) -> list[GuardrailMatch]:
    return [
        GuardrailMatch(kind=kind, start=m.start(), end=m.end())
        for m in re2.finditer(pattern, text)
        if m.end() > m.start()
    ]


def _word(word: str) -> str:
    r"""A deny word as a pattern: whole, in any case. A word boundary is asked for only at
    an end that is a word character: after `c++` or before `.net` there is none to find
    (`\b` lies between a word character and another), and the punctuation is its edge.
    RE2 decides what a word character is, as it does for `\b` (ASCII's)."""
    start = r"\b" if re2.match(r"\w", word[:1]) else ""
    end = r"\b" if re2.match(r"\w", word[-1:]) else ""
    return rf"(?i){start}{re.escape(word)}{end}"


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
