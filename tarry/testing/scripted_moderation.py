"""The scripted model's moderation endpoint (`POST /v1/moderations`, OpenAI's shape), for
`moderation` guardrails in `tarry dev`, the tours and tests: a text is flagged in a
category when it holds one of that category's words, whole and in any case. No model
judges anything: the same text always gets the same answer."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

__all__ = ["MODERATION_WORDS", "moderation_handler", "moderation_result"]

MODERATION_WORDS: Mapping[str, Sequence[str]] = {
    "violence": ("kill", "attack", "bomb"),
    "harassment": ("idiot", "stupid"),
    "self-harm": ("hurt myself",),
}
"""Each category's words: what the scripted endpoint flags unless it is given others."""
FLAGGED_SCORE, CLEAN_SCORE = 0.97, 0.01


def moderation_result(text: str, words: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """One input's result: each category flagged (and scored high) when the text holds
    one of its words."""
    flags = {
        category: any(re.search(rf"(?i)\b{re.escape(w)}\b", text) for w in found)
        for category, found in words.items()
    }
    return {
        "flagged": any(flags.values()),
        "categories": flags,
        "category_scores": {c: FLAGGED_SCORE if f else CLEAN_SCORE for c, f in flags.items()},
    }


def moderation_handler(
    words: Mapping[str, Sequence[str]] = MODERATION_WORDS,
) -> Any:
    """The endpoint's handler, flagging by `words`."""

    async def moderations(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        return web.json_response(
            {
                "id": "modr-scripted",
                "model": body.get("model", "scripted"),
                "results": [moderation_result(str(t), words) for t in texts],
            }
        )

    return moderations
