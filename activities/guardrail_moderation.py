"""A `moderation` guardrail's check: OpenAI's moderation endpoint (`POST /v1/moderations`),
which other providers and the scripted model (`tarry.testing.scripted_moderation`) serve
too, at a model profile's base URL with its key.

A flagged category is a match spanning the whole text: moderation judges a text, not a
piece of it, so its guardrails block and never redact.
"""

from __future__ import annotations

from typing import Any

import httpx

from tarry.config.settings import ModelProfile
from tarry.contracts.guardrails import Guardrail, GuardrailMatch

__all__ = ["moderated"]


async def moderated(
    http: httpx.AsyncClient, profile: ModelProfile, text: str, guardrail: Guardrail
) -> list[GuardrailMatch]:
    """The categories of `guardrail` the endpoint finds in `text`, each a whole-text match;
    an HTTP error raises (the activity retries it)."""
    key = profile.api_key.get_secret_value() if profile.api_key is not None else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = await http.post(
        f"{profile.base_url.rstrip('/')}/moderations",
        json={"model": guardrail.model, "input": text},
        headers=headers,
        timeout=profile.request_timeout,
    )
    response.raise_for_status()
    [result] = response.json()["results"]
    return [
        GuardrailMatch(kind=category, start=0, end=len(text))
        for category in _flagged(result, guardrail)
    ]


def _flagged(result: dict[str, Any], guardrail: Guardrail) -> list[str]:
    """The categories that count: those the guardrail names (all, when none), flagged by
    the endpoint, or scored at least `threshold` when it gives one."""
    scores: dict[str, float] = result.get("category_scores") or {}
    flags: dict[str, bool] = result.get("categories") or {}
    named = guardrail.categories or sorted({*scores, *flags})
    if guardrail.threshold is not None:
        return [c for c in named if scores.get(c, 0.0) >= guardrail.threshold]
    return [c for c in named if flags.get(c)]
